//! Shards to replicas: rendezvous (highest-random-weight) hashing with bounded loads.
//!
//! Every (shard, replica) pair has a [`score`]. Plain rendezvous hashing gives each shard to the
//! replica with the highest score for it: when a replica joins or leaves, only the shards it wins or
//! held move. With few shards per replica that is badly unbalanced, though (16 shards on
//! `ksync-controller-0..2` split 3/7/6), so [`assign`] caps the loads:
//!
//! - with `S` shards and `R` replicas, `S mod R` replicas own `ceil(S/R)` shards and the others own
//!   `floor(S/R)`, so the loads differ by at most one;
//! - the pairs are taken from the highest score down (ties broken by shard, then replica id), and a
//!   pair assigns its shard when the shard is still free and its replica still has room: a replica
//!   below `floor(S/R)` has room, and one at `floor(S/R)` has room while fewer than `S mod R`
//!   replicas have reached `ceil(S/R)`.
//!
//! The ids are de-duplicated and sorted first, and the order of the pairs depends on scores alone, so
//! the result is a function of the member *set*: the same replicas in any order, with duplicates or
//! not, give the same map. Of the balanced variants measured (shard after shard, level by level,
//! Maglev-style turns), the one global order moved the fewest shards at 64 and 256 shards. The price
//! of the caps is some movement beyond the joining or leaving replica's own share, which
//! `docs/sharding.md` measures and the property tests bound.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

/// The rendezvous score of `shard` on `replica`: the first 8 bytes, big-endian, of
/// `SHA-256(shard as 4 big-endian bytes ‖ replica id as UTF-8)`.
///
/// The shard's fixed width makes the encoding unambiguous. Higher scores are preferred.
///
/// ```
/// assert_ne!(sharding::score(0, "ksync-0"), sharding::score(1, "ksync-0"));
/// ```
pub fn score(shard: u32, replica: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(shard.to_be_bytes());
    hasher.update(replica.as_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The owner of every shard in `0..shards` among the live `replicas`.
///
/// Every shard is in the map exactly once, and the replicas' loads differ by at most one: each owns
/// `floor(shards/R)` or `ceil(shards/R)` shards, `R` being the number of distinct replica ids. The
/// order of `replicas` and duplicate ids do not matter. With no replicas (or no shards) the map is
/// empty.
///
/// Cost: `shards × R` SHA-256 digests and a sort of as many pairs (in a release build about 0.7 ms
/// for 256 shards on 16 replicas, 16 ms for 4096 shards on 16): compute it when the members change.
///
/// ```
/// let owners = sharding::assign(16, &["ksync-0", "ksync-1", "ksync-2"]);
/// assert_eq!(owners.len(), 16);
/// let mut loads = std::collections::BTreeMap::<&str, u32>::new();
/// for owner in owners.values() {
///     *loads.entry(owner.as_str()).or_default() += 1;
/// }
/// let (min, max) = (loads.values().min().unwrap(), loads.values().max().unwrap());
/// assert!(max - min <= 1);
/// ```
pub fn assign(shards: u32, replicas: &[impl AsRef<str>]) -> BTreeMap<u32, String> {
    let members: Vec<&str> = replicas.iter().map(AsRef::as_ref).collect::<BTreeSet<_>>().into_iter().collect();
    if members.is_empty() || shards == 0 {
        return BTreeMap::new();
    }
    let count = members.len() as u64;
    let floor = u64::from(shards) / count;
    let with_extra = u64::from(shards) % count;

    let mut pairs: Vec<(u64, u32, usize)> = Vec::with_capacity(shards as usize * members.len());
    for shard in 0..shards {
        for (index, replica) in members.iter().enumerate() {
            pairs.push((score(shard, replica), shard, index));
        }
    }
    // Highest score first; ties by shard, then by replica id (members are sorted, so by index).
    pairs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));

    let mut loads = vec![0u64; members.len()];
    let mut at_ceiling = 0u64;
    let mut owners = BTreeMap::new();
    for (_, shard, index) in pairs {
        if owners.contains_key(&shard) {
            continue;
        }
        let load = loads[index];
        let has_room = load < floor || (load == floor && at_ceiling < with_extra);
        if !has_room {
            continue;
        }
        if load == floor {
            at_ceiling += 1;
        }
        loads[index] += 1;
        owners.insert(shard, members[index].to_owned());
        if owners.len() == shards as usize {
            break;
        }
    }
    owners
}

