//! Shards to replicas: golden values, and the properties of `assign` for 1..=16 replicas and
//! 1..=256 shards (every shard exactly once, loads within one, order independence, bounded movement
//! on join and leave).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use sharding::assign::assign_sticky;
use sharding::{assign, owned_by, score};

const THREE: [&str; 3] = ["ksync-controller-0", "ksync-controller-1", "ksync-controller-2"];

/// Computed independently (Python's `hashlib.sha256` and the same greedy). A change here moves shards
/// between replicas on upgrade: it must be deliberate.
#[test]
fn golden_values() {
    assert_eq!(score(0, "ksync-controller-0"), 0x97a1_7751_896e_afc1);
    assert_eq!(score(15, "ksync-controller-2"), 0x18dc_1048_f3b5_fa09);

    // Plain rendezvous would split these 16 shards 3/7/6; bounded loads give 5/6/5.
    let want: [&[u32]; 3] = [&[4, 6, 9, 10, 11], &[1, 3, 5, 7, 13, 15], &[0, 2, 8, 12, 14]];
    for (replica, shards) in THREE.into_iter().zip(want) {
        assert_eq!(owned_by(replica, 16, &THREE), shards.iter().copied().collect(), "{replica}");
    }

    let four = ["ksync-controller-0", "ksync-controller-1", "ksync-controller-2", "ksync-controller-3"];
    let want: [&[u32]; 4] = [&[1, 4, 11, 13], &[3, 5, 7, 15], &[0, 6, 8, 14], &[2, 9, 10, 12]];
    for (replica, shards) in four.into_iter().zip(want) {
        assert_eq!(owned_by(replica, 16, &four), shards.iter().copied().collect(), "{replica}");
    }
}

#[test]
fn no_replicas_or_no_shards_is_empty() {
    assert!(assign(16, &[] as &[&str]).is_empty());
    assert!(assign(0, &THREE).is_empty());
    assert!(owned_by("ksync-controller-9", 16, &THREE).is_empty());
}

/// Not guaranteed, and so not claimed: a shard the leaving replica did not own can move too, because
/// the others' caps change (here 16 shards on 16 → 15 replicas).
#[test]
fn shards_of_staying_replicas_can_move() {
    let names: Vec<String> = (0..16).map(|i| format!("ksync-controller-{i}")).collect();
    let before = assign(16, &names);
    let bystander_moves = names.iter().any(|leaver| {
        let rest: Vec<&String> = names.iter().filter(|r| *r != leaver).collect();
        let after = assign(16, &rest);
        before.iter().any(|(shard, owner)| owner != leaver && after[shard] != *owner)
    });
    assert!(bystander_moves);
}

fn loads<'a>(owners: &'a BTreeMap<u32, String>, replicas: &BTreeSet<String>) -> BTreeMap<&'a str, u32> {
    let mut loads: BTreeMap<&str, u32> = BTreeMap::new();
    for owner in owners.values() {
        assert!(replicas.contains(owner), "{owner} is not a live replica");
        *loads.entry(owner.as_str()).or_default() += 1;
    }
    loads
}

fn moved(before: &BTreeMap<u32, String>, after: &BTreeMap<u32, String>) -> u32 {
    before.iter().filter(|(shard, owner)| after[*shard] != **owner).count() as u32
}

/// Distinct replica ids like a Deployment's pods.
fn replica_set(sizes: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = BTreeSet<String>> {
    prop::collection::btree_set("ksync-controller-[a-z0-9]{1,6}", sizes)
}

/// Stated movement bound, `ideal` being the largest share of the replica that joins or leaves
/// (`ceil(S/(n+1))` on join, `ceil(S/n)` on leave, `n` the replicas before): at most
/// `ideal + 2n + 12` shards change owner. Measured worst over 16 name sets for every S in 1..=256 and
/// n in 1..=16: `ideal + 2n + 7`.
fn movement_bound(ideal: u32, n: u32) -> u32 {
    ideal + 2 * n + 12
}

/// 128 cases per property (about 15 s for this file in a debug build), unless `PROPTEST_CASES` asks
/// for more: `PROPTEST_CASES=20000 cargo test --release -p sharding --test assign`.
fn config() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 128;
    }
    config
}

