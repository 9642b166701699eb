//! `ksync reconcile repo NAME` and `ksync reconcile app NAME`: reconcile now instead of at the
//! next interval, wait until the controller has, and say what it found.
//!
//! Writes `sync.kuvryn.io/reconcile-requested-at` (the current time, RFC 3339, UTC) and waits
//! for the object's `status.lastHandledReconcileAt` to name it: a Repository then has fetched
//! its ref (the commit it resolved is printed), an Application has reconciled (its `Ready`
//! condition is printed). A request never approves anything: a manual-sync Application still
//! waits for `ksync sync`.

use std::time::Duration;

use jiff::{Timestamp, Unit};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::names;
use kuvryn_sync::api::repository::Repository;
use kuvryn_sync::command::{Error, Result};
use kuvryn_sync::read;
use kuvryn_sync::read::connect::{Cluster, Request};

use super::{Context, output};

/// The field manager of the annotation write.
const FIELD_MANAGER: &str = "ksync";

/// How often the object is read again while waiting.
const POLL: Duration = Duration::from_millis(500);

/// `ksync reconcile`.
#[derive(Clone, Debug, clap::Args)]
pub struct ReconcileArgs {
    /// What to reconcile.
    #[command(subcommand)]
    pub what: What,
}

/// `ksync reconcile repo|app NAME`.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum What {
    /// Fetch a Repository's ref now, wait, and print the commit it resolved to.
    #[command(visible_alias = "repository")]
    Repo(Target),
    /// Reconcile an Application now (a Revision waiting out its retry backoff tries again),
    /// wait, and print its Ready condition.
    #[command(visible_alias = "application")]
    App(Target),
}

/// The object and how long to wait.
#[derive(Clone, Debug, clap::Args)]
pub struct Target {
    /// Its name.
    pub name: String,
    /// How long to wait for the controller (`30s`, `2m`).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Request it and return at once.
    #[arg(long)]
    pub no_wait: bool,
}

fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    kuvryn_sync::api::duration::parse(s)
}

/// Request the reconcile, wait and report.
pub async fn run(cluster: &Cluster, args: &ReconcileArgs, _ctx: Context) -> Result<()> {
    match &args.what {
        What::Repo(t) => repository(cluster, t).await,
        What::App(t) => application(cluster, t).await,
    }
}

/// The request's token: the real clock (not `KSYNC_NOW`), so two requests are two values.
fn token() -> String {
    Timestamp::now().round(Unit::Millisecond).unwrap_or_else(|_| Timestamp::now()).to_string()
}

async fn request<K>(cluster: &Cluster, kind: &'static str, name: &str, at: &str) -> Result<()>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let ns = cluster.namespace.as_str();
    let api: Api<K> = Api::namespaced(cluster.client.clone(), ns);
    let patch = json!({"metadata": {"annotations": {names::annotations::RECONCILE_REQUESTED_AT: at}}});
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_string()), ..Default::default() };
    api.patch(name, &params, &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(|e| cluster.error(e, Request::Get { kind, name, namespace: ns }))
}

/// Read `name` until `handled` says the request `at` was taken up, or the timeout.
async fn wait<K: read::Kind>(
    cluster: &Cluster,
    name: &str,
    timeout: Duration,
    handled: impl Fn(&K) -> bool,
) -> Result<Option<K>> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let obj = read::get::<K>(cluster, name).await?.typed;
        if handled(&obj) {
            return Ok(Some(obj));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(POLL).await;
    }
}

fn not_handled(kind: &str, name: &str, timeout: Duration, ns: &str) -> Error {
    Error::Unavailable(format!(
        "{kind} \"{name}\" in namespace \"{ns}\" did not take up the request within {}s: is the manager running? (see the manager's logs)",
        timeout.as_secs()
    ))
}

async fn repository(cluster: &Cluster, t: &Target) -> Result<()> {
    let ns = cluster.namespace.as_str();
    let before = read::get::<Repository>(cluster, &t.name).await?.typed;
    if before.spec.suspend {
        return Err(Error::Unavailable(format!(
            "Repository \"{}\" in namespace \"{ns}\" is suspended (spec.suspend): resume it with: ksync resume repo {}",
            t.name, t.name
        )));
    }
    let at = token();
    request::<Repository>(cluster, "Repository", &t.name, &at).await?;
    if t.no_wait {
        return output::print(&format!(
            "Reconcile of Repository \"{}\" in namespace \"{ns}\" requested at {at}.\n",
            t.name
        ));
    }
    let handled =
        |r: &Repository| r.status.as_ref().and_then(|s| s.last_handled_reconcile_at.as_deref()) == Some(at.as_str());
    let after = wait(cluster, &t.name, t.timeout, handled).await?;
    let after = after.ok_or_else(|| not_handled("Repository", &t.name, t.timeout, ns))?;
    repository_outcome(&before, &after, ns).map_or_else(|e| Err(Error::Unavailable(e)), |s| output::print(&s))
}

