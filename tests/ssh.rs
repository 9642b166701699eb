//! Fetching over SSH through the shared Git cache, against a real `sshd` on loopback: the key
//! pair and `known_hosts` come from the credentials as a Repository's Secret holds them
//! (`identity`, `known_hosts`), and gix runs the system `ssh`.
//!
//! Needs `/usr/sbin/sshd`: `scripts/install-tools` installs it.

use std::time::Duration;

use kuvryn_sync::source::{CacheConfig, Credentials, Error, GitCache, Reference};
use testkit::ssh::{KeyPair, SshServer};
use testkit::{WorkTree, temp_dir};

const T: Duration = Duration::from_secs(30);

fn cache(dir: &std::path::Path) -> GitCache {
    GitCache::new(CacheConfig::new(dir)).unwrap()
}

fn branch(b: &str) -> Reference {
    Reference::Branch(b.into())
}

fn ssh_creds(identity: &[u8], known_hosts: Option<&str>) -> Credentials {
    Credentials {
        identity: Some(identity.to_vec()),
        known_hosts: known_hosts.map(|k| k.as_bytes().to_vec()),
        ..Default::default()
    }
}

/// A server with repository `name` holding one commit on `main`; returns (server, url, commit).
fn serve(name: &str) -> (SshServer, String, String) {
    let server = SshServer::start();
    let bare = server.create_repo(name);
    let work = WorkTree::clone(bare.to_str().unwrap());
    work.write("apps/web/cm.yaml", "kind: ConfigMap\n");
    let head = work.commit_and_push("first");
    let url = server.url(name);
    (server, url, head)
}

/// The base64 body lines of an OpenSSH private key (what must never show up anywhere).
fn key_lines(private: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(private)
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 16)
        .map(String::from)
        .collect()
}

fn assert_no_key(text: &str, private: &[u8]) {
    for line in key_lines(private) {
        assert!(!text.contains(&line), "the private key leaked into: {text}");
    }
}

/// Every `ksync-ssh-*` folder left in the temporary folder that still holds this private key
/// (the key files of one operation must be gone when it returns). Each test has its own keys,
/// so tests running at the same time do not see each other's folders.
fn leftover_key_dirs(private: &[u8]) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("ksync-ssh-"))
        .map(|e| e.path())
        .filter(|d| std::fs::read(d.join("identity")).is_ok_and(|k| k == private))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_identity_and_known_hosts_fetch_and_check_out() {
    let (server, url, head) = serve("platform");
    let dir = temp_dir("cache");
    let cache = cache(dir.path());
    let creds = ssh_creds(&server.client.private, Some(&server.known_hosts()));

    let r = cache.resolve(&url, &branch("main"), &creds, T).await;
    let r = r.unwrap_or_else(|e| panic!("resolve over ssh: {e}\nsshd log:\n{}", server.log()));
    assert_eq!(r.commit, head);
    assert!(r.fetched);
    let checkout = cache.checkout(&url, &creds, &head, "apps/web").await.unwrap();
    assert_eq!(std::fs::read_to_string(checkout.path().join("cm.yaml")).unwrap(), "kind: ConfigMap\n");
    assert!(server.log().contains("Accepted publickey"), "{}", server.log());

    // Up to date: contacted again, nothing downloaded.
    let again = cache.resolve(&url, &branch("main"), &creds, T).await.unwrap();
    assert_eq!(again.commit, head);
    assert!(!again.fetched);

    // The key files lived only for the operations; the cache folder never holds them.
    assert_eq!(leftover_key_dirs(&server.client.private), Vec::<std::path::PathBuf>::new());
    let mut stack = vec![dir.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                assert!(bytes != server.client.private, "the private key was written to {}", p.display());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_server_does_not_accept_is_an_auth_error_without_the_key() {
    let (server, url, _) = serve("locked");
    let keys = temp_dir("keys");
    let stranger = KeyPair::generate(keys.path(), "stranger");
    let dir = temp_dir("cache");

    let e = cache(dir.path())
        .resolve(&url, &branch("main"), &ssh_creds(&stranger.private, Some(&server.known_hosts())), T)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Auth(_)), "{e:?}\nsshd log:\n{}", server.log());
    let text = e.to_string();
    assert!(text.contains("Permission denied (publickey)"), "{text}");
    assert!(text.contains("identity"), "says which Secret key to fix: {text}");
    assert_no_key(&text, &stranger.private);
    assert_no_key(&format!("{e:?}"), &stranger.private);
    assert_eq!(leftover_key_dirs(&stranger.private), Vec::<std::path::PathBuf>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_host_key_is_refused_and_says_to_fix_known_hosts() {
    let (server, url, head) = serve("guarded");
    let keys = temp_dir("keys");
    let impostor = KeyPair::generate(keys.path(), "impostor");
    let impostor_key = impostor.public.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    // Known hosts that name other hosts only, and one that names this host with another key.
    let other_host = format!("[127.0.0.1]:1 {impostor_key}\n");
    let wrong_key = format!("[127.0.0.1]:{} {impostor_key}\n", server.port());
    let dir = temp_dir("cache");
    let cache = cache(dir.path());
    let private = &server.client.private;

    for (case, known_hosts, why) in [
        ("no known_hosts", None, "not in known_hosts"),
        ("another host's known_hosts", Some(other_host.as_str()), "not in known_hosts"),
        ("a different key for this host", Some(wrong_key.as_str()), "differs from the one in known_hosts"),
    ] {
        let e = cache.resolve(&url, &branch("main"), &ssh_creds(private, known_hosts), T).await.unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, Error::Auth(_)), "{case}: {e:?}");
        assert!(text.contains("host key") && text.contains("not trusted"), "{case}: {text}");
        assert!(text.contains(why), "{case}: {text}");
        assert!(text.contains("known_hosts of the credentials Secret"), "{case}: {text}");
        // Not ssh's advice to edit the temporary known_hosts file of the operation.
        assert!(!text.contains("ssh-keygen") && !text.contains("ksync-ssh-"), "{case}: {text}");
        assert_no_key(&text, private);
    }
    // The client never got as far as offering its key.
    assert!(!server.log().contains("Accepted publickey"), "{}", server.log());
    assert_eq!(leftover_key_dirs(private), Vec::<std::path::PathBuf>::new());

    // Trusting the host fixes it.
    let r = cache.resolve(&url, &branch("main"), &ssh_creds(private, Some(&server.known_hosts())), T).await.unwrap();
    assert_eq!(r.commit, head);
}

