//! Delivery lanes: the deliveries of one Notification about one Application go one at a time,
//! oldest Event first. Pure (a map under a lock; the engine runs the workers).
//!
//! # Contract
//! - [`Lanes::push`] answers `true` exactly when the lane had no worker: the caller starts one,
//!   and no other caller does until that worker has seen the lane empty;
//! - [`Lanes::next`] gives the oldest queued item of a lane (by its order key), and `None` once
//!   the lane is empty, removing it under the same lock: an item pushed after that starts a new
//!   worker, so none is left queued without one.
//!
//! Table test: `a_lane_delivers_oldest_first_one_worker_at_a_time`.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Mutex;

/// Queues by lane, each ordered by `O`.
pub struct Lanes<L, O, T> {
    queues: Mutex<HashMap<L, BTreeMap<O, T>>>,
}

impl<L, O, T> Default for Lanes<L, O, T> {
    fn default() -> Self {
        Lanes { queues: Mutex::default() }
    }
}

impl<L: Hash + Eq + Clone, O: Ord, T> Lanes<L, O, T> {
    /// Queue `item` at `order` in `lane`; `true` when the caller must start the lane's worker.
    pub fn push(&self, lane: &L, order: O, item: T) -> bool {
        let mut queues = self.queues.lock().expect("lanes lock");
        let idle = !queues.contains_key(lane);
        queues.entry(lane.clone()).or_default().insert(order, item);
        idle
    }

    /// The oldest item of `lane`, or `None` when it is empty (the lane's worker then stops).
    pub fn next(&self, lane: &L) -> Option<T> {
        let mut queues = self.queues.lock().expect("lanes lock");
        let queue = queues.get_mut(lane)?;
        match queue.pop_first() {
            Some((_, item)) => Some(item),
            None => {
                queues.remove(lane);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lane_delivers_oldest_first_one_worker_at_a_time() {
        let lanes: Lanes<&str, i64, &str> = Lanes::default();
        // Events seen out of order (a relist) while the worker is busy.
        assert!(lanes.push(&"web", 20, "Succeeded"), "the first push starts a worker");
        assert!(!lanes.push(&"web", 10, "Progressing"), "a busy lane starts no second worker");
        assert!(lanes.push(&"api", 30, "Progressing"), "another lane has its own worker");
        assert_eq!(lanes.next(&"web"), Some("Progressing"));
        assert!(!lanes.push(&"web", 30, "HealthTimeout"), "still one worker while it delivers");
        assert_eq!(lanes.next(&"web"), Some("Succeeded"));
        assert_eq!(lanes.next(&"web"), Some("HealthTimeout"));
        assert_eq!(lanes.next(&"web"), None);
        assert!(lanes.push(&"web", 40, "NewRevision"), "an emptied lane needs a worker again");
        assert_eq!(lanes.next(&"api"), Some("Progressing"));
    }
}
