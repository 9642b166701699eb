//! Whose turn it is: the order in which reconciles waiting for one of a replica's slots get one.
//!
//! Contract ([`Turns`]), kept by the code and by the table test below:
//! - at most `capacity` reconciles hold a slot at once (a capacity of 0 counts as 1);
//! - a reconcile gets a slot at once when one is free and nobody is waiting;
//! - a reconcile that finishes work in flight (an Application whose attempt is running, waiting
//!   for its health) goes before one that starts new work: of every [`FINISHING_RUN`] + 1 freed
//!   slots, at most [`FINISHING_RUN`] in a row go to finishing ones while others wait, so new work
//!   is slowed, never starved;
//! - within each of the two, a freed slot goes to the namespaces waiting in turn (round robin, in
//!   the order they started waiting), and within a namespace to its earliest waiter: a namespace
//!   waits at most one freed slot per other waiting namespace for each of its turns, however
//!   many the others queue;
//! - a waiter that gives up before its turn is removed and takes no slot.
//!
//! Finishing first is what keeps a cold start's Applications becoming Ready as they go: served
//! in arrival order, the health check that completes an attempt waited behind every new
//! Application's first reconcile (10,000 Applications: 9 a second Ready for the first 140 s,
//! 178 s from create to Ready at the median).
//!
//! Pure: no clock, no I/O. [`super::Queue`] is the async side.

use std::collections::{HashMap, VecDeque};

/// Freed slots in a row that may go to finishing reconciles while new work waits.
pub const FINISHING_RUN: usize = 3;

/// The waiters of one kind of work, by namespace.
#[derive(Debug, Default)]
struct Class {
    waiting: HashMap<String, VecDeque<u64>>,
    /// The namespaces with waiters, the next to be served first.
    rotation: VecDeque<String>,
}

impl Class {
    fn push(&mut self, ns: &str, id: u64) {
        let queue = self.waiting.entry(ns.to_string()).or_default();
        if queue.is_empty() {
            self.rotation.push_back(ns.to_string());
        }
        queue.push_back(id);
    }

    fn pop(&mut self) -> Option<u64> {
        let ns = self.rotation.pop_front()?;
        let queue = self.waiting.get_mut(&ns).expect("a namespace in the rotation has waiters");
        let id = queue.pop_front().expect("a namespace in the rotation has waiters");
        if queue.is_empty() {
            self.waiting.remove(&ns);
        } else {
            self.rotation.push_back(ns);
        }
        Some(id)
    }

    fn cancel(&mut self, ns: &str, id: u64) -> bool {
        let Some(queue) = self.waiting.get_mut(ns) else { return false };
        let Some(at) = queue.iter().position(|w| *w == id) else { return false };
        queue.remove(at);
        if queue.is_empty() {
            self.waiting.remove(ns);
            self.rotation.retain(|n| n != ns);
        }
        true
    }

    fn len(&self) -> usize {
        self.waiting.values().map(VecDeque::len).sum()
    }

    fn is_empty(&self) -> bool {
        self.rotation.is_empty()
    }
}

/// The slots of one replica and who waits for them.
#[derive(Debug)]
pub struct Turns {
    capacity: usize,
    running: usize,
    finishing: Class,
    starting: Class,
    /// Slots given to finishing reconciles in a row while starting ones waited.
    run: usize,
}

impl Turns {
    pub fn new(capacity: usize) -> Turns {
        Turns { capacity: capacity.max(1), running: 0, finishing: Class::default(), starting: Class::default(), run: 0 }
    }

    /// Reconcile `id` of namespace `ns` asks for a slot (`finishing`: it completes work in
    /// flight): `true` when it holds one now, else it waits for [`Turns::release`] to name it.
    pub fn arrive(&mut self, ns: &str, id: u64, finishing: bool) -> bool {
        if self.running < self.capacity && self.finishing.is_empty() && self.starting.is_empty() {
            self.running += 1;
            return true;
        }
        if finishing {
            self.finishing.push(ns, id)
        } else {
            self.starting.push(ns, id)
        }
        false
    }

    /// A slot is freed: the waiter it passes to, or `None` when nobody waits (it stays free).
    pub fn release(&mut self) -> Option<u64> {
        let finishing_turn = !self.finishing.is_empty() && (self.starting.is_empty() || self.run < FINISHING_RUN);
        let next = if finishing_turn {
            self.run = if self.starting.is_empty() { 0 } else { self.run + 1 };
            self.finishing.pop()
        } else {
            self.run = 0;
            self.starting.pop()
        };
        if next.is_none() {
            self.running = self.running.saturating_sub(1);
        }
        next
    }

