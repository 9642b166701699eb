//! The desired-state stage: the source path materialized, Helm `valuesFrom` read and rendered
//! as the Application's service account, validated against discovery, every object stamped as
//! managed by the Application, and the desired-state hash. A redeploy request
//! (`sync.kuvryn.io/redeploy-requested-at`) is checked first and put into the workloads' pod
//! templates ([`crate::plan::redeploy`]), so it is part of the desired state and its hash.

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;

use super::Reconcile;
use super::error::Error;
use super::flow::{Desired, Failure, Source, redact};
use super::replica::{Context, DEFAULT_SHARD, shard_of};
use crate::api::application::{Application, RenderType};
use crate::api::names;
use crate::api::revision::Revision;
use crate::plan::{revision, validate};
use crate::render;
use crate::watch::discovery::ClusterScopes;

/// Steps 4 and 5: the desired state, or what failed.
pub(super) async fn desired(r: &Reconcile<'_>, source: &Source) -> Result<Result<Desired, Failure>, Error> {
    let Reconcile { ctx, app, ns, name, .. } = *r;
    let spec = &app.spec;
    // A redeploy request is checked before anything else: a bad one applies nothing.
    let redeploy = match crate::plan::redeploy::requested(app.annotations()) {
        Ok(r) => r,
        Err(message) => return Ok(Err(Failure::new(names::reasons::VALIDATION_FAILURE, message, false))),
    };
    let rev_name = revision::name(&revision::Identity {
        application: name,
        commit: &source.commit,
        path: &spec.source.path,
        render: &spec.source.render,
        service_account: &spec.service_account_name,
        charts: &revision::charts_digest(&source.charts.versions()),
    });
    let redeploy = take_up(ctx, app, ns, &rev_name, redeploy).await?;
    // A Helm or OCI Repository's chart is rendered from its archive: no Git checkout.
    let packaged = source.charts.source_chart.clone();
    let (checkout, _empty) = match &packaged {
        Some(_) => match tempfile::tempdir() {
            Ok(d) => (None, Some(d)),
            Err(e) => {
                return Ok(Err(Failure::new(names::reasons::RENDER_FAILURE, format!("scratch directory: {e}"), true)));
            }
        },
        None => match ctx.cache.checkout(&source.url, &source.credentials, &source.commit, &spec.source.path).await {
            Ok(c) => (Some(c), None),
            Err(e) => return Ok(Err(Failure::new(names::reasons::SOURCE_FAILURE, e.to_string(), e.retryable()))),
        },
    };
    let dir = match (&checkout, &_empty) {
        (Some(c), _) => c.path(),
        (None, Some(e)) => e.path(),
        (None, None) => unreachable!("a checkout or a scratch directory"),
    };
    let tree = match (&checkout, &packaged) {
        (Some(c), _) => c.tree.to_string(),
        (None, Some(p)) => p.digest.clone(),
        (None, None) => String::new(),
    };
    let sa_client = ctx.client_for(ns, &spec.service_account_name)?;
    let render_failure = |e: render::Error| match e {
        render::Error::Failed { message, retryable } => {
            Failure::new(names::reasons::RENDER_FAILURE, message, retryable)
        }
        render::Error::Invalid(m) => Failure::new(names::reasons::VALIDATION_FAILURE, m, false),
        render::Error::Internal(m) => Failure::new(names::reasons::RENDER_FAILURE, m, true),
    };
    let renderer = if packaged.is_some() { RenderType::Helm } else { render::renderer_of(&spec.source.render, dir) };
    let (values_from, mut secrets) = match (renderer, &spec.source.render.helm) {
        (RenderType::Helm, Some(h)) if !h.values_from.is_empty() => {
            let files = match render::values::repository_files(&ctx.client, &ctx.cache, ns, &h.values_from).await {
                Ok(f) => f,
                Err(e) => return Ok(Err(render_failure(e))),
            };
            match render::values::read(&sa_client, ns, &h.values_from, &files).await {
                Ok(v) => v,
                Err(e) => return Ok(Err(render_failure(e))),
            }
        }
        _ => (Vec::new(), Vec::new()),
    };
    // Helm's `.Capabilities` answer from the cluster's discovery, as under `helm install`.
    secrets.extend(source.charts.present.secrets.iter().cloned());
    let mut scopes = if renderer == RenderType::Helm { ctx.fresh_scopes().await? } else { ctx.scopes(false).await? };
    let capabilities_of =
        |scopes: &ClusterScopes| (renderer == RenderType::Helm).then(|| Arc::new(scopes.capabilities()));
    let mut request = render::Request {
        dir,
        tree: Some(tree),
        render: &spec.source.render,
        renderer,
        application: name,
        namespace: &spec.destination.namespace,
        values_from,
        secrets: secrets.clone(),
        capabilities: capabilities_of(&scopes),
        dependencies: source.charts.present.dependencies(),
        packaged,
    };
    let mut objects = match ctx.renderer.render(&request).await {
        Ok(o) => o,
        Err(e) => return Ok(Err(render_failure(e))),
    };
    // Validating thousands of objects takes a while: off the runtime when large.
    let check = |scopes: Arc<ClusterScopes>, objects: Arc<Vec<serde_json::Value>>| {
        let (destination, limits) = (spec.destination.clone(), ctx.settings.validate);
        let large = crate::offload::Size::default().values(objects.iter()).large();
        crate::offload::offload_if(large, move || validate::validate(&objects, &destination, &*scopes, limits))
    };
    let mut validated = check(scopes.clone(), objects.clone()).await;
    if validated.is_err() {
        // A kind served since the last discovery (a CRD installed a moment ago). With
        // dependencies, discovery runs again whatever its age: a dependency that just turned
        // Healthy may have installed the CRD within the last two seconds.
        scopes = if app.spec.depends_on.is_empty() { ctx.scopes(true).await? } else { ctx.rediscover().await? };
        // A chart asking about the kind renders differently now.
        let capabilities = capabilities_of(&scopes);
        if capabilities != request.capabilities {
            request.capabilities = capabilities;
            objects = match ctx.renderer.render(&request).await {
                Ok(o) => o,
                Err(e) => return Ok(Err(render_failure(e))),
            };
        }
        validated = check(scopes.clone(), objects.clone()).await;
    }
    let found = objects.clone();
    let large = crate::offload::Size::default().values(found.iter()).large();
    secrets.extend(crate::offload::offload_if(large, move || crate::redact::secret_strings(&found)).await);
    let fail = |reason: &'static str, message: String, retryable: bool| {
        Ok(Err(Failure::new(reason, redact(&message, &secrets), retryable)))
    };
    let mut desired = match validated {
        Ok(v) => v,
        Err(problems) => {
            let n = problems.len();
            let message =
                format!("{n} problem{} in the desired state: {}", if n == 1 { "" } else { "s" }, problems.join("; "));
            return fail(names::reasons::VALIDATION_FAILURE, message, false);
        }
    };
    let shard = if ctx.fence.is_some() || ctx.settings.shards > 1 {
        shard_of(ctx, ns, name).to_string()
    } else {
        DEFAULT_SHARD.to_string()
    };
    let (app_ns, app_name) = (ns.to_string(), name.to_string());
    let at = redeploy.clone();
    let large = crate::offload::Size::default().values(desired.iter()).large();
    let prepared = crate::offload::offload_if(large, move || {
        crate::plan::prepare::prepare(std::mem::take(&mut desired), &app_ns, &app_name, &shard, at.as_deref())
    })
    .await;
    let (hooks, hash, restarted) = (Arc::new(prepared.hooks), prepared.hash, prepared.restarted);
    let desired = Arc::new(prepared.objects);
    if let Some(at) = &redeploy {
        announce_redeploy(r, &rev_name, at, &restarted);
    }
    Ok(Ok(Desired { objects: desired, hooks, hash, secrets, scopes, sa: sa_client }))
}

