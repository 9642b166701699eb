//! `ksync dev`: what the quickstart prints, as pure functions. The command keeps a [`World`] (the
//! Repository, its Applications and their Revisions, as the watches last saw them); after each
//! watch event it asks [`changes`] for the lines that describe what moved (an Application
//! discovered, a Revision planned, applied, Healthy, a drift...) and [`converged`] whether every
//! Application is Synced and Healthy at the Repository's commit. [`next_steps`] is the text
//! printed once that first happens.

use std::collections::BTreeMap;

use kube::ResourceExt;

use kuvryn_sync::api::application::{Application, SyncState};
use kuvryn_sync::api::common::HealthStatus;
use kuvryn_sync::api::conditions;
use kuvryn_sync::api::display;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::{PlanSummary, Revision, RevisionPhase};
use kuvryn_sync::api::{Repository, repository::RepositoryStatus};
use kuvryn_sync::view::apps::{health_of, sync_name, sync_of};
use kuvryn_sync::view::{Tone, health_name, phase_of, short_commit};

/// The quickstart's objects as the watches last saw them, by name.
#[derive(Clone, Debug, Default)]
pub struct World {
    /// The one Repository.
    pub repository: Option<Repository>,
    /// Its Applications.
    pub apps: BTreeMap<String, Application>,
    /// Their Revisions.
    pub revisions: BTreeMap<String, Revision>,
}

/// One line of the live log: what it is about, what happened, and its colour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// `Repository quickstart`, or an Application's name.
    pub subject: String,
    /// What happened.
    pub text: String,
    /// How to colour it.
    pub tone: Tone,
}

impl Line {
    fn new(subject: impl Into<String>, text: impl Into<String>, tone: Tone) -> Line {
        Line { subject: subject.into(), text: text.into(), tone }
    }
}

/// What the log says about a Repository: its Ready condition.
fn repository_facts(status: Option<&RepositoryStatus>) -> Option<(bool, String)> {
    let c = conditions::get(&status?.conditions, names::conditions::READY)?;
    let ok = c.status == "True";
    Some((ok, if ok { c.message.clone() } else { format!("{}: {}", c.reason, c.message) }))
}

/// What the log says about an Application: sync and health, with what drifted or why it is not
/// Healthy. None before its first status.
fn app_facts(app: &Application) -> Option<(String, Tone)> {
    let status = app.status.as_ref()?;
    let (sync, health) = (sync_of(app), health_of(app));
    if sync == SyncState::Unknown && health == HealthStatus::Unknown {
        return None;
    }
    let mut text = format!("{}, {}", sync_name(sync), health_name(health));
    if sync == SyncState::Drifted {
        let drifted: Vec<String> =
            status.sync.as_ref().map(|s| s.drifted.iter().map(display::resource).collect()).unwrap_or_default();
        if !drifted.is_empty() {
            text.push_str(&format!(" (drifted: {})", drifted.join(", ")));
        }
    }
    if health == HealthStatus::Degraded
        && let Some(m) = status.health.as_ref().and_then(|h| h.message.as_deref()).filter(|m| !m.is_empty())
    {
        text.push_str(&format!(": {}", kuvryn_sync::view::one_line(m)));
    }
    let tone = match (sync, health) {
        (SyncState::Synced, HealthStatus::Healthy) => Tone::Good,
        (_, HealthStatus::Degraded) => Tone::Bad,
        _ => Tone::Warn,
    };
    Some((text, tone))
}

/// What the log says about a Revision: its phase, whether it has a plan yet, and its failure.
#[derive(Clone, Debug, PartialEq)]
struct RevisionFacts {
    phase: RevisionPhase,
    /// The plan's summary line, and whether it changes anything.
    planned: Option<(String, bool)>,
    failure: Option<String>,
}

fn revision_facts(r: &Revision) -> RevisionFacts {
    let status = r.status.as_ref();
    RevisionFacts {
        phase: phase_of(r),
        planned: status.and_then(|s| s.plan.as_ref()).map(|p| plan_summary(&p.summary)),
        failure: status.and_then(|s| s.failure.as_ref()).map(|f| format!("{}: {}", f.reason, f.message)),
    }
}

/// A plan's counts in a few words (`3 to create`, `1 to update, 2 unchanged`), and whether it
/// changes anything.
fn plan_summary(s: &PlanSummary) -> (String, bool) {
    let mut parts: Vec<String> = [(s.create, "to create"), (s.update, "to update"), (s.delete, "to delete")]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    let changes = !parts.is_empty();
    if s.unchanged > 0 {
        parts.push(format!("{} unchanged", s.unchanged));
    }
    if parts.is_empty() {
        parts.push("nothing".to_string());
    }
    (parts.join(", "), changes)
}

