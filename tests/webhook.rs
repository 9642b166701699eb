//! The admission webhook, served by the real `ksync-controller run` process: it refuses a wrong
//! chosen Revision, records who asked for a rollback or approved a plan from the authenticated
//! request, restores forged records, keeps one certificate across replicas in a Secret and the
//! configuration's `caBundle`, rotates it, and serves nothing with `ENABLE_WEBHOOKS=false`.
//!
//! On simcluster the configuration reaches the manager through a Service mapped to its port
//! (`SimCluster::set_webhook_service`); on realkube through `clientConfig.url` (realkube cannot
//! route to a Service).

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kuvryn_sync::api::application::{Application, Strategy, SyncPolicy};
use kuvryn_sync::api::names::annotations as a;
use kuvryn_sync::api::names::labels::SHARD;
use kuvryn_sync::api::revision::Revision;
use kuvryn_sync::webhook::certs;
use serde_json::{Value, json};
use testkit::manager::{Manager, SERVICE, SYSTEM, install_configuration};
use testkit::{Cluster, apply_as, eventually, free_port, install_crds, temp_dir};

const NS: &str = "team";
const CONFIG: &str = "kuvryn-sync";
const SECRET: &str = "kuvryn-sync-webhook-tls";
const WAIT: Duration = Duration::from_secs(60);

async fn setup(cluster: &Cluster) -> kube::Client {
    let client = cluster.client().await;
    install_crds(&client).await;
    for ns in [NS, SYSTEM] {
        apply_as(&client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
    }
    // alice and bob may write Applications and read Revisions in NS (and nothing else); carol
    // may write Applications only.
    apply_as(
        &client,
        "test",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "app-editor", "namespace": NS},
        "rules": [{"apiGroups": ["sync.kuvryn.io"], "resources": ["applications"], "verbs": ["*"]},
                  {"apiGroups": ["sync.kuvryn.io"], "resources": ["revisions"], "verbs": ["get", "list", "watch"]}]}),
    )
    .await;
    apply_as(
        &client,
        "test",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "app-writer", "namespace": NS},
        "rules": [{"apiGroups": ["sync.kuvryn.io"], "resources": ["applications"], "verbs": ["*"]}]}),
    )
    .await;
    apply_as(
        &client,
        "test",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "app-writers", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "app-writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}]}),
    )
    .await;
    apply_as(
        &client,
        "test",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "app-editors", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "app-editor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
                     {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]}),
    )
    .await;
    client
}

/// A client acting as `user` (impersonated by the admin).
async fn as_user(cluster: &Cluster, user: &str) -> kube::Client {
    let mut config = cluster.config().await;
    config.auth_info.impersonate = Some(user.to_string());
    kube::Client::try_from(config).expect("client")
}

async fn create_app(client: &kube::Client, name: &str, annotations: Value) -> Result<Application, kube::Error> {
    let app: Application = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"source": {"repository": "platform", "path": "apps/web"}, "serviceAccountName": "deployer",
                 "destination": {"namespace": NS}, "suspend": true},
    }))
    .expect("Application");
    Api::<Application>::namespaced(client.clone(), NS).create(&PostParams::default(), &app).await
}

/// Merge-patch the Application's annotations (`null` removes one).
async fn annotate(client: &kube::Client, name: &str, annotations: Value) -> Result<Application, kube::Error> {
    Api::<Application>::namespaced(client.clone(), NS)
        .patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": annotations}})))
        .await
}

async fn annotations(client: &kube::Client, name: &str) -> std::collections::BTreeMap<String, String> {
    let app = Api::<Application>::namespaced(client.clone(), NS).get(name).await.expect("get Application");
    app.metadata.annotations.unwrap_or_default()
}

