//! Issue 48: shard Lease renewals that survive a saturated replica. In a 10,000-Application
//! load test 83 renewals came later than the fence limit, each closing a shard's fence. The
//! coordinator now runs on a thread of its own ([`sharding::thread::LeaseThread`]) with a client
//! built there (its own connections and request queue): renewals wait for nothing the fleet does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::Api;
use serde_json::json;
use sharding::coordinator::{Coordinator, Fence, Ownership, Workers};
use sharding::lease::{Leases, Timing};
use sharding::thread::LeaseThread;
use testkit::{Cluster, apply_as, eventually};

const WAIT: Duration = Duration::from_secs(300);

/// Workers with nothing to run: the test is about the Leases.
struct Idle;

impl Workers for Idle {
    async fn start(&mut self, _shard: u32) {}
    // The trait asks the same; rustc reports it as a refinement in a test crate.
    #[allow(refining_impl_trait)]
    fn stop(&mut self, _shard: u32) -> impl std::future::Future<Output = ()> + Send + 'static {
        std::future::ready(())
    }
}

/// Every ownership the coordinator publishes: (when seen, shard → valid until).
type History = Arc<Mutex<Vec<(Instant, BTreeMap<u32, Instant>)>>>;

async fn record(mut rx: tokio::sync::watch::Receiver<Ownership>, out: History) {
    loop {
        let now: BTreeMap<u32, Instant> =
            rx.borrow_and_update().shards.iter().map(|(k, h)| (*k, h.valid_until)).collect();
        out.lock().unwrap().push((Instant::now(), now));
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// A replica `name` holding all `shards` shards of namespace `ns`: its coordinator on a Lease
/// thread of its own, renewing as `timing` says, and the ownership it publishes recorded. The
/// thread must outlive the test's use of the fence.
async fn holding_every_shard(
    cluster: &Cluster,
    ns: &str,
    name: &str,
    timing: Timing,
    shards: u32,
    spare: Duration,
) -> (LeaseThread, Fence, History) {
    let client = cluster.client().await;
    apply_as(&client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
    let own = LeaseThread::start("test-leases").expect("the Lease thread");
    let renewals = own.client(cluster.config().await).expect("the renewal client");
    let (coordinator, owned) = Coordinator::new(Leases::new(Api::namespaced(renewals, ns), "a", timing), name, shards);
    let history: History = Arc::default();
    own.spawn(record(owned.clone(), history.clone()));
    own.spawn(coordinator.run(Idle, std::future::pending::<()>()));
    let fence = Fence::new(owned, spare);
    eventually("the replica to hold every shard", WAIT, || async {
        (fence.shards().len() == shards as usize).then_some(())
    })
    .await;
    (own, fence, history)
}

/// Each renewal of `valid` ((when seen, valid until), in order) was seen before the fence of
/// the one before closed (`spare` before its end); the closest it came to closing.
fn fence_never_closed(valid: &[(Instant, Instant)], spare: Duration, what: &str) -> Duration {
    let mut closest = Duration::MAX;
    for pair in valid.windows(2) {
        let ((_, before), (renewed, _)) = (pair[0], pair[1]);
        assert!(
            renewed < before - spare,
            "{what}: its fence closed {:?} before the next renewal was seen",
            renewed - (before - spare)
        );
        closest = closest.min((before - spare) - renewed);
    }
    closest
}

/// Saturate the main runtime (the test's two workers and the thread driving it, which calls
/// this) for `blocked_for`, as reconciles rendering large charts would; when it is free again.
async fn block_the_main_runtime(blocked_for: Duration) -> Instant {
    let blockers: Vec<_> = (0..2).map(|_| tokio::spawn(async move { std::thread::sleep(blocked_for) })).collect();
    std::thread::sleep(blocked_for);
    for b in blockers {
        b.await.unwrap();
    }
    Instant::now()
}

/// Every worker of the replica's main runtime (and the thread driving it) is blocked for two
/// Lease durations, as reconciles rendering large charts block them: the shard Leases are renewed
/// on their cadence all the same and no shard's fence closes. Without the thread of its own (the
/// coordinator spawned on the main runtime, or its client built there) no renewal is sent while
/// the runtime is blocked and the fences close.
fn renewals_keep_their_cadence_while_the_main_runtime_is_saturated(cluster: Cluster) {
    const NS: &str = "saturated";
    const SHARDS: u32 = 3;
    // The real server on a loaded 2-core machine sometimes takes over a second to answer a Lease
    // write (see tests/sharding.rs): its Leases are longer, so the test measures the replica.
    let duration = Duration::from_secs(if cluster.sim().is_some() { 6 } else { 12 });
    let timing = Timing::new(duration);
    // The fence the manager gives the Application controller: a tenth of the duration to spare.
    let spare = duration / 10;
    let main = testkit::runtime();
    main.block_on(async {
        let (own, _fence, history) = holding_every_shard(&cluster, NS, "sat", timing, SHARDS, spare).await;
        let held_from = Instant::now();
        let blocked_for = 2 * duration;
        let blocked_until = block_the_main_runtime(blocked_for).await;
        let history = history.lock().unwrap().clone();
        drop(own);

        // Each shard's validity as it was renewed, from its first acquisition on.
        let (mut closest, mut renewals_blocked) = (Duration::MAX, 0);
        for k in 0..SHARDS {
            let mut valid: Vec<(Instant, Instant)> = Vec::new();
            for (seen, shards) in &history {
                if let Some(v) = shards.get(&k)
                    && valid.last().is_none_or(|(_, last)| last != v)
                {
                    valid.push((*seen, *v));
                }
            }
            let during = valid.iter().filter(|(seen, _)| *seen > held_from && *seen < blocked_until).count();
            assert!(during >= 3, "shard {k}: {during} renewals while the main runtime was blocked");
            renewals_blocked += during;
            closest = closest.min(fence_never_closed(&valid, spare, &format!("shard {k}")));
            let (_, last) = valid.last().copied().expect("renewals");
            assert!(last - spare > blocked_until, "shard {k}: fenced when the main runtime was free again");
        }
        eprintln!(
            "{renewals_blocked} renewals of {SHARDS} shard Leases while the main runtime was blocked for {blocked_for:?}; the closest a fence came to closing: {closest:?} before"
        );
    });
}

testkit::both!(renewals_keep_their_cadence_while_the_main_runtime_is_saturated);

/// A server slow to answer Lease writes (half a second each, simcluster's latency fault) holds a
/// round up by one write, not one per shard: eight shards are renewed at once, on the cadence,
/// and no fence closes. One after the other, a round took four and a half seconds, longer than
/// the fence lasts.
fn a_slow_server_delays_a_round_by_one_renewal_not_one_per_shard(cluster: Cluster) {
    const NS: &str = "slow-writes";
    const SHARDS: u32 = 8;
    let sim = cluster.sim().expect("simcluster: the test injects latency");
    let duration = Duration::from_secs(6);
    let spare = duration / 10;
    testkit::runtime().block_on(async {
        let (own, _fence, history) =
            holding_every_shard(&cluster, NS, "slow", Timing::new(duration), SHARDS, spare).await;
        sim.add_fault(simcluster::faults::FaultRule {
            verb: Some("update".into()),
            resource: Some("leases".into()),
            action: Some(simcluster::faults::FaultAction::Latency { millis: 500 }),
            ..Default::default()
        });
        let slow_from = Instant::now();
        // Five rounds' worth of slow renewals, watched as they come.
        let seen =
            |k: u32| history.lock().unwrap().iter().filter(|(at, s)| *at > slow_from && s.contains_key(&k)).count();
        eventually("renewals while the server is slow", WAIT, || async {
            (0..SHARDS).all(|k| seen(k) >= 5).then_some(())
        })
        .await;
        sim.clear_faults();
        let history = history.lock().unwrap().clone();
        drop(own);
        for k in 0..SHARDS {
            let mut valid: Vec<(Instant, Instant)> = Vec::new();
            for (at, shards) in &history {
                if let Some(v) = shards.get(&k)
                    && valid.last().is_none_or(|(_, last)| last != v)
                {
                    valid.push((*at, *v));
                }
            }
            fence_never_closed(&valid, spare, &format!("shard {k}"));
        }
    });
}

mod a_slow_server_delays_a_round_by_one_renewal_not_one_per_shard {
    #[test]
    fn simcluster() {
        super::a_slow_server_delays_a_round_by_one_renewal_not_one_per_shard(testkit::Cluster::start());
    }
}

/// A leader term as published: when seen, and until when valid (`None`: not leading).
type Term = (Instant, Option<Instant>);

/// The leader Lease is renewed on the Lease thread as the shard Leases are
/// (`sharding::leader::spawn_elected_fenced`): with every worker of the main runtime and its
/// driving thread blocked for two Lease durations, the leader's term is renewed on its cadence
/// and its fence never closes, while the singleton work itself runs on the main runtime. With the
/// election on the main runtime (as before) no renewal is sent while it is blocked and the fence
/// closes.
fn the_leader_lease_keeps_its_cadence_while_the_main_runtime_is_saturated(cluster: Cluster) {
    const NS: &str = "saturated-leader";
    let duration = Duration::from_secs(if cluster.sim().is_some() { 6 } else { 12 });
    let timing = Timing::new(duration);
    let spare = timing.fence_spare();
    testkit::runtime().block_on(async {
        let client = cluster.client().await;
        apply_as(&client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
        let own = LeaseThread::start("test-leases").expect("the Lease thread");
        let renewals = own.client(cluster.config().await).expect("the renewal client");
        let leases = Leases::new(Api::namespaced(renewals, NS), "a", timing);
        let (term, term_rx) = tokio::sync::watch::channel(None);
        // Every term published: (when seen, valid until; None when not leading).
        let history: Arc<Mutex<Vec<Term>>> = Arc::default();
        let (mut rx, out) = (term_rx.clone(), history.clone());
        own.spawn(async move {
            loop {
                let now = rx.borrow_and_update().as_ref().map(|h: &sharding::lease::Held| h.valid_until);
                out.lock().unwrap().push((Instant::now(), now));
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
        let worked_on: Arc<Mutex<Option<String>>> = Arc::default();
        let w = worked_on.clone();
        let work = move |_stop: tokio::sync::watch::Receiver<bool>| {
            let w = w.clone();
            async move {
                *w.lock().unwrap() = std::thread::current().name().map(str::to_string);
            }
        };
        let allowed = tokio::sync::watch::channel(true).1;
        let fence = sharding::leader::LeaderFence::new(term_rx, spare);
        let _leading = sharding::leader::spawn_elected_fenced(
            &own,
            leases,
            "test-leader".into(),
            allowed,
            work,
            std::future::pending::<()>(),
            term,
        );
        eventually("the replica to lead", WAIT, || async { fence.until().map(|_| ()) }).await;
        eventually("the singleton work to run", WAIT, || async { worked_on.lock().unwrap().clone() }).await;
        let ran_on = worked_on.lock().unwrap().clone();
        assert_ne!(ran_on.as_deref(), Some("test-leases"), "the singleton work runs on the main runtime");
        let held_from = Instant::now();
        let blocked_for = 2 * duration;
        let blocked_until = block_the_main_runtime(blocked_for).await;
        let history = history.lock().unwrap().clone();
        drop(own);

        let mut valid: Vec<(Instant, Instant)> = Vec::new();
        for (seen, v) in history.iter().skip_while(|(_, v)| v.is_none()) {
            let v = v.unwrap_or_else(|| panic!("the leader's term ended at {seen:?}: {history:?}"));
            if valid.last().is_none_or(|(_, last)| *last != v) {
                valid.push((*seen, v));
            }
        }
        let during = valid.iter().filter(|(seen, _)| *seen > held_from && *seen < blocked_until).count();
        assert!(during >= 3, "{during} leader renewals while the main runtime was blocked");
        fence_never_closed(&valid, spare, "the leader");
        let (_, last) = valid.last().copied().expect("renewals");
        assert!(last - spare > blocked_until, "fenced when the main runtime was free again");
    });
}

testkit::both!(the_leader_lease_keeps_its_cadence_while_the_main_runtime_is_saturated);

/// This process's count of late renewals for `role` ([`sharding::lease::RENEWALS_LATE_TOTAL`]),
/// read from a Prometheus recorder installed once per process, as the manager installs its own.
fn late_renewals(role: &str) -> u64 {
    static RECORDER: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> = std::sync::OnceLock::new();
    let handle = RECORDER.get_or_init(|| {
        metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder().expect("the test's recorder")
    });
    let series = format!("{}{{role=\"{role}\"}} ", sharding::lease::RENEWALS_LATE_TOTAL);
    handle.render().lines().find_map(|l| l.strip_prefix(&series)?.trim().parse().ok()).unwrap_or(0)
}

/// A replica's shard Lease is taken over while it is not renewing (a replica paused past its
/// Lease): the renewal that finds it lost counts as late once (`Leases::acquire` reports the
/// loss), and the attempts after it do not count again. Without the wiring, a Lease lost to a gap
/// shows only as a hand-over and the count stays at 0.
fn a_lease_lost_to_a_gap_counts_one_late_renewal(cluster: Cluster) {
    const NS: &str = "lost-lease";
    const ROLE: &str = "lost-test";
    let duration = Duration::from_secs(if cluster.sim().is_some() { 3 } else { 12 });
    let timing = Timing::new(duration);
    testkit::runtime().block_on(async {
        let client = cluster.client().await;
        apply_as(&client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
        let a = Leases::new(Api::namespaced(client.clone(), NS), "a", timing);
        let b = Leases::new(Api::namespaced(client.clone(), NS), "b", timing);
        eventually("a to hold the Lease", WAIT, || async { a.acquire("shard-0", ROLE).await.ok().flatten() }).await;
        assert_eq!(late_renewals(ROLE), 0, "no renewal is due yet");
        // b may take it once it has seen it unchanged for a whole duration: past a's fence limit.
        eventually("b to take the Lease over", WAIT, || async { b.acquire("shard-0", ROLE).await.ok().flatten() })
            .await;
        eventually("a to see the Lease lost", WAIT, || async {
            matches!(a.acquire("shard-0", ROLE).await, Ok(None)).then_some(())
        })
        .await;
        assert_eq!(late_renewals(ROLE), 1, "the gap that lost the Lease counts once");
        assert!(matches!(a.acquire("shard-0", ROLE).await, Ok(None) | Err(_)), "b holds it");
        assert_eq!(late_renewals(ROLE), 1, "a Lease no longer held has no renewal to be late");
    });
}

testkit::both!(a_lease_lost_to_a_gap_counts_one_late_renewal);

/// The server refuses a held Lease's renewals past the fence limit, then answers again: the gap
/// counts once, when the first refusal past the limit is seen, and not again at the renewal
/// that ends it. Without the wiring of failures in `Leases::acquire` only the late renewal
/// would count, and only if it came.
fn refused_renewals_past_the_limit_count_once(cluster: Cluster) {
    const NS: &str = "refused-lease";
    const ROLE: &str = "refused-test";
    let sim = cluster.sim().expect("simcluster: the test injects errors");
    let timing = Timing::new(Duration::from_secs(3));
    testkit::runtime().block_on(async {
        let client = cluster.client().await;
        apply_as(&client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
        let a = Leases::new(Api::namespaced(client.clone(), NS), "a", timing);
        eventually("a to hold the Lease", WAIT, || async { a.acquire("shard-0", ROLE).await.ok().flatten() }).await;
        sim.add_fault(simcluster::faults::FaultRule {
            verb: Some("update".into()),
            resource: Some("leases".into()),
            namespace: Some(NS.into()),
            action: Some(simcluster::faults::FaultAction::Status { code: 500 }),
            ..Default::default()
        });
        eventually("a refusal past the fence limit to count", WAIT, || async {
            assert!(a.acquire("shard-0", ROLE).await.is_err(), "the server refuses every renewal");
            (late_renewals(ROLE) == 1).then_some(())
        })
        .await;
        assert!(a.acquire("shard-0", ROLE).await.is_err(), "still refused");
        sim.clear_faults();
        eventually("a to renew again", WAIT, || async { a.acquire("shard-0", ROLE).await.ok().flatten() }).await;
        assert_eq!(late_renewals(ROLE), 1, "one gap, counted once");
    });
}

mod refused_renewals_past_the_limit_count_once {
    #[test]
    fn simcluster() {
        super::refused_renewals_past_the_limit_count_once(testkit::Cluster::start());
    }
}
