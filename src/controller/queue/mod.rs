//! The replica's reconcile queue: one cap on Applications reconciled at once
//! (`--concurrent-applications`) shared by every shard the replica runs, handed out fairly
//! across namespaces ([`turns`]), so one tenant's thousands of Applications do not starve
//! another's few, and more shards do not mean more concurrent work.
//!
//! Each shard's controller keeps its own scheduling (debounce, one reconcile per Application at
//! a time, requeues) and lets every due reconcile start; a reconcile first waits here for a
//! [`Slot`], and gives it back when it ends or is dropped.

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

    /// Wait for a slot for a reconcile of an Application of namespace `ns`.
    pub async fn enter(self: &Arc<Self>, ns: &str) -> Slot {
        let (id, rx) = {
            let mut inner = self.inner.lock().expect("queue lock");
            let id = inner.next_id;
            inner.next_id += 1;
            let now = inner.turns.arrive(ns, id);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::time::Duration;

    #[tokio::test]
    async fn a_slot_is_shared_by_turns_and_a_dropped_wait_frees_nothing_twice() {
        let q = Queue::new(1);
        let first = q.enter("a").await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for (ns, n) in [("a", 1), ("a", 2), ("a", 3), ("b", 9)] {
            let (q2, tx) = (q.clone(), tx.clone());
            tasks.push(tokio::spawn(async move {
                let _slot = q2.enter(ns).await;
                tx.send(n).unwrap();
            }));
            // Arrive in this order.
            while q.counts().1 < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        // One that gives up while waiting.
        let gives_up = tokio::time::timeout(Duration::from_millis(1), q.enter("c")).await;
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
        let _again = q.enter("d").await;
        assert_eq!(q.counts(), (1, 0));
    }

    #[tokio::test]
    async fn a_wait_dropped_just_after_its_turn_came_passes_the_slot_on() {
        let q = Queue::new(1);
        let first = q.enter("a").await;
        let q2 = q.clone();
        let mut second = Box::pin(async move { q2.enter("a").await });
        let pending = std::future::poll_fn(|cx| std::task::Poll::Ready(second.as_mut().poll(cx).is_pending())).await;
        assert!(pending, "the slot is held");
        let third = tokio::spawn({
            let q = q.clone();
            async move { drop(q.enter("b").await) }
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
