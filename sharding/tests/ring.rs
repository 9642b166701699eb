//! Applications to shards: golden values, balance on 10,000 keys, and the jump properties.

use proptest::prelude::*;
use sharding::{MAX_SHARDS, application_key, jump, key_hash, shard_of};

/// Shard counts the golden table covers.
const GOLDEN_SHARDS: [u32; 7] = [1, 2, 3, 16, 64, 256, 4096];

/// `(key, key_hash(key), shard_of(key, n) for n in GOLDEN_SHARDS)`, computed independently (Python's
/// `hashlib.sha256` and the integer jump loop). A change here moves Applications between shards on
/// upgrade: it must be deliberate.
const GOLDEN: [(&str, u64, [u32; 7]); 5] = [
    ("default/guestbook", 0x201e_b0b5_329c_be41, [0, 0, 2, 5, 19, 209, 209]),
    ("team-a/web", 0xa6d6_8893_13c2_3313, [0, 1, 1, 1, 46, 183, 919]),
    ("kube-system/coredns", 0x1444_b064_7cdf_399b, [0, 1, 1, 15, 54, 220, 2647]),
    ("payments/api-gateway", 0xd6b8_0278_22ac_4927, [0, 0, 0, 9, 44, 44, 3240]),
    ("team-07/app-0042", 0xc14e_6592_a152_12ab, [0, 0, 2, 15, 15, 231, 231]),
];

#[test]
fn golden_values() {
    for (key, hash, shards) in GOLDEN {
        assert_eq!(key_hash(key), hash, "key_hash({key:?})");
        for (count, want) in GOLDEN_SHARDS.into_iter().zip(shards) {
            assert_eq!(shard_of(key, count), want, "shard_of({key:?}, {count})");
            assert_eq!(jump(hash, count), want, "jump({hash:#x}, {count})");
        }
    }
    assert_eq!(application_key("team-a", "web"), "team-a/web");
}

/// The `key_hash`es of the two key sets of `docs/sharding.md` (`shard_of(key, n)` is
/// `jump(key_hash(key), n)`, which `golden_values` checks; hashing once keeps the tests fast).
fn key_sets() -> [Vec<u64>; 2] {
    [
        (0..10_000).map(|i| key_hash(&format!("app-{i:05}"))).collect(),
        (0..10_000).map(|i| key_hash(&format!("team-{:02}/app-{:04}", i / 200, i % 200))).collect(),
    ]
}

/// Stated bound, for every shard count in 4..=64 and 10,000 keys: every shard's count is within 4.5
/// standard deviations of the mean (binomial: σ = sqrt(N·p·(1−p)), p = 1/shards), and the fullest
/// shard holds at most 1.5 times as many keys as the emptiest. Measured: at worst 3.94σ and 1.44.
#[test]
fn balance_on_10000_keys() {
    for (set, keys) in key_sets().iter().enumerate() {
        for shards in 4..=64u32 {
            let mut counts = vec![0usize; shards as usize];
            for &hash in keys {
                counts[jump(hash, shards) as usize] += 1;
            }
            let n = keys.len() as f64;
            let p = 1.0 / f64::from(shards);
            let (mean, sigma) = (n * p, (n * p * (1.0 - p)).sqrt());
            for (shard, &count) in counts.iter().enumerate() {
                let deviation = (count as f64 - mean).abs() / sigma;
                assert!(
                    deviation <= 4.5,
                    "key set {set}, {shards} shards: shard {shard} has {count} keys, {deviation:.2}σ from {mean:.0}"
                );
            }
            let (max, min) = (*counts.iter().max().unwrap(), *counts.iter().min().unwrap());
            assert!(max as f64 <= 1.5 * min as f64, "key set {set}, {shards} shards: max {max} / min {min} > 1.5");
        }
    }
}

proptest! {
    #[test]
    fn shard_is_in_range(key in ".{0,80}", shards in 1..=MAX_SHARDS) {
        prop_assert!(shard_of(&key, shards) < shards);
    }

    /// Jump's consistency: one more shard moves a key only onto the new shard.
    #[test]
    fn one_more_shard_moves_keys_only_onto_it(namespace in "[a-z0-9-]{1,20}", name in "[a-z0-9-]{1,40}", shards in 1..MAX_SHARDS) {
        let key = application_key(&namespace, &name);
        let before = shard_of(&key, shards);
        let after = shard_of(&key, shards + 1);
        prop_assert!(after == before || after == shards, "{key}: {before} of {shards} became {after}");
    }
}

/// Growing the shard count from `n` to `n + 1` moves about `1/(n+1)` of the keys (jump's minimal
/// disruption): on 10,000 keys, within 4.5σ of that for 1..=64 shards.
#[test]
fn one_more_shard_moves_its_share() {
    let [_, keys] = key_sets();
    for shards in 1..=64u32 {
        let moved = keys.iter().filter(|&&hash| jump(hash, shards) != jump(hash, shards + 1)).count();
        let n = keys.len() as f64;
        let p = 1.0 / f64::from(shards + 1);
        let deviation = (moved as f64 - n * p).abs() / (n * p * (1.0 - p)).sqrt();
        assert!(
            deviation <= 4.5,
            "{shards} → {} shards moved {moved} keys, {deviation:.2}σ from {:.0}",
            shards + 1,
            n * p
        );
    }
}