/// A Revision `name` of Application `app` at `commit`, with `deployed` as its
/// `status.deployedDesiredStateHash`.
async fn revision(client: &kube::Client, name: &str, app: &str, commit: &str, deployed: Option<&str>) {
    let revs: Api<Revision> = Api::namespaced(client.clone(), NS);
    let rev: Revision = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Revision",
        "metadata": {"name": name, "labels": {"sync.kuvryn.io/application": app}},
        "spec": {"application": app, "serviceAccountName": "deployer",
                 "source": {"repository": "platform", "url": "https://git.invalid/platform", "commit": commit, "path": "apps/web"}},
    }))
    .expect("Revision");
    revs.create(&PostParams::default(), &rev).await.expect("create Revision");
    if let Some(d) = deployed {
        revs.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"deployedDesiredStateHash": d}})),
        )
        .await
        .expect("Revision status");
    }
}

/// Wait until the webhook answers: an approval on Application `probe` is recorded.
async fn wait_until_served(client: &kube::Client, manager: &Manager) {
    let _ = create_app(client, "probe", json!({})).await;
    eventually("the webhook to answer", WAIT, || async {
        let token =
            format!("sha256:probe-{}", std::time::SystemTime::UNIX_EPOCH.elapsed().map(|d| d.as_nanos()).unwrap_or(0));
        let app = annotate(client, "probe", json!({a::APPROVED_PLAN: token})).await.ok()?;
        app.metadata.annotations?.get(a::APPROVED_BY).cloned()
    })
    .await;
    assert!(manager.stderr().contains("serving the admission webhook"), "{}", manager.stderr());
}

const C1: &str = "1111111111111111111111111111111111111111";
const C2: &str = "2222222222222222222222222222222222222222";

