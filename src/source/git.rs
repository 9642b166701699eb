//! The blocking gix operations on one cached bare repository. Callers run them on a blocking
//! thread ([`super::GitCache`] does) and interrupt them through the `interrupt` flag on timeout.
//!
//! gix only, no `git` subprocess (SSH runs the system `ssh` through `core.sshCommand`, as git
//! does; see [`ssh_command`]). Facts of gix 0.90 this relies on: a bare repository stores no
//! fetch refspec, so every fetch passes `+refs/heads/*:refs/heads/*` and
//! `+refs/tags/*:refs/tags/*`; protocol v2 is forced (v1 ignores fetch filters); dumb HTTP is
//! not supported and is reported as such.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use gix::ObjectId;
use gix::bstr::ByteSlice;

use super::url::Remote;
use super::{Credentials, Error, Reference, Result};

/// The refspecs every fetch uses: all branches and tags, force-updated (a force-push moves a
/// branch backwards).
pub const REFSPECS: [&str; 2] = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"];

/// How to reach the remote for one operation.
pub struct Access<'a> {
    /// The remote.
    pub remote: &'a Remote,
    /// Its credentials.
    pub credentials: &'a Credentials,
    /// Connect and low-speed timeout.
    pub timeout: Duration,
    /// Set by the caller to abort a running fetch.
    pub interrupt: &'a AtomicBool,
}

/// What a resolve did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The commit the reference points to.
    pub commit: ObjectId,
    /// Whether a pack was downloaded.
    pub fetched: bool,
    /// Bytes of the pack downloaded.
    pub bytes: u64,
    /// Whether the remote was contacted at all.
    pub contacted: bool,
}

fn internal(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("{what}: {e}"))
}

/// Open the bare repository at `dir`, creating it if missing, isolated from any system or
/// user Git configuration.
pub fn open(dir: &Path, overrides: Vec<String>) -> Result<gix::Repository> {
    if !dir.join("HEAD").exists() {
        std::fs::create_dir_all(dir).map_err(|e| internal("creating the cache directory", e))?;
        gix::init_bare(dir).map_err(|e| internal("initializing the cache repository", e))?;
    }
    let options = gix::open::Options::isolated().config_overrides(overrides);
    gix::open_opts(dir, options).map_err(|e| internal("opening the cache repository", e))
}

/// Resolve `reference` to a commit, fetching from the remote when needed. A full commit id
/// already in the object database needs no network at all.
pub fn resolve(dir: &Path, reference: &Reference, access: &Access<'_>) -> Result<Resolved> {
    if let Reference::Commit(c) = reference {
        let repo = open(dir, Vec::new())?;
        if let Some(id) = local_commit(&repo, c)? {
            return Ok(Resolved { commit: id, fetched: false, bytes: 0, contacted: false });
        }
        let fetched = fetch(dir, None, access)?;
        let repo = open(dir, Vec::new())?;
        return match local_commit(&repo, c)? {
            Some(id) => Ok(Resolved { commit: id, ..fetched }),
            None => Err(Error::NotFound(format!(
                "commit {c} is not reachable from any branch or tag of {}",
                access.remote.key
            ))),
        };
    }
    let wanted = match reference {
        Reference::Branch(b) => format!("refs/heads/{b}"),
        Reference::Tag(t) => format!("refs/tags/{t}"),
        Reference::Commit(_) => unreachable!(),
    };
    let outcome = fetch(dir, Some(&wanted), access)?;
    Ok(outcome)
}

/// A commit in the object database by full or abbreviated id.
fn local_commit(repo: &gix::Repository, hex: &str) -> Result<Option<ObjectId>> {
    if hex.len() == 40 {
        let Ok(id) = ObjectId::from_hex(hex.as_bytes()) else {
            return Err(Error::NotFound(format!("{hex:?} is not a commit id")));
        };
        return match repo.try_find_object(id) {
            Ok(Some(obj)) if obj.kind == gix::object::Kind::Commit => Ok(Some(id)),
            Ok(Some(obj)) => Err(Error::NotFound(format!("{hex} is a {}, not a commit", obj.kind))),
            Ok(None) => Ok(None),
            Err(e) => Err(internal("reading the object database", e)),
        };
    }
    match repo.rev_parse_single(format!("{hex}^{{commit}}").as_str()) {
        Ok(id) => Ok(Some(id.detach())),
        Err(e) => {
            let msg = e.to_string();
            if msg.contains("ambiguous") || msg.contains("Ambiguous") {
                Err(Error::NotFound(format!("the abbreviated commit {hex} is ambiguous: use more digits")))
            } else {
                Ok(None)
            }
        }
    }
}

