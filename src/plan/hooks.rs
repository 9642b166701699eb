//! Sync hooks, pure: which desired objects are hooks and of which phase, their delete
//! policies, Helm's hook annotations mapped onto them, whether a hook object is done, and the
//! order of an attempt's hook stages.
//!
//! - `sync.kuvryn.io/hook`: one of `PreSync`, `Sync`, `PostSync`, `SyncFail`. Without it,
//!   Helm's `helm.sh/hook` is read: `pre-install`/`pre-upgrade` map to `PreSync`,
//!   `post-install`/`post-upgrade` to `PostSync`; `pre-delete`, `post-delete`, `pre-rollback`,
//!   `post-rollback`, `test` (and `test-success`) are never run (the object is not applied at
//!   all, and its plan entry says why); a list mapping to both `PreSync` and `PostSync` is
//!   refused, since a hook runs in one phase.
//! - `sync.kuvryn.io/hook-delete-policy` (else Helm's `helm.sh/hook-delete-policy`, mapped):
//!   a comma-separated list of `BeforeHookCreation` (the default when absent), `HookSucceeded`,
//!   `HookFailed`.
//! - The wave of a Helm hook without `sync.kuvryn.io/sync-wave` is its `helm.sh/hook-weight`
//!   ([`super::wave_of`]).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::api::common::HealthStatus;
use crate::api::names::{annotations, labels};
use crate::api::revision::HookPhase;

use super::{Action, Entry, Plan};

/// When Kuvryn Sync deletes a hook object it created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeletePolicy {
    /// An object of an earlier run is deleted (and waited for until gone) before the hook is
    /// created again. Without this policy, an object of an earlier run fails the attempt.
    BeforeHookCreation,
    /// Deleted once the hook succeeded.
    HookSucceeded,
    /// Deleted once the hook failed.
    HookFailed,
}

/// What an object's hook annotations say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hooked {
    /// An ordinary object.
    No,
    /// A hook run in this phase.
    Run(HookPhase),
    /// A Helm hook Kuvryn Sync does not run: why.
    NotRun(String),
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Result<Option<&'a str>, String> {
    match &obj["metadata"]["annotations"][key] {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.as_str())),
        other => Err(format!("annotation {key}: {other} is not a string")),
    }
}

fn bounded(s: &str) -> String {
    crate::text::bounded(s, 64)
}

/// The hook phase of `obj` ([`Hooked`]), or why its annotation is refused.
pub fn hooked(obj: &Value) -> Result<Hooked, String> {
    if let Some(v) = annotation(obj, annotations::HOOK)? {
        return HookPhase::ALL.into_iter().find(|p| p.as_str() == v.trim()).map(Hooked::Run).ok_or_else(|| {
            format!(
                "annotation {}: {:?} is not a hook phase (PreSync, Sync, PostSync or SyncFail)",
                annotations::HOOK,
                bounded(v)
            )
        });
    }
    let Some(v) = annotation(obj, annotations::HELM_HOOK)? else { return Ok(Hooked::No) };
    let mut phases = BTreeSet::new();
    let mut not_run = Vec::new();
    for h in v.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        match h {
            "pre-install" | "pre-upgrade" => {
                phases.insert(HookPhase::PreSync);
            }
            "post-install" | "post-upgrade" => {
                phases.insert(HookPhase::PostSync);
            }
            "pre-delete" | "post-delete" | "pre-rollback" | "post-rollback" | "test" | "test-success"
            | "test-failure" => not_run.push(h),
            other => {
                return Err(format!("annotation {}: {:?} is not a Helm hook", annotations::HELM_HOOK, bounded(other)));
            }
        }
    }
    let phases: Vec<HookPhase> = phases.into_iter().collect();
    match phases.as_slice() {
        [one] => Ok(Hooked::Run(*one)),
        [] => Ok(Hooked::NotRun(format!(
            "not run: {} {} is not run by Kuvryn Sync (only pre-install, pre-upgrade, post-install and post-upgrade are)",
            annotations::HELM_HOOK,
            bounded(&not_run.join(","))
        ))),
        _ => Err(format!(
            "annotation {}: {:?} maps to both PreSync and PostSync; a hook runs in one phase",
            annotations::HELM_HOOK,
            bounded(v)
        )),
    }
}

