//! `ksync suspend app|repo NAME` and `ksync resume app|repo NAME`: set `spec.suspend`, the one
//! declarative pause, and wait until the controller has seen it.
//!
//! A suspended Application is not planned, applied, pruned or self-healed; a suspended
//! Repository is not fetched and changes no Application. Resuming also requests a reconcile
//! (`sync.kuvryn.io/reconcile-requested-at`), so the work does not wait for the next interval.
//! An Application whose `.ksync.yaml` declares `spec.suspend` is refused: Git owns that field,
//! and the next discovery would write it back.

use std::time::Duration;

use jiff::{Timestamp, Unit};
use kube::api::{Api, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use serde_json::json;

use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::names;
use kuvryn_sync::api::repository::Repository;
use kuvryn_sync::command::{Error, Result};
use kuvryn_sync::read;
use kuvryn_sync::read::connect::{Cluster, Request};

use super::{Context, output};

/// The field manager of the write.
const FIELD_MANAGER: &str = "ksync";

/// How often the object is read again while waiting.
const POLL: Duration = Duration::from_millis(500);

/// `ksync suspend` and `ksync resume`.
#[derive(Clone, Debug, clap::Args)]
pub struct SuspendArgs {
    /// What to suspend or resume.
    #[command(subcommand)]
    pub what: What,
}

/// `app NAME` or `repo NAME`.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum What {
    /// An Application.
    #[command(visible_alias = "application")]
    App(Target),
    /// A Repository.
    #[command(visible_alias = "repository")]
    Repo(Target),
}

/// The object and how long to wait.
#[derive(Clone, Debug, clap::Args)]
pub struct Target {
    /// Its name.
    pub name: String,
    /// How long to wait for the controller to see the change (`30s`, `2m`).
    #[arg(long, default_value = "1m", value_parser = kuvryn_sync::api::duration::parse)]
    pub timeout: Duration,
    /// Write the change and return at once.
    #[arg(long)]
    pub no_wait: bool,
}

/// Suspend (`suspend: true`) or resume.
pub async fn run(cluster: &Cluster, args: &SuspendArgs, suspend: bool, _ctx: Context) -> Result<()> {
    let ns = cluster.namespace.as_str();
    match &args.what {
        What::App(t) => {
            let app = read::get::<Application>(cluster, &t.name).await?;
            if let Some(why) = declared_in_git(&app.raw) {
                return Err(Error::Unavailable(format!(
                    "Application \"{}\" in namespace \"{ns}\": {why}; change spec.suspend there",
                    t.name
                )));
            }
            let was = app.typed.spec.suspend;
            let generation = set::<Application>(cluster, "Application", t, suspend, was).await?;
            let seen = |a: &Application| a.status.as_ref().and_then(|s| s.observed_generation) >= generation;
            finish(cluster, t, "Application", suspend, was, seen).await
        }
        What::Repo(t) => {
            let repo = read::get::<Repository>(cluster, &t.name).await?;
            let was = repo.typed.spec.suspend;
            let generation = set::<Repository>(cluster, "Repository", t, suspend, was).await?;
            let seen = |r: &Repository| r.status.as_ref().and_then(|s| s.observed_generation) >= generation;
            finish(cluster, t, "Repository", suspend, was, seen).await
        }
    }
}

/// Why Git owns `spec.suspend` of this Application (its discovery applied the field), if it does.
pub fn declared_in_git(raw: &serde_json::Value) -> Option<String> {
    let managed = raw["metadata"]["managedFields"].as_array()?;
    let owns = managed.iter().any(|m| {
        m["manager"] == kuvryn_sync::controller::repository::MANAGER
            && m["fieldsV1"]["f:spec"].get("f:suspend").is_some()
    });
    owns.then(|| {
        let from =
            raw["metadata"]["annotations"][names::annotations::DISCOVERED_FROM].as_str().unwrap_or("its Repository");
        format!("its .ksync.yaml ({from}) declares spec.suspend")
    })
}

