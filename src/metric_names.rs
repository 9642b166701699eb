//! Every metric the manager publishes: its name, kind and labels (the keys in [`label`]), in
//! one place. Code refers to these constants, never to a literal name. Their meaning is
//! documented for users in `docs/` (the Application controller's in
//! `docs/planning.md#running-it`; `tests/docs.rs` checks that each is named there). Pure: names
//! only.

/// Counter: API requests sent (every client of the replica but the Lease and shard-label one). Labels: `verb`.
pub const API_REQUESTS_TOTAL: &str = "ksync_api_requests_total";

/// Counter: Requests sent again after a `429 Too Many Requests`.
pub const API_RETRIES_TOTAL: &str = "ksync_api_retries_total";

/// Histogram: Time a request waited for the QPS/burst budget.
pub const API_THROTTLE_SECONDS: &str = "ksync_api_throttle_seconds";

/// Gauge: The QPS budget in force (0: none).
pub const API_BUDGET_QPS: &str = "ksync_api_budget_qps";

/// Counter: Writes a fence stopped. Labels: `result`: `closed`, `deadline`.
pub const FENCED_REQUESTS_TOTAL: &str = "ksync_fenced_requests_total";

/// Counter: Desired objects a plan compared without reading them again, read and dry-run, or took as absent unread. Labels: `source`: `unchanged`, `api`, `presumed_absent`.
pub const DESIRED_READS_TOTAL: &str = "ksync_desired_reads_total";

/// Counter: Desired objects read again but not dry-run (only their status moved).
pub const DRY_RUNS_SPARED_TOTAL: &str = "ksync_dry_runs_spared_total";

/// Counter: A kind's managed objects of one Application read from a watch cache or listed. Labels: `source`: `cache`, `api`.
pub const INVENTORY_READS_TOTAL: &str = "ksync_inventory_reads_total";

/// Counter: Drift noticed, once per drift.
pub const DRIFT_DETECTED_TOTAL: &str = "ksync_drift_detected_total";

/// Counter: Attempts that re-applied a deployed desired state and succeeded.
pub const DRIFT_REPAIRED_TOTAL: &str = "ksync_drift_repaired_total";

/// Histogram: One Application reconcile.
pub const RECONCILE_DURATION_SECONDS: &str = "ksync_reconcile_duration_seconds";

/// Counter: Application reconciles. Labels: `result`: [`crate::controller::application::Error::metric_label`], or `ok`.
pub const RECONCILES_TOTAL: &str = "ksync_reconciles_total";

/// Histogram: From an Application's first trigger to its reconcile's start.
pub const RECONCILE_QUEUE_SECONDS: &str = "ksync_reconcile_queue_seconds";

/// Gauge: Owned Applications triggered and not yet started.
pub const RECONCILE_QUEUE_DEPTH: &str = "ksync_reconcile_queue_depth";

/// Gauge: Reconciles holding one of the replica's slots.
pub const RECONCILES_RUNNING: &str = "ksync_reconciles_running";

/// Gauge: Reconciles due and waiting for a slot.
pub const RECONCILES_WAITING: &str = "ksync_reconciles_waiting";

/// Gauge: Applications in the shards this replica runs.
pub const APPLICATIONS_OWNED: &str = "ksync_applications_owned";

/// Gauge: Owned Applications by `status.sync.status` and `status.health.status`. Labels: `sync`, `health`.
pub const APPLICATIONS: &str = "ksync_applications";

/// Gauge: Owned Applications not reconciled within `--stale-reconcile-after`.
pub const APPLICATIONS_RECONCILE_STALE: &str = "ksync_applications_reconcile_stale";

/// Gauge: Shard controllers this replica runs.
pub const SHARDS_OWNED: &str = "ksync_shards_owned";

/// Gauge: Shards nobody runs (the leader's count).
pub const SHARDS_ORPHANED: &str = "ksync_shards_orphaned";

/// Histogram: API calls one resource graph took.
pub const GRAPH_API_CALLS: &str = "ksync_graph_api_calls";

/// Counter: Render cache lookups. Labels: `result`.
pub const RENDER_CACHE_REQUESTS_TOTAL: &str = "ksync_render_cache_requests_total";

/// Histogram: One render. Labels: `renderer`.
pub const RENDER_DURATION_SECONDS: &str = "ksync_render_duration_seconds";

/// Counter: Chart dependency pulls. Labels: `result` (`cached`, `pulled`, `failed`).
pub const CHART_PULLS_TOTAL: &str = "ksync_chart_pulls_total";

/// Histogram: One chart pull that was not served from the cache.
pub const CHART_PULL_DURATION_SECONDS: &str = "ksync_chart_pull_duration_seconds";

/// Counter: Git cache lookups (objects and checkouts). Labels: `cache`, `result`.
pub const GIT_CACHE_REQUESTS_TOTAL: &str = "ksync_git_cache_requests_total";

/// Counter: Git fetches. Labels: `result`.
pub const GIT_FETCHES_TOTAL: &str = "ksync_git_fetches_total";

/// Histogram: One Git fetch.
pub const GIT_FETCH_DURATION_SECONDS: &str = "ksync_git_fetch_duration_seconds";