fn overrides(access: &Access<'_>, ssh_dir: Option<&Path>) -> Vec<String> {
    let secs = access.timeout.as_secs().max(1);
    let mut o = vec![
        "protocol.version=2".to_string(),
        format!("gitoxide.http.connectTimeout={}", access.timeout.as_millis().max(1)),
        "http.lowSpeedLimit=1".to_string(),
        format!("http.lowSpeedTime={secs}"),
        "gitoxide.credentials.terminalPrompt=false".to_string(),
    ];
    if let Some(d) = ssh_dir {
        o.push(format!("core.sshCommand={}", ssh_command(d, secs)));
        // The command is a shell script, so gix cannot tell the variant from its name; without
        // this it runs the script once more with `-G` to find out.
        o.push("ssh.variant=ssh".to_string());
    }
    o
}

/// The `core.sshCommand` for one operation whose key files are in `dir`: the system `ssh`,
/// non-interactive, trusting only the hosts in `dir/known_hosts`, offering only `dir/identity`
/// (when the Secret has one) and nothing of the controller's own: no ssh configuration file
/// (`-F /dev/null`: neither `~/.ssh/config` nor `/etc/ssh/ssh_config`), no agent
/// (`SSH_AUTH_SOCK`), no default key files (`~/.ssh/id_*`). Without that, a Secret without an
/// `identity` would log in with whatever the controller's user can reach. gix runs it with
/// `sh -c` and appends the port, `user@host` and the remote command as `"$@"`.
///
/// ssh's stderr goes to `dir/stderr`: gix would copy the lines it does not recognize (such as
/// "Host key verification failed.") to the controller's stderr and report only an unexpected end
/// of the stream; [`classify`] reads the file instead.
fn ssh_command(dir: &Path, connect_timeout_secs: u64) -> String {
    let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', r"'\''"));
    let mut cmd = format!(
        "exec ssh -F /dev/null -o BatchMode=yes -o ConnectTimeout={connect_timeout_secs} -o UserKnownHostsFile={} \
         -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o IdentityAgent=none -o IdentitiesOnly=yes",
        quote(&dir.join("known_hosts"))
    );
    let id = dir.join("identity");
    if id.exists() {
        cmd.push_str(&format!(" -i {}", quote(&id)));
    } else {
        cmd.push_str(" -o IdentityFile=none");
    }
    cmd.push_str(&format!(" \"$@\" 2>{}", quote(&dir.join("stderr"))));
    cmd
}

/// What `ssh` wrote to stderr during this operation (empty when nothing, or not SSH).
fn ssh_stderr(ssh_dir: Option<&Path>) -> String {
    ssh_dir
        .and_then(|d| std::fs::read(d.join("stderr")).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Write the SSH identity and known hosts into a private directory for one operation.
fn ssh_files(creds: &Credentials) -> Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix("ksync-ssh-").tempdir().map_err(|e| internal("ssh key directory", e))?;
    let write = |name: &str, data: &[u8]| -> Result<()> {
        let mut data = data.to_vec();
        if !data.ends_with(b"\n") {
            data.push(b'\n');
        }
        let path = dir.path().join(name);
        std::fs::write(&path, &data).map_err(|e| internal("writing ssh files", e))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| internal("writing ssh files", e))
    };
    if let Some(id) = &creds.identity {
        write("identity", id)?;
    }
    write("known_hosts", creds.known_hosts.as_deref().unwrap_or_default())?;
    Ok(dir)
}

