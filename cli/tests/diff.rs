//! `ksync diff` end to end: the controllers in-process deploy `main` from a real Git server,
//! then the real `ksync` binary, run as a least-privilege reviewer (it may read Applications and
//! Repositories and impersonate service accounts, nothing else), previews a branch, a local
//! checkout and every Application, on simcluster and on a real kube-apiserver. It must write
//! nothing: simcluster's audit log shows only dry runs from it.

use std::path::Path;
use std::process::{Command, Stdio};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use kuvryn_sync::api::revision::RevisionPhase;
use serde_json::{Value, json};
use testkit::apps::Env;
use testkit::{Cluster, apply_as};

const NS: &str = "diff";
const REVIEWER: &str = "reviewer";
const OLD_PASSWORD: &str = "hunter2-before";
const NEW_PASSWORD: &str = "hunter2-after";

fn config(color: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: {color}\n  size: m\n")
}

fn secret(password: &str) -> String {
    format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData:\n  password: {password}\n")
}

const OLD: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: old\ndata:\n  a: \"1\"\n";

/// A kubeconfig for the service account `reviewer`: it may read Applications and Repositories
/// and impersonate service accounts; nothing else.
async fn reviewer_kubeconfig(cluster: &Cluster, client: &kube::Client, dir: &Path) -> std::path::PathBuf {
    let objects = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": REVIEWER, "namespace": NS}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "ksync-diff-reviewer"},
        "rules": [
            {"apiGroups": ["sync.kuvryn.io"], "resources": ["applications", "repositories"], "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
        ]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "ksync-diff-reviewer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ksync-diff-reviewer"},
            "subjects": [{"kind": "ServiceAccount", "name": REVIEWER, "namespace": NS}]}),
    ];
    for o in &objects {
        apply_as(client, "test", o).await;
    }
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { expiration_seconds: Some(3600), ..Default::default() }),
        ..Default::default()
    };
    let token = Api::<ServiceAccount>::namespaced(client.clone(), NS)
        .create_token_request(REVIEWER, &PostParams::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .and_then(|s| s.token)
        .expect("token");
    let path = dir.join("reviewer.kubeconfig");
    cluster.write_kubeconfig(&path, Some(&token), None);
    path
}

/// `ksync --kubeconfig KUBECONFIG -n diff ARGS`: (exit code, stdout, stderr).
fn ksync(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let home = testkit::temp_dir("ksync-home");
    let out = Command::new(testkit::ksync::bin())
        .env_clear()
        .env("HOME", home.path())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-n", NS])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("ksync");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn no_secret_in(text: &str) {
    use base64::Engine;
    for p in [OLD_PASSWORD, NEW_PASSWORD] {
        let encoded = base64::engine::general_purpose::STANDARD.encode(p);
        assert!(!text.contains(p) && !text.contains(&encoded), "a Secret value is shown: {text}");
    }
}