/// The delete policies of `obj` (`BeforeHookCreation` when it names none), or why its
/// annotation is refused.
pub fn delete_policies(obj: &Value) -> Result<BTreeSet<DeletePolicy>, String> {
    let (key, v, helm) = match annotation(obj, annotations::HOOK_DELETE_POLICY)? {
        Some(v) => (annotations::HOOK_DELETE_POLICY, v, false),
        None => match annotation(obj, annotations::HELM_HOOK_DELETE_POLICY)? {
            Some(v) if annotation(obj, annotations::HOOK)?.is_none() => (annotations::HELM_HOOK_DELETE_POLICY, v, true),
            _ => return Ok(BTreeSet::from([DeletePolicy::BeforeHookCreation])),
        },
    };
    let mut out = BTreeSet::new();
    for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let policy = match (p, helm) {
            ("BeforeHookCreation", false) | ("before-hook-creation", true) => DeletePolicy::BeforeHookCreation,
            ("HookSucceeded", false) | ("hook-succeeded", true) => DeletePolicy::HookSucceeded,
            ("HookFailed", false) | ("hook-failed", true) => DeletePolicy::HookFailed,
            _ => {
                return Err(format!(
                    "annotation {key}: {:?} is not a delete policy ({})",
                    bounded(p),
                    if helm {
                        "before-hook-creation, hook-succeeded or hook-failed"
                    } else {
                        "BeforeHookCreation, HookSucceeded or HookFailed"
                    }
                ));
            }
        };
        out.insert(policy);
    }
    if out.is_empty() {
        out.insert(DeletePolicy::BeforeHookCreation);
    }
    Ok(out)
}

/// Every problem with `obj`'s hook annotations (for validation).
pub fn problems(obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match hooked(obj) {
        Err(p) => out.push(p),
        Ok(Hooked::No) => return out,
        Ok(_) => {}
    }
    if let Err(p) = delete_policies(obj) {
        out.push(p);
    }
    out
}

/// Whether a hook that ended (`succeeded` or not) is deleted by `policies`.
pub fn delete_when_done(policies: &BTreeSet<DeletePolicy>, succeeded: bool) -> bool {
    policies.contains(if succeeded { &DeletePolicy::HookSucceeded } else { &DeletePolicy::HookFailed })
}

/// Whether `live`, an object found under a hook's name, was created by Kuvryn Sync as a hook of
/// the Application whose id is `application_id`. Anything else (an object of another
/// Application, of another tool, or made by hand) is never deleted or taken for a hook run.
pub fn ours(live: &Value, application_id: &str) -> bool {
    live["metadata"]["labels"][labels::HOOK_OF].as_str() == Some(application_id)
}

/// The value of [`annotations::HOOK_RUN`] for a run.
pub fn run_id(revision: &str, attempt: i32, phase: HookPhase) -> String {
    format!("{revision}/{attempt}/{phase}")
}

/// Whether `live` is the object of the run `run` ([`run_id`]).
pub fn of_run(live: &Value, run: &str) -> bool {
    live["metadata"]["annotations"][annotations::HOOK_RUN].as_str() == Some(run)
}

/// Where a hook object is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Not done yet: why.
    Running(String),
    /// Done, successfully.
    Succeeded,
    /// Done, unsuccessfully: why.
    Failed(String),
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_ && c["status"] == "True")
}

/// Whether the hook object `live` is done: a Job once `Complete` or `Failed`, a Pod once
/// `Succeeded` or `Failed`, any other kind by its health (Healthy succeeded, Degraded failed).
/// With `check`, the HealthCheck for the hook's kind, its verdict decides for every kind.
pub fn completion(live: &Value, check: Option<&crate::health::cel::Rules>) -> Completion {
    completion_within(live, check, &mut crate::health::cel::Budget::unlimited())
}

