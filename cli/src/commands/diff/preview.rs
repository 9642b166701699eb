//! One Application's preview: the revision resolved through the Git cache code (or a local
//! directory), `valuesFrom` read and rendered, validated against discovery, prepared as a
//! rollout prepares it ([`kuvryn_sync::plan::prepare`]), the live state read and dry-run **as the
//! Application's service account** ([`kuvryn_sync::live::read`]: reads and
//! `dryRun=All` applies only), and planned ([`kuvryn_sync::plan::build`]).
//!
//! Read-only: nothing here writes to the cluster. The Git cache is a temporary directory of
//! this process.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::{Client, ResourceExt};
use serde_json::Value;

use kuvryn_sync::api::application::{Application, ConflictPolicy, RenderType};
use kuvryn_sync::api::names;
use kuvryn_sync::api::names::labels::DEFAULT_SHARD;
use kuvryn_sync::api::repository::Repository;
use kuvryn_sync::live;
use kuvryn_sync::plan::{self, Action, inventory, revision, validate};
use kuvryn_sync::read::connect::{Cluster, Request};
use kuvryn_sync::render::{self, Renderer};
use kuvryn_sync::source::cache::{CacheConfig, GitCache};
use kuvryn_sync::source::checkout::{self, check_symlinks};
use kuvryn_sync::source::{Reference, local, references_of};
use kuvryn_sync::watch::discovery::ClusterScopes;

use crate::view::diff::{Preview, Previewed, Source};

/// What every preview of one run shares.
pub struct Shared {
    cache: GitCache,
    renderer: Renderer,
    scopes: Arc<ClusterScopes>,
    _dir: tempfile::TempDir,
}

impl Shared {
    /// A Git cache in a new temporary directory, a renderer with `tools`, and discovery read
    /// as the user.
    pub async fn new(cluster: &Cluster, tools: render::Tools) -> Result<Shared, String> {
        let dir = tempfile::Builder::new()
            .prefix("ksync-diff-")
            .tempdir()
            .map_err(|e| format!("a temporary directory for the Git cache: {e}"))?;
        let cache = GitCache::new(CacheConfig::new(dir.path())).map_err(|e| e.to_string())?;
        let renderer = Renderer::new(tools, render::Limits::default(), 0);
        let scopes = ClusterScopes::discover(&cluster.client)
            .await
            .map_err(|e| cluster.error(e, Request::List { what: "the API groups (discovery)" }).to_string())?;
        Ok(Shared { cache, renderer, scopes: Arc::new(scopes), _dir: dir })
    }
}

/// What to render: a revision (else the Application's own), or a local checkout.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ask<'a> {
    /// `--revision`.
    pub revision: Option<&'a str>,
    /// `--path`.
    pub local: Option<&'a Path>,
}

/// The rendered directory: a checkout kept alive while it is used, or a local one.
enum Rendered {
    Checkout(Arc<checkout::Checkout>),
    Local(PathBuf),
    /// A Helm or OCI Repository's chart, pulled (the directory is an empty scratch one).
    Packaged(Arc<render::pull::Pulled>, tempfile::TempDir),
}

impl Rendered {
    fn dir(&self) -> &Path {
        match self {
            Rendered::Checkout(c) => c.path(),
            Rendered::Local(d) => d,
            Rendered::Packaged(_, d) => d.path(),
        }
    }
}