/// Counter: Bytes Git fetches received.
pub const GIT_FETCH_BYTES_TOTAL: &str = "ksync_git_fetch_bytes_total";

/// Histogram: Writing one checkout out of the object cache.
pub const GIT_MATERIALIZE_DURATION_SECONDS: &str = "ksync_git_materialize_duration_seconds";

/// Gauge: Unix time the webhook's serving certificate expires.
pub const WEBHOOK_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS: &str = "ksync_webhook_certificate_expiry_timestamp_seconds";

/// Counter: Notification deliveries, once each. Labels: `provider` (the Notification's provider type), `result`: `delivered`, `failed`, `dropped` (routed while the Notification was suspended, or an Event a commit-status provider has nothing to send for: no commit, or no state).
pub const NOTIFICATIONS_TOTAL: &str = "ksync_notifications_total";

/// Histogram: One notification delivery, its retries included. Labels: `provider`.
pub const NOTIFICATION_DURATION_SECONDS: &str = "ksync_notification_duration_seconds";

/// Counter: Requests to the push receiver. Labels: `provider` (`github`, `gitlab`, `gitea`, `bitbucket`, `generic`, `unknown`), `result` ([`crate::receiver::outcome::Outcome::LABELS`]).
pub const RECEIVER_REQUESTS_TOTAL: &str = "ksync_receiver_requests_total";

/// Counter: Repositories a verified push asked to fetch (those with a request already pending are not counted).
pub const RECEIVER_TRIGGERED_TOTAL: &str = "ksync_receiver_triggered_total";

/// Histogram: Time between the sends of two successful renewals of a Lease the replica held throughout. Labels: `role`: `shard`, `member`, `leader`.
pub const LEASE_RENEWAL_GAP_SECONDS: &str = sharding::lease::RENEWAL_GAP_SECONDS;

/// Counter: Lease renewals answered after the fence limit of the renewal before (its writes stopped in between). Labels: `role`.
pub const LEASE_RENEWALS_LATE_TOTAL: &str = sharding::lease::RENEWALS_LATE_TOTAL;

/// Every name above, for the tests that check them against the docs.
pub const ALL: &[&str] = &[
    LEASE_RENEWAL_GAP_SECONDS,
    LEASE_RENEWALS_LATE_TOTAL,
    API_REQUESTS_TOTAL,
    API_RETRIES_TOTAL,
    API_THROTTLE_SECONDS,
    API_BUDGET_QPS,
    FENCED_REQUESTS_TOTAL,
    DESIRED_READS_TOTAL,
    DRY_RUNS_SPARED_TOTAL,
    INVENTORY_READS_TOTAL,
    DRIFT_DETECTED_TOTAL,
    DRIFT_REPAIRED_TOTAL,
    RECONCILE_DURATION_SECONDS,
    RECONCILES_TOTAL,
    RECONCILE_QUEUE_SECONDS,
    RECONCILE_QUEUE_DEPTH,
    RECONCILES_RUNNING,
    RECONCILES_WAITING,
    APPLICATIONS_OWNED,
    APPLICATIONS,
    APPLICATIONS_RECONCILE_STALE,
    SHARDS_OWNED,
    SHARDS_ORPHANED,
    GRAPH_API_CALLS,
    RENDER_CACHE_REQUESTS_TOTAL,
    RENDER_DURATION_SECONDS,
    CHART_PULLS_TOTAL,
    CHART_PULL_DURATION_SECONDS,
    GIT_CACHE_REQUESTS_TOTAL,
    GIT_FETCHES_TOTAL,
    GIT_FETCH_DURATION_SECONDS,
    GIT_FETCH_BYTES_TOTAL,
    GIT_MATERIALIZE_DURATION_SECONDS,
    WEBHOOK_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS,
    NOTIFICATIONS_TOTAL,
    NOTIFICATION_DURATION_SECONDS,
    RECEIVER_REQUESTS_TOTAL,
    RECEIVER_TRIGGERED_TOTAL,
];

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_prometheus_names_and_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for name in super::ALL {
            assert!(name.starts_with("ksync_"), "{name}");
            assert!(name.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{name}");
            assert!(seen.insert(*name), "{name} twice");
        }
    }
}

/// The label keys of the metrics above.
pub mod label {
    /// How a request, reconcile or lookup ended (`hit`/`miss`, `ok`/an error label, ...).
    pub const RESULT: &str = "result";
    /// Who sent a receiver request (`github`, `gitlab`, `gitea`, `bitbucket`, `generic`,
    /// `unknown`); a Notification's provider type (`Slack`, `Teams`, ...: nine values).
    pub const PROVIDER: &str = "provider";
    /// Where something was read from (`cache`, `api`, `unchanged`).
    pub const SOURCE: &str = "source";
    /// An API request's verb.
    pub const VERB: &str = "verb";
    /// Which Git cache (`objects`, `checkouts`).
    pub const CACHE: &str = "cache";
    /// The renderer (`yaml`, `kustomize`, `helm`).
    pub const RENDERER: &str = "renderer";
    /// An Application's sync state.
    pub const SYNC: &str = "sync";
    /// An Application's health.
    pub const HEALTH: &str = "health";
}