/// The Application a Revision belongs to.
fn app_of(r: &Revision) -> String {
    r.labels().get(names::labels::APPLICATION).cloned().unwrap_or_else(|| r.spec.application.clone())
}

/// The lines for one Revision going from `before` (None: new) to `after`.
fn revision_lines(r: &Revision, before: Option<&RevisionFacts>) -> Vec<Line> {
    let after = revision_facts(r);
    if before == Some(&after) {
        return Vec::new();
    }
    let app = app_of(r);
    let name = r.name_any();
    let commit = short_commit(&r.spec.source.commit).to_string();
    let mut out = Vec::new();
    let phase_changed = before.is_none_or(|b| b.phase != after.phase);
    // A Revision already deployed is re-planned by drift checks, and re-applied by self-heal.
    let deployed = before.is_some_and(|b| b.phase == RevisionPhase::Healthy);
    let heal = if deployed { "self-heal: " } else { "" };
    if before.is_none() {
        out.push(Line::new(&app, format!("new Revision {name} for commit {commit}"), Tone::Plain));
    }
    // The first plan, and every later one that changes something (a drift check that finds
    // nothing to do is not news).
    if let Some((plan, changes)) = &after.planned
        && before.is_none_or(|b| b.planned.is_none() || (*changes && b.planned != after.planned))
    {
        let text = if deployed { format!("drift found: {plan}") } else { format!("planned: {plan}") };
        out.push(Line::new(&app, text, if deployed { Tone::Warn } else { Tone::Plain }));
    }
    if phase_changed {
        let line = match after.phase {
            RevisionPhase::Planning => None,
            RevisionPhase::AwaitingApproval => Some(("waiting for approval".to_string(), Tone::Warn)),
            RevisionPhase::Applying => Some((format!("{heal}applying (Server-Side Apply)"), Tone::Warn)),
            RevisionPhase::Progressing => {
                let waiting = r
                    .status
                    .as_ref()
                    .and_then(|s| s.health.as_ref())
                    .and_then(|h| h.message.clone())
                    .filter(|m| !m.is_empty());
                let text = match waiting {
                    Some(m) => format!("{heal}applied; waiting for health: {}", kuvryn_sync::view::one_line(&m)),
                    None => format!("{heal}applied; waiting for health"),
                };
                Some((text, Tone::Warn))
            }
            RevisionPhase::Healthy => Some((format!("Revision {name} is Healthy"), Tone::Good)),
            RevisionPhase::Failed => {
                Some((format!("Revision {name} failed: {}", after.failure.clone().unwrap_or_default()), Tone::Bad))
            }
        };
        out.extend(line.map(|(text, tone)| Line::new(&app, text, tone)));
    } else if after.phase != RevisionPhase::Failed
        && after.failure.is_some()
        && before.is_some_and(|b| b.failure != after.failure)
    {
        // A retried attempt that failed again (the phase stays what it was).
        out.push(Line::new(&app, format!("attempt failed: {}", after.failure.clone().unwrap_or_default()), Tone::Bad));
    }
    out
}

/// The lines describing what changed from `before` to `after`, in a stable order: the
/// Repository, then per Application (by name) its discovery, its Revisions (by name), and its
/// sync and health.
pub fn changes(before: &World, after: &World) -> Vec<Line> {
    let mut out = Vec::new();
    if let Some(repo) = &after.repository {
        let now = repository_facts(repo.status.as_ref());
        let then = before.repository.as_ref().and_then(|r| repository_facts(r.status.as_ref()));
        if let Some((ok, text)) = now.filter(|n| Some(n) != then.as_ref()) {
            let tone = if ok { Tone::Plain } else { Tone::Bad };
            out.push(Line::new(format!("Repository {}", repo.name_any()), text, tone));
        }
    }
    let mut names: Vec<&String> = after.apps.keys().chain(before.apps.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let (was, is) = (before.apps.get(name), after.apps.get(name));
        match (was, is) {
            (None, Some(app)) => {
                let from = app.annotations().get(names::annotations::DISCOVERED_FROM).cloned();
                let text = match from {
                    Some(f) => format!("discovered (declared in {f})"),
                    None => "discovered".to_string(),
                };
                out.push(Line::new(name, text, Tone::Plain));
            }
            (Some(_), None) => out.push(Line::new(name, "deleted", Tone::Warn)),
            _ => {}
        }
        for (rev_name, r) in after.revisions.iter().filter(|(_, r)| &app_of(r) == name) {
            let before_facts = before.revisions.get(rev_name).map(revision_facts);
            out.extend(revision_lines(r, before_facts.as_ref()));
        }
        if let Some(app) = is {
            let now = app_facts(app);
            if now.is_some() && now != was.and_then(app_facts) {
                let (text, tone) = now.unwrap_or_default();
                out.push(Line::new(name, text, tone));
            }
        }
    }
    out
}

