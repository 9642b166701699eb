//! The HealthCheck status controller, and which HealthCheck applies to an object.
//!
//! Singleton work: it runs on the leader (or the only replica) and writes nothing but
//! HealthCheck status. The Application controllers evaluate the rules themselves (their own
//! watch, [`crate::controller::application`]), with the same [`compile`] and [`applies`].
//!
//! # Expected flow
//!
//! For each HealthCheck: compile its expressions ([`compile`]), find whether an older one for
//! the same kind in the namespace wins ([`winner`]), and write `status` ([`desired_status`]):
//!
//! - every expression compiles: `Ready=True` (reason `Succeeded`);
//! - one does not (syntax, evident non-bool result, cost over the limit): `Stalled=True` and
//!   `Ready=False` with reason `InvalidExpression` and the compiler's message;
//! - another HealthCheck for the same kind in the namespace is older (then lower in name):
//!   `Stalled=True`, `Ready=False`, reason `DuplicateTarget`, naming the one that applies.
//!
//! `status.observedGeneration` is the generation compiled. Status is written only when it
//! changes. A change of one HealthCheck reconciles the others of its namespace, as the winner
//! of a kind may change.

use std::cmp::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::api::conditions;
use crate::api::healthcheck::{HealthCheck, HealthCheckStatus};
use crate::api::names;
use crate::health::cel::Rules;

/// The API group and kind a HealthCheck targets (the version is not compared: an object is
/// read at whatever version the controller watches it).
pub fn target(hc: &HealthCheck) -> (&str, &str) {
    let group = hc.spec.target.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    (group, &hc.spec.target.kind)
}

/// Whether `hc` is for objects of `group`/`kind` in `namespace`.
pub fn applies(hc: &HealthCheck, namespace: &str, group: &str, kind: &str) -> bool {
    hc.namespace().as_deref() == Some(namespace)
        && target(hc) == (group, kind)
        && hc.metadata.deletion_timestamp.is_none()
}

/// Which of two HealthChecks for the same kind applies: the older, then the lower name.
pub fn precedence(a: &HealthCheck, b: &HealthCheck) -> Ordering {
    let created = |hc: &HealthCheck| hc.metadata.creation_timestamp.as_ref().map(|t| t.0);
    (created(a), a.name_any()).cmp(&(created(b), b.name_any()))
}

/// The HealthCheck that applies to `group`/`kind` in `namespace`, among `all`.
pub fn winner<'a>(
    all: impl IntoIterator<Item = &'a HealthCheck>,
    namespace: &str,
    group: &str,
    kind: &str,
) -> Option<&'a HealthCheck> {
    all.into_iter().filter(|hc| applies(hc, namespace, group, kind)).min_by(|a, b| precedence(a, b))
}

/// The compiled rules of `hc`.
pub fn compile(hc: &HealthCheck) -> Rules {
    Rules::compile(&hc.name_any(), &hc.spec.current, hc.spec.in_progress.as_deref(), hc.spec.failed.as_deref())
}

/// The status `hc` should have: `rules` are its compiled rules, `winner` the HealthCheck that
/// applies to its kind in its namespace.
pub fn desired_status(
    hc: &HealthCheck,
    rules: &Rules,
    winner: Option<&HealthCheck>,
    now: Timestamp,
) -> HealthCheckStatus {
    let mut status = hc.status.clone().unwrap_or_default();
    let generation = hc.metadata.generation;
    status.observed_generation = generation;
    let c = &mut status.conditions;
    if let Some(error) = rules.error() {
        conditions::mark_stalled(c, names::reasons::INVALID_EXPRESSION, error, generation, now);
    } else if let Some(other) = winner.filter(|w| w.name_any() != hc.name_any()) {
        let (_, kind) = target(hc);
        let message = format!(
            "HealthCheck {} is older and applies to {kind} in this namespace; this one is ignored",
            other.name_any()
        );
        conditions::mark_stalled(c, names::reasons::DUPLICATE_TARGET, &message, generation, now);
    } else {
        let (_, kind) = target(hc);
        let message = format!("every expression compiles; applies to {kind} in this namespace");
        conditions::mark_ready(c, names::reasons::SUCCEEDED, &message, generation, now);
    }
    status
}

struct Ctx {
    client: Client,
    store: Store<HealthCheck>,
}