fn rollback_requests_are_checked_and_recorded_from_the_request(cluster: Cluster) {
    testkit::runtime().block_on(async {
        let admin = setup(&cluster).await;
        let manager = Manager::start(&cluster, &[], &[]);
        install_configuration(&cluster, &admin, manager.port).await;
        wait_until_served(&admin, &manager).await;
        let (alice, bob) = (as_user(&cluster, "alice").await, as_user(&cluster, "bob").await);
        revision(&admin, "web-c1", "web", C1, Some("sha256:deployed-c1")).await;
        revision(&admin, "web-c2", "web", C2, None).await;
        revision(&admin, "api-c1", "api", C1, Some("sha256:api")).await;
        create_app(&admin, "web", json!({"team": "payments"})).await.expect("create web");

        // Alice asks, with a forged requester: recorded as alice, with the target hash.
        annotate(
            &alice,
            "web",
            json!({a::ROLLBACK_TO: C1, a::ROLLBACK_KIND: "manual",
            a::ROLLBACK_TARGET_REVISION: "web-c1", a::ROLLBACK_REQUESTED_BY: "mallory"}),
        )
        .await
        .expect("alice's request");
        let got = annotations(&admin, "web").await;
        assert_eq!(got[a::ROLLBACK_REQUESTED_BY], "alice");
        let at: jiff::Timestamp = got[a::ROLLBACK_REQUESTED_AT].parse().expect("RFC 3339 requested-at");
        assert!((jiff::Timestamp::now().as_second() - at.as_second()).abs() < 120, "{at}");
        let want_hash = kuvryn_sync::plan::target_hash::rollback_target_hash(
            "sha256:deployed-c1",
            &SyncPolicy::default(),
            &Strategy::default(),
        );
        assert_eq!(got[a::ROLLBACK_TARGET_HASH], want_hash);
        assert_eq!(got["team"], "payments");

        // Bob forges the requester and the hash of the unchanged request: both are put back.
        annotate(&bob, "web", json!({a::ROLLBACK_REQUESTED_BY: "bob", a::ROLLBACK_TARGET_HASH: "sha256:forged"}))
            .await
            .expect("bob's edit");
        let after = annotations(&admin, "web").await;
        assert_eq!(after[a::ROLLBACK_REQUESTED_BY], "alice");
        assert_eq!(after[a::ROLLBACK_TARGET_HASH], want_hash);
        assert_eq!(after[a::ROLLBACK_REQUESTED_AT], got[a::ROLLBACK_REQUESTED_AT]);
        // Removing a record is undone too.
        annotate(&bob, "web", json!({a::ROLLBACK_REQUESTED_BY: null})).await.expect("bob's removal");
        assert_eq!(annotations(&admin, "web").await[a::ROLLBACK_REQUESTED_BY], "alice");

        // Wrong Revisions are refused, naming what is wrong; the stored request is unchanged.
        for (target, to, want) in [
            ("web-gone", C1, "Revision \"web-gone\" does not exist"),
            ("api-c1", C1, "belongs to Application \"api\", not to Application \"web\""),
            ("web-c1", C2, &format!("is of commit \"{C1}\", not of sync.kuvryn.io/rollback-to \"{C2}\"")),
        ] {
            let err = annotate(&alice, "web", json!({a::ROLLBACK_TO: to, a::ROLLBACK_TARGET_REVISION: target}))
                .await
                .expect_err(target);
            let kube::Error::Api(status) = err else { panic!("{target}: {err:?}") };
            assert!(
                status.message.contains("admission webhook \"applications.sync.kuvryn.io\" denied the request")
                    && status.message.contains(want),
                "{target}: {}",
                status.message
            );
        }
        assert_eq!(annotations(&admin, "web").await[a::ROLLBACK_TARGET_REVISION], "web-c1");

        // Carol may write Applications but not read Revisions: one answer whatever the Revision
        // (it exists and fits, belongs to another Application, is of another commit, or is
        // missing), so no denial tells her of a Revision.
        let carol = as_user(&cluster, "carol").await;
        create_app(&carol, "carols", json!({})).await.expect("carol's Application");
        let mut answers = std::collections::BTreeSet::new();
        for (to, target) in [(C1, "web-c1"), (C2, "web-c2"), (C2, "web-c1"), (C1, "missing")] {
            let err = annotate(&carol, "carols", json!({a::ROLLBACK_TO: to, a::ROLLBACK_TARGET_REVISION: target}))
                .await
                .expect_err(target);
            let kube::Error::Api(status) = err else { panic!("{target}: {err:?}") };
            assert!(status.message.contains("you may not read Revisions"), "{target}: {}", status.message);
            answers.insert(status.message.replace(target, "REVISION"));
        }
        assert_eq!(answers.len(), 1, "{answers:?}");

        // Bob changes the target: recorded again as bob; web-c2 never deployed, so no hash.
        annotate(&bob, "web", json!({a::ROLLBACK_TO: C2, a::ROLLBACK_TARGET_REVISION: "web-c2"}))
            .await
            .expect("bob's request");
        let moved = annotations(&admin, "web").await;
        assert_eq!(moved[a::ROLLBACK_REQUESTED_BY], "bob");
        assert!(!moved.contains_key(a::ROLLBACK_TARGET_HASH), "{moved:?}");

        // An approval is recorded from the request, a forged approver is put back.
        annotate(&alice, "web", json!({a::APPROVED_PLAN: "sha256:plan", a::APPROVED_BY: "mallory"}))
            .await
            .expect("approval");
        assert_eq!(annotations(&admin, "web").await[a::APPROVED_BY], "alice");
        annotate(&bob, "web", json!({a::APPROVED_BY: "bob"})).await.expect("forged approver");
        let approved = annotations(&admin, "web").await;
        assert_eq!(approved[a::APPROVED_BY], "alice");
        assert!(approved[a::APPROVED_AT].parse::<jiff::Timestamp>().is_ok(), "{approved:?}");

        // Removing the whole request removes its record.
        let gone = [
            a::ROLLBACK_TO,
            a::ROLLBACK_KIND,
            a::ROLLBACK_TARGET_REVISION,
            a::ROLLBACK_REQUESTED_BY,
            a::ROLLBACK_REQUESTED_AT,
            a::ROLLBACK_TARGET_HASH,
        ];
        let nulls: serde_json::Map<String, Value> = gone.iter().map(|k| (k.to_string(), Value::Null)).collect();
        annotate(&alice, "web", Value::Object(nulls)).await.expect("removing the request");
        let removed = annotations(&admin, "web").await;
        assert!(gone.iter().all(|k| !removed.contains_key(*k)), "{removed:?}");

        // A forged record on a new Application is replaced by the creator's.
        create_app(
            &bob,
            "forged",
            json!({a::ROLLBACK_TO: C1, a::ROLLBACK_KIND: "manual",
            a::ROLLBACK_REQUESTED_BY: "alice", a::ROLLBACK_REQUESTED_AT: "2000-01-01T00:00:00Z"}),
        )
        .await
        .expect("create forged");
        assert_eq!(annotations(&admin, "forged").await[a::ROLLBACK_REQUESTED_BY], "bob");

        // Writes that touch no rollback or approval annotation never reach the webhook.
        drop(manager);
        create_app(&admin, "plain", json!({"team": "payments"})).await.expect("plain Application without the webhook");
    });
}

