//! Admission webhooks: simcluster calls them as kube-apiserver v1.36.2 does. The expected
//! answers (status codes, reasons and messages) were recorded from realkube (`../shared/realkube`)
//! with the same configurations and a webhook server answering as [`answer`] does.
//!
//! `webhooks_on_realkube` runs the same scenarios against a real API
//! server too (its webhooks reach this test's server at `https://127.0.0.1:PORT`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// What the webhook server received: (path, AdmissionReview).
type Log = Arc<Mutex<Vec<(String, Value)>>>;

/// A CA and a server certificate for 127.0.0.1 and `webhook.hooks.svc`: (ca pem, cert pem, key pem).
fn private_ca() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "webhook test CA");
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("key");
    let params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "webhook.hooks.svc".to_string()]).expect("params");
    let cert = params.signed_by(&key, &issuer).expect("cert");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// The webhook's answer to a review sent to `path`.
fn answer(path: &str, review: &Value) -> (u16, Value) {
    let req = &review["request"];
    let uid = req["uid"].clone();
    let patch = |ops: Value| {
        use base64::Engine as _;
        json!({"uid": uid, "allowed": true, "patchType": "JSONPatch",
               "patch": base64::engine::general_purpose::STANDARD.encode(ops.to_string())})
    };
    let response = match path {
        "/deny" => {
            json!({"uid": uid, "allowed": false, "status": {"message": "no thanks", "code": 403, "reason": "Forbidden"}})
        }
        "/deny-bare" => json!({"uid": uid, "allowed": false}),
        "/deny-code" => json!({"uid": uid, "allowed": false, "status": {"code": 422}}),
        "/warn" => json!({"uid": uid, "allowed": true, "warnings": ["careful now"]}),
        "/patch" => patch(json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}])),
        "/badpatch" => patch(json!([{"op": "remove", "path": "/nope/x"}])),
        "/500" => return (500, json!("oops")),
        "/nouid" => json!({"allowed": true}),
        "/hang" => {
            std::thread::sleep(Duration::from_secs(4));
            json!({"uid": uid, "allowed": true})
        }
        _ => json!({"uid": uid, "allowed": true}),
    };
    (200, json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
}

/// An HTTPS webhook server on its own threads (one per connection), so it answers whatever
/// the test's runtime does.
fn start_webhook_server(cert: &str, key: &str) -> (SocketAddr, Log) {
    use rustls::pki_types::pem::PemObject as _;
    let certs: Vec<_> =
        rustls::pki_types::CertificateDer::pem_slice_iter(cert.as_bytes()).map(|c| c.expect("cert")).collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("server config"),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let log: Log = Arc::default();
    let log2 = log.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (config, log) = (config.clone(), log2.clone());
            std::thread::spawn(move || {
                let Ok(conn) = rustls::ServerConnection::new(config) else { return };
                let mut tls = rustls::StreamOwned::new(conn, stream);
                let _ = serve_one(&mut tls, &log);
            });
        }
    });
    (addr, log)
}

fn serve_one<S: std::io::Read + std::io::Write>(s: &mut S, log: &Log) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (head_end, len) = loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0)))
                .unwrap_or(0);
            break (i + 4, len);
        }
    };
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let target = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let path = target.split('?').next().unwrap_or("/").to_string();
    let review: Value = serde_json::from_slice(&buf[head_end..]).unwrap_or(Value::Null);
    log.lock().unwrap().push((target, review.clone()));
    let (code, body) = answer(&path, &review);
    let body = match body {
        Value::String(s) => s,
        v => v.to_string(),
    };
    let (status, ct) =
        if code == 200 { ("200 OK", "application/json") } else { ("500 Internal Server Error", "text/plain") };
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    s.flush()
}

/// `(status code, body, Warning headers)` of one request.
async fn send(client: &kube::Client, method: &str, path: &str, body: Option<Value>) -> (u16, Value, Vec<String>) {
    let ct = if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("Content-Type", ct)
        .body(body.map(|b| b.to_string().into_bytes()).unwrap_or_default())
        .expect("request");
    let resp = client.send(req.map(kube::client::Body::from)).await.expect("send");
    let code = resp.status().as_u16();
    let warnings = resp.headers().get_all("Warning").iter().filter_map(|v| v.to_str().ok()).map(String::from).collect();
    let bytes = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), 1 << 24).await.expect("body");
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null), warnings)
}