/// What `ksync reconcile repo` prints once the request was handled, or the failure to report.
pub fn repository_outcome(before: &Repository, after: &Repository, ns: &str) -> std::result::Result<String, String> {
    let name = after.metadata.name.as_deref().unwrap_or_default();
    let status = after.status.clone().unwrap_or_default();
    let ready = kuvryn_sync::api::conditions::get(&status.conditions, names::conditions::READY);
    if let Some(c) = ready.filter(|c| c.status != "True") {
        return Err(format!(
            "Repository \"{name}\" in namespace \"{ns}\" could not be fetched: {}: {}",
            c.reason, c.message
        ));
    }
    let commit = status.revision.as_ref().map(|r| r.commit.as_str()).unwrap_or_default();
    let old = before.status.as_ref().and_then(|s| s.revision.as_ref()).map(|r| r.commit.as_str());
    let following = after.spec.following();
    // A chart Repository's revision is the chart version, never shortened.
    let chart = after.spec.is_chart();
    let what = if chart { "version" } else { "commit" };
    let short = |c: &str| if chart { c.to_string() } else { c.get(..12).unwrap_or(c).to_string() };
    let change = match old {
        Some(o) if o == commit => "unchanged".to_string(),
        Some(o) if !o.is_empty() => format!("was {}", short(o)),
        _ => "first fetch".to_string(),
    };
    Ok(format!("Repository \"{name}\" in namespace \"{ns}\" fetched {following}: {what} {commit} ({change}).\n"))
}

async fn application(cluster: &Cluster, t: &Target) -> Result<()> {
    let ns = cluster.namespace.as_str();
    let before = read::get::<Application>(cluster, &t.name).await?.typed;
    if before.spec.suspend {
        return Err(Error::Unavailable(format!(
            "Application \"{}\" in namespace \"{ns}\" is suspended (spec.suspend): resume it with: ksync resume app {}",
            t.name, t.name
        )));
    }
    let at = token();
    request::<Application>(cluster, "Application", &t.name, &at).await?;
    if t.no_wait {
        return output::print(&format!(
            "Reconcile of Application \"{}\" in namespace \"{ns}\" requested at {at}.\n",
            t.name
        ));
    }
    let handled =
        |a: &Application| a.status.as_ref().and_then(|s| s.last_handled_reconcile_at.as_deref()) == Some(at.as_str());
    let after = wait(cluster, &t.name, t.timeout, handled).await?;
    let after = after.ok_or_else(|| not_handled("Application", &t.name, t.timeout, ns))?;
    output::print(&application_outcome(&after, ns))
}

/// What `ksync reconcile app` prints once the request was handled: its Ready condition and the
/// commit of its desired Revision.
pub fn application_outcome(app: &Application, ns: &str) -> String {
    let name = app.metadata.name.as_deref().unwrap_or_default();
    let status = app.status.clone().unwrap_or_default();
    let ready = kuvryn_sync::api::conditions::get(&status.conditions, names::conditions::READY);
    let state = match ready {
        Some(c) => format!("Ready={} ({}): {}", c.status, c.reason, c.message),
        None => "no Ready condition yet".to_string(),
    };
    format!("Application \"{name}\" in namespace \"{ns}\" reconciled: {state}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(commit: Option<&str>, ready: (&str, &str, &str)) -> Repository {
        serde_json::from_value(json!({
            "apiVersion": names::API_VERSION, "kind": "Repository",
            "metadata": {"name": "platform", "namespace": "team-a"},
            "spec": {"url": "https://git.example.invalid/p.git", "ref": {"branch": "main"}},
            "status": {"revision": commit.map(|c| json!({"ref": "branch/main", "commit": c})),
                       "conditions": [{"type": "Ready", "status": ready.0, "reason": ready.1, "message": ready.2,
                                       "lastTransitionTime": "2026-12-05T00:00:00Z"}]},
        }))
        .unwrap()
    }

    #[test]
    fn it_says_which_commit_and_whether_it_moved() {
        let c1 = "2c26b46b68ffc68ff99b453c1d30413413422d70";
        let c2 = "fcde2b2edba56bf408601fb721fe9b5c338d10ee";
        let ok = ("True", "Succeeded", "fetched");
        assert_eq!(
            repository_outcome(&repo(Some(c1), ok), &repo(Some(c2), ok), "team-a").unwrap(),
            format!(
                "Repository \"platform\" in namespace \"team-a\" fetched branch/main: commit {c2} (was 2c26b46b68ff).\n"
            )
        );
        assert!(
            repository_outcome(&repo(Some(c1), ok), &repo(Some(c1), ok), "team-a").unwrap().ends_with("(unchanged).\n")
        );
        assert!(
            repository_outcome(&repo(None, ok), &repo(Some(c1), ok), "team-a").unwrap().ends_with("(first fetch).\n")
        );
        let failed = repo(Some(c1), ("False", "SourceFailure", "authentication failed"));
        assert_eq!(
            repository_outcome(&repo(Some(c1), ok), &failed, "team-a").unwrap_err(),
            "Repository \"platform\" in namespace \"team-a\" could not be fetched: SourceFailure: authentication failed"
        );
    }
}
