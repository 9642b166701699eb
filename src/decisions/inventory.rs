//! Where a plan that may be acted on (a rollout's start, its next wave, a self-heal) takes an
//! Application's managed objects of one kind from: the shard's watch cache, or a list made as the
//! Application's service account.
//!
//! A list per kind per attempt was the largest request cost of a new Application after its
//! applies (one per managed kind, [performance.md]). The watch cache holds the same objects
//! (every managed object carries its Application's labels and shard), but a list as the service
//! account also answers two questions the cache cannot: whether that account may see the kind
//! where the plan looks, and what exists *now*, including what this replica has just written.
//! [`source`] takes the cache only when both are answered otherwise.
//!
//! [performance.md]: ../../../docs/performance.md

/// What the Application's service account was answered when it last listed the kind, no longer
/// ago than [`crate::live::TRUST_LIST_FOR`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    /// Listed across the cluster: it may see every namespace's objects of the kind.
    Everywhere,
    /// Refused across the cluster, listed in each namespace the plan searches.
    InEach,
    /// Not listed lately, or refused somewhere the plan searches.
    Unknown,
}

/// What is known when a plan that may be acted on needs one kind's managed objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The Application's shard has a running watch of the kind that has listed.
    pub cache_ready: bool,
    /// What the service account was answered when it listed the kind.
    pub listed: Listed,
    /// An operator asked for this reconcile (`sync.kuvryn.io/reconcile-requested-at`): it reads
    /// everything.
    pub requested: bool,
    /// Every object of the kind this replica last applied or found unchanged for the
    /// Application is in the cache: the watch has caught up with this replica's own writes.
    pub own_writes_seen: bool,
}

/// Where the managed objects of one kind come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The shard's watch cache. `searched_only`: keep only the objects in the namespaces the
    /// plan searches, as the service account's lists there would.
    Cache { searched_only: bool },
    /// A list as the service account.
    List,
}

/// Where a plan that may be acted on takes one kind's managed objects from.
///
/// Contract: the cache, only when all of these hold; else a list as the service account.
/// - the cache can answer (a running watch of the kind in the Application's shard that has
///   listed);
/// - the service account listed the kind lately without a refusal: across the cluster (the
///   cache's objects are all ones it may see), or in each namespace the plan searches (the
///   cache's objects are then kept to those namespaces);
/// - no operator asked for this reconcile;
/// - the cache shows every object of the kind this replica last wrote or found for the
///   Application (what it has just applied is not missed, and so not left unpruned).
///
/// The cache never answers *more* than the list would: it is label-selected to the shard's
/// objects, a subset of what the service account's list by the Application's labels finds.
pub fn source(f: Facts) -> Source {
    if !worth_looking(f.listed, f.requested) || !f.cache_ready || !f.own_writes_seen {
        return Source::List;
    }
    match f.listed {
        Listed::Everywhere => Source::Cache { searched_only: false },
        Listed::InEach => Source::Cache { searched_only: true },
        Listed::Unknown => Source::List,
    }
}

/// Whether the cache could answer at all, on what is known before the store is searched: when
/// not, [`source`] says [`Source::List`] whatever the store holds, so the search is spared.
pub fn worth_looking(listed: Listed, requested: bool) -> bool {
    !requested && listed != Listed::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_answers_an_acted_on_plan_only_with_the_service_accounts_lists_and_its_own_writes_seen() {
        use Listed::*;
        let list = Source::List;
        let all = Source::Cache { searched_only: false };
        let searched = Source::Cache { searched_only: true };
        // (cache ready, listed, requested, own writes seen) → source
        let cases = [
            ((true, Everywhere, false, true), all),
            ((true, InEach, false, true), searched),
            // The service account's permission is not known: list, as it.
            ((true, Unknown, false, true), list),
            // No watch of the kind, or it has not listed yet.
            ((false, Everywhere, false, true), list),
            ((false, InEach, false, true), list),
            // An operator's request reads everything.
            ((true, Everywhere, true, true), list),
            ((true, InEach, true, true), list),
            // The watch has not shown what this replica just applied.
            ((true, Everywhere, false, false), list),
            ((true, InEach, false, false), list),
            ((false, Unknown, true, false), list),
        ];
        for ((cache_ready, listed, requested, own_writes_seen), want) in cases {
            let f = Facts { cache_ready, listed, requested, own_writes_seen };
            assert_eq!(source(f), want, "{f:?}");
            if !worth_looking(listed, requested) {
                assert_eq!(want, list, "{f:?}: the store is not searched, so it must not be needed");
            }
        }
    }
}
