//! Applications to shards: jump consistent hash over a stable 64-bit key hash.
//!
//! An Application's key is `namespace/name` ([`application_key`]). Its shard is
//! `jump(key_hash(key), shards)` ([`shard_of`]):
//!
//! - [`key_hash`] is the first 8 bytes of the SHA-256 digest of the key's UTF-8 bytes, read
//!   big-endian. SHA-256 is fixed by FIPS 180-4, so the value is the same on every platform, Rust
//!   version and implementation language.
//! - [`jump`] is Lamping and Veach's jump consistent hash ("A Fast, Minimal Memory, Consistent Hash
//!   Algorithm", 2014), with the one division done exactly in integers instead of in `f64`. It
//!   agrees with the paper's floating-point code on the published test vectors and on every input
//!   this crate's tests try; where the paper's doubles could round a quotient that is exactly an
//!   integer down by one ulp, this version is the exact one.
//!
//! Why jump rather than rendezvous hashing over the shards: both spread keys as evenly as a random
//! function can (the same balance, measured in `docs/sharding.md`), and both move only `1/(n+1)` of
//! the keys, all onto the new shard, when the shard count grows from `n` to `n + 1`; but jump needs
//! one SHA-256 and about `ln(shards)` multiply-divide steps per key, where rendezvous needs one hash
//! per shard (4,096 SHA-256 digests per key at the largest shard count).

use sha2::{Digest, Sha256};

/// The largest shard count [`shard_of`] accepts.
pub const MAX_SHARDS: u32 = 4096;

/// The key of an Application: `namespace/name`.
///
/// ```
/// assert_eq!(sharding::application_key("team-a", "web"), "team-a/web");
/// ```
pub fn application_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The stable 64-bit hash of a key: the first 8 bytes of `SHA-256(key)` as a big-endian `u64`.
///
/// ```
/// // SHA-256("") = e3b0c442 98fc1c14 9afbf4c8 996fb924 ...
/// assert_eq!(sharding::key_hash(""), 0xe3b0_c442_98fc_1c14);
/// ```
pub fn key_hash(key: &str) -> u64 {
    let digest = Sha256::digest(key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// Jump consistent hash: the bucket in `0..buckets` of a 64-bit `hash`.
///
/// Growing `buckets` from `n` to `n + 1` moves a `1/(n+1)` share of the hashes, all of them into the
/// new bucket `n`; no hash moves between old buckets.
///
/// The loop is the paper's: `hash = hash * 2862933555777941757 + 1` (mod 2^64), then
/// `j = floor((b + 1) * 2^31 / ((hash >> 33) + 1))`, computed exactly in `u64`.
///
/// # Panics
///
/// If `buckets` is 0.
///
/// ```
/// assert_eq!(sharding::jump(123_456, 1000), 984);
/// ```
pub fn jump(mut hash: u64, buckets: u32) -> u32 {
    assert!(buckets > 0, "jump consistent hash needs at least one bucket");
    let buckets = u64::from(buckets);
    let mut b = 0u64;
    let mut j = 0u64;
    while j < buckets {
        b = j;
        hash = hash.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        // b + 1 <= buckets < 2^32, so (b + 1) << 31 < 2^63: no overflow.
        j = ((b + 1) << 31) / ((hash >> 33) + 1);
    }
    // b < buckets <= u32::MAX.
    b as u32
}

/// The shard, in `0..shards`, of the Application with key `key` (`namespace/name`, see
/// [`application_key`]): `jump(key_hash(key), shards)`.
///
/// # Panics
///
/// If `shards` is not in `1..=MAX_SHARDS`; validate the configured count once, up front.
///
/// ```
/// let shard = sharding::shard_of("team-a/web", 16);
/// assert!(shard < 16);
/// assert_eq!(sharding::shard_of("team-a/web", 1), 0);
/// ```
pub fn shard_of(key: &str, shards: u32) -> u32 {
    assert!((1..=MAX_SHARDS).contains(&shards), "shard count {shards} is not in 1..={MAX_SHARDS}");
    jump(key_hash(key), shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paper's code, in `f64`, as a reference.
    fn jump_f64(mut key: u64, buckets: u32) -> u32 {
        let mut b: i64 = -1;
        let mut j: i64 = 0;
        while j < i64::from(buckets) {
            b = j;
            key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
            j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
        }
        b as u32
    }

    #[test]
    fn jump_matches_published_vectors() {
        // Vectors published with other implementations of the paper's algorithm.
        for (hash, buckets, want) in [
            (1, 1, 0),
            (42, 57, 43),
            (256, 1024, 520),
            (3_735_883_980, 1, 0),
            (3_735_883_980, 666, 361),
            (16_045_690_984_833_335_023, 255, 237),
            (123_456, 1000, 984),
        ] {
            assert_eq!(jump(hash, buckets), want, "jump({hash}, {buckets})");
            assert_eq!(jump_f64(hash, buckets), want, "reference jump({hash}, {buckets})");
        }
    }

    #[test]
    fn jump_matches_the_floating_point_reference_on_many_keys() {
        for i in 0..2_000u32 {
            let hash = key_hash(&format!("team-{:02}/app-{i:04}", i % 37));
            for buckets in [1, 2, 3, 7, 16, 100, 257, 1000, 4096, 65_536, u32::MAX] {
                assert_eq!(jump(hash, buckets), jump_f64(hash, buckets), "hash {hash:#x}, {buckets} buckets");
            }
        }
    }

    #[test]
    fn key_hash_is_the_sha256_prefix() {
        // SHA-256("abc") = ba7816bf 8f01cfea 414140de 5dae2223 b00361a3 96177a9c b410ff61 f20015ad
        assert_eq!(key_hash("abc"), 0xba78_16bf_8f01_cfea);
        assert_eq!(key_hash(""), 0xe3b0_c442_98fc_1c14);
    }

    #[test]
    #[should_panic(expected = "not in 1..=4096")]
    fn zero_shards_panics() {
        shard_of("a/b", 0);
    }

    #[test]
    #[should_panic(expected = "not in 1..=4096")]
    fn too_many_shards_panics() {
        shard_of("a/b", MAX_SHARDS + 1);
    }
}
