//! The replica's reconcile queue: one cap on Applications reconciled at once
//! (`--concurrent-applications`) shared by every shard the replica runs, handed out fairly
//! across namespaces ([`turns`]), so one tenant's thousands of Applications do not starve
//! another's few, and more shards do not mean more concurrent work.
//!
//! A reconcile of an Application whose attempt is in flight ([`finishing`]) goes before one
//! that starts new work ([`turns`] says how far).
//!
//! Each shard's controller keeps its own scheduling (debounce, one reconcile per Application at
//! a time, requeues) and lets every due reconcile start; a reconcile first waits here for a
//! [`Slot`], and gives it back when it ends or is dropped. A reconcile that waits for another
//! controller (a Deployment's to observe what it applied) gives its slot back meanwhile
//! ([`away`]) and comes back as finishing work.

pub mod turns;

use std::sync::{Arc, Mutex};

use turns::Turns;

/// One replica's slots, shared by its shards.
pub struct Queue {
    inner: Mutex<Inner>,
}

struct Inner {
    turns: Turns,
    next_id: u64,
    woken: std::collections::HashMap<u64, tokio::sync::oneshot::Sender<()>>,
}

impl Inner {
    /// Hand a freed slot on to the next waiter that is still there.
    fn release(&mut self) {
        while let Some(id) = self.turns.release() {
            // A waiter gone without cancelling (cannot happen: it cancels before its receiver
            // drops) passes the slot on to the next.
            if self.woken.remove(&id).is_some_and(|tx| tx.send(()).is_ok()) {
                break;
            }
        }
        self.gauges();
    }

    fn gauges(&self) {
        metrics::gauge!(crate::metric_names::RECONCILES_RUNNING).set(self.turns.running() as f64);
        metrics::gauge!(crate::metric_names::RECONCILES_WAITING).set(self.turns.waiting() as f64);
    }
}

/// A held slot: freed, and passed to the next waiter, when dropped.
pub struct Slot {
    queue: Arc<Queue>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.queue.inner.lock().expect("queue lock").release();
    }
}

/// A reconcile waiting for its turn; if it is dropped (its shard stops), it leaves the queue,
/// or passes on the slot it was just given.
struct Waiting<'a> {
    queue: &'a Arc<Queue>,
    ns: &'a str,
    id: u64,
    done: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut inner = self.queue.inner.lock().expect("queue lock");
        if inner.turns.cancel(self.ns, self.id) {
            inner.woken.remove(&self.id);
            inner.gauges();
        } else {
            inner.release();
        }
    }
}

impl Queue {
    /// `capacity` Applications reconciled at once (0 counts as 1).
    pub fn new(capacity: usize) -> Arc<Queue> {
        Arc::new(Queue {
            inner: Mutex::new(Inner {
                turns: Turns::new(capacity),
                next_id: 0,
                woken: std::collections::HashMap::new(),
            }),
        })
    }

    /// Wait for a slot for a reconcile of an Application of namespace `ns` (`finishing`: it
    /// completes work in flight).
    pub async fn enter(self: &Arc<Self>, ns: &str, finishing: bool) -> Slot {
        let (id, rx) = {
            let mut inner = self.inner.lock().expect("queue lock");
            let id = inner.next_id;
            inner.next_id += 1;
            let now = inner.turns.arrive(ns, id, finishing);
            inner.gauges();
            if now {
                return Slot { queue: self.clone() };
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            inner.woken.insert(id, tx);
            (id, rx)
        };
        // Declared after `rx`, so dropped before it: a dropped wait cancels under the lock.
        let mut waiting = Waiting { queue: self, ns, id, done: false };
        // The sender is only dropped by `Waiting` itself (cancelled): it always sends first.
        let _ = rx.await;
        waiting.done = true;
        Slot { queue: self.clone() }
    }

    /// (slots held, reconciles waiting).
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.inner.lock().expect("queue lock");
        (inner.turns.running(), inner.turns.waiting())
    }
}

tokio::task_local! {
    /// The slot the reconcile running in this task holds, and its Application's namespace.
    static HELD: std::cell::RefCell<Option<(Slot, String)>>;
}

/// Run `reconcile` holding `slot` (taken for an Application of namespace `ns`): [`away`], called
/// within it, can give the slot back for a while.
pub async fn holding<F: std::future::Future>(slot: Slot, ns: &str, reconcile: F) -> F::Output {
    HELD.scope(std::cell::RefCell::new(Some((slot, ns.to_string()))), reconcile).await
}

/// Await `wait` with the slot of the reconcile running in this task given back, then wait for a
/// slot again as finishing work (it goes before new work). Outside [`holding`], or if the slot
/// is already away, just `wait`.
pub async fn away<F: std::future::Future>(wait: F) -> F::Output {
    let held = HELD.try_with(|h| h.borrow_mut().take()).ok().flatten();
    let Some((slot, ns)) = held else { return wait.await };
    let queue = slot.queue.clone();
    drop(slot);
    let out = wait.await;
    let slot = queue.enter(&ns, true).await;
    let _ = HELD.try_with(|h| *h.borrow_mut() = Some((slot, ns)));
    out
}