/// Some((commit, count)) when the Repository is Ready at a commit, declares `count`
/// Applications, and every one of them exists, is Ready, Synced and Healthy at that commit.
pub fn converged(world: &World) -> Option<(String, usize)> {
    let status = world.repository.as_ref()?.status.as_ref()?;
    if !conditions::is_true(&status.conditions, names::conditions::READY) {
        return None;
    }
    let commit = status.revision.as_ref()?.commit.clone();
    let count = usize::try_from(status.applications.as_ref()?.discovered).ok()?;
    if count == 0 || world.apps.len() != count {
        return None;
    }
    let all = world.apps.values().all(|a| {
        let Some(s) = a.status.as_ref() else { return false };
        sync_of(a) == SyncState::Synced
            && health_of(a) == HealthStatus::Healthy
            && conditions::is_true(&s.conditions, names::conditions::READY)
            && s.sync.as_ref().and_then(|s| s.commit.as_deref()) == Some(commit.as_str())
    });
    all.then_some((commit, count))
}

/// The line announcing convergence (`elapsed` is seconds since `ksync dev` started). Tests wait
/// for its first words.
pub fn converged_line(commit: &str, count: usize, elapsed: f64) -> String {
    let s = if count == 1 { "" } else { "s" };
    format!(
        "All {count} Application{s} are Synced and Healthy at commit {} ({elapsed:.1}s after start)",
        short_commit(commit)
    )
}

/// `[  12.3s] subject  text`, the subject padded to `width`.
pub fn log_line(elapsed: f64, line: &Line, width: usize, palette: kuvryn_sync::view::Palette) -> String {
    let subject = format!("{:<width$}", line.subject);
    format!("[{elapsed:>6.1}s] {}  {}", palette.paint(Tone::Bold, &subject), palette.paint(line.tone, &line.text))
}

/// What the "what to try next" text needs to know.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The state directory (absolute).
    pub state_dir: String,
    /// `source`-able script setting KUBECONFIG and PATH.
    pub env_script: String,
    /// The kubeconfig.
    pub kubeconfig: String,
    /// The working copy of the example repository.
    pub repo_dir: String,
    /// Its URL on the local Git server.
    pub repo_url: String,
    /// The Repository's polling interval, as written in its spec.
    pub interval: String,
    /// The namespace of the Applications.
    pub namespace: String,
    /// The replicas: (name, pid, metrics URL if any, log file).
    pub replicas: Vec<(String, u32, Option<String>, String)>,
    /// The namespace of the Leases.
    pub lease_namespace: String,
}