proptest! {
    #![proptest_config(config())]

    /// Every shard exactly once, to a live replica; `S mod R` replicas own `ceil(S/R)` and the others
    /// `floor(S/R)`, so max − min ≤ 1; `owned_by` agrees.
    #[test]
    fn every_shard_once_and_loads_within_one(replicas in replica_set(1..=16), shards in 1..=256u32) {
        let list: Vec<&String> = replicas.iter().collect();
        let owners = assign(shards, &list);
        prop_assert_eq!(owners.keys().copied().collect::<Vec<_>>(), (0..shards).collect::<Vec<_>>());

        let r = replicas.len() as u32;
        let loads = loads(&owners, &replicas);
        let floor = shards / r;
        let at_ceiling = replicas.iter().filter(|id| loads.get(id.as_str()).copied().unwrap_or(0) == floor + 1).count() as u32;
        for id in &replicas {
            let load = loads.get(id.as_str()).copied().unwrap_or(0);
            prop_assert!(load == floor || load == floor + 1, "{id} owns {load}, floor {floor}");
        }
        prop_assert_eq!(at_ceiling, shards % r);

        let mut union = BTreeSet::new();
        for id in &replicas {
            let mine = owned_by(id, shards, &list);
            prop_assert_eq!(mine.len() as u32, loads.get(id.as_str()).copied().unwrap_or(0));
            prop_assert!(union.is_disjoint(&mine));
            union.extend(mine);
        }
        prop_assert_eq!(union.len() as u32, shards);
    }

    /// The same member set in any order, with duplicates, gives the same map.
    #[test]
    fn order_and_duplicates_do_not_matter(
        (replicas, shuffled) in replica_set(1..=16).prop_flat_map(|set| {
            let list: Vec<String> = set.iter().cloned().collect();
            let doubled: Vec<String> = list.iter().chain(list.iter().take(3)).cloned().collect();
            (Just(list), Just(doubled).prop_shuffle())
        }),
        shards in 1..=256u32,
    ) {
        prop_assert_eq!(assign(shards, &replicas), assign(shards, &shuffled));
    }

    /// A replica joining (n → n+1): it takes its share, and at most `movement_bound` shards move.
    #[test]
    fn join_moves_a_bounded_number(replicas in replica_set(2..=17), pick in any::<prop::sample::Index>(), shards in 1..=256u32) {
        let all: Vec<&String> = replicas.iter().collect();
        let newcomer = all[pick.index(all.len())];
        let before_set: Vec<&String> = all.iter().copied().filter(|r| *r != newcomer).collect();
        let n = before_set.len() as u32;
        let before = assign(shards, &before_set);
        let after = assign(shards, &all);
        let taken = after.values().filter(|owner| *owner == newcomer).count() as u32;
        let ideal = shards.div_ceil(n + 1);
        prop_assert!(taken == shards / (n + 1) || taken == ideal);
        let moved = moved(&before, &after);
        prop_assert!(moved >= taken);
        prop_assert!(moved <= movement_bound(ideal, n), "{shards} shards, {n} → {} replicas: {moved} moved, ideal {ideal}", n + 1);
    }

    /// A replica leaving (n → n−1): its shards move, and at most `movement_bound` shards in all.
    #[test]
    fn leave_moves_a_bounded_number(replicas in replica_set(2..=16), pick in any::<prop::sample::Index>(), shards in 1..=256u32) {
        let all: Vec<&String> = replicas.iter().collect();
        let leaver = all[pick.index(all.len())];
        let rest: Vec<&String> = all.iter().copied().filter(|r| *r != leaver).collect();
        let n = all.len() as u32;
        let before = assign(shards, &all);
        let after = assign(shards, &rest);
        let held = before.values().filter(|owner| *owner == leaver).count() as u32;
        prop_assert!(after.values().all(|owner| owner != leaver));
        let moved = moved(&before, &after);
        prop_assert!(moved >= held);
        let ideal = shards.div_ceil(n);
        prop_assert!(moved <= movement_bound(ideal, n), "{shards} shards, {n} → {} replicas: {moved} moved, ideal {ideal}", n - 1);
    }
}

proptest! {
    #![proptest_config(config())]

    /// `assign_sticky` from a balanced state: loads within one, and the minimum moves. A join
    /// moves exactly the newcomer's share (when every old replica holds at least its new cap); a
    /// leave moves exactly the leaver's shards; a state that is already balanced stays put.
    #[test]
    fn sticky_assignment_moves_the_minimum(replicas in replica_set(2..=17), pick in any::<prop::sample::Index>(), shards in 1..=256u32) {
        let all: Vec<&String> = replicas.iter().collect();
        let other = all[pick.index(all.len())];
        let rest: Vec<&String> = all.iter().copied().filter(|r| *r != other).collect();
        let n = rest.len() as u32;
        let set: BTreeSet<String> = replicas.iter().cloned().collect();

        // Join: `rest` balanced, then `other` joins.
        let before = assign(shards, &rest);
        let after = assign_sticky(shards, &all, &before);
        loads(&after, &set);
        prop_assert_eq!(after.len(), shards as usize);
        let counts: Vec<usize> = all.iter().map(|r| after.values().filter(|o| o == r).count()).collect();
        prop_assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1, "loads {:?}", counts);
        let taken = after.values().filter(|o| *o == other).count() as u32;
        if shards / n >= shards.div_ceil(n + 1) {
            prop_assert_eq!(moved(&before, &after), taken, "join: only the newcomer's share moves");
        }
        prop_assert_eq!(assign_sticky(shards, &all, &after), after.clone(), "a balanced state stays put");

        // Leave: from that state, `other` leaves.
        let left = assign_sticky(shards, &rest, &after);
        prop_assert_eq!(left.len(), shards as usize);
        prop_assert!(left.values().all(|o| o != other));
        prop_assert_eq!(moved(&after, &left), taken, "leave: only the leaver's shards move");
    }
}
