//! The job controller (see the module documentation of [`crate::kcm`]), as kube-controller-manager
//! v1.36 runs it for `NonIndexed` Jobs:
//!
//! - Pods from the template: `generateName: <job>-`, the template's labels (the four
//!   controller-uid / job-name labels the Job strategy put there), a controller ownerReference
//!   and the `batch.kubernetes.io/job-tracking` finalizer; a `SuccessfulCreate` Event each.
//!   Replacements of failed Pods wait for the pod-failure backoff (10 s doubling, at most 6 min)
//!   counted from the failed Pods' finish times, compared on each pass.
//! - Finished Pods are tracked through `status.uncountedTerminatedPods`: recorded there first,
//!   then their finalizer is removed, then they move into `succeeded`/`failed`.
//! - Status always carries `terminating`, `ready` and `uncountedTerminatedPods`; `active`,
//!   `succeeded` and `failed` only when non-zero. Success adds `SuccessCriteriaMet`, then
//!   `Complete` (reason `CompletionsReached`, `completionTime`, a `Completed` Event); too many
//!   failures (or the active deadline) add `FailureTarget`, then `Failed` once no Pod is
//!   uncounted or terminating (a Warning Event with the reason).
//! - Pods whose controlling Job is gone or finished lose the tracking finalizer.
//!
//! Each pass recomputes from the current objects and writes only what differs.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value, json};

use crate::client::{Client, path};

/// The finalizer on every Pod the controller has not counted yet.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The Event source.
pub const COMPONENT: &str = "job-controller";

const DEFAULT_BACKOFF_SECS: i64 = 10;
const MAX_BACKOFF_SECS: i64 = 360;

/// One reconcile pass over every object this controller owns.
pub async fn reconcile(client: Client) {
    let Ok(jobs) = client.list("/apis/batch/v1/jobs", "").await else { return };
    // Only Pods a Job controls or that carry the tracking finalizer matter here.
    let job_pod = |p: &Value| {
        has_finalizer(p) || controller_ref(p).is_some_and(|r| r["kind"] == "Job" && r["apiVersion"] == "batch/v1")
    };
    let Ok(pods) = client.list_where("/api/v1/pods", "", job_pod).await else { return };
    let jobs: Vec<Value> = jobs.into_iter().map(|j| typed(j, "batch/v1", "Job")).collect();
    let by_uid: HashMap<String, &Value> =
        jobs.iter().filter_map(|j| Some((j["metadata"]["uid"].as_str()?.to_string(), j))).collect();

    // Pods keeping a tracking finalizer for a Job that is gone or finished: release them.
    let mut owned: HashMap<String, Vec<Value>> = HashMap::new();
    for pod in pods {
        let controller = controller_ref(&pod);
        let job = controller
            .filter(|r| r["kind"] == "Job" && r["apiVersion"] == "batch/v1")
            .and_then(|r| r["uid"].as_str())
            .and_then(|uid| by_uid.get(uid).copied());
        match job {
            Some(job) if !is_finished(job) => {
                let uid = job["metadata"]["uid"].as_str().unwrap_or_default().to_string();
                owned.entry(uid).or_default().push(pod);
            }
            _ => {
                let not_ours = controller.is_some_and(|r| r["kind"] != "Job" || r["apiVersion"] != "batch/v1");
                if has_finalizer(&pod) && !not_ours {
                    remove_finalizer(&client, &pod).await;
                }
            }
        }
    }
    for job in &jobs {
        if is_finished(job) || !managed_by_us(job) {
            continue;
        }
        let uid = job["metadata"]["uid"].as_str().unwrap_or_default();
        let pods = owned.remove(uid).unwrap_or_default();
        sync_job(&client, job.clone(), pods).await;
    }
}

fn typed(mut obj: Value, api_version: &str, kind: &str) -> Value {
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(api_version));
        m.insert("kind".into(), json!(kind));
    }
    obj
}

fn controller_ref(obj: &Value) -> Option<&Value> {
    obj["metadata"]["ownerReferences"].as_array()?.iter().find(|r| r["controller"] == true)
}

fn managed_by_us(job: &Value) -> bool {
    job["spec"]["managedBy"].as_str().is_none_or(|m| m.is_empty() || m == "kubernetes.io/job-controller")
}

