//! The admission webhook for Applications, served by the manager (`ksync-controller run`, on by
//! default; `ENABLE_WEBHOOKS=false` turns it off). See `docs/webhook.md`.
//!
//! - [`record`] (pure): which Revision a rollback request is checked against, the check, and
//!   which `rollback-requested-*`, `rollback-target-hash` and `approved-*` annotations are
//!   recorded from the request, restored from the old object, or removed;
//! - [`configuration`]: the `MutatingWebhookConfiguration` (and why there is no validating one);
//! - [`certs`]: the serving certificate in a Secret, created once across replicas and rotated;
//! - [`server`]: HTTPS with a swappable certificate.
//!
//! Expected flow of [`run`]: log every Application carrying a pending rollback request with a
//! recorded requester (spec: "At startup with webhooks enabled..."); then, every
//! `check_interval`: read the webhook configuration. Not installed, nothing is served (the API
//! server would call nothing anyway) and a warning says so once; it is checked again next time.
//! Installed, make sure of the certificate (the Secret, or the cert-manager directory), publish
//! the CA bundle into the configuration (not in the cert-manager case), present the certificate
//! once the configuration trusts it, and start serving on the first pass that has one.
//!
//! Caveats: the webhook trusts the API server's `userInfo` (the API server authenticated the
//! request); the TLS server does not authenticate the API server, as usual for webhooks: a
//! caller reaching the port could only get its own review answered.

pub mod certs;
pub mod configuration;
pub mod record;
pub mod server;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use crate::api::application::{Strategy, SyncPolicy};
use crate::api::names::annotations as a;
use crate::api::revision::Revision;
use record::{Annotations, Requester};

/// Gauge: the unix time the serving certificate presented from the Secret expires (its
/// `notAfter`), set each time the certificate is (still) presented. Not set for a cert-manager
/// directory (`--webhook-cert-dir`): cert-manager exports its own
/// `certmanager_certificate_expiration_timestamp_seconds`.
pub const CERTIFICATE_EXPIRY: &str = crate::metric_names::WEBHOOK_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS;

/// Settings of the webhook (flags of `ksync-controller run`).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Where to serve HTTPS.
    pub bind: SocketAddr,
    /// The manager's namespace: the certificate Secret's, and the Service's.
    pub namespace: String,
    /// The Service the API server reaches the webhook through.
    pub service_name: String,
    /// The `MutatingWebhookConfiguration`'s name.
    pub configuration_name: String,
    /// The certificate Secret's name.
    pub secret_name: String,
    /// A directory with `tls.crt` and `tls.key` (cert-manager): used instead of the Secret,
    /// reloaded when they change, and `caBundle` is left alone.
    pub cert_dir: Option<PathBuf>,
    /// More names (DNS or IP) the generated certificate is valid for.
    pub extra_hosts: Vec<String>,
    /// Validity of a generated certificate (rotated at two thirds of it).
    pub cert_validity: Duration,
    /// How often the configuration, the certificates and the bundle are checked.
    pub check_interval: Duration,
    /// Shards the Applications are split into (`--shards`): a new Application gets its shard
    /// label at admission.
    pub shards: u32,
}

impl Settings {
    /// The names the generated serving certificate is valid for.
    pub fn hosts(&self) -> Vec<String> {
        let svc = format!("{}.{}.svc", self.service_name, self.namespace);
        let mut hosts = vec![svc.clone(), format!("{svc}.cluster.local")];
        hosts.extend(self.extra_hosts.iter().cloned());
        hosts
    }
}

/// What the review handler needs.
#[derive(Clone)]
struct Handler {
    client: kube::Client,
    /// The manager, whose own requests never approve or ask for a manual rollback.
    manager: Arc<record::Manager>,
    /// Shards the Applications are split into.
    shards: u32,
}

