//! The shared harness itself works: a real git server on loopback, the real tools, and the
//! end-to-end CRD check against a real cluster when one is named.

use testkit::{Cluster, GitServer, Tools, WorkTree, git_cmd, run, temp_dir};

#[test]
fn git_server_serves_pushed_commits() {
    let server = GitServer::start();
    let url = server.create_repo("platform");
    let work = WorkTree::clone(&url);
    work.write(".ksync.yaml", "applications: []\n");
    let first = work.commit_and_push("first");
    work.write("apps/guestbook/cm.yaml", "kind: ConfigMap\n");
    let second = work.commit_and_push("second");
    assert_ne!(first, second);

    let scratch = temp_dir("ls-remote");
    let refs = run(git_cmd(scratch.path()).args(["ls-remote", &url]));
    assert!(refs.contains(&format!("{second}\trefs/heads/main")), "{refs}");
}

#[test]
fn git_servers_do_not_share_repositories() {
    let a = GitServer::start();
    let b = GitServer::start();
    a.create_repo("only-on-a");
    let scratch = temp_dir("ls-remote");
    let out = git_cmd(scratch.path()).args(["ls-remote", &b.url("only-on-a")]).output().unwrap();
    assert!(!out.status.success(), "b must not serve a's repository");
}

#[test]
fn tools_are_the_pinned_versions() {
    let tools = Tools::get();
    let home = temp_dir("tools");
    let helm = run(tools.helm(home.path()).args(["version", "--short"]));
    assert!(helm.starts_with("v4."), "helm {helm}");
    let kubectl = run(tools.kubectl(home.path()).args(["version", "--client", "-o", "json"]));
    assert!(kubectl.contains("\"gitVersion\": \"v1.35."), "kubectl {kubectl}");
}

/// `kubectl apply --server-side --dry-run=server -f crds/`: the API server accepts our CRDs, CEL
/// rules and cost estimates included (simcluster, or the real cluster of `KSYNC_E2E_KUBECONFIG`).
fn api_server_accepts_the_crds(cluster: Cluster) {
    let tools = Tools::get();
    let home = temp_dir("kubectl");
    let out = run(cluster
        .kubectl(&tools, home.path())
        .args(["apply", "--server-side", "--dry-run=server", "--field-manager=kuvryn-sync-test", "-f"])
        .arg(testkit::repo_root().join("crds")));
    for crd in ["repositories", "applications", "revisions", "healthchecks"] {
        assert!(out.contains(&format!("{crd}.sync.kuvryn.io")), "{out}");
    }
}

testkit::both!(api_server_accepts_the_crds,);

/// The test kit finds the binaries at run time (a library gets no `CARGO_BIN_EXE_*`): the very
/// files Cargo built for this package's tests.
#[test]
fn the_kit_runs_the_binaries_cargo_built_for_these_tests() {
    let same =
        |a: &std::path::Path, b: &str| a.canonicalize().unwrap() == std::path::Path::new(b).canonicalize().unwrap();
    let controller = testkit::manager::bin();
    assert!(same(&controller, env!("CARGO_BIN_EXE_ksync-controller")), "{}", controller.display());
    // The root package's tests get `ksync` from beside `ksync-controller`.
    assert_eq!(testkit::binaries::built("ksync"), controller.with_file_name("ksync"));
}