// See: issue 44 (trust boundaries, round two).
/// Defence in depth behind `.ksync.yaml`'s refusal: the webhook refuses an approval or a manual
/// rollback request made with the manager's own identity (the manager runs as its service
/// account here, through an impersonating kubeconfig) or with the Repository controller's field
/// manager, while a person's, and the manager's own failure-policy rollback, go through.
fn the_managers_own_identity_never_decides(cluster: Cluster) {
    const MANAGER_SA: &str = "system:serviceaccount:kuvryn-system:kuvryn-sync";
    testkit::runtime().block_on(async {
        let admin = setup(&cluster).await;
        apply_as(
            &admin,
            "test",
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "kuvryn-sync-manager"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "kuvryn-sync", "namespace": SYSTEM}]}),
        )
        .await;
        let dir = temp_dir("manager-sa");
        let mut kubeconfig = kube::config::Kubeconfig::read_from(cluster.kubeconfig()).expect("kubeconfig");
        for named in &mut kubeconfig.auth_infos {
            if let Some(info) = named.auth_info.as_mut() {
                info.impersonate = Some(MANAGER_SA.to_string());
            }
        }
        let path = dir.path().join("manager.kubeconfig");
        std::fs::write(&path, serde_json::to_vec(&kubeconfig).expect("kubeconfig JSON")).expect("write kubeconfig");
        let manager = Manager::start(&cluster, &[], &[("KUBECONFIG", path.to_str().expect("path"))]);
        install_configuration(&cluster, &admin, manager.port).await;
        let alice = as_user(&cluster, "alice").await;
        wait_until_served(&alice, &manager).await;
        let as_manager = as_user(&cluster, MANAGER_SA).await;
        create_app(&alice, "web", json!({})).await.expect("web");

        let denied = |r: Result<Application, kube::Error>, what: &str| {
            let err = r.expect_err(what);
            let kube::Error::Api(status) = err else { panic!("{what}: {err:?}") };
            assert!(status.message.contains("the manager's own identity"), "{what}: {}", status.message);
        };
        denied(
            annotate(&as_manager, "web", json!({a::APPROVED_PLAN: "sha256:forged"})).await,
            "approval as the manager",
        );
        denied(
            annotate(&as_manager, "web", json!({a::ROLLBACK_TO: C1, a::ROLLBACK_TARGET_REVISION: "web-c1"})).await,
            "manual rollback as the manager",
        );
        let repository_controller =
            PatchParams { field_manager: Some("kuvryn-sync-repository".into()), ..Default::default() };
        let api = Api::<Application>::namespaced(alice.clone(), NS);
        denied(
            api.patch(
                "web",
                &repository_controller,
                &Patch::Merge(json!({"metadata": {"annotations": {a::APPROVED_PLAN: "sha256:from-git"}}})),
            )
            .await,
            "approval with the Repository controller's field manager",
        );
        assert!(!annotations(&admin, "web").await.contains_key(a::APPROVED_PLAN));

        // A person's approval, and the failure policy's own rollback request, go through.
        annotate(&alice, "web", json!({a::APPROVED_PLAN: "sha256:reviewed"})).await.expect("alice's approval");
        assert_eq!(annotations(&admin, "web").await[a::APPROVED_BY], "alice");
        annotate(&as_manager, "web", json!({a::ROLLBACK_TO: C1, a::ROLLBACK_KIND: a::ROLLBACK_KIND_AUTOMATIC}))
            .await
            .expect("a failure policy's rollback");
        assert!(manager.stderr().contains("refused a decision made with the manager's own identity"));
    });
}