/// Run the webhook until `stop` (see the module's expected flow).
pub async fn run(client: kube::Client, settings: Settings, stop: impl Future<Output = ()>) {
    log_pending_requests(&client).await;
    let manager = Arc::new(record::Manager {
        username: crate::identity::own_service_account(&client).await,
        field_managers: vec![crate::controller::repository::MANAGER.to_string()],
    });
    let slot = Arc::new(server::CertSlot::default());
    let router = axum::Router::new()
        .route(configuration::PATH, axum::routing::post(review))
        .route(configuration::SHARD_PATH, axum::routing::post(label))
        .with_state(Handler { client: client.clone(), manager, shards: settings.shards });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut serving = false;
    let mut state = LoopState::default();
    tokio::pin!(stop);
    loop {
        tick(&client, &settings, &slot, &mut state).await;
        if !serving && slot.is_set() && state.configured {
            match tokio::net::TcpListener::bind(settings.bind).await {
                Ok(listener) => {
                    tracing::info!(address = %settings.bind, configuration = %settings.configuration_name, "serving the admission webhook");
                    let (slot, router, mut rx) = (slot.clone(), router.clone(), stop_rx.clone());
                    tokio::spawn(async move {
                        let stopped = async move {
                            let _ = rx.wait_for(|s| *s).await;
                        };
                        if let Err(e) = server::serve(listener, slot, router, stopped).await {
                            tracing::error!(error = %e, "the admission webhook server stopped");
                        }
                    });
                    serving = true;
                }
                Err(e) => tracing::error!(address = %settings.bind, error = %e, "cannot serve the admission webhook"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(settings.check_interval) => {}
            _ = &mut stop => break,
        }
    }
    let _ = stop_tx.send(true);
}

#[derive(Default)]
struct LoopState {
    /// The configuration was found on the last check.
    configured: bool,
    /// Said once that it is missing.
    warned_missing: bool,
}

async fn tick(client: &kube::Client, s: &Settings, slot: &server::CertSlot, st: &mut LoopState) {
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let config = match configs.get_opt(&s.configuration_name).await {
        Ok(Some(c)) => c,
        Ok(None) => {
            st.configured = false;
            if !st.warned_missing {
                st.warned_missing = true;
                tracing::warn!(
                    configuration = %s.configuration_name,
                    "webhooks are enabled but MutatingWebhookConfiguration {} is not installed: the API server calls no webhook, so rollback and approval annotations are not verified; not serving until it is",
                    s.configuration_name
                );
            }
            return;
        }
        Err(e) => {
            tracing::warn!(configuration = %s.configuration_name, error = %e, "reading the webhook configuration failed");
            return;
        }
    };
    if !st.configured {
        tracing::info!(configuration = %s.configuration_name, "the webhook configuration is installed");
    }
    st.configured = true;
    st.warned_missing = false;
    if let Some(dir) = &s.cert_dir {
        let read = |f: &str| std::fs::read_to_string(dir.join(f));
        match (read("tls.crt"), read("tls.key")) {
            (Ok(crt), Ok(key)) => match slot.set(&crt, &key) {
                Ok(true) => tracing::info!(dir = %dir.display(), "webhook: loaded the certificate"),
                Ok(false) => {}
                Err(e) => tracing::error!(dir = %dir.display(), error = %e, "webhook: cannot use the certificate"),
            },
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(dir = %dir.display(), error = %e, "webhook: cannot read tls.crt and tls.key")
            }
        }
        return;
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &s.namespace);
    let (material, outcome) = match certs::ensure(&secrets, &s.secret_name, &s.hosts(), s.cert_validity).await {
        Ok(m) => m,
        Err(e) => {
            tracing::error!(error = %e, "webhook: the certificate Secret");
            return;
        }
    };
    match outcome {
        certs::Outcome::Read => {}
        certs::Outcome::Created => {
            tracing::info!(secret = %s.secret_name, namespace = %s.namespace, not_after = %material.not_after, "webhook: created the certificate Secret")
        }
        certs::Outcome::Rotated(why) => {
            tracing::info!(secret = %s.secret_name, namespace = %s.namespace, not_after = %material.not_after, reason = ?why, "webhook: rotated the certificates (the previous CA stays trusted until it expires)")
        }
    }
    let bundle = material.ca_bundle(jiff::Timestamp::now());
    let mut live = config.clone();
    let mut changed = false;
    for w in live.webhooks.iter_mut().flatten() {
        let current = w.client_config.ca_bundle.as_ref().map(|b| String::from_utf8_lossy(&b.0).to_string());
        if current.as_deref() != Some(bundle.as_str()) {
            w.client_config.ca_bundle = Some(k8s_openapi::ByteString(bundle.clone().into_bytes()));
            changed = true;
        }
    }
    if changed {
        // The resourceVersion read above is the precondition: a replica holding an older Secret
        // cannot put an older bundle back over a newer one.
        match configs.replace(&s.configuration_name, &PostParams::default(), &live).await {
            Ok(c) => {
                tracing::info!(configuration = %s.configuration_name, "webhook: published the CA bundle");
                live = c;
            }
            Err(e) => {
                tracing::info!(configuration = %s.configuration_name, error = %e, "webhook: publishing the CA bundle failed; retrying");
                live = config;
            }
        }
    }
    let trusted = live.webhooks.iter().flatten().all(|w| {
        w.client_config
            .ca_bundle
            .as_ref()
            .is_some_and(|b| certs::bundle_trusts(&String::from_utf8_lossy(&b.0), &material.ca_current))
    });
    // Until the configuration trusts the new CA, keep presenting the previous certificate
    // (still trusted); with none yet, present this one.
    if trusted || !slot.is_set() {
        match slot.set(&material.tls_crt, &material.tls_key) {
            Ok(presented) => {
                if presented {
                    tracing::info!(not_after = %material.not_after, "webhook: presenting the certificate");
                }
                metrics::gauge!(CERTIFICATE_EXPIRY).set(material.not_after.as_second() as f64);
            }
            Err(e) => tracing::error!(error = %e, "webhook: cannot use the certificate"),
        }
    }
}

/// Log every Application carrying a pending rollback request with a recorded requester: it may
/// have been written while webhooks were disabled (spec, Rollback).
pub async fn log_pending_requests(client: &kube::Client) {
    let apps: Api<crate::api::Application> = Api::all(client.clone());
    let list = match apps.list_metadata(&ListParams::default()).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "listing Applications for pending rollback requests failed");
            return;
        }
    };
    for app in list.items {
        let ann = app.metadata.annotations.unwrap_or_default();
        let pending = record::REQUEST_IDENTITY.iter().any(|k| ann.contains_key(*k));
        let Some(by) = ann.get(a::ROLLBACK_REQUESTED_BY).filter(|_| pending) else { continue };
        tracing::warn!(
            application = %format!("{}/{}", app.metadata.namespace.unwrap_or_default(), app.metadata.name.unwrap_or_default()),
            requested_by = %by,
            requested_at = %ann.get(a::ROLLBACK_REQUESTED_AT).map(String::as_str).unwrap_or(""),
            rollback_to = %ann.get(a::ROLLBACK_TO).map(String::as_str).unwrap_or(""),
            "pending rollback request with a recorded requester; if it may have been written while webhooks were disabled, remove its sync.kuvryn.io/rollback-* annotations and request the rollback again"
        );
    }
}