/// Fetch every branch and tag. With `wanted` (a full ref name), resolve it on the remote and
/// skip the download when its object is already local.
fn fetch(dir: &Path, wanted: Option<&str>, access: &Access<'_>) -> Result<Resolved> {
    let creds = access.credentials;
    // Removed when this function returns, on every path.
    let ssh = if access.remote.scheme == "ssh" { Some(ssh_files(creds)?) } else { None };
    let ssh_dir = ssh.as_ref().map(|d| d.path());
    let fail = |e: &dyn std::fmt::Display| classify(access, e, &ssh_stderr(ssh_dir));
    let repo = open(dir, overrides(access, ssh_dir))?;
    let remote = repo
        .remote_at(access.remote.url.as_str())
        .and_then(|r| r.with_refspecs(REFSPECS, gix::remote::Direction::Fetch))
        .map_err(|e| Error::Unsupported(format!("Git URL {}: {}", access.remote.key, creds.redact(&e.to_string()))))?;
    let connection = if access.remote.scheme == "git" {
        // gix's git:// transport has a connect timeout but no read timeout: a server that
        // accepts and never answers would hang the fetch forever. Bring our own stream.
        remote.to_connection_with_transport(daemon_transport(access)?)
    } else {
        let mut c = remote.connect(gix::remote::Direction::Fetch).map_err(|e| fail(&e))?;
        if let Some(options) = http_options(&repo, access)? {
            c.set_transport_options(options);
        }
        c
    };
    let username = creds.username.clone().unwrap_or_else(|| "git".to_string());
    let password = creds.password.clone();
    let connection = connection.with_credentials(move |action| match action {
        gix::credentials::helper::Action::Get(ctx) => {
            Ok(password.clone().map(|password| gix::credentials::protocol::Outcome {
                identity: gix::sec::identity::Account {
                    username: username.clone(),
                    password,
                    oauth_refresh_token: None,
                },
                next: ctx.into(),
            }))
        }
        _ => Ok(None),
    });
    let prepare = connection.prepare_fetch(gix::progress::Discard, Default::default()).map_err(|e| fail(&e))?;
    let mut target = None;
    if let Some(wanted) = wanted {
        let found = prepare.ref_map().remote_refs.iter().find_map(|r| {
            let (name, object, peeled) = r.unpack();
            (name == wanted.as_bytes().as_bstr()).then(|| peeled.or(object).map(|o| o.to_owned()))
        });
        let what = if wanted.starts_with("refs/heads/") { "branch" } else { "tag" };
        let short = wanted.trim_start_matches("refs/heads/").trim_start_matches("refs/tags/");
        match found {
            Some(Some(id)) => target = Some(id),
            _ => {
                return Err(Error::NotFound(format!("{what} {short:?} not found in {}", access.remote.key)));
            }
        }
    }
    if let Some(id) = target
        && repo.has_object(id)
    {
        // Already here: no download. Still update the local refs? Not needed: resolution is by
        // id, and the next fetch updates them.
        let commit = peel_to_commit(&repo, id)?;
        return Ok(Resolved { commit, fetched: false, bytes: 0, contacted: true });
    }
    let outcome = prepare.receive(gix::progress::Discard, access.interrupt).map_err(|e| fail(&e))?;
    let bytes = match &outcome.status {
        gix::remote::fetch::Status::Change { write_pack_bundle, .. } => write_pack_bundle
            .data_path
            .as_ref()
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .unwrap_or_default(),
        _ => 0,
    };
    let fetched = matches!(outcome.status, gix::remote::fetch::Status::Change { .. });
    drop(ssh);
    let repo = open(dir, Vec::new())?;
    let commit = match target {
        Some(id) => peel_to_commit(&repo, id)?,
        None => ObjectId::null(gix::hash::Kind::Sha1),
    };
    Ok(Resolved { commit, fetched, bytes, contacted: true })
}

type BoxedTransport = Box<dyn gix::protocol::transport::client::blocking_io::Transport + Send>;