fn secret_data(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().expect("data")[key].0.clone()).expect("utf-8")
}

async fn ca_bundle(client: &kube::Client) -> Option<String> {
    let c = Api::<MutatingWebhookConfiguration>::all(client.clone()).get(CONFIG).await.ok()?;
    let b = c.webhooks?.first()?.client_config.ca_bundle.clone()?;
    Some(String::from_utf8(b.0).expect("utf-8"))
}

#[test]
fn two_replicas_create_one_certificate_and_publish_its_ca() {
    let cluster = Cluster::start();
    testkit::runtime().block_on(async {
        let admin = setup(&cluster).await;
        let a = Manager::start(&cluster, &[], &[]);
        let b = Manager::start(&cluster, &[], &[]);
        install_configuration(&cluster, &admin, a.port).await;
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), SYSTEM);
        let secret = eventually("the certificate Secret", WAIT, || async { secrets.get(SECRET).await.ok() }).await;
        let bundle = eventually("the caBundle", WAIT, || async { ca_bundle(&admin).await }).await;
        assert_eq!(bundle, secret_data(&secret, certs::keys::CA_BUNDLE));
        assert_eq!(certs::pem_blocks(&bundle).len(), 1, "one CA");
        // Both replicas present the Secret's certificate: each answers through the configuration.
        for m in [&a, &b] {
            cluster.sim().expect("simcluster").set_webhook_service(
                SYSTEM,
                SERVICE,
                443,
                ([127, 0, 0, 1], m.port).into(),
            );
            wait_until_served(&admin, m).await;
        }
        // Several checks later, still the one Secret, never replaced.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let again = secrets.get(SECRET).await.expect("Secret");
        assert_eq!(again.metadata.resource_version, secret.metadata.resource_version);
        assert_eq!(again.metadata.uid, secret.metadata.uid);
        let created = [&a, &b].iter().filter(|m| m.stderr().contains("created the certificate Secret")).count();
        assert_eq!(created, 1, "exactly one replica created it:\n{}\n---\n{}", a.stderr(), b.stderr());
        // Logs carry no key material.
        for m in [&a, &b] {
            assert!(!m.stderr().contains("PRIVATE KEY") && !m.stderr().contains("BEGIN CERTIFICATE"), "{}", m.stderr());
        }
    });
}

/// The alert KuvrynSyncWebhookCertificateExpiring (`deploy/prometheus/rules.yaml`) reads
/// `ksync_webhook_certificate_expiry_timestamp_seconds`: the presented certificate's notAfter, as
/// the Secret records it.
#[test]
fn the_presented_certificates_expiry_is_exported() {
    let cluster = Cluster::start();
    testkit::runtime().block_on(async {
        let admin = setup(&cluster).await;
        let metrics = free_port();
        let m = Manager::start_with_metrics(&cluster, &[], &[], Some(metrics));
        install_configuration(&cluster, &admin, m.port).await;
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), SYSTEM);
        let secret = eventually("the certificate Secret", WAIT, || async { secrets.get(SECRET).await.ok() }).await;
        let not_after: jiff::Timestamp = secret_data(&secret, certs::keys::NOT_AFTER).parse().expect("notAfter");
        let script = format!(
            "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:{metrics}/metrics').read().decode())"
        );
        let exported = eventually("the certificate expiry gauge", WAIT, || async {
            let out = std::process::Command::new("python3").args(["-c", &script]).output().ok()?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let line = text.lines().find(|l| l.starts_with("ksync_webhook_certificate_expiry_timestamp_seconds "))?;
            line.rsplit_once(' ')?.1.parse::<f64>().ok()
        })
        .await;
        assert_eq!(exported, not_after.as_second() as f64, "{}", m.stderr());
    });
}