/// Whether the requester (`userInfo` of the review) may get Revision `name` in `namespace`: a
/// SubjectAccessReview.
async fn may_read_revision(
    client: &kube::Client,
    user: &Value,
    namespace: &str,
    name: &str,
) -> Result<bool, kube::Error> {
    use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
    let strings = |v: &Value| -> Option<Vec<String>> {
        v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
    };
    let extra =
        user["extra"].as_object().map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), strings(v)?))).collect());
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user["username"].as_str().map(str::to_string),
            groups: strings(&user["groups"]),
            uid: user["uid"].as_str().map(str::to_string),
            extra,
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_string()),
                verb: Some("get".into()),
                group: Some(crate::api::names::GROUP.to_string()),
                resource: Some("revisions".into()),
                name: Some(name.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone()).create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The shard-labelling webhook ([`configuration::SHARD_WEBHOOK_NAME`]): a new Application
/// without a shard label gets its own. Allows everything, denies nothing.
async fn label(State(h): State<Handler>, body: axum::body::Bytes) -> Answer {
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let req = &review["request"];
    let mut response = json!({"allowed": true});
    let ours = req["resource"]["group"] == crate::api::names::GROUP && req["resource"]["resource"] == "applications";
    if ours && req["operation"] == "CREATE" && !req["subResource"].is_string() {
        let object = &req["object"];
        let name = object["metadata"]["name"].as_str().or(req["name"].as_str()).unwrap_or_default();
        let namespace = req["namespace"].as_str().unwrap_or_default();
        if let Some(labels) = shard_labelled(object, namespace, name, h.shards) {
            use base64::Engine as _;
            let patch = json!([{"op": "add", "path": "/metadata/labels", "value": labels}]);
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(patch.to_string()));
        }
    }
    answer(&req["uid"], response)
}