fn previews_a_branch_a_local_checkout_and_every_application_without_writing(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        let wt = env
            .app_from(
                "web",
                &[
                    ("web/config.yaml", &config("blue")),
                    ("web/old.yaml", OLD),
                    ("web/secret.yaml", &secret(OLD_PASSWORD)),
                ],
                json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                       "destination": {"namespace": NS}, "sync": {"automatic": true, "prune": true}}),
            )
            .await;
        env.revision_where("web", "main deployed", |r| {
            r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
        })
        .await;
        let dir = testkit::temp_dir("diff");
        let kubeconfig = reviewer_kubeconfig(&cluster, &env.client, dir.path()).await;
        let revisions = |env: &Env| {
            let api = env.revisions();
            async move {
                let mut names: Vec<String> =
                    api.list(&ListParams::default()).await.unwrap().items.iter().map(|r| r.name_any()).collect();
                names.sort();
                names
            }
        };
        let revisions_before = revisions(&env).await;
        let audit_from = cluster.sim().map(|s| s.audit_log().len()).unwrap_or_default();

        // What is deployed: nothing would change.
        let (code, out, err) = ksync(&kubeconfig, &["diff", "web"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("Nothing would change."), "{out}");

        // A branch that changes a value, drops an object and rotates the password.
        wt.git(&["checkout", "--quiet", "-b", "feature"]);
        wt.write("web/config.yaml", &config("green")).write("web/secret.yaml", &secret(NEW_PASSWORD));
        std::fs::remove_file(wt.path().join("web/old.yaml")).unwrap();
        wt.git(&["add", "--all"]);
        wt.git(&["commit", "--quiet", "-m", "feature"]);
        wt.git(&["push", "--quiet", "origin", "feature"]);
        let (code, out, err) = ksync(&kubeconfig, &["diff", "web", "--revision", "feature"]);
        assert_eq!(code, 1, "{out}{err}");
        for want in [
            "~ update     ConfigMap diff/settings",
            "--- ConfigMap diff/settings (live)",
            "+++ ConfigMap diff/settings (after apply)",
            "-  color: blue",
            "+  color: green",
            "- delete     ConfigMap diff/old",
            "~ update     Secret diff/creds",
            "*** (before)",
            "*** (after)",
            "Plan: 0 to create, 2 to update, 1 to delete, 0 unchanged",
        ] {
            assert!(out.contains(want), "missing {want:?} in:\n{out}");
        }
        assert!(!out.contains("resourceVersion") && !out.contains("managedFields"), "{out}");
        // The delete comes last, after the updates (apply order, deletes last).
        assert!(out.find("- delete").unwrap() > out.find("~ update     Secret").unwrap(), "{out}");
        no_secret_in(&out);
        no_secret_in(&err);

        // -o json for pipelines.
        let (code, out, err) = ksync(&kubeconfig, &["diff", "web", "--revision", "feature", "-o", "json"]);
        assert_eq!(code, 1, "{err}");
        let j: Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(j["changes"], true);
        assert_eq!(j["summary"]["delete"], 1);
        assert_eq!(j["source"]["reference"], "feature");
        let settings = j["entries"].as_array().unwrap().iter().find(|e| e["name"] == "settings").unwrap();
        assert!(settings["diff"].as_str().unwrap().contains("+  color: green"), "{settings}");
        no_secret_in(&out);

        // A local checkout not pushed yet: an edit in the work tree shows.
        wt.write("web/config.yaml", &config("purple"));
        let local = wt.path().to_str().unwrap();
        let (code, out, err) = ksync(&kubeconfig, &["diff", "web", "--path", local]);
        assert_eq!(code, 1, "{out}{err}");
        assert!(out.contains(&format!("Local:        {local} (not pushed)")), "{out}");
        assert!(out.contains("+  color: purple"), "{out}");
        // A symlink out of the checkout is refused, as in a Git checkout: what it points to is
        // never rendered.
        let outside = testkit::temp_dir("outside");
        let stolen = outside.path().join("stolen.yaml");
        std::fs::write(&stolen, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stolen\n").unwrap();
        std::os::unix::fs::symlink(&stolen, wt.path().join("web/stolen.yaml")).unwrap();
        let (code, out, err) = ksync(&kubeconfig, &["diff", "web", "--path", local]);
        assert_eq!(code, 2, "{out}{err}");
        assert!(err.contains("symlink stolen.yaml") && !out.contains("stolen"), "{out}{err}");
        std::fs::remove_file(wt.path().join("web/stolen.yaml")).unwrap();

        // Every Application of the Repository: a summary table, then the diffs.
        let (code, out, err) =
            ksync(&kubeconfig, &["diff", "--all", "--repository", "platform", "--revision", "feature"]);
        assert_eq!(code, 1, "{out}{err}");
        let header = out.lines().next().unwrap_or_default();
        assert!(header.starts_with("APPLICATION") && header.ends_with("RESULT"), "{out}");
        assert!(out.lines().nth(1).is_some_and(|l| l.starts_with("diff/web") && l.ends_with("would change")), "{out}");
        assert!(out.contains("+  color: green"), "{out}");

        // An error: exit status 2, and a message.
        let (code, out, err) = ksync(&kubeconfig, &["diff", "web", "--revision", "no-such-branch"]);
        assert_eq!(code, 2, "{out}{err}");
        assert!(err.contains("no-such-branch"), "{err}");

        // Nothing was written: no Revision, the live objects as main left them, and (simcluster)
        // every write the reviewer made, itself or as the service account, was a dry run.
        assert_eq!(revisions(&env).await, revisions_before);
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        assert_eq!(cms.get("settings").await.unwrap().data.unwrap()["color"], "blue");
        assert!(cms.get_opt("old").await.unwrap().is_some());
        if let Some(sim) = cluster.sim() {
            let me = format!("system:serviceaccount:{NS}:{REVIEWER}");
            let mine: Vec<_> = sim.audit_log()[audit_from..]
                .iter()
                .filter(|e| e.user == me || e.impersonated_by.as_deref() == Some(me.as_str()))
                .cloned()
                .collect();
            assert!(mine.iter().any(|e| e.dry_run), "the reviewer's dry runs are in the audit log: {mine:?}");
            let writes: Vec<_> = mine.iter().filter(|e| !e.dry_run).collect();
            assert!(writes.is_empty(), "ksync diff wrote: {writes:?}");
        }
    });
}

testkit::both!(previews_a_branch_a_local_checkout_and_every_application_without_writing);