/// Four replicas' certificate checks at once, on a missing Secret and then on one due for
/// rotation: one creates (then one rotates), the others read its result, all end with the same
/// certificate.
fn replicas_racing_for_the_secret_agree_on_one_certificate(cluster: Cluster) {
    testkit::runtime().block_on(async {
        let admin = setup(&cluster).await;
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), SYSTEM);
        let hosts = vec![format!("{SERVICE}.{SYSTEM}.svc")];
        let race = || async {
            let (a, b, c, d) = tokio::join!(
                certs::ensure(&secrets, SECRET, &hosts, Duration::from_secs(3600)),
                certs::ensure(&secrets, SECRET, &hosts, Duration::from_secs(3600)),
                certs::ensure(&secrets, SECRET, &hosts, Duration::from_secs(3600)),
                certs::ensure(&secrets, SECRET, &hosts, Duration::from_secs(3600)),
            );
            [a, b, c, d].map(|r| r.expect("ensure"))
        };
        let created = race().await;
        let outcomes: Vec<_> = created.iter().map(|(_, o)| *o).collect();
        assert_eq!(outcomes.iter().filter(|o| **o == certs::Outcome::Created).count(), 1, "{outcomes:?}");
        assert!(created.iter().all(|(m, _)| m.tls_crt == created[0].0.tls_crt), "{outcomes:?}");
        let stored = secrets.get(SECRET).await.expect("Secret");
        assert_eq!(secret_data(&stored, certs::keys::TLS_CRT), created[0].0.tls_crt);

        // Age it: issued long ago, so two thirds of its validity have passed.
        let mut aged = certs::Material::from_data(stored.data.as_ref().unwrap()).unwrap();
        aged.not_before = jiff::Timestamp::now() - Duration::from_secs(3000);
        aged.not_after = aged.not_before + Duration::from_secs(3600);
        let mut secret = stored.clone();
        secret.data = Some(aged.to_data(jiff::Timestamp::now()));
        secrets.replace(SECRET, &PostParams::default(), &secret).await.expect("age the Secret");
        let rotated = race().await;
        let outcomes: Vec<_> = rotated.iter().map(|(_, o)| *o).collect();
        let rotations =
            outcomes.iter().filter(|o| **o == certs::Outcome::Rotated(certs::Decision::RotateAging)).count();
        assert_eq!(rotations, 1, "{outcomes:?}");
        assert!(rotated.iter().all(|(m, _)| m.tls_crt == rotated[0].0.tls_crt), "{outcomes:?}");
        let new = &rotated[0].0;
        assert_ne!(new.ca_current, aged.ca_current);
        assert_eq!(new.previous.as_ref().map(|(ca, _)| ca.as_str()), Some(aged.ca_current.as_str()));
        assert!(certs::bundle_trusts(&new.ca_bundle(jiff::Timestamp::now()), &aged.ca_current));
    });
}

