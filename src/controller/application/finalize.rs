//! The finalize stage: `deletionPolicy: DeleteManagedResources` holds the Application with a
//! finalizer until what it manages, and may delete, is deleted.
//!
//! Not `kube::runtime::finalizer`: its finalizer patches go through an `Api` whose requests
//! cannot carry the shard fence (every write here must), and it puts the finalizer on every
//! object, while `Orphan` needs none.
//!
//! # Expected flow
//!
//! 1. Whether the Application's own namespace is being deleted (read as the controller).
//! 2. Every managed object, listed as the service account (never from a cache: this decides
//!    what is deleted); what each managed Namespace holds and which custom resources each managed
//!    CustomResourceDefinition has, listed the same way ([`namespace_contents`], [`definition`]).
//! 3. The decision, pure: [`crate::plan::deletion::decide`] (what is kept, and why).
//! 4. The deletes, in reverse apply order, through the fenced writer, each conditional on the
//!    listed `uid` and `resourceVersion` ([`crate::apply::prune`]).
//! 5. The kept objects named in one `PruneSkipped` Warning Event, and the finalizer removed.
//!
//! # Guarantees
//!
//! - High-risk kinds are deleted (the spec), but never a Namespace that holds, or a CRD whose
//!   kind has, anything this deletion does not delete, nor anything opted out of pruning.
//! - Kept objects never hold the Application: once everything it may delete is deleted, it goes.
//! - A failure (a refused delete, an API error) is reported (`Ready=False`, `PruneFailure`) and
//!   retried: the finalizer is not removed early, and granting the permission lets it finish.
//! - **It never wedges its own namespace.** When the Application's namespace is being deleted,
//!   the namespace controller deletes what is in it, and may already have removed the
//!   RoleBindings that let the service account delete anything. The finalizer then tries no
//!   delete in that namespace, makes one attempt at the managed objects elsewhere (cluster-scoped
//!   ones and other namespaces, with the same rules), and removes itself whatever that attempt
//!   gave; what it could not do is logged (an Event cannot be written into a terminating
//!   namespace).
//!
//! # Assumptions
//!
//! The controller may `get` Namespaces. When it may not, the namespace is taken as not being
//! deleted (and a namespace deletion waits for the service account's deletes, as before).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::events::EventType;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::Reconcile;
use super::error::Error;
use super::flow::Failure;
use super::replica::{Context, fenced, may_write};
use crate::api::application::{Application, ApplicationStatus, DeletionPolicy};
use crate::api::names;
use crate::live;
use crate::plan::deletion::{self, Contents, Definition};
use crate::plan::{self, inventory, validate};
use crate::watch::discovery::ClusterScopes;

/// Page size of the lists of what a managed Namespace or CRD holds.
const CONTENTS_PAGE: u32 = 100;
/// Most objects listed for one Namespace or CRD: beyond, it is kept without listing the rest.
const MAX_CONTENTS: usize = 1000;
/// Lists in flight at once.
const CONCURRENCY: usize = 8;
/// How many kinds the service account may not list a reason names.
const NAMED_KINDS: usize = 5;

pub(super) fn has_finalizer(app: &Application) -> bool {
    app.finalizers().iter().any(|f| f == names::finalizers::APPLICATION)
}