/// Write the status of every HealthCheck until `shutdown` completes (see the module
/// documentation).
pub async fn run(client: Client, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    let api: Api<HealthCheck> = Api::all(client.clone());
    let (store, writer) = reflector::store();
    let own = watcher(api.clone(), watcher::Config::default()).default_backoff().reflect(writer).applied_objects();
    let controller = Controller::for_stream(own, store.clone()).trigger_backoff(super::EachWatchBacksOff);
    let siblings = store.clone();
    let others = watcher(api, watcher::Config::default()).default_backoff().touched_objects();
    controller
        // Another HealthCheck of the namespace changed: the winner of its kind may have too.
        .watches_stream(others, move |hc: HealthCheck| {
            let ns = hc.namespace();
            siblings
                .state()
                .into_iter()
                .filter(|other| other.namespace() == ns && other.name_any() != hc.name_any())
                .map(|other| ObjectRef::from_obj(&*other))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile,
            |_, e: &kube::Error, _| {
                tracing::debug!(error = %e, "healthcheck status");
                Action::requeue(Duration::from_secs(5))
            },
            Arc::new(Ctx { client, store }),
        )
        .for_each(|_| async {})
        .await;
}

async fn reconcile(hc: Arc<HealthCheck>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let ns = hc.namespace().unwrap_or_default();
    let rules = compile(&hc);
    let all = ctx.store.state();
    let (group, kind) = target(&hc);
    let winner = winner(all.iter().map(|a| &**a), &ns, group, kind);
    let old = hc.status.clone().unwrap_or_default();
    let new = desired_status(&hc, &rules, winner, Timestamp::now());
    if new != old {
        let api: Api<HealthCheck> = Api::namespaced(ctx.client.clone(), &ns);
        let params = PatchParams::apply(names::STATUS_FIELD_MANAGER);
        api.patch_status(&hc.name_any(), &params, &Patch::Merge(json!({"status": new}))).await?;
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;

    use super::*;
    use crate::api::healthcheck::{HealthCheckSpec, HealthCheckTarget};

    fn hc(name: &str, created: i64, current: &str) -> HealthCheck {
        let mut hc = HealthCheck::new(
            name,
            HealthCheckSpec {
                target: HealthCheckTarget { api_version: "example.com/v1".into(), kind: "Widget".into() },
                current: current.into(),
                in_progress: None,
                failed: None,
            },
        );
        hc.metadata = ObjectMeta {
            name: Some(name.into()),
            namespace: Some("apps".into()),
            generation: Some(2),
            creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
            ..Default::default()
        };
        hc
    }

    fn condition<'a>(s: &'a HealthCheckStatus, t: &str) -> (&'a str, &'a str, &'a str) {
        let c = conditions::get(&s.conditions, t).unwrap_or_else(|| panic!("no {t}"));
        (&c.status, &c.reason, &c.message)
    }

    #[test]
    fn valid_rules_are_ready() {
        let a = hc("a", 10, "status.ready == true");
        let s = desired_status(&a, &compile(&a), Some(&a), Timestamp::UNIX_EPOCH);
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(condition(&s, "Ready").0, "True");
        assert!(conditions::get(&s.conditions, "Stalled").is_none());
    }

    #[test]
    fn invalid_rules_are_stalled_with_the_compiler_message() {
        let a = hc("a", 10, "status.ready ==");
        let s = desired_status(&a, &compile(&a), Some(&a), Timestamp::UNIX_EPOCH);
        let (status, reason, message) = condition(&s, "Stalled");
        assert_eq!((status, reason), ("True", "InvalidExpression"));
        assert!(message.starts_with("current: "), "{message}");
        assert_eq!(condition(&s, "Ready").0, "False");
    }

    #[test]
    fn the_oldest_then_the_lowest_name_applies_and_the_others_say_so() {
        let (older, newer, same_age) = (hc("z", 10, "true"), hc("a", 20, "true"), hc("b", 20, "true"));
        let all = [newer.clone(), same_age.clone(), older.clone()];
        assert_eq!(winner(&all, "apps", "example.com", "Widget").unwrap().name_any(), "z");
        assert_eq!(winner(&all[..2], "apps", "example.com", "Widget").unwrap().name_any(), "a");
        assert!(winner(&all, "other", "example.com", "Widget").is_none());
        assert!(winner(&all, "apps", "example.com", "Gadget").is_none());
        let s = desired_status(&newer, &compile(&newer), Some(&older), Timestamp::UNIX_EPOCH);
        let (status, reason, message) = condition(&s, "Stalled");
        assert_eq!((status, reason), ("True", "DuplicateTarget"));
        assert!(message.starts_with("HealthCheck z is older"), "{message}");
    }
}