#[test]
fn certificates_rotate_before_expiry_keeping_the_old_ca_trusted() {
    let cluster = Cluster::start();
    testkit::runtime().block_on(async {
        let admin = setup(&cluster).await;
        let manager = Manager::start(&cluster, &["--webhook-cert-validity", "9s"], &[]);
        install_configuration(&cluster, &admin, manager.port).await;
        wait_until_served(&admin, &manager).await;
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), SYSTEM);
        let first = secrets.get(SECRET).await.expect("Secret");
        let first_ca = secret_data(&first, certs::keys::CA_CURRENT);
        // Rotated at two thirds of 9 s; the bundle then holds the new CA and the old one.
        let rotated = eventually("a rotation", WAIT, || async {
            let s = secrets.get(SECRET).await.ok()?;
            (secret_data(&s, certs::keys::CA_CURRENT) != first_ca).then_some(s)
        })
        .await;
        let new_ca = secret_data(&rotated, certs::keys::CA_CURRENT);
        let bundle = eventually("the bundle with both CAs", WAIT, || async {
            let b = ca_bundle(&admin).await?;
            (certs::bundle_trusts(&b, &new_ca) && certs::bundle_trusts(&b, &first_ca)).then_some(b)
        })
        .await;
        assert_eq!(certs::pem_blocks(&bundle).len(), 2);
        // The webhook keeps answering across rotations.
        for _ in 0..3 {
            wait_until_served(&admin, &manager).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        assert!(manager.stderr().contains("rotated the certificates"), "{}", manager.stderr());
    });
}

/// Set `caBundle` of every webhook of the configuration by hand (what cert-manager's injector does).
async fn set_ca_bundle(client: &kube::Client, bundle: &str) {
    let api = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let mut config = api.get(CONFIG).await.expect("configuration");
    for w in config.webhooks.iter_mut().flatten() {
        w.client_config.ca_bundle = Some(k8s_openapi::ByteString(bundle.as_bytes().to_vec()));
    }
    api.replace(CONFIG, &PostParams::default(), &config).await.expect("replace configuration");
}

#[test]
fn a_certificate_directory_is_served_and_reloaded_and_ca_bundle_left_alone() {
    let cluster = Cluster::start();
    testkit::runtime().block_on(async {
        let admin = setup(&cluster).await;
        let hosts = vec![format!("{SERVICE}.{SYSTEM}.svc")];
        let write = |dir: &std::path::Path, m: &certs::Material| {
            std::fs::write(dir.join("tls.crt"), &m.tls_crt).unwrap();
            std::fs::write(dir.join("tls.key"), &m.tls_key).unwrap();
        };
        let certs_dir = temp_dir("webhook-certs");
        let first = certs::generate(jiff::Timestamp::now(), Duration::from_secs(3600), &hosts, None).unwrap();
        write(certs_dir.path(), &first);
        let dir_arg = certs_dir.path().display().to_string();
        let manager = Manager::start(&cluster, &["--webhook-cert-dir", &dir_arg], &[]);
        install_configuration(&cluster, &admin, manager.port).await;
        set_ca_bundle(&admin, &first.ca_current).await;
        wait_until_served(&admin, &manager).await;
        // cert-manager renews: new files from a new CA, and the injector replaces the bundle.
        let second = certs::generate(jiff::Timestamp::now(), Duration::from_secs(3600), &hosts, None).unwrap();
        write(certs_dir.path(), &second);
        set_ca_bundle(&admin, &second.ca_current).await;
        wait_until_served(&admin, &manager).await;
        // The manager made no Secret and left the bundle as set.
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), SYSTEM);
        assert!(secrets.get_opt(SECRET).await.expect("get").is_none());
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(ca_bundle(&admin).await.as_deref(), Some(second.ca_current.as_str()));
        assert_eq!(manager.stderr().matches("loaded the certificate").count(), 2, "{}", manager.stderr());
    });
}

#[test]
fn enable_webhooks_false_serves_nothing() {
    let cluster = Cluster::start();
    testkit::runtime().block_on(async {
        let admin = setup(&cluster).await;
        let manager = Manager::start(&cluster, &[], &[("ENABLE_WEBHOOKS", "false")]);
        install_configuration(&cluster, &admin, manager.port).await;
        eventually("the manager to start", WAIT, || async { manager.stderr().contains("starting").then_some(()) })
            .await;
        // Several webhook check intervals (1 s) later:
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(std::net::TcpStream::connect(("127.0.0.1", manager.port)).is_err(), "something listens");
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), SYSTEM);
        assert!(secrets.get_opt(SECRET).await.expect("get").is_none(), "no certificate Secret");
        assert!(ca_bundle(&admin).await.is_none(), "caBundle untouched");
        // With the configuration installed and nothing serving, the API server refuses rollback
        // writes (failurePolicy Fail); others pass.
        let err = create_app(&admin, "web", json!({a::ROLLBACK_TO: C1})).await.expect_err("no webhook");
        assert!(format!("{err}").contains("failed calling webhook"), "{err}");
        create_app(&admin, "plain", json!({})).await.expect("plain Application");
        assert!(manager.stderr().contains("ENABLE_WEBHOOKS=false: no admission webhook"), "{}", manager.stderr());
    });
}

