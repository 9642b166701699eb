//! The real `kubectl` against the cluster (simcluster unless `KSYNC_E2E_KUBECONFIG` names a
//! real one): server-side apply of our CRDs and an Application, `get app` with our printer
//! columns, `wait --for=condition=Ready`, delete, and `auth can-i` through impersonation.

use std::time::Duration;

use testkit::{Cluster, Tools, run, temp_dir, wait_for};

fn kubectl_works_against_the_cluster(cluster: Cluster) {
    let tools = Tools::get();
    let home = temp_dir("kubectl");
    let kubectl = || cluster.kubectl(&tools, home.path());
    let ns = format!("kubectl-{}", std::process::id());

    run(kubectl()
        .args(["apply", "--server-side", "--field-manager=kuvryn-sync-test", "-f"])
        .arg(testkit::repo_root().join("crds")));
    run(kubectl().args(["wait", "--for=condition=Established", "--timeout=60s", "crd/applications.sync.kuvryn.io"]));
    // `kubectl create namespace` would send protobuf, which simcluster does not speak (see
    // docs/simcluster.md); apply sends JSON.
    let ns_manifest = home.path().join("ns.yaml");
    std::fs::write(&ns_manifest, format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n")).unwrap();
    run(kubectl().args(["apply", "-f"]).arg(&ns_manifest));

    let app = std::fs::read_to_string(testkit::repo_root().join("testdata/api/application-minimal.yaml"))
        .unwrap()
        .replace("namespace: team-a", &format!("namespace: {ns}"));
    let manifest = home.path().join("app.yaml");
    std::fs::write(&manifest, app).unwrap();
    let applied = run(kubectl().args(["apply", "--server-side", "-f"]).arg(&manifest));
    assert!(applied.contains("application.sync.kuvryn.io/guestbook serverside-applied"), "{applied}");

    // Printer columns, through server-side printing (Table).
    let table = run(kubectl().args(["get", "app", "-n", &ns]));
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "SYNC", "HEALTH", "REVISION", "READY", "AGE"], "{table}");
    assert!(table.contains("guestbook"), "{table}");
    let wide = run(kubectl().args(["get", "app", "-n", &ns, "-o", "wide"]));
    assert!(wide.lines().next().unwrap().contains("SUSPENDED"), "{wide}");

    // Defaults materialized by the schema are visible to kubectl.
    let got = run(kubectl().args([
        "get",
        "app",
        "guestbook",
        "-n",
        &ns,
        "-o",
        "jsonpath={.spec.sync.automatic}/{.spec.history.limit}",
    ]));
    assert_eq!(got, "true/10");

    // Act as the controller: report Ready through the status subresource, and wait for it.
    let status = r#"{"status":{"observedGeneration":1,"conditions":[{"type":"Ready","status":"True","reason":"Succeeded","message":"ok","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#;
    run(kubectl().args(["patch", "app", "guestbook", "-n", &ns, "--subresource=status", "--type=merge", "-p", status]));
    run(kubectl().args(["wait", "--for=condition=Ready", "--timeout=30s", "app/guestbook", "-n", &ns]));
    let ready = run(kubectl().args(["get", "app", "guestbook", "-n", &ns, "--no-headers"]));
    assert!(ready.split_whitespace().any(|c| c == "True"), "{ready}");

    // Impersonation and RBAC: a ServiceAccount with no grants may not, the admin may.
    let sa = format!("system:serviceaccount:{ns}:nobody");
    let denied = kubectl().args(["auth", "can-i", "create", "configmaps", "-n", &ns, "--as", &sa]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&denied.stdout).trim(), "no");
    assert_eq!(run(kubectl().args(["auth", "can-i", "create", "configmaps", "-n", &ns])).trim(), "yes");

    run(kubectl().args(["delete", "app", "guestbook", "-n", &ns]));
    let missing = kubectl().args(["get", "app", "guestbook", "-n", &ns]).output().unwrap();
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("NotFound"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );

    run(kubectl().args(["delete", "namespace", &ns, "--wait=false"]));
    wait_for("the namespace to go", Duration::from_secs(60), || {
        let out = kubectl().args(["get", "namespace", &ns]).output().unwrap();
        (!out.status.success()).then_some(())
    });
}

testkit::both!(kubectl_works_against_the_cluster,);
