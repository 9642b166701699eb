//! Whether a plan that may be acted on takes a desired object as absent without reading it (a
//! `GET` per object was a third of a new Application's requests, [performance.md]), and the
//! precondition that makes its apply create it only if it really is.
//!
//! The shard's watch of a kind holds every object of the shard's Applications, so an object it
//! lacks is, most of the time, one nobody has created. It cannot see an object without the
//! shard's labels: created by hand, by another tool, or by an Application of another shard. So
//! the apply of a presumed-absent object carries `metadata.resourceVersion: "1"`
//! ([`PRECONDITION`]): where the object is missing the API server creates it (a precondition
//! needs an object to hold against); where it exists, the server refuses the write with `409
//! Conflict` whatever it would change, forced or not (checked on kube-apiserver v1.36). No
//! stored object has resourceVersion 1: the etcd3 storage gives each write the store's next
//! revision, and revision 1 is the empty store.
//!
//! [performance.md]: ../../../docs/performance.md

/// The `metadata.resourceVersion` an apply of a presumed-absent object carries: no stored
/// object has it, so the write succeeds only as a create.
pub const PRECONDITION: &str = "1";

/// What is known of one desired object when a plan that may be acted on is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The plan may be acted on (not a drift check from the watch caches).
    pub acted_on: bool,
    /// An operator asked for this reconcile (`sync.kuvryn.io/reconcile-requested-at`): it reads
    /// everything.
    pub requested: bool,
    /// The object's kind is namespaced (cluster-scoped objects are not in the shard's watches).
    pub namespaced: bool,
    /// What the Application's shard's watch of the kind says: `None` when no running, synced
    /// watch can say; `Some(true)` when it holds the object.
    pub watched: Option<bool>,
    /// This replica applied the object, or found it unchanged, for the Application lately:
    /// its watch may just not show it yet.
    pub written_here: bool,
    /// An apply of an object of the Application presumed absent found it existing lately: its
    /// objects are read until that is forgotten.
    pub found_existing: bool,
}

/// Whether the object is taken as absent without a `GET`.
///
/// Contract: only when all of these hold; otherwise it is read.
/// - the plan may be acted on, and no operator asked for this reconcile;
/// - the kind is namespaced, and the shard's running, synced watch of it does not hold the
///   object;
/// - this replica has not applied or found the object for the Application lately;
/// - no apply of a presumed-absent object of the Application found it existing lately.
///
/// And its apply carries [`PRECONDITION`]: what the watch could not see is never written over,
/// and never taken from another Application, a presumed object existing is refused by the API
/// server, and the next plan reads every object of the Application.
pub fn presume_absent(f: Facts) -> bool {
    f.acted_on && !f.requested && f.namespaced && f.watched == Some(false) && !f.written_here && !f.found_existing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_taken_as_absent_only_when_its_shards_watch_says_so_and_nothing_says_otherwise() {
        let base = Facts {
            acted_on: true,
            requested: false,
            namespaced: true,
            watched: Some(false),
            written_here: false,
            found_existing: false,
        };
        // (case, facts) → presumed absent
        let cases: &[(&str, Facts, bool)] = &[
            ("a new object of a watched kind", base, true),
            ("a drift check", Facts { acted_on: false, ..base }, false),
            ("an operator's request", Facts { requested: true, ..base }, false),
            ("cluster-scoped", Facts { namespaced: false, ..base }, false),
            ("no synced watch of the kind", Facts { watched: None, ..base }, false),
            ("the watch holds it", Facts { watched: Some(true), ..base }, false),
            ("just applied here, not watched yet", Facts { written_here: true, ..base }, false),
            ("a presumed object existed", Facts { found_existing: true, ..base }, false),
        ];
        for (case, f, want) in cases {
            assert_eq!(presume_absent(*f), *want, "{case}");
        }
    }
}