/// Write `spec.suspend` (and, when resuming, a reconcile request); the generation to wait for.
async fn set<K>(cluster: &Cluster, kind: &'static str, t: &Target, suspend: bool, was: bool) -> Result<Option<i64>>
where
    K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let ns = cluster.namespace.as_str();
    let mut patch = json!({"spec": {"suspend": suspend}});
    if !suspend {
        let at = Timestamp::now().round(Unit::Millisecond).unwrap_or_else(|_| Timestamp::now()).to_string();
        patch["metadata"] = json!({"annotations": {names::annotations::RECONCILE_REQUESTED_AT: at}});
    } else if was {
        return Ok(None);
    }
    let api: Api<K> = Api::namespaced(cluster.client.clone(), ns);
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_string()), ..Default::default() };
    let written = api
        .patch(&t.name, &params, &Patch::Merge(&patch))
        .await
        .map_err(|e| cluster.error(e, Request::Get { kind, name: &t.name, namespace: ns }))?;
    Ok(written.meta().generation)
}

async fn finish<K: read::Kind>(
    cluster: &Cluster,
    t: &Target,
    kind: &str,
    suspend: bool,
    was: bool,
    seen: impl Fn(&K) -> bool,
) -> Result<()> {
    let ns = cluster.namespace.as_str();
    if !t.no_wait {
        let deadline = tokio::time::Instant::now() + t.timeout;
        while !seen(&read::get::<K>(cluster, &t.name).await?.typed) {
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Unavailable(format!(
                    "{kind} \"{}\" in namespace \"{ns}\": spec.suspend is {suspend}, but the controller did not observe it within {}s (is the manager running?)",
                    t.name,
                    t.timeout.as_secs()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }
    output::print(&message(kind, &t.name, ns, suspend, was))
}

/// What the command prints.
pub fn message(kind: &str, name: &str, ns: &str, suspend: bool, was: bool) -> String {
    let command = if kind == "Application" { "app" } else { "repo" };
    let paused = if kind == "Application" {
        "nothing is planned, applied, pruned or self-healed"
    } else {
        "nothing is fetched and no Application changes"
    };
    match (suspend, was) {
        (true, true) => format!("{kind} \"{name}\" in namespace \"{ns}\" was already suspended.\n"),
        (true, false) => format!(
            "{kind} \"{name}\" in namespace \"{ns}\" suspended: {paused} until: ksync resume {command} {name}\n"
        ),
        (false, true) => format!("{kind} \"{name}\" in namespace \"{ns}\" resumed, and reconciled now.\n"),
        (false, false) => {
            format!("{kind} \"{name}\" in namespace \"{ns}\" was not suspended; a reconcile was requested.\n")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suspend_declared_in_git_is_refused() {
        let raw = |fields: serde_json::Value| {
            json!({"metadata": {"name": "web",
                "annotations": {names::annotations::DISCOVERED_FROM: "platform/apps/.ksync.yaml"},
                "managedFields": [{"manager": "kuvryn-sync-repository", "operation": "Apply", "fieldsV1": {"f:spec": fields}},
                                  {"manager": "ksync", "operation": "Update", "fieldsV1": {"f:spec": {"f:suspend": {}}}}]}})
        };
        assert_eq!(
            declared_in_git(&raw(json!({"f:suspend": {}, "f:source": {}}))).as_deref(),
            Some("its .ksync.yaml (platform/apps/.ksync.yaml) declares spec.suspend")
        );
        // Another manager's suspend (ksync's own, kubectl's) is not Git's.
        assert_eq!(declared_in_git(&raw(json!({"f:source": {}}))), None);
        assert_eq!(declared_in_git(&json!({"metadata": {"name": "web"}})), None);
    }

    #[test]
    fn it_says_what_stops_and_how_to_resume() {
        assert_eq!(
            message("Application", "web", "team-a", true, false),
            "Application \"web\" in namespace \"team-a\" suspended: nothing is planned, applied, pruned or self-healed until: ksync resume app web\n"
        );
        assert_eq!(
            message("Repository", "platform", "team-a", true, false),
            "Repository \"platform\" in namespace \"team-a\" suspended: nothing is fetched and no Application changes until: ksync resume repo platform\n"
        );
        assert!(message("Repository", "platform", "team-a", false, true).contains("resumed"));
        assert!(message("Application", "web", "team-a", true, true).contains("already suspended"));
    }
}