/// The owner of every shard, as [`assign`], but keeping shards where they are: `current` maps
/// shards to their present holders (as the shard Leases say), and a live holder keeps up to its
/// cap of them, its best-scored first. Only the rest are placed by score within the caps.
///
/// Loads are exactly as balanced as [`assign`]'s (`floor` or `ceil` of `shards/R`; the ceilings go
/// to the replicas holding the most). Movement is the minimum: when a replica leaves, only its
/// shards move; when one joins, only the shards it takes move, as long as every old replica
/// holds at least its new cap (true whenever `floor(S/n) >= ceil(S/(n+1))`, for example 12
/// shards up to 3 → 4 replicas). With no live holder in `current` this is [`assign`].
///
/// Unlike [`assign`] the result depends on history, so replicas may briefly disagree while the
/// Leases change; they agree again once they read the same holders, and the Leases, not this
/// function, keep two replicas from owning one shard.
///
/// ```
/// let three = ["ksync-0", "ksync-1", "ksync-2"];
/// let before = sharding::assign(12, &three);
/// let four = ["ksync-0", "ksync-1", "ksync-2", "ksync-3"];
/// let after = sharding::assign::assign_sticky(12, &four, &before);
/// let moved = before.iter().filter(|(k, v)| after[*k] != **v).count();
/// assert_eq!(moved, 3); // exactly the newcomer's share
/// ```
pub fn assign_sticky(
    shards: u32,
    replicas: &[impl AsRef<str>],
    current: &BTreeMap<u32, String>,
) -> BTreeMap<u32, String> {
    let members: Vec<&str> = replicas.iter().map(AsRef::as_ref).collect::<BTreeSet<_>>().into_iter().collect();
    if members.is_empty() || shards == 0 {
        return BTreeMap::new();
    }
    let mut held: Vec<Vec<u32>> = vec![Vec::new(); members.len()];
    for (shard, owner) in current {
        if *shard < shards
            && let Ok(index) = members.binary_search(&owner.as_str())
        {
            held[index].push(*shard);
        }
    }
    if held.iter().all(Vec::is_empty) {
        return assign(shards, replicas);
    }
    let count = members.len() as u64;
    let floor = u64::from(shards) / count;
    let with_extra = (u64::from(shards) % count) as usize;
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by_key(|i| (std::cmp::Reverse(held[*i].len()), *i));
    let mut caps = vec![floor; members.len()];
    for i in order.into_iter().take(with_extra) {
        caps[i] += 1;
    }
    let mut owners = BTreeMap::new();
    let mut loads = vec![0u64; members.len()];
    for (index, shards_held) in held.iter_mut().enumerate() {
        shards_held.sort_by_key(|s| (std::cmp::Reverse(score(*s, members[index])), *s));
        for shard in shards_held.iter().take(caps[index] as usize) {
            owners.insert(*shard, members[index].to_owned());
            loads[index] += 1;
        }
    }
    let mut pairs: Vec<(u64, u32, usize)> = Vec::new();
    for shard in (0..shards).filter(|s| !owners.contains_key(s)) {
        for (index, replica) in members.iter().enumerate() {
            if loads[index] < caps[index] {
                pairs.push((score(shard, replica), shard, index));
            }
        }
    }
    pairs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    for (_, shard, index) in pairs {
        if owners.contains_key(&shard) || loads[index] >= caps[index] {
            continue;
        }
        loads[index] += 1;
        owners.insert(shard, members[index].to_owned());
    }
    owners
}

/// The shards [`assign`] gives to `replica` among the live `replicas` (empty if `replica` is not
/// one of them).
///
/// ```
/// let replicas = ["ksync-0", "ksync-1"];
/// let mine = sharding::owned_by("ksync-0", 8, &replicas);
/// let theirs = sharding::owned_by("ksync-1", 8, &replicas);
/// assert_eq!(mine.len() + theirs.len(), 8);
/// assert!(mine.is_disjoint(&theirs));
/// ```
pub fn owned_by(replica: &str, shards: u32, replicas: &[impl AsRef<str>]) -> BTreeSet<u32> {
    assign(shards, replicas).into_iter().filter(|(_, owner)| owner == replica).map(|(shard, _)| shard).collect()
}