/// The text printed once everything is Healthy the first time.
pub fn next_steps(s: &Setup) -> String {
    let mut out = String::new();
    let mut add = |line: &str| {
        out.push_str(line);
        out.push('\n');
    };
    add("What to try next, in another terminal:");
    add("");
    add(&format!("  Point kubectl and ksync at the quickstart cluster (its context is in namespace {}):", s.namespace));
    add(&format!("    source {}", s.env_script));
    add(&format!("    # (or: export KUBECONFIG={})", s.kubeconfig));
    add("");
    add("  Look around:");
    add("    kubectl get app                    # Applications: sync, health, Revision");
    add("    ksync apps -w                      # the same, redrawn as it changes (Ctrl-C to stop)");
    add("    ksync app web                      # one Application: its Revision, resources, health");
    add("    ksync plan api                     # the plan stored on api's Revision");
    add("    ksync history greeter              # Revisions, newest first");
    add("    kubectl get deploy,svc,cm,pods     # what the Applications deployed");
    add("");
    add(&format!(
        "  Commit a change and watch it roll out (the Repository polls {} every {}):",
        s.repo_url, s.interval
    ));
    add(&format!("    cd {}", s.repo_dir));
    add("    sed -i 's/replicas: 2/replicas: 3/' apps/web/deployment.yaml");
    add("    git commit -am 'web: 3 replicas' && git push");
    add("");
    add("  Make a drift by hand:");
    add("    kubectl scale deployment web --replicas=5   # web has selfHeal: put back to 2 at once");
    add("    kubectl scale deployment api --replicas=5   # api has none: reported as Drifted, left as is");
    add("    kubectl scale deployment api --replicas=2   # undo it: api is Synced again");
    add("");
    add(&format!("  Replicas (they split the Applications' shards with Leases in {}):", s.lease_namespace));
    for (name, pid, metrics, log) in &s.replicas {
        let metrics = metrics.as_ref().map(|m| format!(", metrics {m}")).unwrap_or_default();
        add(&format!("    {name}: pid {pid}{metrics}, log {log}"));
    }
    if let Some((name, pid, _, _)) = s.replicas.first() {
        add(&format!("    kill {pid}                          # stop {name}: the others take its shards over"));
    }
    add("    kubectl get leases -n kuvryn-system");
    add("");
    add(&format!("  Everything lives in {} (kept when you stop).", s.state_dir));
    add("  Press Ctrl-C here to stop everything.");
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn app(name: &str, status: serde_json::Value) -> Application {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": "quickstart",
                         "annotations": {"sync.kuvryn.io/discovered-from": ".ksync.yaml"}},
            "spec": {"source": {"repository": "quickstart", "path": "apps/web"}, "serviceAccountName": "deployer",
                     "destination": {"namespace": "quickstart"}},
            "status": status,
        }))
        .unwrap()
    }

    fn ready(status: &str) -> serde_json::Value {
        json!([{"type": "Ready", "status": status, "reason": "Succeeded", "message": "ok",
                "lastTransitionTime": "2025-01-01T00:00:00Z"}])
    }

    fn healthy(commit: &str) -> serde_json::Value {
        json!({"conditions": ready("True"), "sync": {"status": "Synced", "revision": "web-1", "commit": commit},
               "health": {"status": "Healthy"}})
    }

    fn revision(name: &str, app: &str, status: serde_json::Value) -> Revision {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Revision",
            "metadata": {"name": name, "namespace": "quickstart", "labels": {"sync.kuvryn.io/application": app}},
            "spec": {"application": app, "serviceAccountName": "deployer",
                     "source": {"repository": "quickstart", "url": "git://127.0.0.1:1/quickstart.git",
                                "commit": "0123456789abcdef0123", "path": "apps/web"}},
            "status": status,
        }))
        .unwrap()
    }

    fn repo(commit: &str, count: i32) -> Repository {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
            "metadata": {"name": "quickstart", "namespace": "quickstart"},
            "spec": {"url": "git://127.0.0.1:1/quickstart.git", "ref": {"branch": "main"}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                        "message": format!("branch/main at {commit}: {count} Applications from .ksync.yaml"),
                        "lastTransitionTime": "2025-01-01T00:00:00Z"}],
                       "revision": {"ref": "branch/main", "commit": commit},
                       "applications": {"discovered": count, "files": [".ksync.yaml"]}},
        }))
        .unwrap()
    }

    fn texts(lines: &[Line]) -> Vec<String> {
        lines.iter().map(|l| format!("{}: {}", l.subject, l.text)).collect()
    }

    #[test]
    fn a_rollout_is_told_step_by_step() {
        let mut world = World::default();
        let mut next = world.clone();
        next.repository = Some(repo("c1", 1));
        next.apps.insert("web".into(), app("web", json!({})));
        assert_eq!(
            texts(&changes(&world, &next)),
            [
                "Repository quickstart: branch/main at c1: 1 Applications from .ksync.yaml",
                "web: discovered (declared in .ksync.yaml)"
            ]
        );
        world = next.clone();
        next.revisions.insert("web-1".into(), revision("web-1", "web", json!({"phase": "Planning"})));
        assert_eq!(texts(&changes(&world, &next)), ["web: new Revision web-1 for commit 0123456789ab"]);
        world = next.clone();
        let plan = json!({"digest": "sha256:1", "summary": {"create": 3, "update": 0, "delete": 0, "unchanged": 0}});
        next.revisions.insert("web-1".into(), revision("web-1", "web", json!({"phase": "Applying", "plan": plan})));
        assert_eq!(texts(&changes(&world, &next)), ["web: planned: 3 to create", "web: applying (Server-Side Apply)"]);
        world = next.clone();
        next.revisions.insert(
            "web-1".into(),
            revision("web-1", "web", json!({"phase": "Progressing", "plan": plan,
                "health": {"status": "Progressing", "message": "Deployment.apps quickstart/web: 0 of 2 updated replicas are available"}})),
        );
        next.apps.insert(
            "web".into(),
            app("web", json!({"sync": {"status": "Synced"}, "health": {"status": "Progressing"}})),
        );
        assert_eq!(
            texts(&changes(&world, &next)),
            [
                "web: applied; waiting for health: Deployment.apps quickstart/web: 0 of 2 updated replicas are available",
                "web: Synced, Progressing"
            ]
        );
        assert_eq!(converged(&next), None);
        world = next.clone();
        next.revisions.insert("web-1".into(), revision("web-1", "web", json!({"phase": "Healthy", "plan": plan})));
        next.apps.insert("web".into(), app("web", healthy("c1")));
        assert_eq!(texts(&changes(&world, &next)), ["web: Revision web-1 is Healthy", "web: Synced, Healthy"]);
        assert_eq!(converged(&next), Some(("c1".to_string(), 1)));
        // Nothing changed: nothing to say.
        assert!(changes(&next, &next).is_empty());
        // A drift check re-plans the Revision: nothing to do is not news, a repair is.
        world = next.clone();
        let unchanged =
            json!({"digest": "sha256:2", "summary": {"create": 0, "update": 0, "delete": 0, "unchanged": 3}});
        next.revisions.insert("web-1".into(), revision("web-1", "web", json!({"phase": "Healthy", "plan": unchanged})));
        assert!(changes(&world, &next).is_empty());
        world = next.clone();
        let repair = json!({"digest": "sha256:3", "summary": {"create": 0, "update": 1, "delete": 0, "unchanged": 2}});
        next.revisions.insert("web-1".into(), revision("web-1", "web", json!({"phase": "Healthy", "plan": repair})));
        assert_eq!(texts(&changes(&world, &next)), ["web: drift found: 1 to update, 2 unchanged"]);
        world = next.clone();
        next.revisions
            .insert("web-1".into(), revision("web-1", "web", json!({"phase": "Progressing", "plan": repair})));
        assert_eq!(texts(&changes(&world, &next)), ["web: self-heal: applied; waiting for health"]);
    }

    #[test]
    fn drift_degradation_failure_and_deletion_are_told() {
        let mut world = World::default();
        world.apps.insert("api".into(), app("api", healthy("c1")));
        let mut next = world.clone();
        next.apps.insert(
            "api".into(),
            app("api", json!({"sync": {"status": "Drifted", "drifted": [{"group": "apps", "kind": "Deployment", "namespace": "quickstart", "name": "api"}]},
                             "health": {"status": "Degraded", "message": "Pod crash-looping"}})),
        );
        let lines = changes(&world, &next);
        assert_eq!(
            texts(&lines),
            ["api: Drifted, Degraded (drifted: Deployment.apps quickstart/api): Pod crash-looping"]
        );
        assert_eq!(lines[0].tone, Tone::Bad);
        let failed = revision(
            "api-2",
            "api",
            json!({"phase": "Failed", "failure": {"reason": "RenderFailure", "message": "kustomize: boom"}}),
        );
        next.revisions.insert("api-2".into(), failed);
        next.apps.clear();
        assert_eq!(
            texts(&changes(&world, &next)),
            [
                "api: deleted",
                "api: new Revision api-2 for commit 0123456789ab",
                "api: Revision api-2 failed: RenderFailure: kustomize: boom"
            ]
        );
    }

    #[test]
    fn convergence_needs_every_declared_application_at_the_repository_commit() {
        let mut world = World { repository: Some(repo("c2", 2)), ..Default::default() };
        world.apps.insert("a".into(), app("a", healthy("c2")));
        assert_eq!(converged(&world), None, "one of two declared");
        world.apps.insert("b".into(), app("b", healthy("c1")));
        assert_eq!(converged(&world), None, "b is still at the previous commit");
        world.apps.insert("b".into(), app("b", healthy("c2")));
        assert_eq!(converged(&world), Some(("c2".to_string(), 2)));
        assert_eq!(
            converged_line("0123456789abcdef", 2, 12.34),
            "All 2 Applications are Synced and Healthy at commit 0123456789ab (12.3s after start)"
        );
    }

    #[test]
    fn next_steps_name_the_real_paths_and_pids() {
        let text = next_steps(&Setup {
            state_dir: "/s".into(),
            env_script: "/s/env.sh".into(),
            kubeconfig: "/s/kubeconfig".into(),
            repo_dir: "/s/repo".into(),
            repo_url: "git://127.0.0.1:1/quickstart.git".into(),
            interval: "5s".into(),
            namespace: "quickstart".into(),
            replicas: vec![(
                "ksync-dev-0".into(),
                42,
                Some("http://127.0.0.1:2/metrics".into()),
                "/s/logs/ksync-dev-0.log".into(),
            )],
            lease_namespace: "kuvryn-system".into(),
        });
        for want in ["source /s/env.sh", "cd /s/repo", "git push", "kubectl scale deployment web", "kill 42", "Ctrl-C"]
        {
            assert!(text.contains(want), "{want} missing from:\n{text}");
        }
    }
}