/// The labels of `object`, a new Application `namespace/name`, with its shard's label
/// ([`crate::controller::labeller::shard_of`]) when it has none: set at admission, the shard's
/// owner sees it at once and the labeller has nothing to write. `None` when it has one (a
/// tenant's, corrected by the shard's owner if wrong) or no name yet (`generateName`: the
/// labeller labels it).
fn shard_labelled(object: &Value, namespace: &str, name: &str, shards: u32) -> Option<serde_json::Map<String, Value>> {
    use crate::api::names::labels::SHARD;
    let mut labels = object["metadata"]["labels"].as_object().cloned().unwrap_or_default();
    if name.is_empty() || namespace.is_empty() || labels.contains_key(SHARD) {
        return None;
    }
    let shard = crate::controller::labeller::shard_of(namespace, name, shards);
    labels.insert(SHARD.to_string(), Value::String(shard.to_string()));
    Some(labels)
}

fn annotations_of(obj: &Value) -> Annotations {
    obj["metadata"]["annotations"]
        .as_object()
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default()
}

/// The time of a request, RFC 3339 to the microsecond, as `status.approval.time` keeps it: two
/// approvals of one plan within a second stay two.
fn now_rfc3339() -> String {
    crate::decisions::approval::webhook_time(jiff::Timestamp::now())
}

