//! `coordination.k8s.io/v1` Leases with fencing that does not trust clocks.
//!
//! - **Acquire / renew**: a replace conditioned on the Lease's `resourceVersion`, so two
//!   replicas can never both win the same transition.
//! - **Expiry of someone else's Lease** is judged the way client-go's leader election does it:
//!   by how long *this* process has seen the Lease's `resourceVersion` unchanged, on its own
//!   monotonic clock. Wall-clock skew between replicas does not make a Lease look expired early.
//! - **Our own validity** ([`Held::valid_until`]) runs from the moment the renewing request was
//!   *sent*, for the Lease duration minus a margin: the holder stops acting before any other
//!   replica may take over, whatever their clocks say (only clock *rates* matter).
//! - **Epoch**: `leaseTransitions` increments on every change of holder; a holder records it
//!   with the writes it makes, so a write from an older epoch can be told apart.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;

/// The label giving a Lease's role: `member`, `shard` or `leader`.
pub const ROLE_LABEL: &str = "sync.kuvryn.io/lease-role";

/// A Lease this process holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The Lease's name.
    pub name: String,
    /// `leaseTransitions` when we took it: the fencing epoch.
    pub epoch: i32,
    /// Until when (local monotonic clock) we may act on it.
    pub valid_until: Instant,
}

impl Held {
    /// Whether we may still act, with `spare` to spare.
    pub fn valid(&self, spare: Duration) -> bool {
        Instant::now() + spare < self.valid_until
    }
}

/// Timing of the Leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// `leaseDurationSeconds`.
    pub duration: Duration,
    /// How much earlier than the duration a holder stops acting.
    pub margin: Duration,
}

impl Timing {
    /// The duration with a third of it as margin.
    pub fn new(duration: Duration) -> Timing {
        Timing { duration, margin: duration / 3 }
    }

    /// How often to renew: a third of the duration.
    pub fn renew_every(&self) -> Duration {
        self.duration / 3
    }
}

/// Acquires, renews and releases Leases in one namespace as one identity.
pub struct Leases {
    api: Api<Lease>,
    identity: String,
    timing: Timing,
    /// Foreign Leases: name → (resourceVersion, when we first saw that version).
    observed: Mutex<HashMap<String, (String, Instant)>>,
}

/// Why a Lease operation failed (other than losing a race, which is `Ok(None)`).
pub type Result<T> = std::result::Result<T, kube::Error>;

fn now_micro() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

impl Leases {
    /// Leases in `api`'s namespace, held as `identity`.
    pub fn new(api: Api<Lease>, identity: impl Into<String>, timing: Timing) -> Leases {
        Leases { api, identity: identity.into(), timing, observed: Mutex::new(HashMap::new()) }
    }

    /// Our identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The timing.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    fn spec(&self, transitions: i32, acquired: Option<MicroTime>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(i32::try_from(self.timing.duration.as_secs().max(1)).unwrap_or(i32::MAX)),
            acquire_time: Some(acquired.unwrap_or_else(now_micro)),
            renew_time: Some(now_micro()),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// Whether a Lease held by someone else may be taken: released (no holder), or unchanged
    /// for a whole duration as this process observed it.
    fn takeable(&self, lease: &Lease) -> bool {
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref().is_none_or(str::is_empty) {
            return true;
        }
        let duration = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
            .unwrap_or(self.timing.duration);
        self.observe(lease) >= duration
    }

    /// Note `lease`'s `resourceVersion` as seen now; how long this process has seen it unchanged.
    fn observe(&self, lease: &Lease) -> Duration {
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let name = lease.metadata.name.clone().unwrap_or_default();
        let mut observed = self.observed.lock().expect("observed lock");
        let entry = observed.entry(name).or_insert_with(|| (rv.clone(), Instant::now()));
        if entry.0 != rv {
            *entry = (rv, Instant::now());
        }
        entry.1.elapsed()
    }

    /// Acquire or renew `name` (created labelled [`ROLE_LABEL`]`=role`). `Ok(None)`: someone
    /// else holds it (or won a race).
    pub async fn acquire(&self, name: &str, role: &str) -> Result<Option<Held>> {
        let sent = Instant::now();
        let held = |lease: &Lease| Held {
            name: name.to_string(),
            epoch: lease.spec.as_ref().and_then(|s| s.lease_transitions).unwrap_or(0),
            valid_until: sent + self.timing.duration.saturating_sub(self.timing.margin),
        };
        let Some(current) = self.api.get_opt(name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    labels: Some(
                        [
                            (ROLE_LABEL.to_string(), role.to_string()),
                            ("app.kubernetes.io/managed-by".to_string(), "kuvryn-sync".to_string()),
                        ]
                        .into(),
                    ),
                    ..Default::default()
                },
                spec: Some(self.spec(0, None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => Ok(Some(held(&created))),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
                Err(e) => Err(e),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let ours = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        if !ours && !self.takeable(&current) {
            return Ok(None);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        let acquired = if ours { spec.acquire_time.clone() } else { None };
        let mut next = current.clone();
        next.spec = Some(self.spec(transitions, acquired));
        match self.api.replace(name, &PostParams::default(), &next).await {
            Ok(replaced) => {
                self.observed.lock().expect("observed lock").remove(name);
                Ok(Some(held(&replaced)))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Release `name` if we hold it (graceful hand-over: no one has to wait for expiry).
    pub async fn release(&self, name: &str) -> Result<()> {
        let Some(current) = self.api.get_opt(name).await? else { return Ok(()) };
        let spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        let mut next = current.clone();
        next.spec = Some(LeaseSpec { holder_identity: None, acquire_time: None, renew_time: None, ..spec });
        match self.api.replace(name, &PostParams::default(), &next).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The holder of each Lease selected by `labels` that has one: Lease name → holder (live or
    /// not: the caller decides with the member Leases). Every Lease held by another replica is
    /// observed on the way, so the whole Lease duration a takeover waits runs from the first
    /// list that saw its last renewal, not from when this replica first wanted it (a replica
    /// assigned a dead one's shards after the membership Lease expired would otherwise wait
    /// a second duration).
    pub async fn holders(&self, labels: &str) -> Result<std::collections::BTreeMap<String, String>> {
        let list = self.api.list(&kube::api::ListParams::default().labels(labels)).await?;
        for l in &list.items {
            let holder = l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()).unwrap_or_default();
            if !holder.is_empty() && holder != self.identity {
                self.observe(l);
            }
        }
        Ok(list
            .items
            .into_iter()
            .filter_map(|l| {
                let holder = l.spec?.holder_identity.filter(|h| !h.is_empty())?;
                Some((l.metadata.name?, holder))
            })
            .collect())
    }

    /// The holders of the Leases selected by `labels` that are live: renewed within their
    /// duration (wall clock: used only to pick members, never for fencing).
    pub async fn live_holders(&self, labels: &str) -> Result<Vec<String>> {
        let list = self.api.list(&kube::api::ListParams::default().labels(labels)).await?;
        let now = jiff::Timestamp::now();
        let mut out: Vec<String> = list
            .items
            .into_iter()
            .filter_map(|l| {
                let spec = l.spec?;
                let holder = spec.holder_identity.filter(|h| !h.is_empty())?;
                let renewed = spec.renew_time?.0;
                let duration = jiff::SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
                (renewed.checked_add(duration).ok()? > now).then_some(holder)
            })
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }
}