    /// Waiter `id` of `ns` gives up: `true` if it was still waiting (it is removed), `false` if
    /// it was already given a slot (which its caller must [`Turns::release`]).
    pub fn cancel(&mut self, ns: &str, id: u64) -> bool {
        self.finishing.cancel(ns, id) || self.starting.cancel(ns, id)
    }

    /// Slots held.
    pub fn running(&self) -> usize {
        self.running
    }

    /// Reconciles waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.finishing.len() + self.starting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A script of steps and who holds a slot after each: `+ns:id` arrives to start work,
    /// `*ns:id` to finish work in flight, `-` releases one slot, `xns:id` gives up.
    fn run(capacity: usize, script: &str) -> Vec<u64> {
        let mut t = Turns::new(capacity);
        let mut served = Vec::new();
        for step in script.split_whitespace() {
            match step.split_at(1) {
                (kind @ ("+" | "*"), w) => {
                    let (ns, id) = w.split_once(':').unwrap();
                    if t.arrive(ns, id.parse().unwrap(), kind == "*") {
                        served.push(id.parse().unwrap());
                    }
                }
                ("-", "") => served.extend(t.release()),
                ("x", w) => {
                    let (ns, id) = w.split_once(':').unwrap();
                    t.cancel(ns, id.parse().unwrap());
                }
                _ => panic!("bad step {step}"),
            }
            assert!(t.running() <= capacity.max(1), "{script}: at most capacity run");
        }
        served
    }

    #[test]
    fn slots_go_round_robin_across_namespaces_and_in_order_within_one() {
        let cases: &[(&str, usize, &str, &[u64])] = &[
            ("free slots are taken at once", 2, "+a:1 +b:2", &[1, 2]),
            ("capacity 0 counts as 1", 0, "+a:1 +a:2 -", &[1, 2]),
            ("a full replica makes newcomers wait", 1, "+a:1 +a:2", &[1]),
            ("within a namespace, first come first served", 1, "+a:1 +a:2 +a:3 - -", &[1, 2, 3]),
            ("a busy tenant does not starve a small one", 1, "+a:1 +a:2 +a:3 +a:4 +a:5 +b:9 - - -", &[1, 2, 9, 3]),
            (
                "namespaces take turns in the order they started waiting",
                1,
                "+a:1 +a:2 +a:3 +b:4 +b:5 +c:6 - - - - -",
                &[1, 2, 4, 6, 3, 5],
            ),
            ("a freed slot with nobody waiting stays free", 1, "+a:1 - +b:2", &[1, 2]),
            ("a waiter that gives up takes no slot", 1, "+a:1 +a:2 +b:3 xa:2 - -", &[1, 3]),
            ("a namespace that gives up leaves the rotation", 1, "+a:1 +b:2 +c:3 xb:2 - -", &[1, 3]),
            ("a freed slot passes straight to the next waiter", 1, "+a:1 +a:2 - +b:3 -", &[1, 2, 3]),
            ("finishing work goes before new work", 1, "+a:1 +a:2 +a:3 *a:4 - - -", &[1, 4, 2, 3]),
            ("finishing work takes turns across namespaces too", 1, "+a:1 *a:2 *a:3 *b:4 - - -", &[1, 2, 4, 3]),
            (
                "new work gets one slot after three finishing in a row",
                1,
                "+a:1 +a:2 *b:3 *b:4 *b:5 *b:6 *b:7 - - - - - - -",
                &[1, 3, 4, 5, 2, 6, 7],
            ),
            (
                "with no new work waiting, finishing work runs on",
                1,
                "+a:1 *a:2 *a:3 *a:4 *a:5 - - - -",
                &[1, 2, 3, 4, 5],
            ),
            ("a free slot is taken at once whatever the work", 2, "*a:1 +b:2", &[1, 2]),
            ("a finishing waiter that gives up takes no slot", 1, "+a:1 +a:2 *a:3 xa:3 -", &[1, 2]),
        ];
        for (what, capacity, script, want) in cases {
            assert_eq!(run(*capacity, script), *want, "{what}: {script}");
        }
    }

    #[test]
    fn giving_up_after_the_turn_came_says_so_and_counts_are_kept() {
        let mut t = Turns::new(1);
        assert!(t.arrive("a", 1, false));
        assert!(!t.arrive("a", 2, true));
        assert_eq!((t.running(), t.waiting()), (1, 1));
        assert_eq!(t.release(), Some(2), "the slot passes on");
        assert!(!t.cancel("a", 2), "2 holds the slot: its caller releases it");
        assert_eq!(t.release(), None);
        assert_eq!((t.running(), t.waiting()), (0, 0));
        assert!(!t.cancel("a", 7), "unknown waiter");
    }
}