/// The preview of `app`, or why there is none (secret values redacted).
pub async fn preview(cluster: &Cluster, shared: &Shared, app: &Application, ask: Ask<'_>) -> Result<Preview, String> {
    let ns = app.namespace().unwrap_or_else(|| cluster.namespace.clone());
    let name = app.name_any();
    let spec = &app.spec;
    let api_error = |e: kube::Error, what: &'static str| cluster.error(e, Request::List { what }).to_string();
    let repo = Api::<Repository>::namespaced(cluster.client.clone(), &ns)
        .get_opt(&spec.source.repository)
        .await
        .map_err(|e| api_error(e, "Repositories"))?
        .ok_or_else(|| format!("Repository {:?} does not exist in namespace {ns}", spec.source.repository))?;
    // A chart Repository's Secret is read below, for its chart.
    let credentials = if repo.spec.is_chart() {
        Default::default()
    } else {
        kuvryn_sync::source::secret::of_repository(&cluster.client, &ns, repo.spec.secret_ref.as_ref(), &repo.spec.url)
            .await
            .map_err(|e| api_error(e, "the Repository's credentials Secret"))?
            .map_err(|m| format!("Repository {}: {m}", spec.source.repository))?
    };
    let path = checkout::clean_relative_path(&spec.source.path).map_err(|e| e.to_string())?;
    let mut source =
        Source { repository: spec.source.repository.clone(), path: spec.source.path.clone(), ..Default::default() };
    let rendered = match ask.local {
        Some(root) => {
            let dir = if path.is_empty() { root.to_path_buf() } else { root.join(&path) };
            if !dir.is_dir() {
                return Err(format!("{}: no such directory (spec.source.path {:?} in --path)", dir.display(), path));
            }
            if let Err(r) = check_symlinks(&local::entries(&dir)?) {
                return Err(format!(
                    "{}: symlink {} -> {} is refused ({:?}), as it would be in a Git checkout",
                    dir.display(),
                    r.link,
                    r.target,
                    r.problem
                ));
            }
            source.local = Some(root.display().to_string());
            Rendered::Local(dir)
        }
        None if repo.spec.is_chart() => {
            // A chart Repository: --revision is a chart version (or range).
            let chart = repo.spec.chart.as_ref().ok_or("the Repository names no chart")?;
            let version = match ask.revision.or(spec.source.revision.as_deref()) {
                Some(v) => v.to_string(),
                None => repo.status.as_ref().and_then(|s| s.revision.as_ref()).map(|r| r.commit.clone()).ok_or_else(
                    || {
                        format!(
                            "Repository {} has not resolved {} yet: pass --revision",
                            spec.source.repository,
                            repo.spec.following()
                        )
                    },
                )?,
            };
            let auth = kuvryn_sync::controller::repository::chart_auth(
                &cluster.client,
                &ns,
                repo.spec.secret_ref.as_ref(),
                &repo.spec.url,
            )
            .await
            .map_err(|e| api_error(e, "the Repository's credentials Secret"))?
            .map_err(|m| format!("Repository {}: {m}", spec.source.repository))?;
            let exact = render::chart::is_exact(&version);
            let pulled = shared
                .renderer
                .charts()
                .pull(&repo.spec.url, &chart.name, &version, exact, &auth, Duration::ZERO)
                .await?;
            source.reference = Some(repo.spec.following());
            source.commit = Some(pulled.version.clone());
            let scratch = tempfile::tempdir().map_err(|e| format!("scratch directory: {e}"))?;
            Rendered::Packaged(pulled, scratch)
        }
        None => {
            let timeout = kuvryn_sync::api::duration::parse(&repo.spec.timeout).unwrap_or(Duration::from_secs(60));
            let (reference, candidates) = match ask.revision.or(spec.source.revision.as_deref()) {
                Some(r) => (r.to_string(), references_of(r)),
                None => match repo.status.as_ref().and_then(|s| s.revision.as_ref()) {
                    Some(r) => (r.reference.clone(), vec![Reference::Commit(r.commit.clone())]),
                    None => {
                        return Err(format!(
                            "Repository {} has not resolved {} yet: pass --revision",
                            spec.source.repository,
                            repo.spec.following()
                        ));
                    }
                },
            };
            let mut last = None;
            let mut commit = None;
            for c in candidates {
                match shared.cache.resolve(&repo.spec.url, &c, &credentials, timeout).await {
                    Ok(r) => {
                        commit = Some(r.commit);
                        break;
                    }
                    Err(e) => last = Some(e),
                }
            }
            let Some(commit) = commit else {
                let why = last.map(|e| e.to_string()).unwrap_or_else(|| "empty".into());
                return Err(credentials.redact(&format!("revision {reference:?}: {why}")));
            };
            let c = shared
                .cache
                .checkout(&repo.spec.url, &credentials, &commit, &spec.source.path)
                .await
                .map_err(|e| credentials.redact(&e.to_string()))?;
            source.reference = Some(reference);
            source.commit = Some(commit);
            Rendered::Checkout(c)
        }
    };
    let sa = kuvryn_sync::impersonate::standalone(&cluster.config, &ns, &spec.service_account_name)
        .map_err(|e| format!("a client acting as the service account: {e}"))?;
    let packaged = match &rendered {
        Rendered::Packaged(p, _) => Some(p.clone()),
        _ => None,
    };
    let renderer =
        if packaged.is_some() { RenderType::Helm } else { render::renderer_of(&spec.source.render, rendered.dir()) };
    let (values_from, mut secrets) = match (renderer, &spec.source.render.helm) {
        (RenderType::Helm, Some(h)) if !h.values_from.is_empty() => {
            let files = render::values::repository_files(&cluster.client, &shared.cache, &ns, &h.values_from)
                .await
                .map_err(|e| format!("valuesFrom: {e}"))?;
            render::values::read(&sa, &ns, &h.values_from, &files).await.map_err(|e| format!("valuesFrom: {e}"))?
        }
        _ => (Vec::new(), Vec::new()),
    };
    // A chart in Git: its dependencies pulled (or materialized) as the controller does.
    let present = match (&rendered, &source.commit) {
        (Rendered::Checkout(c), Some(commit)) if renderer == RenderType::Helm => {
            let git = render::dependencies::Git {
                cache: &shared.cache,
                url: &repo.spec.url,
                credentials: &credentials,
                commit,
            };
            render::dependencies::make_present(
                shared.renderer.charts(),
                &git,
                &sa,
                &ns,
                &spec.source,
                c.path(),
                Duration::ZERO,
            )
            .await
            .map_err(|f| f.message)?
        }
        _ => Default::default(),
    };
    secrets.extend(present.secrets.iter().cloned());
    let redact = |m: String, secrets: &[String]| kuvryn_sync::redact::redact(&m, secrets.iter().map(String::as_str));
    let tree = match &rendered {
        Rendered::Checkout(c) => Some(c.tree.to_string()),
        Rendered::Local(_) => None,
        Rendered::Packaged(p, _) => Some(p.digest.clone()),
    };
    let request = render::Request {
        dir: rendered.dir(),
        tree,
        render: &spec.source.render,
        renderer,
        application: &name,
        namespace: &spec.destination.namespace,
        values_from,
        secrets: secrets.clone(),
        capabilities: (renderer == RenderType::Helm).then(|| std::sync::Arc::new(shared.scopes.capabilities())),
        dependencies: present.dependencies(),
        packaged,
    };
    let objects =
        shared.renderer.render(&request).await.map_err(|e| redact(format!("render failed: {e}"), &secrets))?;
    secrets.extend(kuvryn_sync::redact::secret_strings(&objects));
    let validated = validate::validate(&objects, &spec.destination, &*shared.scopes, validate::Limits::default())
        .map_err(|p| redact(format!("{} problem(s) in the desired state: {}", p.len(), p.join("; ")), &secrets))?;
    let shard = app.labels().get(names::labels::SHARD).map_or(DEFAULT_SHARD, String::as_str);
    let redeploy = kuvryn_sync::plan::redeploy::requested(app.annotations())?;
    let prepared = kuvryn_sync::plan::prepare::prepare(validated, &ns, &name, shard, redeploy.as_deref());

    let mut namespaces = BTreeSet::from([spec.destination.namespace.clone()]);
    namespaces.extend(prepared.objects.iter().filter_map(|o| o["metadata"]["namespace"].as_str()).map(str::to_string));
    let managed_kinds = app.status.as_ref().map(|s| s.managed_kinds.clone()).unwrap_or_default();
    let selector = inventory::selector(&ns, &name);
    let adopt = spec.sync.conflict_policy == ConflictPolicy::Adopt;
    let search = live::Search { namespaces: &namespaces, answers: None };
    let needed = live::Needed {
        desired: &prepared.objects,
        managed_kinds: &managed_kinds,
        selector: &selector,
        adopt,
        vouched: None,
        // A preview reads every object: it has no watch to presume from.
        presumed: &BTreeSet::new(),
    };
    let read = live::read(&sa, &shared.scopes, needed, search, &live::uncached, None).await.map_err(|e| {
        redact(format!("reading the live state as the service account {}: {e}", spec.service_account_name), &secrets)
    })?;
    for (id, other) in inventory::claimed_by_others(&read.live, &ns, &name) {
        let (other_ns, other_name) = other.split_once('/').unwrap_or(("", other.as_str()));
        let exists = Api::<Application>::namespaced(cluster.client.clone(), other_ns)
            .get_opt(other_name)
            .await
            .map_err(|e| api_error(e, "Applications"))?
            .is_some();
        if exists {
            let what = inventory::describe(&id);
            return Err(format!("{what} is managed by Application {other}: the rollout would be refused"));
        }
    }
    let inputs = plan::Inputs {
        live: read.live,
        dry_run: read.dry_run,
        managed: read.managed,
        prune: spec.sync.prune,
        conflicts: read.conflicts,
        one_wave: !spec.strategy.waves,
        hooks: prepared.hooks.clone(),
        run_hooks: spec.strategy.hooks,
    };
    let planned = plan::build(&prepared.objects, &inputs);
    let summary = revision::summary(&planned);
    let desired: BTreeMap<String, &Value> =
        prepared.objects.iter().chain(&prepared.hooks).map(|o| (validate::identity(o), o)).collect();
    let mut entries = Vec::with_capacity(planned.entries.len());
    for e in &planned.entries {
        let id = format!("{}/{}/{}/{}", e.group, e.kind, e.namespace, e.name);
        let (before, after) = match e.action {
            Action::Create => (None, desired.get(&id).map(|v| (*v).clone())),
            Action::Update => {
                let after = inputs.dry_run.get(&id).or_else(|| desired.get(&id).copied());
                (inputs.live.get(&id).cloned(), after.cloned())
            }
            Action::Delete => (Some(pruned(&sa, &shared.scopes, e, &inputs.managed).await), None),
            Action::Unchanged | Action::Skip => (None, None),
        };
        entries.push(Previewed { entry: revision::stored_entry(e, adopt), before, after });
    }
    Ok(Preview { application: format!("{ns}/{name}"), source, entries, summary, secrets })
}

/// The whole object a prune would delete, read as the service account; its metadata from the
/// inventory when it cannot be read.
async fn pruned(sa: &Client, scopes: &ClusterScopes, e: &plan::Entry, managed: &[Value]) -> Value {
    let listed = managed
        .iter()
        .find(|m| validate::identity(m) == format!("{}/{}/{}/{}", e.group, e.kind, e.namespace, e.name))
        .cloned()
        .unwrap_or(Value::Null);
    let Some(r) = scopes.resource(&e.group, &e.version, &e.kind) else { return listed };
    let api: Api<DynamicObject> = if e.namespace.is_empty() {
        Api::all_with(sa.clone(), r)
    } else {
        Api::namespaced_with(sa.clone(), &e.namespace, r)
    };
    match api.get_opt(&e.name).await {
        Ok(Some(o)) => serde_json::to_value(o).unwrap_or(listed),
        _ => listed,
    }
}