// See: issue 18 (tenants cannot read each other's Git source).
/// A commit fetched over SSH with tenant A's deploy key is in the cache; tenant B naming the same
/// URL and commit with its own key (which the server does not accept), or with no key at all,
/// gets the server's refusal, never the cached commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_cached_for_one_key_is_not_served_to_another() {
    let (server, url, head) = serve("tenant-a");
    let keys = temp_dir("keys");
    let stranger = KeyPair::generate(keys.path(), "tenant-b");
    let dir = temp_dir("cache");
    let cache = cache(dir.path());
    let a = ssh_creds(&server.client.private, Some(&server.known_hosts()));
    assert_eq!(cache.resolve(&url, &branch("main"), &a, T).await.unwrap().commit, head);

    let b = ssh_creds(&stranger.private, Some(&server.known_hosts()));
    let keyless = Credentials { known_hosts: Some(server.known_hosts().into_bytes()), ..Default::default() };
    for (who, creds) in [("another key", &b), ("no key", &keyless)] {
        let e = cache.resolve(&url, &Reference::Commit(head.clone()), creds, T).await.map(|r| r.commit);
        assert!(matches!(e, Err(Error::Auth(_))), "{who}: got {e:?}, want an auth error\nsshd log:\n{}", server.log());
    }
}

// See: issue 18. A Secret without an `identity` must not borrow the controller's own SSH keys:
// its agent (`SSH_AUTH_SOCK`), default key files and `~/.ssh/config` are never used, or a tenant
// could read whatever the controller's user can.
/// Runs [`keyless_credentials_inner`] as a child of this test binary with `SSH_AUTH_SOCK`
/// pointing to an agent that holds the key the server accepts (the process environment is the
/// controller's, so the child is the controller here).
#[test]
fn keyless_credentials_never_use_the_controllers_ssh_agent() {
    let (server, url, _) = serve("agent");
    let keys = temp_dir("agent");
    let sock = keys.path().join("agent.sock");
    let mut agent = std::process::Command::new("ssh-agent")
        .arg("-D")
        .arg("-a")
        .arg(&sock)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("ssh-agent");
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while !sock.exists() && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let key = keys.path().join("key");
    std::fs::write(&key, &server.client.private).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let added = std::process::Command::new("ssh-add").arg(&key).env("SSH_AUTH_SOCK", &sock).output().unwrap();
    assert!(added.status.success(), "ssh-add: {}", String::from_utf8_lossy(&added.stderr));
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "keyless_credentials_inner", "--ignored", "--nocapture"])
        .env("SSH_AUTH_SOCK", &sock)
        .env("KSYNC_TEST_SSH_URL", &url)
        .env("KSYNC_TEST_SSH_KNOWN_HOSTS", server.known_hosts())
        .output()
        .unwrap();
    let _ = agent.kill();
    let _ = agent.wait();
    let out = format!("{}{}", String::from_utf8_lossy(&child.stdout), String::from_utf8_lossy(&child.stderr));
    assert!(out.contains("1 passed"), "{out}\nsshd log:\n{}", server.log());
}

/// The child of [`keyless_credentials_never_use_the_controllers_ssh_agent`] (does nothing when
/// run on its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by keyless_credentials_never_use_the_controllers_ssh_agent"]
async fn keyless_credentials_inner() {
    let (Ok(url), Ok(known_hosts)) = (std::env::var("KSYNC_TEST_SSH_URL"), std::env::var("KSYNC_TEST_SSH_KNOWN_HOSTS"))
    else {
        return;
    };
    let listed = std::process::Command::new("ssh-add").arg("-l").output().unwrap();
    assert!(listed.status.success(), "the agent holds the server's key: {}", String::from_utf8_lossy(&listed.stdout));
    let dir = temp_dir("cache");
    let keyless = Credentials { known_hosts: Some(known_hosts.into_bytes()), ..Default::default() };
    let e = cache(dir.path()).resolve(&url, &branch("main"), &keyless, T).await.map(|r| r.commit);
    assert!(matches!(e, Err(Error::Auth(_))), "got {e:?}, want an auth error: the agent's key was used");
}