/// A `git://` connection whose socket has read and write timeouts.
fn daemon_transport(access: &Access<'_>) -> Result<BoxedTransport> {
    use std::net::ToSocketAddrs;
    let url = gix::url::parse(access.remote.url.as_bytes().as_bstr())
        .map_err(|e| Error::Unsupported(format!("Git URL {}: {e}", access.remote.key)))?;
    let host = url.host().unwrap_or_default().to_string();
    let port = url.port;
    let unreachable = |e: std::io::Error| Error::Transport(format!("connecting to {}: {e}", access.remote.key));
    let addr = (host.as_str(), port.unwrap_or(9418))
        .to_socket_addrs()
        .map_err(unreachable)?
        .next()
        .ok_or_else(|| Error::Transport(format!("{}: the host has no address", access.remote.key)))?;
    let stream = std::net::TcpStream::connect_timeout(&addr, access.timeout).map_err(|e| {
        if e.kind() == std::io::ErrorKind::TimedOut {
            Error::Timeout(format!("connecting to {} timed out after {:?}", access.remote.key, access.timeout))
        } else {
            unreachable(e)
        }
    })?;
    stream.set_read_timeout(Some(access.timeout)).map_err(unreachable)?;
    stream.set_write_timeout(Some(access.timeout)).map_err(unreachable)?;
    let write = stream.try_clone().map_err(unreachable)?;
    let connection = gix::protocol::transport::client::git::blocking_io::Connection::new(
        stream,
        write,
        gix::protocol::transport::Protocol::V2,
        url.path.clone(),
        Some((host, port)),
        gix::protocol::transport::client::git::ConnectMode::Daemon,
        false,
    );
    Ok(Box::new(connection))
}

/// HTTP(S) transport options from the repository configuration, plus an overall request
/// timeout and the CA of the Secret (`ca.crt`), which the reqwest backend takes only through
/// its client builder (it ignores `http.sslCAInfo`).
fn http_options(repo: &gix::Repository, access: &Access<'_>) -> Result<Option<Box<dyn std::any::Any>>> {
    use gix::protocol::transport::client::blocking_io::http;
    let Some(mut options) = repo
        .transport_options(access.remote.url.as_str(), None)
        .map_err(|e| Error::Unsupported(format!("Git URL {}: {e}", access.remote.key)))?
    else {
        return Ok(None);
    };
    let Some(http_options) = options.downcast_mut::<http::Options>() else { return Ok(Some(options)) };
    let timeout = access.timeout;
    let ca = match &access.credentials.ca_cert {
        Some(pem) => Some(reqwest::Certificate::from_pem_bundle(pem).map_err(|e| {
            Error::Auth(format!("the ca.crt of the credentials Secret is not a PEM certificate bundle: {e}"))
        })?),
        None => None,
    };
    let configure: Box<http::reqwest::ConfigureClientFn> = Box::new(move |mut builder| {
        builder = builder.timeout(timeout);
        match &ca {
            Some(certs) => {
                for cert in certs {
                    builder = builder.add_root_certificate(cert.clone());
                }
            }
            None => {
                if let Some(tls) = platform_tls() {
                    builder = builder.tls_backend_preconfigured(tls.clone());
                }
            }
        }
        Ok(builder)
    });
    let backend = http::reqwest::Options { configure_client: Some(configure), configure_request: None };
    http_options.backend = Some(std::sync::Arc::new(std::sync::Mutex::new(backend)));
    Ok(Some(options))
}

/// The TLS configuration reqwest builds by default (the platform's roots, through
/// `rustls-platform-verifier`), built once per process. Built by reqwest, it reads every
/// certificate of the system's store from disk (a 219 KB bundle and about 290 files) for each
/// connection gix opens to an HTTPS remote, that is each poll of each Repository. `None` when
/// it cannot be built (no readable store): reqwest then builds its own and reports why. A Secret's `ca.crt` still builds its own (tenants choose
/// it: not kept).
fn platform_tls() -> Option<&'static rustls::ClientConfig> {
    static TLS: std::sync::OnceLock<Option<rustls::ClientConfig>> = std::sync::OnceLock::new();
    TLS.get_or_init(|| {
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
        let verifier = rustls_platform_verifier::Verifier::new(provider.clone()).ok()?;
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .dangerous()
            .with_custom_certificate_verifier(std::sync::Arc::new(verifier))
            .with_no_client_auth();
        // gix speaks HTTP/1.1 (what reqwest offers for an HTTP/1 client).
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Some(tls)
    })
    .as_ref()
}

fn peel_to_commit(repo: &gix::Repository, id: ObjectId) -> Result<ObjectId> {
    let obj = repo.find_object(id).map_err(|e| internal("reading the fetched object", e))?;
    let commit = obj
        .peel_to_kind(gix::object::Kind::Commit)
        .map_err(|_| Error::NotFound(format!("{id} does not point to a commit")))?;
    Ok(commit.id)
}

