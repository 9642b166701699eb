//! The chart servers of `testkit::charts` with the real `helm` v4: what each accepts and refuses,
//! and the exact invocations (flags, files written, errors) its rustdoc documents.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use testkit::charts::{HelmRepo, OciRegistry, chart, crd_group};
use testkit::{Tools, temp_dir, wait_for};

/// What a `helm` run did.
struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Run `cmd`, writing `stdin` (for `--password-stdin`) when given.
fn output(cmd: &mut Command, stdin: Option<&str>) -> Out {
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    if let Some(input) = stdin {
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write stdin");
    }
    let out = child.wait_with_output().expect("helm output");
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Run `cmd` and panic with its output unless it succeeds.
fn ok(cmd: &mut Command, stdin: Option<&str>) -> Out {
    let out = output(cmd, stdin);
    assert!(out.ok, "{cmd:?} failed:\nstdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    out
}

/// Every file under `dir`, relative, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.push(path.strip_prefix(root).expect("under root").display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The packages in `dir`.
fn packages(dir: &Path) -> Vec<String> {
    files_under(dir).into_iter().filter(|f| f.ends_with(".tgz")).collect()
}

fn base64(s: &str) -> String {
    run_stdout(Command::new("base64").arg("-w0"), s)
}

fn run_stdout(cmd: &mut Command, stdin: &str) -> String {
    ok(cmd, Some(stdin)).stdout
}

#[test]
fn helm_repo_serves_every_published_version_and_refuses_a_wrong_password() {
    let tools = Tools::get();
    let repo = HelmRepo::start("bob", "pw-bob");
    let url = repo.url();
    let src = temp_dir("charts");
    repo.publish(&chart(src.path(), "alpha", "1.0.0").write());
    repo.publish(&chart(src.path(), "alpha", "1.1.0").write());
    let index = std::fs::read_to_string(repo.served().join("index.yaml")).expect("index.yaml");
    for version in ["1.0.0", "1.1.0"] {
        assert!(index.contains(&format!("version: {version}")), "{index}");
        assert!(index.contains(&format!("- {url}/alpha-{version}.tgz")), "{index}");
    }

    // `helm repo add`: wrong password, then no CA, then right.
    let home = temp_dir("helm-home");
    let add = |password: &str, ca: bool| {
        let mut c = tools.helm(home.path());
        c.args(["repo", "add", "kuvryn", &url, "--username", "bob", "--password-stdin"]);
        if ca {
            c.arg("--ca-file").arg(repo.ca_file());
        }
        output(&mut c, Some(password))
    };
    let wrong = add("wrong", true);
    assert!(!wrong.ok);
    assert_eq!(
        wrong.stderr.trim(),
        format!(
            "Error: looks like \"{url}\" is not a valid chart repository or cannot be reached: \
             failed to fetch {url}/index.yaml : 401 Unauthorized"
        )
    );
    assert_eq!(repo.requests().last().map(String::as_str), Some("GET /index.yaml  401"));
    let no_ca = add("pw-bob", false);
    assert!(!no_ca.ok);
    assert_eq!(
        no_ca.stderr.trim(),
        format!(
            "Error: looks like \"{url}\" is not a valid chart repository or cannot be reached: Get \"{url}/index.yaml\": \
             tls: failed to verify certificate: x509: certificate signed by unknown authority"
        )
    );
    let right = add("pw-bob", true);
    assert!(right.ok, "{}", right.stderr);
    assert_eq!(right.stdout.trim(), "\"kuvryn\" has been added to your repositories");
    assert_eq!(
        files_under(home.path()),
        [
            "cache/repository/kuvryn-charts.txt",
            "cache/repository/kuvryn-index.yaml",
            "config/repositories.lock",
            "config/repositories.yaml"
        ]
    );
    let repositories = std::fs::read_to_string(home.path().join("config/repositories.yaml")).expect("repositories");
    for field in [
        format!("caFile: {}", repo.ca_file().display()),
        "username: bob".into(),
        "password: pw-bob".into(),
        format!("url: {url}"),
        "name: kuvryn".into(),
    ] {
        assert!(repositories.contains(&field), "{field} not in\n{repositories}");
    }

    // `helm pull --repo` with flags only, in a fresh home: nothing is left behind.
    let home = temp_dir("helm-home");
    let dest = temp_dir("pulled");
    let pull = |version: &str, password: &str| {
        output(
            tools
                .helm(home.path())
                .args([
                    "pull",
                    "alpha",
                    "--repo",
                    &url,
                    "--version",
                    version,
                    "--username",
                    "bob",
                    "--password",
                    password,
                ])
                .arg("--ca-file")
                .arg(repo.ca_file())
                .arg("-d")
                .arg(dest.path()),
            None,
        )
    };
    let wrong = pull("1.0.0", "wrong");
    assert!(!wrong.ok);
    assert_eq!(
        wrong.stderr.trim(),
        format!(
            "Error: looks like \"{url}\" is not a valid chart repository or cannot be reached: \
             failed to fetch {url}/index.yaml : 401 Unauthorized"
        )
    );
    assert!(pull("1.0.0", "pw-bob").ok);
    let range = pull("~1.1.0", "pw-bob");
    assert!(range.ok, "{}", range.stderr);
    assert_eq!(packages(dest.path()), ["alpha-1.0.0.tgz", "alpha-1.1.0.tgz"]);
    assert!(files_under(home.path()).is_empty(), "{:?}", files_under(home.path()));

    // SSL_CERT_FILE instead of --ca-file.
    let dest = temp_dir("pulled");
    ok(
        tools
            .helm(home.path())
            .env("SSL_CERT_FILE", repo.ca_file())
            .args(["pull", "alpha", "--repo", &url, "--username", "bob", "--password", "pw-bob"])
            .arg("-d")
            .arg(dest.path()),
        None,
    );
    assert_eq!(packages(dest.path()), ["alpha-1.1.0.tgz"]);
}

#[test]
fn oci_registry_takes_pushes_and_pulls_with_credentials_and_refuses_a_wrong_password() {
    let tools = Tools::get();
    let registry = OciRegistry::start("alice", "pw-alice");
    let host = registry.host();
    let src = temp_dir("charts");
    let reference = registry.push(&chart(src.path(), "beta", "1.0.0").write());
    assert_eq!(reference, format!("oci://{host}/charts/beta"));
    registry.push(&chart(src.path(), "beta", "1.2.0").write());

    let home = temp_dir("helm-home");
    let dest = temp_dir("pulled");
    let pull = |version: &str, credentials: Option<&str>, ca: bool| {
        let mut c = tools.helm(home.path());
        c.args(["pull", &reference, "--version", version]).arg("-d").arg(dest.path());
        if let Some(password) = credentials {
            c.args(["--username", "alice", "--password", password]);
        }
        if ca {
            c.arg("--ca-file").arg(registry.ca_file());
        }
        output(&mut c, None)
    };
    let manifest = format!("https://{host}/v2/charts/beta/manifests/1.0.0");
    let wrong = pull("1.0.0", Some("wrong"), true);
    assert!(!wrong.ok);
    assert_eq!(
        wrong.stderr.trim(),
        format!(
            "Error: failed to perform \"FetchReference\" on source: GET \"{manifest}\": response status code 401: \
             unauthorized: authentication required: [map[Action:pull Class: Name:charts/beta Type:repository]]"
        )
    );
    let none = pull("1.0.0", None, true);
    assert_eq!(
        none.stderr.trim(),
        format!(
            "Error: failed to perform \"FetchReference\" on source: GET \"{manifest}\": basic credential not found"
        )
    );
    let no_ca = pull("1.0.0", Some("pw-alice"), false);
    assert_eq!(
        no_ca.stderr.trim(),
        format!(
            "Error: failed to perform \"FetchReference\" on source: Get \"{manifest}\": tls: failed to verify \
             certificate: x509: certificate signed by unknown authority"
        )
    );
    let right = pull("1.0.0", Some("pw-alice"), true);
    assert!(right.ok, "{}", right.stderr);
    // helm prints `Pulled:` and `Digest:` on stderr.
    assert!(
        right.stderr.starts_with(&format!("Pulled: {host}/charts/beta:1.0.0\nDigest: sha256:")),
        "{}",
        right.stderr
    );
    let range = pull("^1.0.0", Some("pw-alice"), true);
    assert!(range.ok, "{}", range.stderr);
    assert_eq!(packages(dest.path()), ["beta-1.0.0.tgz", "beta-1.2.0.tgz"]);
    assert!(files_under(home.path()).is_empty(), "{:?}", files_under(home.path()));
    // The registry answered the wrong password and the missing credentials with 401.
    wait_for("the registry's access log", Duration::from_secs(5), || {
        let requests = registry.requests();
        (requests.iter().filter(|r| r.ends_with(" 401")).count() >= 2).then_some(())
    });

    // `helm registry login`: wrong password, then right; then pulls need no credentials.
    let login = |password: &str| {
        output(
            tools
                .helm(home.path())
                .args(["registry", "login", &host, "--username", "alice", "--password-stdin"])
                .arg("--ca-file")
                .arg(registry.ca_file()),
            Some(password),
        )
    };
    let wrong = login("wrong");
    assert!(!wrong.ok);
    assert_eq!(
        wrong.stderr.trim(),
        format!(
            "Error: authenticating to \"{host}\": GET \"https://{host}/v2/\": response status code 401: unauthorized: \
             authentication required"
        )
    );
    assert!(files_under(home.path()).is_empty(), "{:?}", files_under(home.path()));
    let right = login("pw-alice");
    assert!(right.ok, "{}", right.stderr);
    assert_eq!(right.stderr.trim(), "Login Succeeded", "on stderr");
    assert_eq!(files_under(home.path()), ["config/registry/config.json"]);
    let config = std::fs::read_to_string(home.path().join("config/registry/config.json")).expect("config.json");
    let config: serde_json::Value = serde_json::from_str(&config).expect("config.json is JSON");
    assert_eq!(config, serde_json::json!({"auths": {host.clone(): {"auth": base64("alice:pw-alice")}}}));
    let dest2 = temp_dir("pulled");
    ok(
        tools
            .helm(home.path())
            .args(["pull", &reference, "--version", "1.2.0"])
            .arg("--ca-file")
            .arg(registry.ca_file())
            .arg("-d")
            .arg(dest2.path()),
        None,
    );
    // SSL_CERT_FILE instead of --ca-file.
    ok(
        tools
            .helm(home.path())
            .env("SSL_CERT_FILE", registry.ca_file())
            .args(["pull", &reference, "--version", "1.0.0"])
            .arg("-d")
            .arg(dest2.path()),
        None,
    );
    assert_eq!(packages(dest2.path()), ["beta-1.0.0.tgz", "beta-1.2.0.tgz"]);
}

/// An umbrella chart `umbrella` 0.1.0 (with the CRD) depending on `alpha ~1.0.0` from `repo`
/// and `beta ^1.0.0` from `registry`, which serve alpha 1.0.0 and 1.1.0 and beta 1.0.0.
fn umbrella(repo: &HelmRepo, registry: &OciRegistry, src: &Path) -> PathBuf {
    repo.publish(&chart(src, "alpha", "1.0.0").write());
    repo.publish(&chart(src, "alpha", "1.1.0").write());
    registry.push(&chart(src, "beta", "1.0.0").write());
    chart(src, "umbrella", "0.1.0")
        .dependency("alpha", "~1.0.0", &repo.url())
        .dependency("beta", "^1.0.0", &registry.url())
        .with_crd()
        .write()
}

#[test]
fn an_umbrella_chart_builds_with_a_dependency_from_each_server() {
    let tools = Tools::get();
    let repo = HelmRepo::start("bob", "pw-bob");
    let registry = OciRegistry::start("alice", "pw-alice");
    let src = temp_dir("charts");
    let umbrella = umbrella(&repo, &registry, src.path());

    // The documented setup: `helm repo add` and `helm registry login`, each with its own CA.
    let home = temp_dir("helm-home");
    ok(
        tools
            .helm(home.path())
            .args(["repo", "add", "kuvryn", &repo.url(), "--username", "bob", "--password-stdin"])
            .arg("--ca-file")
            .arg(repo.ca_file()),
        Some("pw-bob"),
    );
    ok(
        tools
            .helm(home.path())
            .args(["registry", "login", &registry.host(), "--username", "alice", "--password-stdin"])
            .arg("--ca-file")
            .arg(registry.ca_file()),
        Some("pw-alice"),
    );
    let build = || {
        ok(
            tools
                .helm(home.path())
                .args(["dependency", "build"])
                .arg(&umbrella)
                .arg("--ca-file")
                .arg(registry.ca_file()),
            None,
        )
    };
    let built = build();
    assert!(built.stdout.contains("Saving 2 charts"), "{}", built.stdout);
    assert_eq!(packages(&umbrella.join("charts")), ["alpha-1.0.0.tgz", "beta-1.0.0.tgz"]);
    let lock = std::fs::read_to_string(umbrella.join("Chart.lock")).expect("Chart.lock");
    assert!(lock.contains(&format!("repository: {}\n  version: 1.0.0", repo.url())), "{lock}");
    assert!(lock.contains(&format!("repository: {}\n  version: 1.0.0", registry.url())), "{lock}");

    // Rendering makes no request to either server.
    let counts = || (repo.requests().len(), registry.requests().len());
    // The registry logs a request after answering it: wait for the chart's two blobs (its config
    // and its content), the last requests of the build.
    let blob_gets = || registry.requests().iter().filter(|r| r.starts_with("GET /v2/charts/beta/blobs/")).count();
    wait_for("the registry to log the chart's blobs", Duration::from_secs(5), || (blob_gets() == 2).then_some(()));
    let before = counts();
    let template =
        |extra: &[&str]| ok(tools.helm(home.path()).args(["template", "r"]).arg(&umbrella).args(extra), None).stdout;
    let rendered = template(&[]);
    for name in ["r-umbrella", "r-alpha", "r-beta"] {
        assert!(rendered.contains(&format!("name: {name}\n")), "{name} not in\n{rendered}");
    }
    assert!(rendered.contains("chart: alpha\n  version: \"1.0.0\""), "{rendered}");
    assert!(rendered.contains("chart: beta\n  version: \"1.0.0\""), "{rendered}");
    assert!(!rendered.contains("kind: Widget"), "{rendered}");
    assert!(!rendered.contains("CustomResourceDefinition"), "{rendered}");
    let group = crd_group("umbrella");
    let with_crd = template(&["--include-crds", "--api-versions", &format!("{group}/v1/Widget")]);
    assert!(with_crd.contains(&format!("name: widgets.{group}")), "{with_crd}");
    assert!(
        with_crd.contains(&format!("apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: r-umbrella")),
        "{with_crd}"
    );
    assert_eq!(counts(), before, "helm template made requests");

    // helm keeps no chart cache: building again downloads both charts again.
    build();
    wait_for("a second download from each server", Duration::from_secs(5), || {
        let repo_tgz = repo.requests().iter().filter(|r| r.starts_with("GET /alpha-1.0.0.tgz ")).count();
        (repo_tgz == 2 && blob_gets() == 4).then_some(())
    });
}

#[test]
fn dependency_build_with_hand_written_credentials_and_wrong_passwords() {
    let tools = Tools::get();
    let repo = HelmRepo::start("bob", "pw-bob");
    let registry = OciRegistry::start("alice", "pw-alice");
    let src = temp_dir("charts");
    let umbrella = umbrella(&repo, &registry, src.path());
    let url = repo.url();
    let host = registry.host();

    // repositories.yaml and registry/config.json written by hand: no `repo add`, no login.
    let write_config = |home: &Path, repo_password: &str, registry_password: &str| {
        std::fs::create_dir_all(home.join("config/registry")).expect("config folder");
        std::fs::write(
            home.join("config/repositories.yaml"),
            format!(
                "apiVersion: \"\"\nrepositories:\n- name: kuvryn\n  url: {url}\n  caFile: {}\n  username: bob\n  password: {repo_password}\n",
                repo.ca_file().display()
            ),
        )
        .expect("repositories.yaml");
        std::fs::write(
            home.join("config/registry/config.json"),
            serde_json::json!({"auths": {host.clone(): {"auth": base64(&format!("alice:{registry_password}"))}}})
                .to_string(),
        )
        .expect("config.json");
    };
    let build = |home: &Path, extra: &[&str]| {
        let _ = std::fs::remove_dir_all(umbrella.join("charts"));
        let _ = std::fs::remove_file(umbrella.join("Chart.lock"));
        output(
            tools
                .helm(home)
                .args(["dependency", "build"])
                .arg(&umbrella)
                .arg("--ca-file")
                .arg(registry.ca_file())
                .args(extra),
            None,
        )
    };

    let home = temp_dir("helm-home");
    write_config(home.path(), "pw-bob", "pw-alice");
    let built = build(home.path(), &[]);
    assert!(built.ok, "{}\n{}", built.stdout, built.stderr);
    assert_eq!(packages(&umbrella.join("charts")), ["alpha-1.0.0.tgz", "beta-1.0.0.tgz"]);
    assert_eq!(
        files_under(home.path()),
        [
            "cache/repository/kuvryn-charts.txt",
            "cache/repository/kuvryn-index.yaml",
            "config/registry/config.json",
            "config/repositories.yaml"
        ]
    );
    // With the index cached, --skip-refresh asks only for the chart.
    let index_gets = || repo.requests().iter().filter(|r| r.starts_with("GET /index.yaml ")).count();
    let before = index_gets();
    let again = build(home.path(), &["--skip-refresh"]);
    assert!(again.ok, "{}", again.stderr);
    assert_eq!(index_gets(), before);

    // --username/--password (for OCI) do not override the repositories.yaml entry's credentials.
    let flags = build(home.path(), &["--username", "alice", "--password", "pw-alice"]);
    assert!(flags.ok, "{}", flags.stderr);

    // A wrong password for the HTTPS repository: a warning on the refresh, then no index.
    let home = temp_dir("helm-home");
    write_config(home.path(), "wrong", "pw-alice");
    let cache = home.path().join("cache/repository");
    let wrong = build(home.path(), &[]);
    assert!(!wrong.ok);
    assert!(
        wrong.stdout.contains(&format!(
            "...Unable to get an update from the \"kuvryn\" chart repository ({url}):\n\tfailed to fetch {url}/index.yaml : 401 Unauthorized\n"
        )),
        "{}",
        wrong.stdout
    );
    assert_eq!(
        wrong.stderr.trim(),
        format!(
            "Error: no cached repository for kuvryn found. (try 'helm repo update'): open {}: no such file or directory",
            cache.join("kuvryn-index.yaml").display()
        )
    );

    // A wrong password for the registry, from config.json or from the flags.
    let tags = format!("oci://{host}/charts: GET \"https://{host}/v2/charts/beta/tags/list\"");
    let want = format!(
        "Error: could not retrieve list of tags for repository {tags}: response status code 401: unauthorized: \
         authentication required: [map[Action:pull Class: Name:charts/beta Type:repository]]"
    );
    let home = temp_dir("helm-home");
    write_config(home.path(), "pw-bob", "wrong");
    let wrong = build(home.path(), &[]);
    assert!(!wrong.ok);
    assert_eq!(wrong.stderr.trim(), want);
    let home = temp_dir("helm-home");
    write_config(home.path(), "pw-bob", "pw-alice");
    std::fs::remove_file(home.path().join("config/registry/config.json")).expect("no registry config");
    let none = build(home.path(), &[]);
    assert_eq!(
        none.stderr.trim(),
        format!("Error: could not retrieve list of tags for repository {tags}: basic credential not found")
    );
    let wrong = build(home.path(), &["--username", "alice", "--password", "wrong"]);
    assert_eq!(wrong.stderr.trim(), want);
    let right = build(home.path(), &["--username", "alice", "--password", "pw-alice"]);
    assert!(right.ok, "{}", right.stderr);

    // No repositories.yaml entry for the HTTPS dependency.
    let home = temp_dir("helm-home");
    let unknown = build(home.path(), &["--username", "alice", "--password", "pw-alice"]);
    assert!(!unknown.ok);
    assert!(
        unknown.stderr.trim().starts_with("Error: no cached repository for helm-manager-")
            && unknown.stderr.contains("found. (try 'helm repo update')"),
        "{}",
        unknown.stderr
    );
}
