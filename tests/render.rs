//! The renderers with the real `helm` and `kubectl kustomize` binaries on charts and overlays
//! under `testdata/render/`.

use std::time::Duration;

use kuvryn_sync::api::application::{HelmRender, Render, RenderType};
use kuvryn_sync::render::{Error, Limits, Renderer, Request, Tools};
use serde_json::{Value, json};

fn renderer(limits: Limits) -> Renderer {
    let t = testkit::Tools::get();
    Renderer::new(
        Tools { helm: t.bin.join("helm"), kubectl: t.bin.join("kubectl") },
        limits,
        kuvryn_sync::render::DEFAULT_CACHE_BYTES,
    )
}

fn dir(name: &str) -> std::path::PathBuf {
    testkit::repo_root().join("testdata/render").join(name)
}

fn render_of(type_: RenderType, helm: Option<HelmRender>) -> Render {
    Render { type_: Some(type_), helm }
}

fn names(objects: &[Value]) -> Vec<String> {
    objects.iter().map(|o| o["metadata"]["name"].as_str().unwrap_or_default().to_string()).collect()
}

fn request<'a>(d: &'a std::path::Path, render: &'a Render) -> Request<'a> {
    Request {
        dir: d,
        tree: None,
        render,
        renderer: kuvryn_sync::render::renderer_of(render, d),
        application: "web",
        namespace: "team-a",
        values_from: Vec::new(),
        secrets: Vec::new(),
        capabilities: None,
        dependencies: Vec::new(),
        packaged: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_manifests_in_a_stable_order() {
    let d = dir("plain");
    let render = render_of(RenderType::Yaml, None);
    let objects = renderer(Limits::default()).render(&request(&d, &render)).await.unwrap();
    // a.yaml (two documents, empty ones skipped), nested/list.yml (a List, flattened), z.json;
    // .ksync.yaml and README.md are not manifests.
    assert_eq!(names(&objects), ["a", "b", "c", "d", "e"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_overlay_with_the_real_binary() {
    let d = dir("kustomize/overlay");
    let render = render_of(RenderType::Kustomize, None);
    let objects = renderer(Limits::default()).render(&request(&d, &render)).await.unwrap();
    assert_eq!(names(&objects), ["prod-settings"]);
    assert_eq!(objects[0]["data"]["mode"], "prod");

    let d = dir("kustomize-remote");
    let e = renderer(Limits::default()).render(&request(&d, &render)).await.unwrap_err();
    assert!(e.to_string().contains("remote reference; rendering has no network access"), "{e}");

    let d = dir("plain");
    let e = renderer(Limits::default()).render(&request(&d, &render)).await.unwrap_err();
    assert!(e.to_string().contains("no kustomization.yaml"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_template_with_values_in_order_and_hooks_as_objects() {
    let d = dir("chart");
    let helm = HelmRender {
        release_name: Some("demo".into()),
        values: Some(json!({"replicas": 3}).as_object().unwrap().clone()),
        values_from: Vec::new(),
        credentials: Vec::new(),
    };
    let render = render_of(RenderType::Helm, Some(helm));
    let mut req = request(&d, &render);
    req.values_from = vec![json!({"greeting": "from-secret", "replicas": 2})];
    let objects = renderer(Limits::default()).render(&req).await.unwrap();
    let mut n = names(&objects);
    n.sort();
    assert_eq!(n, ["demo-migrate", "demo-settings"], "the hook is rendered as an object");
    let cm = objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    assert_eq!(cm["metadata"]["namespace"], "team-a");
    assert_eq!(cm["data"]["greeting"], "from-secret");
    assert_eq!(cm["data"]["replicas"], "3", "inline values win over valuesFrom");

    // The release name defaults to the Application's.
    let render = render_of(RenderType::Helm, None);
    let objects = renderer(Limits::default()).render(&request(&d, &render)).await.unwrap();
    assert!(names(&objects).contains(&"web-settings".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_failures_are_bounded_and_redacted() {
    let d = dir("chart");
    let render = render_of(RenderType::Helm, None);
    let mut req = request(&d, &render);
    req.values_from = vec![json!({"failWith": "the-db-password-is-hunter2"})];
    req.secrets = vec!["the-db-password-is-hunter2".into()];
    let e = renderer(Limits::default()).render(&req).await.unwrap_err();
    let Error::Failed { message, retryable } = &e else { panic!("{e:?}") };
    assert!(!retryable);
    assert!(message.starts_with("helm template failed:"), "{message}");
    assert!(message.contains("<redacted>") && !message.contains("hunter2"), "{message}");
    assert!(message.len() < 1200, "bounded: {}", message.len());

    let tiny = Limits { max_output_bytes: 100, ..Limits::default() };
    let e = renderer(tiny).render(&request(&d, &render)).await.unwrap_err();
    assert!(e.to_string().contains("the output limit"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renderer_that_hangs_is_killed_at_the_timeout() {
    let scratch = testkit::temp_dir("hang");
    let fake = scratch.path().join("helm");
    std::fs::write(&fake, "#!/bin/sh\nexec sleep 600\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = Renderer::new(
        Tools { helm: fake, kubectl: "kubectl".into() },
        Limits { timeout: Duration::from_secs(1), ..Limits::default() },
        kuvryn_sync::render::DEFAULT_CACHE_BYTES,
    );
    let d = dir("chart");
    let render = render_of(RenderType::Helm, None);
    let e = r.render(&request(&d, &render)).await.unwrap_err();
    assert!(matches!(e, Error::Failed { retryable: true, .. }), "{e:?}");
    assert!(e.to_string().contains("did not finish within 1s"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_cached_by_tree_settings_and_values() {
    let scratch = testkit::temp_dir("cache-src");
    std::fs::write(scratch.path().join("cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: one}\n").unwrap();
    let r = renderer(Limits::default());
    let render = render_of(RenderType::Yaml, None);
    let mut req = request(scratch.path(), &render);
    req.tree = Some("tree-1".into());
    let first = r.render(&req).await.unwrap();
    // Same tree id: served from the cache, even though the files changed underneath.
    std::fs::write(scratch.path().join("cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: two}\n").unwrap();
    let again = r.render(&req).await.unwrap();
    assert_eq!(names(&first), ["one"]);
    assert_eq!(again, first, "the cached result, not the changed files");
    // Another tree id renders again.
    req.tree = Some("tree-2".into());
    assert_eq!(names(&r.render(&req).await.unwrap()), ["two"]);
}

/// A stand-in for `name` that records its arguments, one a line, in `args` and prints nothing.
fn recording_tool(dir: &std::path::Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let log = dir.join(format!("{name}.args"));
    let tool = dir.join(name);
    std::fs::write(&tool, format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\n", log.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    (tool, log)
}

// See: issue 18. `releaseName: --set-file=x=/proc/1/environ` became a flag of helm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_release_names_are_checked_before_helm_runs() {
    let scratch = testkit::temp_dir("release-name");
    let (helm, log) = recording_tool(scratch.path(), "helm");
    let r = Renderer::new(
        Tools { helm, kubectl: "kubectl".into() },
        Limits::default(),
        kuvryn_sync::render::DEFAULT_CACHE_BYTES,
    );
    let d = dir("chart");
    for bad in ["--set-file=x=/proc/1/environ", "Web", "web_1", "web-"] {
        let helm = HelmRender { release_name: Some(bad.into()), ..HelmRender::default() };
        let render = render_of(RenderType::Helm, Some(helm));
        let e = r.render(&request(&d, &render)).await.unwrap_err();
        let Error::Invalid(message) = &e else { panic!("{bad}: {e:?}") };
        assert!(message.starts_with("spec.source.render.helm.releaseName"), "{message}");
        assert!(message.contains("is not a Helm release name"), "{message}");
        assert!(!log.exists(), "{bad}: helm ran with {:?}", std::fs::read_to_string(&log));
    }
    // The default, the Application's name, follows the same rule (Application names may be
    // longer than 53 characters).
    let render = render_of(RenderType::Helm, None);
    let mut req = request(&d, &render);
    let long = "a".repeat(54);
    req.application = &long;
    let e = r.render(&req).await.unwrap_err();
    assert!(matches!(&e, Error::Invalid(m) if m.contains("set spec.source.render.helm.releaseName")), "{e:?}");
    assert!(!log.exists());
    // A valid name runs helm.
    let helm = HelmRender { release_name: Some("web.v2".into()), ..HelmRender::default() };
    let render = render_of(RenderType::Helm, Some(helm));
    r.render(&request(&d, &render)).await.unwrap();
    assert!(log.exists());
}

// See: issue 18. Every argument that comes from the Application or the repository goes after
// `--`, so it is never parsed as an option of the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_get_their_positional_arguments_after_a_double_dash() {
    let scratch = testkit::temp_dir("double-dash");
    let (helm, helm_log) = recording_tool(scratch.path(), "helm");
    let (kubectl, kubectl_log) = recording_tool(scratch.path(), "kubectl");
    let r = Renderer::new(Tools { helm, kubectl }, Limits::default(), kuvryn_sync::render::DEFAULT_CACHE_BYTES);
    let args = |log: &std::path::Path| -> Vec<String> {
        std::fs::read_to_string(log).unwrap().lines().map(str::to_string).collect()
    };

    let d = dir("chart");
    let helm = HelmRender { values: Some(json!({"a": 1}).as_object().unwrap().clone()), ..HelmRender::default() };
    let render = render_of(RenderType::Helm, Some(helm));
    r.render(&request(&d, &render)).await.unwrap();
    let helm_args = args(&helm_log);
    assert_eq!(helm_args.len(), 7, "{helm_args:?}");
    assert_eq!(helm_args[..3], ["template", "--namespace=team-a", "--include-crds"], "{helm_args:?}");
    assert!(helm_args[3].starts_with("--values=") && helm_args[3].ends_with("values-0.json"), "{helm_args:?}");
    assert_eq!(helm_args[4..], ["--", "web", "."], "{helm_args:?}");

    let d = dir("kustomize/overlay");
    let render = render_of(RenderType::Kustomize, None);
    r.render(&request(&d, &render)).await.unwrap();
    assert_eq!(args(&kubectl_log), ["kustomize", "--", "."]);
}

// See: issue 18. With the real helm: after `--`, a release name that looks like a flag is
// refused as a name. Without it, helm would read the file into the chart's values.
#[test]
fn after_the_double_dash_helm_reads_no_flag() {
    let scratch = testkit::temp_dir("helm-dash");
    let secret = scratch.path().join("secret.txt");
    std::fs::write(&secret, "controller-secret-value").unwrap();
    let release = format!("--set-file=greeting={}", secret.display());
    let out = testkit::Tools::get()
        .helm(scratch.path())
        .args(kuvryn_sync::render::helm::template_args(&release, ".", "team-a", &[], &Default::default()))
        .current_dir(dir("chart"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stdout.contains("controller-secret-value"), "helm read the file: {stdout}");
    assert!(!out.status.success(), "{stdout}");
    assert!(stderr.contains("invalid release name"), "{stderr}");
}

/// The render cache is bounded in bytes: results are kept by tree id until what they hold
/// would pass the bound, the least recently used go first, and one larger than the bound is not
/// kept at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_render_cache_is_bounded_in_bytes() {
    let d = dir("plain");
    let render = render_of(RenderType::Yaml, None);
    let one = {
        let r = renderer(Limits::default());
        let objects = r.render(&Request { tree: Some("t0".into()), ..request(&d, &render) }).await.unwrap();
        let size = serde_json::to_string(&*objects).unwrap().len();
        assert_eq!(r.cached_bytes(), size as u64, "one result cached, weighed by its objects as JSON");
        size as u64
    };
    // Room for two results: the third evicts one, and the total never passes the bound.
    let t = testkit::Tools::get();
    let tools = || Tools { helm: t.bin.join("helm"), kubectl: t.bin.join("kubectl") };
    let r = Renderer::new(tools(), Limits::default(), 2 * one + one / 2);
    for tree in ["t1", "t2", "t3", "t4"] {
        r.render(&Request { tree: Some(tree.into()), ..request(&d, &render) }).await.unwrap();
        assert!(r.cached_bytes() <= 2 * one + one / 2, "{} > bound", r.cached_bytes());
    }
    assert!(r.cached_bytes() >= one, "something is cached");
    // Smaller than one result: nothing is kept.
    let r = Renderer::new(tools(), Limits::default(), one - 1);
    r.render(&Request { tree: Some("t5".into()), ..request(&d, &render) }).await.unwrap();
    assert_eq!(r.cached_bytes(), 0);
}