/// The most specific line of a gix error chain ("Caused by: ... N: <cause>"), or the text.
fn root_cause(text: &str) -> String {
    let causes: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.split_once(": ").is_some_and(|(n, _)| n.chars().all(|c| c.is_ascii_digit())))
        .collect();
    let first = text.lines().next().unwrap_or_default().trim();
    match causes.last() {
        Some(last) => {
            let cause = last.split_once(": ").map(|(_, c)| c).unwrap_or(last);
            // Prefer a cause that says something over a bare "I/O error".
            let meaningful = causes
                .iter()
                .rev()
                .map(|l| l.split_once(": ").map(|(_, c)| c).unwrap_or(l))
                .find(|c| !c.starts_with("I/O error"))
                .unwrap_or(cause);
            meaningful.to_string()
        }
        None => first.to_string(),
    }
}

/// The lines of ssh's stderr worth showing: without blank lines and the `@@@` banner, at most
/// the last three, bounded.
fn ssh_messages(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("@@@")).collect();
    let text = lines[lines.len().saturating_sub(3)..].join(" ");
    text.chars().take(600).collect()
}

/// Turn a transport error into a clear, credential-free error. `ssh_stderr` is what `ssh`
/// wrote (empty for other transports): its messages explain what gix sees only as a closed
/// stream.
fn classify(access: &Access<'_>, e: &dyn std::fmt::Display, ssh_stderr: &str) -> Error {
    let url = &access.remote.key;
    let ssh = access.credentials.redact(&ssh_messages(ssh_stderr));
    let ssh_lower = ssh.to_ascii_lowercase();
    if ssh_lower.contains("host key verification failed")
        || ssh_lower.contains("host key is known")
        || ssh_lower.contains("host identification has changed")
    {
        let why = if ssh_lower.contains("has changed") {
            "its host key differs from the one in known_hosts"
        } else {
            "its host key is not in known_hosts"
        };
        // Only ssh's verdict: its banner and advice (`ssh-keygen -R` on our temporary
        // known_hosts file) would mislead here.
        let verdict: Vec<&str> = ssh_stderr
            .lines()
            .map(str::trim)
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                l.contains("host key")
                    && !l.contains("ssh-keygen")
                    && !l.starts_with("add correct")
                    && !l.starts_with("it is also possible")
            })
            .collect();
        let verdict = access.credentials.redact(&verdict.join(" ").chars().take(600).collect::<String>());
        return Error::Auth(format!(
            "the SSH host key of {url} is not trusted ({why}): put the server's public host key in \
             known_hosts of the credentials Secret (for example the output of ssh-keyscan): {verdict}"
        ));
    }
    if ssh_lower.contains("permission denied") {
        if access.credentials.identity.is_none() {
            return Error::Auth(format!(
                "SSH authentication to {url} failed: the Repository gives no SSH key (put the private key in \
                 identity of the Secret in spec.secretRef): {ssh}"
            ));
        }
        return Error::Auth(format!(
            "SSH authentication to {url} failed: the server did not accept the identity of the credentials \
             Secret: {ssh}"
        ));
    }
    let cause = access.credentials.redact(&root_cause(&format!("{e:#}")));
    let text = if ssh.is_empty() { cause } else { format!("{ssh} ({cause})") };
    let lower = text.to_ascii_lowercase();
    if lower.contains("interrupt") {
        return Error::Timeout(format!("fetching {url} timed out after {:?}", access.timeout));
    }
    if lower.contains("clear text") {
        return Error::Unsupported(format!(
            "credentials are sent only over HTTPS: use an https:// URL for {url} (plain http:// works without credentials)"
        ));
    }
    if lower.contains("401")
        || lower.contains("403")
        || lower.contains("authentication")
        || lower.contains("permission denied")
        || lower.contains("credentials")
    {
        if access.credentials.is_anonymous() {
            return Error::Auth(format!(
                "authentication to {url} failed: the Repository gives no credentials (put username and password \
                 in the Secret in spec.secretRef): {text}"
            ));
        }
        return Error::Auth(format!("authentication to {url} failed: {text}"));
    }
    if lower.contains("certificate") {
        return Error::Transport(format!(
            "TLS to {url} failed: {text}; for a private CA, put its certificate in the credentials Secret as ca.crt"
        ));
    }
    if lower.contains("'dumb' protocol") {
        return Error::Unsupported(format!(
            "{url} speaks only the dumb HTTP protocol, which is not supported: serve it with smart HTTP (git http-backend): {text}"
        ));
    }
    if lower.contains("timed out") || lower.contains("timeout") {
        return Error::Timeout(format!("fetching {url} timed out: {text}"));
    }
    Error::Transport(format!("fetching {url} failed: {text}"))
}