fn webhook(name: &str, url: &str, ca: &str, case: &str, extra: Value) -> Value {
    use base64::Engine as _;
    let mut w = json!({
        "name": name,
        "clientConfig": {"url": url, "caBundle": base64::engine::general_purpose::STANDARD.encode(ca)},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"],
                   "resources": ["configmaps"], "scope": "*"}],
        "objectSelector": {"matchLabels": {"case": case}},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    for (k, v) in extra.as_object().expect("object") {
        w[k] = v.clone();
    }
    w
}

/// Wait (with a deadline) until a ConfigMap of `case` is admitted, so the configurations are
/// in force (a real server loads them asynchronously).
async fn wait_in_force(client: &kube::Client, ns: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let cm = json!({"metadata": {"name": "probe", "labels": {"case": "deny"}}});
        let (code, _, _) =
            send(client, "POST", &format!("/api/v1/namespaces/{ns}/configmaps?dryRun=All"), Some(cm)).await;
        if code == 403 {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "webhook configurations not in force after 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The scenarios, on one API server.
async fn scenarios(client: kube::Client, sim: Option<&simcluster::SimCluster>) {
    // A namespace of this run's own: a real server deletes namespaces in the background.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("time").subsec_nanos();
    let ns = format!("wh-{nanos}");
    let (ca, cert, key) = private_ca();
    let (addr, log) = start_webhook_server(&cert, &key);
    let base = format!("https://{addr}");
    let ca_b64 = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&ca)
    };
    let url = |p: &str| format!("{base}{p}");
    let w = |name: &str, path: &str, case: &str, extra: Value| webhook(name, &url(path), &ca, case, extra);
    let validating = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "sim-webhooks-v"},
        "webhooks": [
            w("allow.example.com", "/allow", "allow", json!({})),
            w("deny.example.com", "/deny", "deny", json!({})),
            w("deny-bare.example.com", "/deny-bare", "deny-bare", json!({})),
            w("deny-code.example.com", "/deny-code", "deny-code", json!({})),
            w("warn.example.com", "/warn", "warn", json!({})),
            w("hang.example.com", "/hang", "hang", json!({"timeoutSeconds": 1, "failurePolicy": "Fail"})),
            w("hang-ignore.example.com", "/hang", "hang-ignore", json!({"timeoutSeconds": 1, "failurePolicy": "Ignore"})),
            w("e500.example.com", "/500", "e500", json!({})),
            w("nouid.example.com", "/nouid", "nouid", json!({})),
            w("refused.example.com", "/allow", "refused", json!({"clientConfig": {"url": "https://127.0.0.1:1/x", "caBundle": ca_b64}})),
            w("badca.example.com", "/allow", "badca", json!({"clientConfig": {"url": url("/allow")}})),
            w("mc.example.com", "/deny", "mc", json!({"matchConditions": [{"name": "x-is-y", "expression": "object.data.x == 'y'"}]})),
            w("mc-false.example.com", "/deny", "mc-false", json!({"matchConditions": [{"name": "x-is-z", "expression": "object.data.x == 'z'"}]})),
        ]
    });
    let mutating = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "sim-webhooks-m"},
        "webhooks": [
            w("patch.example.com", "/patch", "patch", json!({})),
            w("badpatch.example.com", "/badpatch", "badpatch", json!({})),
        ]
    });
    let (code, _, _) = send(&client, "POST", "/api/v1/namespaces", Some(json!({"metadata": {"name": ns}}))).await;
    assert!(code == 201 || code == 409, "namespace: {code}");
    let vpath = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
    let mpath = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";
    let _ = send(&client, "DELETE", &format!("{vpath}/sim-webhooks-v"), None).await;
    let _ = send(&client, "DELETE", &format!("{mpath}/sim-webhooks-m"), None).await;
    let (code, stored, _) = send(&client, "POST", vpath, Some(validating)).await;
    assert_eq!(code, 201, "{stored}");
    assert_eq!(stored["webhooks"][0]["failurePolicy"], "Fail", "defaulted");
    assert_eq!(stored["webhooks"][0]["timeoutSeconds"], 10, "defaulted");
    let (code, stored, _) = send(&client, "POST", mpath, Some(mutating)).await;
    assert_eq!(code, 201, "{stored}");
    assert_eq!(stored["webhooks"][0]["reinvocationPolicy"], "Never", "defaulted");
    wait_in_force(&client, &ns).await;

    let create = |case: &str| {
        let client = client.clone();
        let case = case.to_string();
        let ns = ns.clone();
        async move {
            let _ = send(&client, "DELETE", &format!("/api/v1/namespaces/{ns}/configmaps/c-{case}"), None).await;
            let cm = json!({"metadata": {"name": format!("c-{case}"), "labels": {"case": case}}, "data": {"x": "y"}});
            send(&client, "POST", &format!("/api/v1/namespaces/{ns}/configmaps"), Some(cm)).await
        }
    };
    let failed = |name: &str, err: &str| {
        let m = format!("failed calling webhook \"{name}\": {err}");
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": format!("Internal error occurred: {m}"), "reason": "InternalError",
               "details": {"causes": [{"message": m}]}, "code": 500})
    };
    let status = |code: u16, reason: Option<&str>, message: &str| {
        let mut s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": message, "code": code});
        if let Some(r) = reason {
            s["reason"] = json!(r);
        }
        s
    };

    // Allowed: the object is stored; the validating webhook saw it with uid and
    // creationTimestamp, the request as the real server writes it.
    let (code, body, _) = create("allow").await;
    assert_eq!(code, 201, "{body}");
    let review = log.lock().unwrap().iter().rev().find(|(p, _)| p.starts_with("/allow")).cloned().expect("called");
    assert_eq!(review.0, "/allow?timeout=10s");
    let r = &review.1["request"];
    assert_eq!(review.1["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(r["kind"], json!({"group": "", "version": "v1", "kind": "ConfigMap"}));
    assert_eq!(r["resource"], json!({"group": "", "version": "v1", "resource": "configmaps"}));
    assert_eq!(r["requestKind"], r["kind"]);
    assert_eq!(r["requestResource"], r["resource"]);
    assert_eq!(
        (r["name"].as_str(), r["namespace"].as_str(), r["operation"].as_str()),
        (Some("c-allow"), Some(ns.as_str()), Some("CREATE"))
    );
    assert!(r["userInfo"]["username"].is_string() && r["userInfo"]["groups"].is_array(), "{r}");
    assert!(r["object"]["metadata"]["uid"].is_string() && r["object"]["metadata"]["creationTimestamp"].is_string());
    assert!(r["object"]["metadata"].get("resourceVersion").is_none(), "{r}");
    assert_eq!(r["object"]["kind"], "ConfigMap");
    assert_eq!((&r["oldObject"], &r["dryRun"]), (&Value::Null, &json!(false)));
    assert_eq!(r["options"], json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}));

    // Update and delete.
    let (code, _, _) = send(
        &client,
        "PATCH",
        &format!("/api/v1/namespaces/{ns}/configmaps/c-allow?fieldManager=me"),
        Some(json!({"data": {"x": "z"}})),
    )
    .await;
    assert_eq!(code, 200);
    let r = log.lock().unwrap().last().cloned().expect("called").1["request"].clone();
    assert_eq!(r["operation"], "UPDATE");
    assert_eq!((r["object"]["data"]["x"].as_str(), r["oldObject"]["data"]["x"].as_str()), (Some("z"), Some("y")));
    assert_eq!(r["options"], json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "me"}));
    let (code, _, _) = send(&client, "DELETE", &format!("/api/v1/namespaces/{ns}/configmaps/c-allow"), None).await;
    assert_eq!(code, 200);
    let r = log.lock().unwrap().last().cloned().expect("called").1["request"].clone();
    assert_eq!((r["operation"].as_str(), &r["object"]), (Some("DELETE"), &Value::Null));
    assert_eq!(r["oldObject"]["data"]["x"], "z");
    assert_eq!(r["options"], json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}));

    // Dry run: webhooks with sideEffects None are called, with dryRun true.
    let cm = json!({"metadata": {"name": "c-dry", "labels": {"case": "allow"}}});
    let (code, _, _) = send(&client, "POST", &format!("/api/v1/namespaces/{ns}/configmaps?dryRun=All"), Some(cm)).await;
    assert_eq!(code, 201);
    let r = log.lock().unwrap().last().cloned().expect("called").1["request"].clone();
    assert_eq!(r["dryRun"], true);
    assert_eq!(r["options"], json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "dryRun": ["All"]}));

    // Denials.
    let (code, body, _) = create("deny").await;
    assert_eq!(
        (code, body),
        (403, status(403, Some("Forbidden"), "admission webhook \"deny.example.com\" denied the request: no thanks"))
    );
    let (code, body, _) = create("deny-bare").await;
    assert_eq!(
        (code, body),
        (400, status(400, None, "admission webhook \"deny-bare.example.com\" denied the request without explanation"))
    );
    let (code, body, _) = create("deny-code").await;
    assert_eq!(
        (code, body),
        (422, status(422, None, "admission webhook \"deny-code.example.com\" denied the request without explanation"))
    );
    let (code, body, _) = create("mc").await;
    assert_eq!(code, 403, "matchConditions true: called: {body}");
    let (code, body, _) = create("mc-false").await;
    assert_eq!(code, 201, "matchConditions false: not called: {body}");

    // Warnings.
    let (code, _, warnings) = create("warn").await;
    assert_eq!((code, warnings), (201, vec!["299 - \"careful now\"".to_string()]));

    // Failures under Fail and Ignore.
    let (code, body, _) = create("hang").await;
    let hang = format!("failed to call webhook: Post \"{base}/hang?timeout=1s\": context deadline exceeded");
    assert_eq!((code, body), (500, failed("hang.example.com", &hang)));
    let (code, body, _) = create("hang-ignore").await;
    assert_eq!(code, 201, "{body}");
    let (code, body, _) = create("e500").await;
    let e500 = "failed to call webhook: an error on the server (\"oops\") has prevented the request from succeeding";
    assert_eq!((code, body), (500, failed("e500.example.com", e500)));
    let (code, body, _) = create("refused").await;
    let refused = "failed to call webhook: Post \"https://127.0.0.1:1/x?timeout=10s\": dial tcp 127.0.0.1:1: connect: connection refused";
    assert_eq!((code, body), (500, failed("refused.example.com", refused)));
    let (code, body, _) = create("badca").await;
    let badca = format!(
        "failed to call webhook: Post \"{base}/allow?timeout=10s\": tls: failed to verify certificate: x509: certificate signed by unknown authority"
    );
    assert_eq!((code, body), (500, failed("badca.example.com", &badca)));
    let (code, body, _) = create("nouid").await;
    assert_eq!(code, 500);
    let msg = body["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("Internal error occurred: failed calling webhook \"nouid.example.com\": received invalid webhook response: expected response.uid=\"")
            && msg.ends_with("\", got \"\""),
        "{msg}"
    );

    // Mutation: the patch is applied; managed fields do not record it. The mutating webhook
    // saw the object before uid and creationTimestamp were set.
    let (code, body, _) = create("patch").await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["metadata"]["labels"], json!({"case": "patch", "mutated": "yes"}));
    assert!(!body["metadata"]["managedFields"].to_string().contains("mutated"), "{body}");
    let r = log.lock().unwrap().iter().rev().find(|(p, _)| p.starts_with("/patch")).cloned().expect("called").1;
    assert!(r["request"]["object"]["metadata"].get("uid").is_none(), "{r}");
    assert!(r["request"]["object"]["metadata"]["managedFields"].is_array(), "{r}");
    let (code, body, _) = create("badpatch").await;
    let m = "remove operation does not apply: doc is missing path: \"/nope/x\": missing value";
    let want = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": format!("Internal error occurred: {m}"), "reason": "InternalError",
                      "details": {"causes": [{"message": m}]}, "code": 500});
    assert_eq!((code, body), (500, want));

    // clientConfig.service: simcluster maps the Service to the local server (a real control
    // plane without kube-proxy cannot route it).
    if let Some(sim) = sim {
        sim.set_webhook_service("hooks", "webhook", 8443, addr);
        let mut svc = webhook("svc.example.com", "", &ca, "svc", json!({}));
        svc["clientConfig"] = json!({"service": {"namespace": "hooks", "name": "webhook", "port": 8443, "path": "/deny"},
                                      "caBundle": svc["clientConfig"]["caBundle"]});
        let mut missing = webhook("missing.example.com", "", &ca, "missing", json!({}));
        missing["clientConfig"] = json!({"service": {"namespace": "hooks", "name": "nobody", "path": "/allow"},
                                          "caBundle": missing["clientConfig"]["caBundle"]});
        let cfg = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                         "metadata": {"name": "sim-webhooks-svc"}, "webhooks": [svc, missing]});
        let (code, body, _) = send(&client, "POST", vpath, Some(cfg)).await;
        assert_eq!(code, 201, "{body}");
        let (code, body, _) = create("svc").await;
        assert_eq!(
            (code, body["message"].as_str()),
            (403, Some("admission webhook \"svc.example.com\" denied the request: no thanks"))
        );
        let target = log.lock().unwrap().last().cloned().expect("called").0;
        assert_eq!(target, "/deny?timeout=10s");
        let (code, body, _) = create("missing").await;
        assert_eq!(
            (code, body),
            (
                500,
                failed(
                    "missing.example.com",
                    "failed to call webhook: Post \"https://nobody.hooks.svc:443/allow?timeout=10s\": service \"nobody\" not found"
                )
            )
        );
        let _ = send(&client, "DELETE", &format!("{vpath}/sim-webhooks-svc"), None).await;
    }
    let _ = send(&client, "DELETE", &format!("{vpath}/sim-webhooks-v"), None).await;
    let _ = send(&client, "DELETE", &format!("{mpath}/sim-webhooks-m"), None).await;
    let _ = send(&client, "DELETE", &format!("/api/v1/namespaces/{ns}"), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_on_simcluster() {
    let sim = simcluster::SimCluster::start(simcluster::Config { kubelet: false, ..Default::default() }, 0)
        .await
        .expect("start");
    let client = sim.client().await.expect("client");
    scenarios(client, Some(&sim)).await;
}

/// A realkube control plane for this test (`KSYNC_REALKUBE_DIR`, else `../shared/realkube` next
/// to the project), stopped by its `down` script on drop.
struct RealKube {
    scripts: std::path::PathBuf,
    dir: tempfile::TempDir,
}

impl RealKube {
    fn start() -> RealKube {
        let scripts = std::env::var_os("KSYNC_REALKUBE_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/realkube"));
        assert!(
            scripts.join("up").is_file(),
            "no real control plane at {} (set KSYNC_REALKUBE_DIR); scripts/test leaves the realkube tests out in that case",
            scripts.display()
        );
        let dir = tempfile::Builder::new().prefix("realkube").tempdir().expect("temp dir");
        let out = simcluster::realkube::up(&scripts, dir.path()).expect("starting realkube");
        assert!(
            out.status.success() && dir.path().join("kubeconfig").is_file(),
            "realkube did not start ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        RealKube { scripts, dir }
    }
}

impl Drop for RealKube {
    fn drop(&mut self) {
        // Stops exactly what `up` started (by the pids it recorded in `dir`).
        let _ = std::process::Command::new(self.scripts.join("down")).arg(self.dir.path()).output();
    }
}

/// The same scenarios against a real kube-apiserver: the recorded texts are its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_on_realkube() {
    let real = RealKube::start();
    let kc = kube::config::Kubeconfig::read_from(real.dir.path().join("kubeconfig")).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("config");
    scenarios(kube::Client::try_from(config).expect("client"), None).await;
}