fn condition_true(job: &Value, type_: &str) -> bool {
    job["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == type_ && c["status"] == "True"))
}

fn find_condition<'a>(job: &'a Value, type_: &str) -> Option<&'a Value> {
    job["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_ && c["status"] == "True")
}

/// `Complete` or `Failed` is true.
pub fn is_finished(job: &Value) -> bool {
    condition_true(job, "Complete") || condition_true(job, "Failed")
}

fn has_finalizer(pod: &Value) -> bool {
    pod["metadata"]["finalizers"].as_array().is_some_and(|f| f.iter().any(|f| f.as_str() == Some(TRACKING_FINALIZER)))
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or_default()
}

fn is_terminal(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// Only Failed Pods are replaced (`podReplacementPolicy: Failed` or a pod failure policy).
fn only_replace_failed(job: &Value) -> bool {
    job["spec"]["podReplacementPolicy"] == "Failed" || job["spec"]["podFailurePolicy"].is_object()
}

/// A failed Pod: phase Failed or, unless only Failed Pods count, deleted before succeeding.
fn is_pod_failed(pod: &Value, job: &Value) -> bool {
    if phase(pod) == "Failed" {
        return true;
    }
    if only_replace_failed(job) {
        return false;
    }
    is_deleting(pod) && phase(pod) != "Succeeded"
}

fn parse_time(v: &Value) -> Option<jiff::Timestamp> {
    v.as_str()?.parse::<jiff::Timestamp>().ok()
}

/// When a Pod finished: its Ready=False transition when terminal, else its containers' last
/// `finishedAt`, else its deletion, else its creation.
fn finish_time(pod: &Value) -> Option<jiff::Timestamp> {
    if is_terminal(pod)
        && let Some(t) = pod["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready" && c["status"] == "False"))
            .and_then(|c| parse_time(&c["lastTransitionTime"]))
    {
        return Some(t);
    }
    if let Some(statuses) = pod["status"]["containerStatuses"].as_array()
        && !statuses.is_empty()
    {
        let times: Vec<Option<jiff::Timestamp>> =
            statuses.iter().map(|s| parse_time(&s["state"]["terminated"]["finishedAt"])).collect();
        if times.iter().all(Option::is_some) {
            return times.into_iter().flatten().max();
        }
    }
    parse_time(&pod["metadata"]["deletionTimestamp"]).or_else(|| parse_time(&pod["metadata"]["creationTimestamp"]))
}

/// Seconds to wait before replacing failed Pods: the default backoff doubled per failure since
/// the last success, minus the time since the last failure.
fn backoff_remaining(pods: &[Value], job: &Value) -> i64 {
    let now = jiff::Timestamp::now();
    let last_success = pods.iter().filter(|p| phase(p) == "Succeeded").filter_map(finish_time).max();
    let failures: Vec<jiff::Timestamp> = pods
        .iter()
        .filter(|p| is_pod_failed(p, job))
        .filter_map(finish_time)
        .filter(|t| last_success.is_none_or(|s| *t > s))
        .collect();
    let Some(last) = failures.iter().max().copied() else { return 0 };
    let mut delay = DEFAULT_BACKOFF_SECS;
    for _ in 1..failures.len() {
        delay = (delay * 2).min(MAX_BACKOFF_SECS);
    }
    let last = last.min(now);
    let elapsed = now.duration_since(last).as_secs();
    (delay - elapsed).max(0)
}

fn strings_of(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
}

fn new_condition(type_: &str, reason: &str, message: &str) -> Value {
    let now = crate::api::now();
    json!({"type": type_, "status": "True", "lastProbeTime": now, "lastTransitionTime": now,
           "reason": reason, "message": message})
}

/// A terminal condition to reach, with its reason and message.
#[derive(Clone)]
struct Finish {
    type_: &'static str,
    reason: String,
    message: String,
}

impl Finish {
    fn success(&self) -> bool {
        matches!(self.type_, "SuccessCriteriaMet" | "Complete")
    }
}

/// The counters and tracking state of one pass.
struct Tracking {
    succeeded: i64,
    failed: i64,
    uncounted_succeeded: Vec<String>,
    uncounted_failed: Vec<String>,
}