/// An AdmissionReview answer (axum's JSON extractor is not built in).
type Answer = ([(http::header::HeaderName, &'static str); 1], String);

/// The AdmissionReview answering the request `uid` with `response`.
fn answer(uid: &Value, mut response: Value) -> Answer {
    response["uid"] = uid.clone();
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response});
    ([(http::header::CONTENT_TYPE, "application/json")], review.to_string())
}

async fn review(State(h): State<Handler>, body: axum::body::Bytes) -> Answer {
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let req = &review["request"];
    let respond = |response: Value| answer(&req["uid"], response);
    let deny = |message: String| {
        respond(json!({"allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": message}}))
    };
    let ours = req["resource"]["group"] == crate::api::names::GROUP && req["resource"]["resource"] == "applications";
    let op = req["operation"].as_str().unwrap_or_default();
    if !ours || !matches!(op, "CREATE" | "UPDATE") || req["subResource"].is_string() {
        return respond(json!({"allowed": true}));
    }
    let object = &req["object"];
    let new = annotations_of(object);
    let old = (op == "UPDATE" && req["oldObject"].is_object()).then(|| annotations_of(&req["oldObject"]));
    let name = object["metadata"]["name"].as_str().or(req["name"].as_str()).unwrap_or_default().to_string();
    let namespace = req["namespace"].as_str().unwrap_or_default().to_string();
    let who =
        Requester { username: req["userInfo"]["username"].as_str().unwrap_or_default().to_string(), at: now_rfc3339() };
    let field_manager = req["options"]["fieldManager"].as_str();
    if let Some(message) = record::manager_decides(old.as_ref(), &new, &who.username, field_manager, &h.manager) {
        tracing::warn!(application = %format!("{namespace}/{name}"), user = %who.username, field_manager = field_manager.unwrap_or_default(), %message, "webhook: refused a decision made with the manager's own identity");
        return deny(message);
    }
    let mut target_hash = None;
    if let Some(target) = record::target_to_check(old.as_ref(), &new) {
        // What the check below says of a Revision is for someone who may read it: anyone else
        // gets one answer, whether it exists or not.
        match may_read_revision(&h.client, &req["userInfo"], &namespace, target).await {
            Ok(true) => {}
            Ok(false) => return deny(record::unreadable_target(&namespace)),
            Err(e) => {
                return deny(format!(
                    "{}: checking whether you may read Revisions failed: {e}",
                    a::ROLLBACK_TARGET_REVISION
                ));
            }
        }
        let revisions: Api<Revision> = Api::namespaced(h.client.clone(), &namespace);
        let rev = match revisions.get_opt(target).await {
            Ok(r) => r,
            Err(e) => {
                return deny(format!("{} {target:?}: reading the Revision failed: {e}", a::ROLLBACK_TARGET_REVISION));
            }
        };
        match record::check_target(&name, new.get(a::ROLLBACK_TO).map(String::as_str), target, rev.as_ref()) {
            Err(message) => {
                tracing::info!(application = %format!("{namespace}/{name}"), user = %who.username, %message, "webhook: refused a rollback request");
                return deny(message);
            }
            Ok(deployed) => {
                let spec = &object["spec"];
                let sync: SyncPolicy = serde_json::from_value(spec["sync"].clone()).unwrap_or_default();
                let strategy: Strategy = serde_json::from_value(spec["strategy"].clone()).unwrap_or_default();
                target_hash = deployed.map(|d| crate::plan::target_hash::rollback_target_hash(&d, &sync, &strategy));
            }
        }
    }
    let out = record::record(old.as_ref(), &new, &who, target_hash.as_deref());
    if out == new {
        return respond(json!({"allowed": true}));
    }
    if record::request_changed(old.as_ref(), &new) {
        tracing::info!(application = %format!("{namespace}/{name}"), user = %who.username, "webhook: recorded a rollback request");
    }
    use base64::Engine as _;
    let patch = json!([{"op": "add", "path": "/metadata/annotations", "value": out}]);
    respond(json!({
        "allowed": true,
        "patchType": "JSONPatch",
        "patch": base64::engine::general_purpose::STANDARD.encode(patch.to_string()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::names::labels::SHARD;

    #[test]
    fn a_new_application_without_a_shard_label_gets_its_own() {
        let own = crate::controller::labeller::shard_of("team", "web", 32).to_string();
        // (what, object, namespace, name, the labels set)
        let cases: Vec<(&str, Value, &str, &str, Option<Value>)> = vec![
            ("no labels", json!({"metadata": {"name": "web"}}), "team", "web", Some(json!({SHARD: own}))),
            (
                "other labels kept",
                json!({"metadata": {"name": "web", "labels": {"team": "payments"}}}),
                "team",
                "web",
                Some(json!({"team": "payments", SHARD: own})),
            ),
            ("a label of its own is left", json!({"metadata": {"labels": {SHARD: "7"}}}), "team", "web", None),
            ("no name yet (generateName)", json!({"metadata": {"generateName": "web-"}}), "team", "", None),
            ("no namespace", json!({"metadata": {"name": "web"}}), "", "web", None),
        ];
        for (what, object, ns, name, want) in cases {
            let got = shard_labelled(&object, ns, name, 32).map(Value::Object);
            assert_eq!(got, want, "{what}");
        }
    }
}