/// The redeploy value the desired state carries: the request, unless it is new (neither in
/// `status.lastHandledRedeployAt` nor announced by this replica) while an attempt of the
/// Revision `rev` is running. That attempt would complete without applying it and record the new desired state as deployed
/// (losing the restart), so the request waits: the value handled last stays until the attempt
/// ends, and the next reconcile takes the new one up.
async fn take_up(
    ctx: &Context,
    app: &Application,
    ns: &str,
    rev: &str,
    requested: Option<String>,
) -> Result<Option<String>, Error> {
    let handled = app.status.as_ref().and_then(|s| s.last_handled_redeploy_at.as_deref());
    let Some(at) = requested else { return Ok(None) };
    // Announced by this replica but not recorded yet (the status write was refused): taken up.
    let announced = ctx.redeploys.announced(&ObjectRef::from_obj(app)).as_ref() == Some(&at);
    if Some(at.as_str()) == handled || announced {
        return Ok(Some(at));
    }
    let revisions: kube::Api<Revision> = kube::Api::namespaced(ctx.client.clone(), ns);
    let running = revisions.get_opt(rev).await?.is_some_and(|r| {
        r.status
            .as_ref()
            .and_then(|s| s.attempts.last())
            .is_some_and(|a| a.result == crate::api::revision::AttemptResult::Running)
    });
    if running {
        // Only a value the controller wrote (normalized) is ever put back.
        return Ok(handled.and_then(|h| crate::plan::redeploy::parse(h).ok()));
    }
    Ok(Some(at))
}