/// [`completion`], the HealthCheck's expressions charged to `budget`.
pub fn completion_within(
    live: &Value,
    check: Option<&crate::health::cel::Rules>,
    budget: &mut crate::health::cel::Budget,
) -> Completion {
    if let Some(rules) = check {
        let a = crate::health::assess_within(rules, live, budget);
        return match a.status {
            HealthStatus::Healthy => Completion::Succeeded,
            HealthStatus::Degraded => Completion::Failed(a.message),
            _ => Completion::Running(a.message),
        };
    }
    let kind = live["kind"].as_str().unwrap_or_default();
    let group = live["apiVersion"].as_str().and_then(|av| av.rsplit_once('/')).map_or("", |(g, _)| g);
    let why = |c: &Value| {
        let text = [c["reason"].as_str(), c["message"].as_str()].into_iter().flatten().collect::<Vec<_>>().join(": ");
        crate::text::bounded(&text, 512)
    };
    match (group, kind) {
        ("batch", "Job") => {
            if condition(live, "Complete").is_some() || condition(live, "SuccessCriteriaMet").is_some() {
                Completion::Succeeded
            } else if let Some(c) = condition(live, "Failed").or_else(|| condition(live, "FailureTarget")) {
                Completion::Failed(format!("Job failed: {}", why(c)))
            } else {
                Completion::Running("Job has not completed".into())
            }
        }
        ("", "Pod") => match live["status"]["phase"].as_str() {
            Some("Succeeded") => Completion::Succeeded,
            Some("Failed") => Completion::Failed(format!(
                "Pod failed{}",
                live["status"]["message"]
                    .as_str()
                    .map(|m| format!(": {}", crate::text::bounded(m, 512)))
                    .unwrap_or_default()
            )),
            Some(p) => Completion::Running(format!("Pod is {p}")),
            None => Completion::Running("Pod has not started".into()),
        },
        _ => {
            let a = crate::health::assess(live);
            match a.status {
                HealthStatus::Healthy => Completion::Succeeded,
                HealthStatus::Degraded => Completion::Failed(a.message),
                _ => Completion::Running(a.message),
            }
        }
    }
}

/// The plan entries of the hooks that run in `phase` at `wave`, in plan order.
pub fn of_stage(plan: &Plan, phase: HookPhase, wave: i32) -> impl Iterator<Item = &Entry> {
    plan.entries.iter().filter(move |e| e.hook == Some(phase) && e.action == Action::Create && e.wave == wave)
}

/// The waves of the hooks that run in `phase`, lowest first (empty: no such hooks, or hooks are
/// off).
pub fn waves(plan: &Plan, phase: HookPhase) -> Vec<i32> {
    let w: BTreeSet<i32> =
        plan.entries.iter().filter(|e| e.hook == Some(phase) && e.action == Action::Create).map(|e| e.wave).collect();
    w.into_iter().collect()
}

/// What an attempt does once the hooks of `phase` at `wave` all succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Run the hooks of this phase and wave.
    Hooks(HookPhase, i32),
    /// Apply the plan's waves (with its Sync hooks).
    Waves,
    /// The attempt is done (after PostSync: succeeded; after SyncFail: failed).
    Done,
}

/// The stage that starts an attempt: its first PreSync wave, else the waves.
pub fn first(plan: &Plan) -> Next {
    match waves(plan, HookPhase::PreSync).first() {
        Some(w) => Next::Hooks(HookPhase::PreSync, *w),
        None => Next::Waves,
    }
}

/// The stage after the waves are all Healthy: the first PostSync wave, else done.
pub fn after_waves(plan: &Plan) -> Next {
    match waves(plan, HookPhase::PostSync).first() {
        Some(w) => Next::Hooks(HookPhase::PostSync, *w),
        None => Next::Done,
    }
}