#[test]
fn startup_logs_pending_rollback_requests_with_a_requester() {
    let cluster = Cluster::start();
    testkit::runtime().block_on(async {
        let admin = setup(&cluster).await;
        // Written while no webhook ran: trusted as written, and reported at start-up.
        create_app(
            &admin,
            "web",
            json!({a::ROLLBACK_TO: C1, a::ROLLBACK_KIND: "manual", a::ROLLBACK_REQUESTED_BY: "mallory"}),
        )
        .await
        .expect("create");
        create_app(&admin, "quiet", json!({a::ROLLBACK_TO: C1})).await.expect("create");
        let manager = Manager::start(&cluster, &[], &[]);
        let line = eventually("the start-up warning", WAIT, || async {
            manager.stderr().lines().find(|l| l.contains("pending rollback request")).map(String::from)
        })
        .await;
        assert!(line.contains("WARN") && line.contains("team/web") && line.contains("mallory"), "{line}");
        assert!(!manager.stderr().contains("team/quiet"), "{}", manager.stderr());
        // No configuration installed: nothing is served, and the manager says why.
        eventually("the not-installed warning", WAIT, || async {
            manager.stderr().contains("is not installed").then_some(())
        })
        .await;
        assert!(std::net::TcpStream::connect(("127.0.0.1", manager.port)).is_err());
    });
}

/// A new Application is labelled with its shard at admission: the create's answer carries the
/// label, so the shard's owner sees it at once and the labeller writes nothing. A label the
/// tenant gave is left (the shard's owner corrects a wrong one, `tests/sharding.rs`).
fn a_new_application_gets_its_shard_label_at_admission(cluster: Cluster) {
    testkit::runtime().block_on(async {
        let admin = setup(&cluster).await;
        let manager = Manager::start(&cluster, &["--shards", "32"], &[]);
        install_configuration(&cluster, &admin, manager.port).await;
        wait_until_served(&admin, &manager).await;
        let shard = |app: &Application| app.metadata.labels.as_ref().and_then(|l| l.get(SHARD).cloned());
        for name in ["web", "api", "batch"] {
            let created = create_app(&admin, name, json!({})).await.expect("create");
            let own = kuvryn_sync::controller::labeller::shard_of(NS, name, 32).to_string();
            assert_eq!(shard(&created), Some(own), "{name}: the create's answer");
            let by_labeller = created
                .metadata
                .managed_fields
                .iter()
                .flatten()
                .any(|m| m.manager.as_deref() == Some(kuvryn_sync::controller::labeller::MANAGER));
            assert!(!by_labeller, "{name}: labelled by a write of its own");
        }
        let app: Application = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "chosen", "namespace": NS, "labels": {SHARD: "31"}},
            "spec": {"source": {"repository": "platform", "path": "apps/web"}, "serviceAccountName": "deployer",
                     "destination": {"namespace": NS}, "suspend": true},
        }))
        .unwrap();
        let created = Api::<Application>::namespaced(admin.clone(), NS).create(&PostParams::default(), &app).await;
        assert_eq!(shard(&created.expect("create")).as_deref(), Some("31"), "the tenant's label is left at admission");
    });
}

testkit::both!(
    a_new_application_gets_its_shard_label_at_admission,
    the_managers_own_identity_never_decides,
    rollback_requests_are_checked_and_recorded_from_the_request,
    replicas_racing_for_the_secret_agree_on_one_certificate
);