fn build_status(
    old: &Value,
    conditions: &[Value],
    start_time: &Value,
    completion_time: &Value,
    t: &Tracking,
    (active, terminating, ready): (i64, i64, i64),
) -> Value {
    let mut s = Map::new();
    if !conditions.is_empty() {
        s.insert("conditions".into(), json!(conditions));
    }
    if !start_time.is_null() {
        s.insert("startTime".into(), start_time.clone());
    }
    if !completion_time.is_null() {
        s.insert("completionTime".into(), completion_time.clone());
    }
    for (k, v) in [("active", active), ("succeeded", t.succeeded), ("failed", t.failed)] {
        if v > 0 {
            s.insert(k.into(), json!(v));
        }
    }
    s.insert("terminating".into(), json!(terminating));
    for k in ["completedIndexes", "failedIndexes"] {
        if let Some(v) = old.get(k).filter(|v| !v.is_null()) {
            s.insert(k.into(), v.clone());
        }
    }
    let mut unc = Map::new();
    if !t.uncounted_succeeded.is_empty() {
        unc.insert("succeeded".into(), json!(t.uncounted_succeeded));
    }
    if !t.uncounted_failed.is_empty() {
        unc.insert("failed".into(), json!(t.uncounted_failed));
    }
    s.insert("uncountedTerminatedPods".into(), Value::Object(unc));
    s.insert("ready".into(), json!(ready));
    Value::Object(s)
}

/// Write `status` when it differs from the Job's; the Job as stored afterwards.
async fn write_status(client: &Client, job: &Value, status: Value) -> Option<Value> {
    if job.get("status") == Some(&status) {
        return Some(job.clone());
    }
    let mut updated = job.clone();
    updated["status"] = status;
    let ns = job["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    let out = client.update(&path("batch/v1", "jobs", ns, name, "status"), &updated).await.ok()?;
    Some(typed(out, "batch/v1", "Job"))
}

async fn remove_finalizer(client: &Client, pod: &Value) -> bool {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}});
    match client.strategic_patch(&path("v1", "pods", ns, name, ""), &patch).await {
        Ok(_) => true,
        Err(e) => e.code() == 404,
    }
}

/// The Pod the Job's template describes.
fn pod_from_template(job: &Value) -> Value {
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    let tmpl = &job["spec"]["template"];
    let mut meta = Map::new();
    meta.insert("generateName".into(), json!(format!("{name}-")));
    for k in ["labels", "annotations"] {
        if let Some(v) = tmpl["metadata"].get(k).filter(|v| v.as_object().is_some_and(|o| !o.is_empty())) {
            meta.insert(k.into(), v.clone());
        }
    }
    meta.insert(
        "ownerReferences".into(),
        json!([{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job["metadata"]["uid"],
                "controller": true, "blockOwnerDeletion": true}]),
    );
    let mut finalizers = strings_of(&tmpl["metadata"]["finalizers"]);
    finalizers.push(TRACKING_FINALIZER.into());
    meta.insert("finalizers".into(), json!(finalizers));
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tmpl["spec"]})
}