/// The stage after the hooks of `phase` at `wave` all succeeded.
pub fn after(plan: &Plan, phase: HookPhase, wave: i32) -> Next {
    if let Some(w) = waves(plan, phase).into_iter().find(|w| *w > wave) {
        return Next::Hooks(phase, w);
    }
    match phase {
        HookPhase::PreSync => Next::Waves,
        HookPhase::Sync => after_waves(plan),
        HookPhase::PostSync | HookPhase::SyncFail => Next::Done,
    }
}

/// The stage of a failed attempt: its first SyncFail wave, unless the attempt is already
/// running SyncFail hooks (`current`) or has none.
pub fn on_failure(plan: &Plan, current: Option<HookPhase>) -> Next {
    if current == Some(HookPhase::SyncFail) {
        return Next::Done;
    }
    match waves(plan, HookPhase::SyncFail).first() {
        Some(w) => Next::Hooks(HookPhase::SyncFail, *w),
        None => Next::Done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(serde::Deserialize)]
    struct Case {
        name: String,
        annotations: serde_json::Map<String, Value>,
        /// `No`, `PreSync`..., `NotRun: why`, or `Error: why`.
        hook: String,
        /// The delete policies, or `Error: why`.
        #[serde(default)]
        policies: Option<String>,
    }

    fn obj(annotations: &serde_json::Map<String, Value>) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "h", "annotations": annotations}})
    }

    #[test]
    fn table() {
        let cases: Vec<Case> = crate::yaml::from_str(include_str!("../../testdata/plan/hooks.yaml")).unwrap();
        assert!(cases.len() >= 10);
        for c in cases {
            let o = obj(&c.annotations);
            let got = match hooked(&o) {
                Ok(Hooked::No) => "No".to_string(),
                Ok(Hooked::Run(p)) => p.to_string(),
                Ok(Hooked::NotRun(why)) => format!("NotRun: {why}"),
                Err(e) => format!("Error: {e}"),
            };
            assert_eq!(got, c.hook, "{}", c.name);
            if let Some(want) = c.policies {
                let got = match delete_policies(&o) {
                    Ok(p) => p.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>().join(","),
                    Err(e) => format!("Error: {e}"),
                };
                assert_eq!(got, want, "{}", c.name);
            }
        }
    }

    #[test]
    fn completion_of_jobs_pods_and_other_kinds() {
        let job = |conds: Value| json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"conditions": conds}});
        assert_eq!(completion(&job(json!([{"type": "Complete", "status": "True"}])), None), Completion::Succeeded);
        assert_eq!(
            completion(
                &job(json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                      "message": "Job has reached the specified backoff limit"}])),
                None
            ),
            Completion::Failed("Job failed: BackoffLimitExceeded: Job has reached the specified backoff limit".into())
        );
        assert_eq!(completion(&job(json!([])), None), Completion::Running("Job has not completed".into()));
        assert_eq!(
            completion(&job(json!([{"type": "Complete", "status": "False"}])), None),
            Completion::Running("Job has not completed".into())
        );
        let pod = |phase: &str| json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": phase}});
        assert_eq!(completion(&pod("Succeeded"), None), Completion::Succeeded);
        assert_eq!(completion(&pod("Failed"), None), Completion::Failed("Pod failed".into()));
        assert_eq!(completion(&pod("Running"), None), Completion::Running("Pod is Running".into()));
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(completion(&cm, None), Completion::Succeeded);
        // A HealthCheck for the kind decides, for Jobs too.
        let rules = crate::health::cel::Rules::compile("jobs", "has(status.done)", None, Some("has(status.failed)"));
        let done = json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"done": true}});
        assert_eq!(completion(&done, Some(&rules)), Completion::Succeeded);
        assert_eq!(
            completion(&job(json!([{"type": "Complete", "status": "True"}])), Some(&rules)),
            Completion::Running("HealthCheck jobs: no expression is true".into())
        );
        let failed = json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"failed": 1}});
        assert_eq!(completion(&failed, Some(&rules)), Completion::Failed("HealthCheck jobs: failed is true".into()));
    }

    #[test]
    fn delete_policies_decide_what_is_deleted_when_done() {
        let p = |v: &[DeletePolicy]| v.iter().copied().collect::<BTreeSet<_>>();
        assert!(!delete_when_done(&p(&[DeletePolicy::BeforeHookCreation]), true));
        assert!(!delete_when_done(&p(&[DeletePolicy::BeforeHookCreation]), false));
        assert!(delete_when_done(&p(&[DeletePolicy::HookSucceeded]), true));
        assert!(!delete_when_done(&p(&[DeletePolicy::HookSucceeded]), false));
        assert!(delete_when_done(&p(&[DeletePolicy::HookFailed]), false));
        assert!(delete_when_done(&p(&[DeletePolicy::HookSucceeded, DeletePolicy::HookFailed]), true));
    }

    /// The guard before any hook delete: only an object labelled as this Application's hook.
    #[test]
    fn only_our_hooks_are_ours() {
        let id = crate::plan::inventory::application_id("shop", "web");
        let with = |labels: Value| json!({"metadata": {"name": "migrate", "labels": labels}});
        assert!(ours(&with(json!({labels::HOOK_OF: id})), &id));
        assert!(!ours(&with(json!({})), &id), "an object made by hand");
        assert!(!ours(&with(json!({labels::HOOK_OF: "0123456789abcdef0123"})), &id), "another Application's hook");
        assert!(!ours(&with(json!({labels::APPLICATION_ID: id})), &id), "a managed object, not a hook");
    }

    fn entry(name: &str, hook: Option<HookPhase>, wave: i32, action: Action) -> Entry {
        Entry {
            group: "batch".into(),
            kind: "Job".into(),
            version: "v1".into(),
            namespace: "shop".into(),
            name: name.into(),
            action,
            changed: Vec::new(),
            more_changed: 0,
            warnings: Vec::new(),
            conflicts: Vec::new(),
            wave,
            hook,
            chart_crd: false,
        }
    }

    #[test]
    fn stages_follow_the_phases_and_their_waves() {
        use HookPhase::*;
        let plan = Plan {
            entries: vec![
                entry("pre-a", Some(PreSync), -1, Action::Create),
                entry("pre-b", Some(PreSync), 2, Action::Create),
                entry("app", None, 0, Action::Create),
                entry("post", Some(PostSync), 0, Action::Create),
                entry("fail", Some(SyncFail), 0, Action::Create),
                entry("skipped", Some(PostSync), 5, Action::Skip),
                entry("helm-test", None, 0, Action::Skip),
            ],
            digest: String::new(),
        };
        assert_eq!(first(&plan), Next::Hooks(PreSync, -1));
        assert_eq!(after(&plan, PreSync, -1), Next::Hooks(PreSync, 2));
        assert_eq!(after(&plan, PreSync, 2), Next::Waves);
        assert_eq!(after_waves(&plan), Next::Hooks(PostSync, 0));
        assert_eq!(after(&plan, PostSync, 0), Next::Done, "a skipped hook is no stage");
        assert_eq!(on_failure(&plan, Some(PreSync)), Next::Hooks(SyncFail, 0));
        assert_eq!(on_failure(&plan, None), Next::Hooks(SyncFail, 0));
        assert_eq!(on_failure(&plan, Some(SyncFail)), Next::Done, "a failing SyncFail hook does not run again");
        assert_eq!(after(&plan, SyncFail, 0), Next::Done);
        let names: Vec<&str> = of_stage(&plan, PreSync, 2).map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["pre-b"]);
        let plain = Plan { entries: vec![entry("app", None, 0, Action::Create)], digest: String::new() };
        assert_eq!(
            (first(&plain), after_waves(&plain), on_failure(&plain, None)),
            (Next::Waves, Next::Done, Next::Done)
        );
    }
}
