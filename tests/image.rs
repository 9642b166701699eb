//! The manager's container image (`deploy/image/Containerfile`, assembled by
//! `scripts/build-image`): its root filesystem holds everything the manager runs, each binary
//! starts from it as the image's user; and, where buildah is installed, the image itself builds
//! and runs. The chart's Pods run from this root filesystem in `tests/install.rs`.

use std::path::Path;
use std::process::Command;

use testkit::image::{ImageRoot, isolation};
use testkit::{repo_root, temp_dir};

/// The image's root filesystem holds what the manager runs: each binary starts from it, chrooted,
/// as the image's user, with only the files `scripts/build-image` put there (and the runtime's
/// `/dev`, `/proc` and `/sys`).
#[test]
fn the_images_binaries_run_from_its_root_filesystem() {
    let how = match isolation() {
        Ok(how) => how,
        Err(why) => {
            eprintln!("SKIP the_images_binaries_run_from_its_root_filesystem: {why}");
            return;
        }
    };
    let image = ImageRoot::build(&testkit::manager::bin());
    assert_eq!(image.user, "65532:65532", "the image runs as nonroot");
    let dir = temp_dir("image-run");
    let root = image.container_root(dir.path(), "probe");
    for (argv, expect) in [
        (vec!["/usr/local/bin/ksync-controller", "--version"], "ksync-controller "),
        (vec!["/usr/local/bin/helm", "version", "--short"], "v4."),
        (vec!["/usr/local/bin/kubectl", "version", "--client"], "Client Version: v1.35"),
        (vec!["/usr/bin/ssh", "-V"], "OpenSSH_"),
    ] {
        let argv: Vec<String> = argv.into_iter().map(String::from).collect();
        let out = image.command(how, &root, &argv).output().expect("run from the image");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains(expect), "{argv:?} from the image: {}\n{text}", out.status);
    }
    // Nothing but what build-image put there: no shell to fall back on.
    let sh = image.command(how, &root, &["/bin/sh".to_string(), "-c".into(), "true".into()]).output().unwrap();
    assert!(!sh.status.success(), "the image has no shell");
}

/// `buildah` with its own storage under `dir` (vfs: no overlay mounts needed), so the test
/// neither needs nor touches the machine's images.
fn buildah(dir: &Path) -> Command {
    let conf = dir.join("storage.conf");
    if !conf.exists() {
        let text = format!(
            "[storage]\ndriver = \"vfs\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
            dir.join("graph").display(),
            dir.join("run").display()
        );
        std::fs::write(&conf, text).expect("storage.conf");
    }
    let mut cmd = Command::new("buildah");
    cmd.env("CONTAINERS_STORAGE_CONF", &conf).env("BUILDAH_ISOLATION", "chroot");
    cmd
}

/// `scripts/build-image` builds the image with buildah, FROM scratch with no registry; its
/// configuration is the Containerfile's (nonroot user, entrypoint, environment) and its binaries
/// run in a container of it.
#[test]
fn the_image_builds_with_buildah_and_runs_as_nonroot() {
    let dir = temp_dir("buildah");
    // Whether buildah can build here at all (as a non-root user it needs /etc/subuid entries): a
    // one-file image FROM scratch.
    let probe = dir.path().join("probe");
    std::fs::create_dir_all(probe.join("rootfs")).unwrap();
    std::fs::write(probe.join("rootfs/probe"), "probe").unwrap();
    std::fs::write(probe.join("Containerfile"), "FROM scratch\nCOPY rootfs/ /\n").unwrap();
    match buildah(dir.path()).args(["build", "--quiet", "-t", "localhost/probe:1"]).arg(&probe).output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            eprintln!(
                "SKIP the_image_builds_with_buildah_and_runs_as_nonroot: buildah cannot build here: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return;
        }
        Err(_) => {
            eprintln!(
                "SKIP the_image_builds_with_buildah_and_runs_as_nonroot: no buildah (Debian: apt-get install buildah); \
                 the_images_binaries_run_from_its_root_filesystem still checks the image's files"
            );
            return;
        }
    }
    let tag = "localhost/kuvryn-sync:test";
    // build-image tries buildah before podman and docker.
    let printed = testkit::run(
        Command::new(repo_root().join("scripts/build-image"))
            .arg("--binary")
            .arg(testkit::manager::bin())
            .args(["--tag", tag])
            .env("CONTAINERS_STORAGE_CONF", dir.path().join("storage.conf"))
            .env("BUILDAH_ISOLATION", "chroot"),
    );
    assert_eq!(printed.trim(), tag, "build-image prints the image it built");

    let inspect = testkit::run(buildah(dir.path()).args(["inspect", "--type", "image", tag]));
    let config: serde_json::Value = serde_json::from_str(&inspect).expect("buildah inspect JSON");
    let oci = &config["OCIv1"]["config"];
    assert_eq!(oci["User"], "65532:65532", "{oci}");
    assert_eq!(oci["Entrypoint"], serde_json::json!(["/usr/local/bin/ksync-controller"]), "{oci}");
    assert_eq!(oci["Cmd"], serde_json::json!(["run"]), "{oci}");
    let env: Vec<&str> = oci["Env"].as_array().unwrap().iter().filter_map(|e| e.as_str()).collect();
    for want in ["HOME=/tmp", "KSYNC_HELM=/usr/local/bin/helm", "KSYNC_KUBECTL=/usr/local/bin/kubectl"] {
        assert!(env.contains(&want), "{want} in {env:?}");
    }

    let container = testkit::run(buildah(dir.path()).args(["from", tag])).trim().to_string();
    for (argv, expect) in [
        (vec!["/usr/local/bin/ksync-controller", "--version"], "ksync-controller "),
        (vec!["/usr/local/bin/helm", "version", "--short"], "v4."),
        (vec!["/usr/bin/ssh", "-V"], "OpenSSH_"),
    ] {
        let out = buildah(dir.path())
            .args(["run", "--isolation", "chroot", &container, "--"])
            .args(&argv)
            .output()
            .expect("buildah run");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains(expect), "{argv:?} in the image: {}\n{text}", out.status);
    }
    let _ = buildah(dir.path()).args(["rm", &container]).output();
    let _ = buildah(dir.path()).args(["rmi", "--all", "--force"]).output();
}