async fn sync_job(client: &Client, job: Value, pods: Vec<Value>) {
    let ns = job["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let status = job["status"].clone();
    let suspended = job["spec"]["suspend"] == true;
    let mut t = Tracking {
        succeeded: status["succeeded"].as_i64().unwrap_or(0),
        failed: status["failed"].as_i64().unwrap_or(0),
        uncounted_succeeded: strings_of(&status["uncountedTerminatedPods"]["succeeded"]),
        uncounted_failed: strings_of(&status["uncountedTerminatedPods"]["failed"]),
    };
    let is_uncounted = |t: &Tracking, uid: &str| {
        t.uncounted_succeeded.iter().any(|u| u == uid) || t.uncounted_failed.iter().any(|u| u == uid)
    };
    let uid_of = |p: &Value| p["metadata"]["uid"].as_str().unwrap_or_default().to_string();

    // Counts as the controller sees them: counters, uncounted, and finished Pods not yet counted.
    let fresh = |f: &dyn Fn(&Value) -> bool| {
        pods.iter().filter(|p| has_finalizer(p) && !is_uncounted(&t, &uid_of(p)) && f(p)).count() as i64
    };
    let succeeded = t.succeeded + t.uncounted_succeeded.len() as i64 + fresh(&|p| phase(p) == "Succeeded");
    let failed = t.failed + t.uncounted_failed.len() as i64 + fresh(&|p| is_pod_failed(p, &job));

    let mut start_time = status["startTime"].clone();
    if start_time.is_null() && !suspended {
        start_time = json!(crate::api::now());
    }

    // A terminal condition already on its way, or reached now.
    let mut finish = if let Some(c) = find_condition(&job, "FailureTarget") {
        Some(Finish {
            type_: "Failed",
            reason: c["reason"].as_str().unwrap_or_default().into(),
            message: c["message"].as_str().unwrap_or_default().into(),
        })
    } else {
        find_condition(&job, "SuccessCriteriaMet").map(|c| Finish {
            type_: "Complete",
            reason: c["reason"].as_str().unwrap_or_default().into(),
            message: c["message"].as_str().unwrap_or_default().into(),
        })
    };
    let backoff_limit = job["spec"]["backoffLimit"].as_i64().unwrap_or(6);
    if finish.is_none() {
        if failed > backoff_limit {
            finish = Some(Finish {
                type_: "FailureTarget",
                reason: "BackoffLimitExceeded".into(),
                message: "Job has reached the specified backoff limit".into(),
            });
        } else if let Some(deadline) = job["spec"]["activeDeadlineSeconds"].as_i64()
            && !suspended
            && let Some(start) = parse_time(&start_time)
            && jiff::Timestamp::now().duration_since(start).as_secs() >= deadline
        {
            finish = Some(Finish {
                type_: "FailureTarget",
                reason: "DeadlineExceeded".into(),
                message: "Job was active longer than specified deadline".into(),
            });
        }
    }

    let active_pods: Vec<&Value> = pods.iter().filter(|p| !is_terminal(p) && !is_deleting(p)).collect();
    let mut terminating = pods.iter().filter(|p| !is_terminal(p) && is_deleting(p)).count() as i64;
    let ready = active_pods.iter().filter(|p| is_ready(p)).count() as i64;
    let mut active = active_pods.len() as i64;
    let mut conditions: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();

    if finish.is_some() || suspended {
        // Active Pods of a finished or suspended Job are deleted.
        for p in &active_pods {
            let name = p["metadata"]["name"].as_str().unwrap_or_default();
            if client.delete(&path("v1", "pods", &ns, name, ""), None, Some("Background")).await.is_ok() {
                active -= 1;
                terminating += 1;
            }
        }
        if suspended && finish.is_none() && !condition_true(&job, "Suspended") {
            conditions.retain(|c| c["type"] != "Suspended");
            conditions.push(new_condition("Suspended", "JobSuspended", "Job suspended"));
            client.event(&job, "Normal", "Suspended", "Job suspended", COMPONENT).await;
        }
    } else {
        if let Some(i) = conditions.iter().position(|c| c["type"] == "Suspended" && c["status"] == "True") {
            let mut c = new_condition("Suspended", "JobResumed", "Job resumed");
            c["status"] = json!("False");
            conditions[i] = c;
            start_time = json!(crate::api::now());
            client.event(&job, "Normal", "Resumed", "Job resumed", COMPONENT).await;
        }
        if !is_deleting(&job) {
            active += manage(client, &job, &pods, active, succeeded, terminating).await;
        }
        let complete = match job["spec"]["completions"].as_i64() {
            None => succeeded > 0 && active == 0,
            Some(c) => succeeded >= c && active == 0,
        };
        if complete {
            finish = Some(Finish {
                type_: "SuccessCriteriaMet",
                reason: "CompletionsReached".into(),
                message: "Reached expected number of succeeded pods".into(),
            });
        }
    }

    // Finished Pods (and every Pod of a finished Job) are recorded as uncounted, then released.
    let mut release: Vec<&Value> = Vec::new();
    for p in &pods {
        if !has_finalizer(p) {
            continue;
        }
        let failed = is_pod_failed(p, &job);
        let can = is_deleting(&job) || finish.is_some() || phase(p) == "Succeeded" || failed;
        if !can {
            continue;
        }
        release.push(p);
        let uid = uid_of(p);
        if is_uncounted(&t, &uid) {
            continue;
        }
        if phase(p) == "Succeeded" {
            t.uncounted_succeeded.push(uid);
        } else if failed || finish.as_ref().is_some_and(|f| !f.success()) {
            t.uncounted_failed.push(uid);
        }
    }
    // The interim condition goes in before any finalizer is removed.
    if let Some(f) = finish.clone() {
        match f.type_ {
            "FailureTarget" => {
                conditions.push(new_condition("FailureTarget", &f.reason, &f.message));
                finish = Some(Finish { type_: "Failed", ..f });
            }
            "SuccessCriteriaMet" => {
                if !conditions.iter().any(|c| c["type"] == "SuccessCriteriaMet") {
                    conditions.push(new_condition("SuccessCriteriaMet", &f.reason, &f.message));
                }
                finish = Some(Finish { type_: "Complete", ..f });
            }
            _ => {}
        }
    }
    let completion_time = status["completionTime"].clone();
    let s = build_status(&status, &conditions, &start_time, &completion_time, &t, (active, terminating, ready));
    let Some(mut job) = write_status(client, &job, s).await else { return };

    // Release the finalizers, then count what was released.
    let mut still_tracked: BTreeSet<String> = pods.iter().filter(|p| has_finalizer(p)).map(&uid_of).collect();
    for p in release {
        if remove_finalizer(client, p).await {
            still_tracked.remove(&uid_of(p));
        }
    }
    let before = (t.uncounted_succeeded.len(), t.uncounted_failed.len());
    t.uncounted_succeeded.retain(|u| still_tracked.contains(u));
    t.uncounted_failed.retain(|u| still_tracked.contains(u));
    t.succeeded += (before.0 - t.uncounted_succeeded.len()) as i64;
    t.failed += (before.1 - t.uncounted_failed.len()) as i64;

    // The terminal condition once nothing is left uncounted or terminating.
    let mut completion_time = completion_time;
    let mut finished = None;
    if let Some(f) = finish
        && t.uncounted_succeeded.is_empty()
        && t.uncounted_failed.is_empty()
        && terminating == 0
    {
        let c = new_condition(f.type_, &f.reason, &f.message);
        if f.type_ == "Complete" {
            completion_time = c["lastTransitionTime"].clone();
        }
        match conditions.iter().position(|x| x["type"] == f.type_) {
            Some(i) => conditions[i] = c,
            None => conditions.push(c),
        }
        finished = Some(f);
    }
    let s = build_status(&status, &conditions, &start_time, &completion_time, &t, (active, terminating, ready));
    let Some(updated) = write_status(client, &job, s).await else { return };
    job = updated;
    if let Some(f) = finished {
        if f.type_ == "Complete" {
            client.event(&job, "Normal", "Completed", "Job completed", COMPONENT).await;
        } else {
            client.event(&job, "Warning", &f.reason, &f.message, COMPONENT).await;
        }
    }
}

/// Create the Pods the Job is missing (after the failure backoff); how many were created.
async fn manage(client: &Client, job: &Value, pods: &[Value], active: i64, succeeded: i64, terminating: i64) -> i64 {
    let parallelism = job["spec"]["parallelism"].as_i64().unwrap_or(1);
    let want = match job["spec"]["completions"].as_i64() {
        None if succeeded > 0 => active,
        None => parallelism,
        Some(c) => (c - succeeded).clamp(0, parallelism),
    };
    let mut diff = want - active;
    if only_replace_failed(job) {
        diff -= terminating;
    }
    if diff <= 0 || backoff_remaining(pods, job) > 0 {
        return 0;
    }
    let ns = job["metadata"]["namespace"].as_str().unwrap_or_default();
    let pod = pod_from_template(job);
    let mut created = 0;
    for _ in 0..diff.min(500) {
        match client.create(&path("v1", "pods", ns, "", ""), &pod).await {
            Ok(p) => {
                created += 1;
                let name = p["metadata"]["name"].as_str().unwrap_or_default();
                client.event(job, "Normal", "SuccessfulCreate", &format!("Created pod: {name}"), COMPONENT).await;
            }
            Err(e) => {
                let msg = match &e {
                    crate::errors::ApiError::Status { message, .. } => message.clone(),
                    crate::errors::ApiError::PageNotFound => "404 page not found".into(),
                };
                client.event(job, "Warning", "FailedCreate", &format!("Error creating: {msg}"), COMPONENT).await;
                break;
            }
        }
    }
    created
}
