//! What keeps a receiver cheap under abuse: a global and a per-path token bucket (checked
//! before any Secret is read or any signature computed), and the delivery ids already handled
//! (a replayed delivery is refused). In memory, per replica.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};

/// The limits of a receiver.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Requests per second the replica accepts in all (sustained).
    pub global_per_second: u32,
    /// Requests the replica accepts at once after a quiet period.
    pub global_burst: u32,
    /// Requests per minute one path accepts (sustained).
    pub path_per_minute: u32,
    /// Requests one path accepts at once after a quiet period.
    pub path_burst: u32,
    /// How long a delivery id is remembered.
    pub replay_window: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            global_per_second: 50,
            global_burst: 100,
            path_per_minute: 60,
            path_burst: 20,
            replay_window: Duration::from_secs(3600),
        }
    }
}

/// The buckets and the deliveries seen.
pub struct Limits {
    global: DefaultDirectRateLimiter,
    per_path: DefaultKeyedRateLimiter<String>,
    deliveries: moka::sync::Cache<String, ()>,
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n.max(1)).expect("at least 1")
}

impl Limits {
    /// Limits of `settings`.
    pub fn new(settings: &Settings) -> Limits {
        let global = Quota::per_second(nz(settings.global_per_second)).allow_burst(nz(settings.global_burst));
        let path = Quota::per_minute(nz(settings.path_per_minute)).allow_burst(nz(settings.path_burst));
        Limits {
            global: RateLimiter::direct(global),
            per_path: RateLimiter::keyed(path),
            deliveries: moka::sync::Cache::builder().max_capacity(100_000).time_to_live(settings.replay_window).build(),
        }
    }

    /// Take one request from the global bucket; when empty, the seconds to wait.
    pub fn global(&self) -> Result<(), u64> {
        self.global.check().map_err(|n| seconds(n.wait_time_from(DefaultClock::default().now())))
    }

    /// Take one request from the bucket of `path` (a path some Repository has: the map of
    /// buckets stays as small as the set of paths); when empty, the seconds to wait.
    pub fn path(&self, path: &str) -> Result<(), u64> {
        let key = path.to_string();
        let r = self.per_path.check_key(&key).map_err(|n| seconds(n.wait_time_from(DefaultClock::default().now())));
        if self.per_path.len() > 10_000 {
            self.per_path.retain_recent();
        }
        r
    }

    /// Claim `delivery` of `path`: false when it was claimed within the replay window. One of
    /// two concurrent claims wins.
    pub fn claim(&self, path: &str, provider: &str, delivery: &str) -> bool {
        self.deliveries.entry(format!("{path}\0{provider}\0{delivery}")).or_insert(()).is_fresh()
    }

    /// Forget a claim, so the sender's retry of a delivery that failed here is not a replay.
    pub fn release(&self, path: &str, provider: &str, delivery: &str) {
        self.deliveries.invalidate(&format!("{path}\0{provider}\0{delivery}"));
    }
}

/// Whole seconds to wait, at least 1 (the `Retry-After` value).
fn seconds(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_refuse_past_their_burst_and_say_how_long_to_wait() {
        let l = Limits::new(&Settings { path_burst: 3, path_per_minute: 6, global_burst: 5, ..Default::default() });
        for _ in 0..3 {
            assert!(l.path("/hook/a").is_ok());
        }
        let wait = l.path("/hook/a").unwrap_err();
        assert!((1..=10).contains(&wait), "{wait}");
        assert!(l.path("/hook/b").is_ok(), "paths have their own buckets");
        for _ in 0..5 {
            assert!(l.global().is_ok());
        }
        assert_eq!(l.global(), Err(1));
    }

    #[test]
    fn a_delivery_is_claimed_once_unless_released() {
        let l = Limits::new(&Settings::default());
        assert!(l.claim("/hook/a", "github", "d1"));
        assert!(!l.claim("/hook/a", "github", "d1"));
        assert!(l.claim("/hook/b", "github", "d1"), "per path");
        assert!(l.claim("/hook/a", "gitlab", "d1"), "per sender");
        l.release("/hook/a", "github", "d1");
        assert!(l.claim("/hook/a", "github", "d1"));
    }

    #[test]
    fn waits_round_up_to_whole_seconds() {
        assert_eq!(seconds(Duration::ZERO), 1);
        assert_eq!(seconds(Duration::from_millis(200)), 1);
        assert_eq!(seconds(Duration::from_secs(2)), 2);
        assert_eq!(seconds(Duration::from_millis(2100)), 3);
    }
}
