//! [`GitCache`]: the process-wide Git object cache.
//!
//! - One bare repository per normalized remote **and credential identity** under
//!   `<dir>/repos/`. The identity is an HMAC-SHA256, under a random key kept in
//!   `<dir>/credential-key` (mode 0600), of every value of the credentials (`username`,
//!   `password`, `identity`, `known_hosts`, `ca.crt`; none at all is an identity too). So
//!   content fetched with one Secret's credentials is only ever served to credentials with the
//!   same values: a tenant naming another tenant's private URL, without credentials or with
//!   other ones, gets its own empty repository, and its fetch is refused by the remote. Every
//!   Repository and Application using the same credentials (one Secret, or copies of it) shares
//!   one repository, which is the common case. The digest is keyed so that a directory name
//!   cannot be used to guess a weak password offline.
//! - `file://` remotes read the controller's own disk: refused unless
//!   [`CacheConfig::allow_local`] (`--allow-local-repositories`) is set.
//! - Single-flight: network operations on one repository run one at a time; a request that
//!   waited while another fetched the same reference takes that result instead of fetching
//!   again, so N Applications asking at once cost one fetch. A full commit id already in the
//!   object database costs no network at all.
//! - Checkouts: the tree of (commit, path) materialized under `<dir>/checkouts/`, cached by
//!   credential identity and tree id in a size-bounded cache (moka): like the objects, a
//!   checkout is only ever served to credentials with the same values as the one that made it. An evicted checkout's directory is deleted once
//!   the last reader drops its handle.
//! - Every network operation has a timeout; on expiry the fetch is interrupted and the
//!   previous state of the cache is kept.
//!
//! Metrics (through the `metrics` facade): `ksync_git_fetches_total{result}`,
//! `ksync_git_fetch_duration_seconds`, `ksync_git_fetch_bytes_total`,
//! `ksync_git_cache_requests_total{cache,result}`, `ksync_git_materialize_duration_seconds`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gix::ObjectId;

use super::checkout::{self, Checkout, Limits};
use super::git::{self, Access};
use super::url::Remote;
use super::{Credentials, Error, Reference, Result};

/// Settings of the cache.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// The cache directory (`--git-cache-dir`).
    pub dir: PathBuf,
    /// Most bytes of materialized checkouts kept (approximate).
    pub checkout_bytes: u64,
    /// Limits of one checkout.
    pub limits: Limits,
    /// Whether `file://` remotes are accepted (`--allow-local-repositories`): they read the
    /// controller's own disk, so only tests and local setups turn this on.
    pub allow_local: bool,
}

impl CacheConfig {
    /// Defaults under `dir`: 1 GiB of checkouts, default limits, no `file://` remotes.
    pub fn new(dir: impl Into<PathBuf>) -> CacheConfig {
        CacheConfig { dir: dir.into(), checkout_bytes: 1 << 30, limits: Limits::default(), allow_local: false }
    }
}

/// The name of the file holding the key of credential identities, in the cache directory.
const CREDENTIAL_KEY_FILE: &str = "credential-key";

/// The key of credential identities: read from `dir`, or created there (32 random bytes, mode
/// 0600) on first use. Kept across restarts so the bare repositories are found again.
fn credential_key(dir: &std::path::Path) -> Result<[u8; 32]> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(CREDENTIAL_KEY_FILE);
    let failed = |e: std::io::Error| Error::Internal(format!("the credential key {}: {e}", path.display()));
    match std::fs::read(&path) {
        Ok(bytes) => {
            return bytes.try_into().map_err(|_| {
                Error::Internal(format!(
                    "the credential key {} is not 32 bytes: remove it (the cached repositories are fetched again)",
                    path.display()
                ))
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed(e)),
    }
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut key)).map_err(failed)?;
    // Written whole under another name, then linked into place: a concurrent start reads either
    // nothing or the whole key, and the first one written wins.
    let tmp = dir.join(format!("{CREDENTIAL_KEY_FILE}.{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&key).and_then(|_| f.sync_all()))
        .map_err(failed)?;
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => credential_key(dir),
        Err(e) => Err(failed(e)),
    }
}