/// Whether reconciling `app` completes work in flight: its status says an attempt is running
/// (`Ready` is `Unknown` for `Progressing`), so this look at its health may end it.
pub fn finishing(app: &crate::api::application::Application) -> bool {
    use crate::api::names;
    app.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| {
            c.type_ == names::conditions::READY && c.status == "Unknown" && c.reason == names::reasons::PROGRESSING
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::time::Duration;

    #[tokio::test]
    async fn a_slot_is_shared_by_turns_and_a_dropped_wait_frees_nothing_twice() {
        let q = Queue::new(1);
        let first = q.enter("a", false).await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for (ns, n) in [("a", 1), ("a", 2), ("a", 3), ("b", 9)] {
            let (q2, tx) = (q.clone(), tx.clone());
            tasks.push(tokio::spawn(async move {
                let _slot = q2.enter(ns, false).await;
                tx.send(n).unwrap();
            }));
            // Arrive in this order.
            while q.counts().1 < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        // One that gives up while waiting.
        let gives_up = tokio::time::timeout(Duration::from_millis(1), q.enter("c", false)).await;
        assert!(gives_up.is_err(), "the slot is held");
        assert_eq!(q.counts(), (1, 4), "the one that gave up left the queue");
        drop(first);
        let mut order = Vec::new();
        for _ in 0..4 {
            order.push(rx.recv().await.unwrap());
        }
        assert_eq!(order, [1, 9, 2, 3], "b is served after one of a's, not after all of them");
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(q.counts(), (0, 0), "every slot given back");
        let _again = q.enter("d", false).await;
        assert_eq!(q.counts(), (1, 0));
    }

    #[tokio::test]
    async fn a_reconcile_away_gives_its_slot_to_another_and_comes_back_before_new_work() {
        let q = Queue::new(1);
        let slot = q.enter("a", false).await;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (order_tx, mut order) = tokio::sync::mpsc::unbounded_channel();
        let (q2, back) = (q.clone(), order_tx.clone());
        let reconcile = tokio::spawn(holding(slot, "a", async move {
            away(async move { rx.await.unwrap() }).await;
            assert_eq!(q2.counts().0, 1, "the slot is held again");
            back.send("back").unwrap();
        }));
        // Another reconcile gets the slot while the first is away.
        let other =
            tokio::time::timeout(Duration::from_secs(10), q.enter("b", false)).await.expect("the slot was given back");
        // New work queued before the first comes back: the one coming back still goes first.
        let q3 = q.clone();
        let new_work = tokio::spawn(async move {
            let _slot = q3.enter("c", false).await;
            order_tx.send("new").unwrap();
        });
        while q.counts().1 < 1 {
            tokio::task::yield_now().await;
        }
        tx.send(()).unwrap();
        while q.counts().1 < 2 {
            tokio::task::yield_now().await;
        }
        drop(other);
        reconcile.await.unwrap();
        new_work.await.unwrap();
        assert_eq!([order.recv().await.unwrap(), order.recv().await.unwrap()], ["back", "new"]);
        assert_eq!(q.counts(), (0, 0), "every slot given back");
        // Outside a reconcile, away just waits.
        assert_eq!(away(async { 7 }).await, 7);
    }

    #[test]
    fn only_an_application_whose_attempt_runs_is_finishing() {
        use crate::api::application::{Application, ApplicationStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        let with = |conditions: &[(&str, &str, &str)]| {
            let mut app: Application = serde_json::from_value(serde_json::json!({
                "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
                "metadata": {"name": "web", "namespace": "a"},
                "spec": {"source": {"repository": "r", "path": "p"}, "destination": {"namespace": "a"}, "serviceAccountName": "d"}
            }))
            .unwrap();
            let conditions = conditions
                .iter()
                .map(|(t, s, r)| Condition {
                    type_: t.to_string(),
                    status: s.to_string(),
                    reason: r.to_string(),
                    message: String::new(),
                    last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        jiff::Timestamp::UNIX_EPOCH,
                    ),
                    observed_generation: None,
                })
                .collect();
            app.status = Some(ApplicationStatus { conditions, ..Default::default() });
            app
        };
        let cases = [
            ("an attempt waiting for health", with(&[("Ready", "Unknown", "Progressing")]), true),
            ("Ready", with(&[("Ready", "True", "Succeeded")]), false),
            ("waiting for approval", with(&[("Ready", "Unknown", "AwaitingApproval")]), false),
            ("failed", with(&[("Ready", "False", "HealthTimeout")]), false),
            ("another condition progressing", with(&[("Reconciling", "Unknown", "Progressing")]), false),
        ];
        for (what, app, want) in cases {
            assert_eq!(finishing(&app), want, "{what}");
        }
        let mut new = with(&[]);
        new.status = None;
        assert!(!finishing(&new), "a new Application starts new work");
    }

    #[tokio::test]
    async fn a_wait_dropped_just_after_its_turn_came_passes_the_slot_on() {
        let q = Queue::new(1);
        let first = q.enter("a", false).await;
        let q2 = q.clone();
        let mut second = Box::pin(async move { q2.enter("a", false).await });
        let pending = std::future::poll_fn(|cx| std::task::Poll::Ready(second.as_mut().poll(cx).is_pending())).await;
        assert!(pending, "the slot is held");
        let third = tokio::spawn({
            let q = q.clone();
            async move { drop(q.enter("b", false).await) }
        });
        while q.counts().1 < 2 {
            tokio::task::yield_now().await;
        }
        // The slot passes to `second`, which is dropped before it sees it.
        drop(first);
        drop(second);
        tokio::time::timeout(Duration::from_secs(10), third).await.expect("b got the slot").unwrap();
        assert_eq!(q.counts(), (0, 0));
    }
}