pub(super) async fn set_finalizers(
    ctx: &Context,
    app: &Application,
    ns: &str,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    fenced(ctx, app)?;
    // The resourceVersion makes this a compare-and-swap: a concurrent change is retried.
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": app.resource_version()}});
    ctx.writer(&ctx.client, ns, &app.name_any())
        .patch::<Application, _>(Some(ns), &app.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// `deletionPolicy: DeleteManagedResources` holds the Application with a finalizer until its
/// resources are deleted; `Orphan` needs none. Returns whether it changed the Application.
pub(super) async fn keep_finalizer(app: &Application, ctx: &Context, ns: &str) -> Result<bool, Error> {
    let wants = app.spec.deletion_policy == DeletionPolicy::DeleteManagedResources;
    let has = has_finalizer(app);
    if wants && !has {
        let mut f = app.finalizers().to_vec();
        f.push(names::finalizers::APPLICATION.to_string());
        set_finalizers(ctx, app, ns, f).await?;
        return Ok(true);
    } else if !wants && has {
        let f = app.finalizers().iter().filter(|f| *f != names::finalizers::APPLICATION).cloned().collect();
        set_finalizers(ctx, app, ns, f).await?;
        return Ok(true);
    }
    Ok(false)
}

/// What [`finalize`] did.
pub(super) enum Finalized {
    /// The Application holds no finalizer of ours: nothing to do.
    NotHeld,
    /// Deleting failed, and was reported on `status`: store it, and try again in a while.
    Failed,
    /// Everything that may go is gone: the finalizer may be removed ([`release`]).
    Done,
}

/// How long a failed deletion waits before it is tried again.
pub(super) const RETRY: Duration = Duration::from_secs(10);

/// The Application is being deleted: with `DeleteManagedResources`, delete what it manages and
/// may delete (see the module documentation).
pub(super) async fn finalize(r: &Reconcile<'_>, status: &mut ApplicationStatus) -> Result<Finalized, Error> {
    let Reconcile { ctx, app, ns, name, .. } = *r;
    if !has_finalizer(app) {
        return Ok(Finalized::NotHeld);
    }
    if app.spec.deletion_policy == DeletionPolicy::DeleteManagedResources {
        let terminating = namespace_terminating(ctx, ns).await;
        match delete_managed(app, ctx, ns, name, terminating).await {
            Ok(done) => report(r, &done),
            Err(message) if terminating => {
                // Retrying would hold the namespace: the service account may never be able to.
                tracing::warn!(application = %name, namespace = %ns, error = %message,
                    "the Application's namespace is being deleted: finishing without every managed resource deleted");
            }
            Err(message) => {
                let failure = Failure::new(
                    names::reasons::PRUNE_FAILURE,
                    format!("deleting the managed resources (deletionPolicy DeleteManagedResources): {message}"),
                    true,
                );
                failure.report(r, status, false);
                return Ok(Finalized::Failed);
            }
        }
    }
    Ok(Finalized::Done)
}

/// Remove the finalizer once [`finalize`] is done: the Application goes.
pub(super) async fn release(r: &Reconcile<'_>) -> Result<(), Error> {
    let Reconcile { ctx, app, ns, name, .. } = *r;
    let f = app.finalizers().iter().filter(|f| *f != names::finalizers::APPLICATION).cloned().collect();
    set_finalizers(ctx, app, ns, f).await?;
    // Its Revisions go with it (owner references).
    ctx.revisions.forget(ns, name);
    Ok(())
}

/// Whether the namespace `ns` is being deleted, or gone. Read as the controller: the service
/// account may already have lost its rights in it.
async fn namespace_terminating(ctx: &Context, ns: &str) -> bool {
    match Api::<Namespace>::all(ctx.client.clone()).get_opt(ns).await {
        Ok(n) => n.is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
        Err(e) => {
            tracing::debug!(namespace = %ns, error = %e, "reading the Application's namespace");
            false
        }
    }
}

/// What a finalization did.
struct Done {
    /// How many objects were deleted.
    deleted: usize,
    /// The managed objects kept, with why.
    kept: Vec<deletion::Kept>,
    /// Managed objects in the Application's terminating namespace, left to the namespace
    /// controller.
    left: usize,
}

/// Say what was kept: a `PruneSkipped` Warning Event and a log line.
fn report(r: &Reconcile<'_>, done: &Done) {
    let Reconcile { ns, name, events, .. } = *r;
    tracing::info!(application = %name, namespace = %ns, deleted = done.deleted, kept = done.kept.len(),
        left_to_the_namespace_controller = done.left, "deleted the managed resources");
    if done.kept.is_empty() {
        return;
    }
    let kept: Vec<String> = done.kept.iter().map(ToString::to_string).collect();
    let note = format!(
        "not deleted with the Application (deletionPolicy DeleteManagedResources): {}; delete them by hand once they are no longer needed",
        kept.join("; ")
    );
    tracing::warn!(application = %name, namespace = %ns, kept = %kept.join("; "), "managed resources kept");
    events.tell(None, EventType::Warning, names::events::PRUNE_SKIPPED, &note);
}

fn namespace_of(o: &Value) -> &str {
    o["metadata"]["namespace"].as_str().unwrap_or_default()
}

fn is_kind(o: &Value, group: &str, kind: &str) -> bool {
    validate::group_of(o["apiVersion"].as_str().unwrap_or_default()) == group && o["kind"] == kind
}

/// Delete what the Application manages and may delete. `terminating`: its own namespace is being
/// deleted (nothing in it is tried, and the caller finishes whatever this returns).
async fn delete_managed(
    app: &Application,
    ctx: &Context,
    ns: &str,
    name: &str,
    terminating: bool,
) -> Result<Done, String> {
    let sa = ctx.client_for(ns, &app.spec.service_account_name).map_err(|e| e.to_string())?;
    // Fresh: a CustomResourceDefinition applied a moment ago defines a kind to look for.
    let scopes = ctx.scopes(true).await.map_err(|e| e.to_string())?;
    let managed_kinds = app.status.as_ref().map(|s| s.managed_kinds.clone()).unwrap_or_default();
    let kinds = live::kinds_to_search(&managed_kinds, &[]);
    // Where to look when the service account may not list a kind cluster-wide: the destination
    // and every allowed namespace that is not a pattern.
    let destination = &app.spec.destination;
    let mut namespaces: BTreeSet<String> = std::iter::once(destination.namespace.clone())
        .chain(destination.allowed_namespaces.iter().filter(|n| !n.contains('*')).cloned())
        .collect();
    if terminating {
        namespaces.remove(ns);
    }
    let mut found = live::Live::default();
    let who = format!("{ns}/{}", app.spec.service_account_name);
    let search = live::Search { namespaces: &namespaces, answers: Some((&ctx.list_answers, &who)) };
    live::read_managed(&sa, &scopes, &kinds, &inventory::selector(ns, name), search, &live::uncached, &mut found)
        .await
        .map_err(|e| e.to_string())?;
    let mut managed = found.managed;
    let listed = managed.len();
    if terminating {
        // The namespace controller deletes these; the service account may no longer.
        managed.retain(|o| namespace_of(o) != ns && !(is_kind(o, "", "Namespace") && o["metadata"]["name"] == ns));
    }
    let left = listed - managed.len();

    let not_ours = inventory::not_selector(ns, name);
    let mut held = BTreeMap::new();
    let mut defined = BTreeMap::new();
    let opted_out =
        |o: &Value| o["metadata"]["annotations"][names::annotations::PRUNE] == names::annotations::PRUNE_DISABLED;
    // Containers already being deleted need no listing.
    for o in managed.iter().filter(|o| !opted_out(o) && o["metadata"]["deletionTimestamp"].is_null()) {
        let container = o["metadata"]["name"].as_str().unwrap_or_default();
        if is_kind(o, "", "Namespace") {
            let contents = namespace_contents(&sa, &scopes, container, &not_ours).await.map_err(|e| e.to_string())?;
            held.insert(container.to_string(), contents);
        } else if is_kind(o, "apiextensions.k8s.io", "CustomResourceDefinition") {
            let d = definition(&sa, &scopes, container, &not_ours).await.map_err(|e| e.to_string())?;
            defined.insert(container.to_string(), d);
        }
    }
    let decision = deletion::decide(&deletion::Inputs {
        managed: &managed,
        namespaces: &held,
        definitions: &defined,
        scopes: &*scopes,
    });

    let mut targets = decision.delete;
    let rank = |o: &Value| {
        let av = o["apiVersion"].as_str().unwrap_or_default();
        let namespaced = !namespace_of(o).is_empty();
        (
            // Higher waves go first, as prune deletes them.
            plan::wave_of(o).unwrap_or(0),
            plan::order::rank(validate::group_of(av), o["kind"].as_str().unwrap_or_default(), namespaced),
            validate::identity(o),
        )
    };
    targets.sort_by_key(|o| std::cmp::Reverse(rank(o)));
    let entries: Vec<plan::Entry> = targets
        .iter()
        .map(|o| {
            let av = o["apiVersion"].as_str().unwrap_or_default();
            plan::Entry {
                group: validate::group_of(av).to_string(),
                kind: o["kind"].as_str().unwrap_or_default().to_string(),
                version: av.rsplit('/').next().unwrap_or_default().to_string(),
                namespace: namespace_of(o).to_string(),
                name: o["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                action: plan::Action::Delete,
                changed: Vec::new(),
                more_changed: 0,
                warnings: Vec::new(),
                conflicts: Vec::new(),
                wave: plan::wave_of(o).unwrap_or(0),
                hook: None,
                chart_crd: plan::is_chart_crd(o),
            }
        })
        .collect();
    let doomed = plan::Plan { entries, digest: String::new() };
    if !may_write(ctx, app) {
        return Err("this replica no longer owns the Application's shard".into());
    }
    let listed: BTreeMap<String, Value> = targets.iter().map(|o| (validate::identity(o), o.clone())).collect();
    let mut done = crate::apply::Applied::default();
    let prunable = |o: &Value| inventory::prunable_by(o, ns, name);
    let changed = crate::apply::prune(&ctx.writer(&sa, ns, name), &scopes, &doomed, &listed, &prunable, &mut done)
        .await
        .map_err(|e| e.to_string())?;
    if !changed.is_empty() {
        // Changed since the list: retried from a fresh list (an object no longer the
        // Application's is not listed again).
        return Err(format!("not deleted yet: {}", changed.join("; ")));
    }
    Ok(Done { deleted: done.deleted.len(), kept: decision.kept, left })
}

/// What the Namespace `namespace` holds besides the Application's own labelled objects, listed
/// as the service account.
///
/// What "everything" means, and what it costs: every namespaced kind the discovery snapshot
/// says answers `list` (about 40 on a bare cluster, plus one per namespaced custom kind), less
/// the kinds that are not content ([`deletion::NOT_CONTENT`]: Events, PodMetrics). One
/// metadata-only list per kind, [`CONCURRENCY`] at a time, in pages of [`CONTENTS_PAGE`], with
/// the label selector `sync.kuvryn.io/application-id!=<id>`: the Application's own objects, the
/// bulk of a namespace it manages (the finalizer has them already), stay on the server, so a
/// namespace holding only them costs one small request per kind. Listing stops at the first
/// object that keeps the Namespace whatever else it holds
/// ([`deletion::keeps_its_container`]), or after [`MAX_CONTENTS`] objects; the Namespace is then
/// kept, and its reason says the listing stopped. A kind the service account may not list
/// leaves the Namespace unproven (kept: grant `list`, or delete it by hand), and so does an API
/// group whose discovery failed (its kinds may be missing from the snapshot), except
/// `metrics.k8s.io`, whose kinds are not content; a kind no longer served holds nothing; any
/// other failure is returned (retried).
async fn namespace_contents(
    sa: &Client,
    scopes: &ClusterScopes,
    namespace: &str,
    not_ours: &str,
) -> Result<Contents, kube::Error> {
    let apis = scopes
        .namespaced_listable()
        .into_iter()
        .filter(|r| deletion::is_content(&r.group, &r.kind))
        .map(|r| (Api::namespaced_with(sa.clone(), namespace, r), r.clone()))
        .collect();
    let mut contents = list_contents(apis, not_ours, &format!("in {namespace}")).await?;
    let failed: Vec<&str> = scopes
        .failed()
        .keys()
        .map(|g| if g.is_empty() { "core" } else { g.as_str() })
        .filter(|g| *g != "metrics.k8s.io")
        .collect();
    if !failed.is_empty() {
        contents.unlisted.push(format!("the discovery of API groups {} failed", failed.join(", ")));
    }
    Ok(contents)
}

/// The kind the CustomResourceDefinition `crd` defines and its custom resources in every
/// namespace besides the Application's own, listed as the service account (one metadata-only
/// list, in pages of [`CONTENTS_PAGE`], stopping as [`namespace_contents`] does). A kind the
/// cluster does not serve cannot be listed: the CRD is kept.
async fn definition(sa: &Client, scopes: &ClusterScopes, crd: &str, not_ours: &str) -> Result<Definition, kube::Error> {
    // A CRD is named `<plural>.<group>`.
    let (plural, group) = crd.split_once('.').unwrap_or((crd, ""));
    let Some(r) = scopes.by_plural(group, plural) else {
        let unlisted = vec![format!("the cluster does not serve {crd}, so its objects cannot be listed")];
        return Ok(Definition {
            group: group.to_string(),
            kind: String::new(),
            contents: Contents { objects: Vec::new(), unlisted },
        });
    };
    let contents =
        list_contents(vec![(Api::all_with(sa.clone(), r), r.clone())], not_ours, "in every namespace").await?;
    Ok(Definition { group: r.group.clone(), kind: r.kind.clone(), contents })
}

/// One kind's list: the objects found, and the kind's plural when the service account may not
/// list it.
type KindList = (Vec<Value>, Option<String>);

/// List `apis` (metadata only, `selector`), stopping as [`namespace_contents`] says. `scope`
/// ends the message about kinds the service account may not list.
async fn list_contents(
    apis: Vec<(Api<DynamicObject>, ApiResource)>,
    selector: &str,
    scope: &str,
) -> Result<Contents, kube::Error> {
    let stop = AtomicBool::new(false);
    let cut = AtomicBool::new(false);
    let count = AtomicUsize::new(0);
    let lists = apis.into_iter().map(|(api, r)| {
        let (stop, cut, count) = (&stop, &cut, &count);
        async move {
            let mut found = Vec::new();
            let mut params = ListParams::default().labels(selector).limit(CONTENTS_PAGE);
            loop {
                if stop.load(Ordering::Relaxed) {
                    cut.store(true, Ordering::Relaxed);
                    return Ok((found, None));
                }
                let page = match api.list_metadata(&params).await {
                    Ok(p) => p,
                    Err(kube::Error::Api(s)) if s.code == 403 => return Ok((found, Some(r.plural.clone()))),
                    // Not served any more, or not listable after all: it holds nothing to list.
                    Err(kube::Error::Api(s)) if matches!(s.code, 404 | 405) => return Ok((found, None)),
                    Err(e) => return Err(e),
                };
                let n = page.items.len();
                for item in page.items {
                    let o = json!({"apiVersion": r.api_version, "kind": r.kind, "metadata": item.metadata});
                    if deletion::keeps_its_container(&o) {
                        stop.store(true, Ordering::Relaxed);
                    }
                    found.push(o);
                }
                if count.fetch_add(n, Ordering::Relaxed) + n >= MAX_CONTENTS {
                    stop.store(true, Ordering::Relaxed);
                }
                match page.metadata.continue_ {
                    Some(c) if !c.is_empty() => params = params.continue_token(&c),
                    _ => return Ok((found, None)),
                }
            }
        }
    });
    let results: Vec<Result<KindList, kube::Error>> =
        futures_util::stream::iter(lists).buffer_unordered(CONCURRENCY).collect().await;
    let mut contents = Contents::default();
    let mut refused = Vec::new();
    for r in results {
        let (found, forbidden) = r?;
        contents.objects.extend(found);
        refused.extend(forbidden);
    }
    if !refused.is_empty() {
        refused.sort();
        let more = refused.len().saturating_sub(NAMED_KINDS);
        refused.truncate(NAMED_KINDS);
        let more = if more > 0 { format!(" and {more} more kinds") } else { String::new() };
        contents.unlisted.push(format!("the service account may not list {}{more} {scope}", refused.join(", ")));
    }
    if cut.load(Ordering::Relaxed) {
        contents.unlisted.push(if contents.objects.iter().any(deletion::keeps_its_container) {
            "the rest was not listed once one was found".to_string()
        } else {
            format!("more than {MAX_CONTENTS} objects not labelled for this Application, not listed further")
        });
    }
    // Deterministic, whatever order the lists answered in.
    contents.objects.sort_by_cached_key(validate::identity);
    Ok(contents)
}