/// HMAC-SHA256 (RFC 2104) of `message` under a 32-byte `key`.
fn hmac_sha256(key: &[u8; 32], message: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let (mut inner_pad, mut outer_pad) = ([0x36u8; 64], [0x5cu8; 64]);
    for (i, k) in key.iter().enumerate() {
        inner_pad[i] ^= k;
        outer_pad[i] ^= k;
    }
    let inner = Sha256::new().chain_update(inner_pad).chain_update(message).finalize();
    Sha256::new().chain_update(outer_pad).chain_update(inner).finalize().into()
}

/// The outcome of [`GitCache::resolve`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    /// The commit id (40 hex digits).
    pub commit: String,
    /// Whether this call downloaded a pack (false when coalesced or already present).
    pub fetched: bool,
}

type Memo = HashMap<Reference, (Instant, Result<ObjectId>)>;

struct RepoEntry {
    remote: Remote,
    dir: PathBuf,
    /// Held during network operations; remembers the last result per reference and when
    /// the operation that produced it finished.
    memo: tokio::sync::Mutex<Memo>,
    /// The repository opened once for reads ([`RepoEntry::reader`]), once something was fetched
    /// into it.
    reader: Mutex<Option<gix::ThreadSafeRepository>>,
}

impl RepoEntry {
    /// A handle for reading objects by id. Opened once and shared: opened for every read, each
    /// reconcile loaded the pack indexes again and swapped the object database's table of them
    /// (a 1,000 cold sync: 10 % less replica CPU shared, docs/performance.md). Objects a later
    /// fetch adds are found all the same: a lookup that misses makes the shared object database
    /// look for new packs before it answers (`tests/source.rs` reads a force-pushed commit
    /// through a handle opened before its fetch).
    fn reader(&self) -> Result<gix::Repository> {
        let mut reader = self.reader.lock().expect("reader lock");
        if let Some(repo) = reader.as_ref() {
            return Ok(repo.to_thread_local());
        }
        let repo = git::open_existing(&self.dir)?;
        *reader = Some(repo.clone().into_sync());
        Ok(repo)
    }
}

struct Inner {
    config: CacheConfig,
    /// The key of credential identities ([`credential_key`]).
    credential_key: [u8; 32],
    /// By (normalized remote, credential identity).
    repos: Mutex<HashMap<(String, String), Arc<RepoEntry>>>,
    /// By (credential identity, tree id).
    checkouts: moka::sync::Cache<(String, ObjectId), Arc<Checkout>>,
    nonce: AtomicU64,
}

/// The shared Git object cache. Cheap to clone.
#[derive(Clone)]
pub struct GitCache {
    inner: Arc<Inner>,
}

impl GitCache {
    /// Open (or create) the cache in `config.dir`. Checkouts of an earlier process are removed.
    ///
    /// # Errors
    /// [`Error::Internal`] when the directory or its credential key cannot be created or read.
    pub fn new(config: CacheConfig) -> Result<GitCache> {
        let checkouts_dir = config.dir.join("checkouts");
        let _ = std::fs::remove_dir_all(&checkouts_dir);
        std::fs::create_dir_all(&checkouts_dir)
            .and_then(|_| std::fs::create_dir_all(config.dir.join("repos")))
            .map_err(|e| Error::Internal(format!("creating the Git cache in {}: {e}", config.dir.display())))?;
        let credential_key = credential_key(&config.dir)?;
        let capacity_kib = (config.checkout_bytes / 1024).max(1);
        let checkouts = moka::sync::Cache::builder()
            .max_capacity(capacity_kib)
            .weigher(|_: &(String, ObjectId), c: &Arc<Checkout>| u32::try_from(c.bytes / 1024 + 1).unwrap_or(u32::MAX))
            .build();
        Ok(GitCache {
            inner: Arc::new(Inner {
                config,
                credential_key,
                repos: Mutex::new(HashMap::new()),
                checkouts,
                nonce: AtomicU64::new(0),
            }),
        })
    }

    /// The identity of `credentials` in this cache: 32 hex digits of a keyed digest of every
    /// value (see the module documentation). Equal for equal values, whatever Secret holds them;
    /// reveals nothing of them.
    pub fn credential_id(&self, credentials: &Credentials) -> String {
        let mac = hmac_sha256(&self.inner.credential_key, &credentials.material());
        mac.iter().take(16).map(|b| format!("{b:02x}")).collect()
    }