/// The tree of `path` (repository-relative, `""` for the root) in `commit`.
pub fn tree_at(repo: &gix::Repository, commit: ObjectId, path: &str) -> Result<ObjectId> {
    let c = repo.find_commit(commit).map_err(|_| Error::NotFound(format!("commit {commit} is not in the cache")))?;
    let tree = c.tree().map_err(|e| internal("reading the commit's tree", e))?;
    if path.is_empty() {
        return Ok(tree.id);
    }
    let entry = tree
        .lookup_entry_by_path(path)
        .map_err(|e| internal("reading the tree", e))?
        .ok_or_else(|| Error::NotFound(format!("path {path:?} does not exist in commit {commit}")))?;
    if !entry.mode().is_tree() {
        return Err(Error::NotFound(format!("path {path:?} in commit {commit} is not a directory")));
    }
    Ok(entry.object_id())
}

/// The content of the regular file at `path` in `commit`; `None` when it does not exist.
/// A symlink, directory or submodule at `path` is an error.
pub fn read_file(repo: &gix::Repository, commit: ObjectId, path: &str) -> Result<Option<Vec<u8>>> {
    let c = repo.find_commit(commit).map_err(|_| Error::NotFound(format!("commit {commit} is not in the cache")))?;
    let tree = c.tree().map_err(|e| internal("reading the commit's tree", e))?;
    let Some(entry) = tree.lookup_entry_by_path(path).map_err(|e| internal("reading the tree", e))? else {
        return Ok(None);
    };
    let mode = entry.mode();
    if mode.is_link() {
        return Err(Error::UnsafePath(format!("{path} is a symlink: it must be a regular file")));
    }
    if !mode.is_blob() {
        return Err(Error::UnsafePath(format!("{path} is not a regular file")));
    }
    let blob = repo.find_object(entry.object_id()).map_err(|e| internal("reading the file", e))?;
    Ok(Some(blob.data.clone()))
}

/// Open for reading only (no network, no overrides). A repository nothing was fetched into yet
/// (these credentials never resolved anything of this remote) is not created: it is an error.
pub fn open_existing(dir: &Path) -> Result<gix::Repository> {
    if !dir.join("HEAD").exists() {
        return Err(Error::NotFound(
            "nothing was fetched from this remote with these credentials yet: resolve the commit first".into(),
        ));
    }
    open(dir, Vec::new())
}