/// Most workloads a redeploy Event names.
const MAX_NAMED: usize = 20;

/// A redeploy request taken up for the first time (not in `status.lastHandledRedeployAt`, nor
/// announced by this replica already): a `Progressing` Event naming it and the workloads it
/// restarts, and the request noted for the status write to record ([`Context::redeploys`]).
fn announce_redeploy(r: &Reconcile<'_>, rev: &str, at: &str, restarted: &[String]) {
    let Reconcile { ctx, app, ns, events, .. } = *r;
    let key = ObjectRef::from_obj(app);
    let handled = app.status.as_ref().and_then(|s| s.last_handled_redeploy_at.as_deref()) == Some(at);
    let announced = ctx.redeploys.announced(&key).as_deref() == Some(at);
    if handled || announced {
        return;
    }
    let what = if restarted.is_empty() {
        "no Deployment, StatefulSet or DaemonSet to restart".to_string()
    } else {
        let mut named = restarted.iter().take(MAX_NAMED).cloned().collect::<Vec<_>>().join(", ");
        if restarted.len() > MAX_NAMED {
            named.push_str(&format!(" and {} more", restarted.len() - MAX_NAMED));
        }
        format!("restarting {named}")
    };
    let approval = if app.spec.sync.automatic || restarted.is_empty() {
        ""
    } else {
        " (the plan waits for approval: spec.sync.automatic is false)"
    };
    let related = crate::api::revision::reference(ns, rev);
    let note = format!("redeploy requested at {at}: {what}{approval}");
    events.tell(Some(related), EventType::Normal, names::reasons::PROGRESSING, &note);
    ctx.redeploys.announce(key, at);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_values_are_redacted_from_messages() {
        let objs = vec![
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                   "data": {"password": "aHVudGVyMg=="}, "stringData": {"token": "tok-123456"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"x": "visible"}}),
        ];
        let secrets = crate::redact::secret_strings(&objs);
        let m = redact("password hunter2 and tok-123456 (aHVudGVyMg==) visible", &secrets);
        assert_eq!(m, "password <redacted> and <redacted> (<redacted>) visible");
    }
}