    /// The bare repository of `url` for `credentials`. A `file://` URL is refused unless
    /// [`CacheConfig::allow_local`].
    fn entry(&self, url: &str, credentials: &Credentials) -> Result<Arc<RepoEntry>> {
        let remote = Remote::parse(url)?;
        if remote.scheme == "file" && !self.inner.config.allow_local {
            return Err(Error::Unsupported(format!(
                "{} is a path on the controller's own disk: file:// Repositories are refused unless the manager \
                 runs with --allow-local-repositories (meant for tests and local setups); serve the repository \
                 over https://, ssh:// or git:// instead",
                remote.key
            )));
        }
        let id = self.credential_id(credentials);
        let mut repos = self.inner.repos.lock().expect("repos lock");
        let entry = repos.entry((remote.key.clone(), id.clone())).or_insert_with(|| {
            let dir = self.inner.config.dir.join("repos").join(remote.dir_name(&id));
            Arc::new(RepoEntry { remote, dir, memo: tokio::sync::Mutex::new(HashMap::new()), reader: Mutex::new(None) })
        });
        Ok(entry.clone())
    }

    /// Resolve `reference` of the remote `url` to a commit, fetching when needed (single-flight).
    /// Only what was fetched with credentials of the same values is looked at: a commit another
    /// credential fetched is fetched again with these, and the remote decides.
    pub async fn resolve(
        &self,
        url: &str,
        reference: &Reference,
        credentials: &Credentials,
        timeout: Duration,
    ) -> Result<Resolution> {
        let requested = Instant::now();
        let entry = self.entry(url, credentials)?;
        let mut memo = entry.memo.lock().await;
        // A fetch that finished after this request was made was in flight when it came:
        // share its result (single-flight).
        if let Some((finished, result)) = memo.get(reference)
            && *finished >= requested
        {
            metrics::counter!(crate::metric_names::GIT_CACHE_REQUESTS_TOTAL, crate::metric_names::label::CACHE => "objects", crate::metric_names::label::RESULT => "hit")
                .increment(1);
            return result.clone().map(|id| Resolution { commit: id.to_string(), fetched: false });
        }
        let started = Instant::now();
        let interrupt = Arc::new(AtomicBool::new(false));
        let task = {
            let (dir, remote, reference, credentials, interrupt) =
                (entry.dir.clone(), entry.remote.clone(), reference.clone(), credentials.clone(), interrupt.clone());
            tokio::task::spawn_blocking(move || {
                let access = Access { remote: &remote, credentials: &credentials, timeout, interrupt: &interrupt };
                git::resolve(&dir, &reference, &access)
            })
        };
        let result = match tokio::time::timeout(timeout, task).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(Error::Internal(format!("the fetch task failed: {e}"))),
            Err(_) => {
                interrupt.store(true, Ordering::Relaxed);
                Err(Error::Timeout(format!("fetching {} timed out after {timeout:?}", entry.remote.key)))
            }
        };
        let label = match &result {
            Ok(r) if r.fetched => "fetched",
            Ok(r) if r.contacted => "up_to_date",
            Ok(_) => "local",
            Err(e) => e.metric_label(),
        };
        metrics::counter!(crate::metric_names::GIT_FETCHES_TOTAL, crate::metric_names::label::RESULT => label)
            .increment(1);
        if let Ok(r) = &result
            && r.contacted
        {
            metrics::histogram!(crate::metric_names::GIT_FETCH_DURATION_SECONDS)
                .record(started.elapsed().as_secs_f64());
            metrics::counter!(crate::metric_names::GIT_FETCH_BYTES_TOTAL).increment(r.bytes);
        }
        let hit = matches!(&result, Ok(r) if !r.fetched);
        metrics::counter!(crate::metric_names::GIT_CACHE_REQUESTS_TOTAL, crate::metric_names::label::CACHE => "objects", crate::metric_names::label::RESULT => if hit { "hit" } else { "miss" })
            .increment(1);
        let fetched = matches!(&result, Ok(r) if r.fetched);
        let stored = result.map(|r| r.commit);
        memo.insert(reference.clone(), (Instant::now(), stored.clone()));
        stored.map(|id| Resolution { commit: id.to_string(), fetched })
    }

    fn commit_id(commit: &str) -> Result<ObjectId> {
        ObjectId::from_hex(commit.as_bytes())
            .map_err(|_| Error::NotFound(format!("{commit:?} is not a full commit id")))
    }

    /// The regular file at `path` of `commit` (already in the cache for `credentials`: resolve
    /// first).
    pub async fn read_file(
        &self,
        url: &str,
        credentials: &Credentials,
        commit: &str,
        path: &str,
    ) -> Result<Option<Vec<u8>>> {
        let entry = self.entry(url, credentials)?;
        let id = Self::commit_id(commit)?;
        let path = checkout::clean_relative_path(path)?;
        tokio::task::spawn_blocking(move || {
            let repo = entry.reader()?;
            git::read_file(&repo, id, &path)
        })
        .await
        .map_err(|e| Error::Internal(format!("reading from the cache: {e}")))?
    }

    /// The first line of the commit message (bounded), for Events.
    pub async fn commit_subject(&self, url: &str, credentials: &Credentials, commit: &str) -> Option<String> {
        let entry = self.entry(url, credentials).ok()?;
        let id = Self::commit_id(commit).ok()?;
        tokio::task::spawn_blocking(move || git::commit_subject(&entry.reader().ok()?, id)).await.ok()?
    }

    /// A directory holding exactly the tree of `path` in `commit` (already in the cache for
    /// `credentials`: resolve first). Shared by every caller asking for the same tree with
    /// credentials of the same values: checkouts are keyed by credential identity and tree id.
    pub async fn checkout(
        &self,
        url: &str,
        credentials: &Credentials,
        commit: &str,
        path: &str,
    ) -> Result<Arc<Checkout>> {
        let entry = self.entry(url, credentials)?;
        let id = Self::commit_id(commit)?;
        let path = checkout::clean_relative_path(path)?;
        let this = self.clone();
        let credential_id = self.credential_id(credentials);
        tokio::task::spawn_blocking(move || {
            let repo = entry.reader()?;
            let tree = git::tree_at(&repo, id, &path)?;
            let mut missed = false;
            let label = if path.is_empty() { format!("commit {commit_short}", commit_short = &id.to_string()[..12]) } else { format!("{path}@{}", &id.to_string()[..12]) };
            let result = this.inner.checkouts.try_get_with((credential_id, tree), || {
                missed = true;
                let started = Instant::now();
                let n = this.inner.nonce.fetch_add(1, Ordering::Relaxed);
                let dest = this.inner.config.dir.join("checkouts").join(format!("{tree}-{n}"));
                let c = checkout::materialize(&repo, tree, dest, this.inner.config.limits, &label);
                metrics::histogram!(crate::metric_names::GIT_MATERIALIZE_DURATION_SECONDS).record(started.elapsed().as_secs_f64());
                c.map(Arc::new)
            });
            metrics::counter!(crate::metric_names::GIT_CACHE_REQUESTS_TOTAL, crate::metric_names::label::CACHE => "checkouts", crate::metric_names::label::RESULT => if missed { "miss" } else { "hit" })
                .increment(1);
            result.map_err(|e: Arc<Error>| (*e).clone())
        })
        .await
        .map_err(|e| Error::Internal(format!("materializing: {e}")))?
    }

    /// Where the bare repository of `url` for `credentials` lives (for diagnostics and tests).
    pub fn repository_dir(&self, url: &str, credentials: &Credentials) -> Result<PathBuf> {
        Ok(self.entry(url, credentials)?.dir.clone())
    }

    /// Run pending evictions of the checkout cache now (tests; moka evicts lazily).
    pub fn run_pending_tasks(&self) {
        self.inner.checkouts.run_pending_tasks();
    }

    /// Drop every cached checkout (their directories go once no reader holds them).
    pub fn clear_checkouts(&self) {
        let keys: Vec<(String, ObjectId)> = self.inner.checkouts.iter().map(|(k, _)| (*k).clone()).collect();
        for k in keys {
            self.inner.checkouts.invalidate(&k);
        }
        self.inner.checkouts.run_pending_tasks();
    }
}