/// The first line of a commit message, for Events (bounded).
pub fn commit_subject(repo: &gix::Repository, commit: ObjectId) -> Option<String> {
    let c = repo.find_commit(commit).ok()?;
    let msg = c.message_raw_sloppy().to_str_lossy().to_string();
    let line = msg.lines().next().unwrap_or_default().to_string();
    Some(line.chars().take(120).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_tls_configuration_is_one_reqwest_takes() {
        let has_store = std::fs::read_dir("/etc/ssl/certs").is_ok_and(|mut d| d.next().is_some());
        let Some(tls) = platform_tls() else {
            assert!(!has_store, "the system has a certificate store, and no TLS configuration was built from it");
            return;
        };
        assert!(std::ptr::eq(tls, platform_tls().unwrap()), "built once");
        // A configuration reqwest does not recognize (another rustls) fails the build.
        reqwest::blocking::ClientBuilder::new().tls_backend_preconfigured(tls.clone()).build().unwrap();
        let unknown = reqwest::blocking::ClientBuilder::new().tls_backend_preconfigured(42u8).build();
        assert!(unknown.is_err());
    }

    fn access_with<'a>(remote: &'a Remote, credentials: &'a Credentials, flag: &'a AtomicBool) -> Access<'a> {
        Access { remote, credentials, timeout: Duration::from_secs(5), interrupt: flag }
    }

    #[test]
    fn the_ssh_command_quotes_its_paths_and_captures_stderr() {
        let dir = tempfile::Builder::new().prefix("ksync-test-it's ").tempdir().unwrap();
        std::fs::write(dir.path().join("identity"), "k").unwrap();
        let cmd = ssh_command(dir.path(), 7);
        let d = dir.path().display().to_string().replace('\'', r"'\''");
        assert_eq!(
            cmd,
            format!(
                "exec ssh -F /dev/null -o BatchMode=yes -o ConnectTimeout=7 -o UserKnownHostsFile='{d}/known_hosts' \
                 -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o IdentityAgent=none \
                 -o IdentitiesOnly=yes -i '{d}/identity' \"$@\" 2>'{d}/stderr'"
            )
        );
        // Without an identity, no key at all: not ssh's default files, not the agent.
        std::fs::remove_file(dir.path().join("identity")).unwrap();
        let keyless = ssh_command(dir.path(), 7);
        assert!(!keyless.contains("-i "), "{keyless}");
        assert!(keyless.contains("-o IdentityFile=none") && keyless.contains("-o IdentityAgent=none"), "{keyless}");
    }

    #[test]
    fn ssh_failures_are_classified_from_its_stderr() {
        let remote = Remote::parse("ssh://git@example.com/org/repo.git").unwrap();
        let creds = Credentials {
            identity: Some(b"-----BEGIN\nAAAAsecretkeymaterial0123\n-----END\n".to_vec()),
            ..Default::default()
        };
        let flag = AtomicBool::new(false);
        let access = access_with(&remote, &creds, &flag);
        let eof = "failed to fill whole buffer";
        let changed = "@@@@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n\
            It is also possible that a host key has just been changed.\n\
            Add correct host key in /tmp/ksync-ssh-x/known_hosts to get rid of this message.\n\
            Offending ED25519 key in /tmp/ksync-ssh-x/known_hosts:1\n\
            remove with:\n  ssh-keygen -f \"/tmp/ksync-ssh-x/known_hosts\" -R \"example.com\"\n\
            Host key for example.com has changed and you have requested strict checking.\n\
            Host key verification failed.\n";
        let e = classify(&access, &eof, changed);
        assert!(matches!(e, Error::Auth(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "the SSH host key of ssh://git@example.com/org/repo is not trusted (its host key differs from the one \
             in known_hosts): put the server's public host key in known_hosts of the credentials Secret (for \
             example the output of ssh-keyscan): Host key for example.com has changed and you have requested \
             strict checking. Host key verification failed."
        );
        let unknown = "No ED25519 host key is known for example.com and you have requested strict checking.\n\
            Host key verification failed.\n";
        let e = classify(&access, &eof, unknown);
        assert!(e.to_string().contains("(its host key is not in known_hosts)"), "{e}");

        let denied = "git@example.com: Permission denied (publickey).\n";
        let e = classify(&access, &eof, denied);
        assert!(matches!(e, Error::Auth(_)), "{e:?}");
        assert!(
            e.to_string()
                .ends_with("identity of the credentials Secret: git@example.com: Permission denied (publickey)."),
            "{e}"
        );

        // Without a key at all, the message says that is the problem.
        let keyless = Credentials { known_hosts: Some(b"x".to_vec()), ..Default::default() };
        let e = classify(&access_with(&remote, &keyless, &flag), &eof, denied);
        assert!(matches!(e, Error::Auth(_)), "{e:?}");
        assert!(e.to_string().contains("the Repository gives no SSH key"), "{e}");

        // Anything else keeps ssh's words and gix's cause; a key echoed back is redacted.
        let refused = "ssh: connect to host example.com port 22: Connection refused\nAAAAsecretkeymaterial0123\n";
        let e = classify(&access, &eof, refused);
        assert!(matches!(e, Error::Transport(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "fetching ssh://git@example.com/org/repo failed: ssh: connect to host example.com port 22: Connection \
             refused <redacted> (failed to fill whole buffer)"
        );
        let e = classify(&access, &eof, "ssh: connect to host example.com port 22: Connection timed out\n");
        assert!(matches!(e, Error::Timeout(_)), "{e:?}");
    }
}
