//! `ksync-controller`: the manager binary.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::api::crd;
use crate::command::{Error, Result};
use crate::telemetry::logging::LogFormat;

/// Kuvryn Sync manager.
#[derive(Parser, Debug)]
#[command(name = "ksync-controller", version, about = "Kuvryn Sync manager")]
pub struct Args {
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "KSYNC_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the CustomResourceDefinitions, or write them (and their JSON schemas) to a folder.
    Crds {
        /// Write `<plural>.<group>.yaml` and `schemas/<group>/<kind>_<version>.json` here
        /// instead of printing the CRDs.
        #[arg(long)]
        out: Option<PathBuf>,
        /// With `--out`: change nothing, fail if the folder is not what would be written.
        #[arg(long, requires = "out")]
        check: bool,
    },
    /// Run the controllers against the cluster of the in-cluster config or `KUBECONFIG`.
    Run(Box<RunArgs>),
    /// Print the MutatingWebhookConfiguration that routes Application writes to the manager's
    /// admission webhook (for `deploy/` and the Helm chart).
    WebhookConfiguration(WebhookConfigurationArgs),
}

/// Settings of `ksync-controller webhook-configuration`.
#[derive(clap::Args, Debug)]
pub struct WebhookConfigurationArgs {
    /// The configuration's name (the manager's `--webhook-configuration-name`).
    #[arg(long, default_value = DEFAULT_WEBHOOK_CONFIGURATION)]
    pub name: String,
    /// The Service in front of the manager (its `--webhook-service-name`).
    #[arg(long, default_value = DEFAULT_WEBHOOK_SERVICE)]
    pub service_name: String,
    /// The Service's namespace (the manager's namespace).
    #[arg(long, default_value = DEFAULT_NAMESPACE)]
    pub service_namespace: String,
    /// The Service's port.
    #[arg(long, default_value_t = 443)]
    pub service_port: u16,
    /// Reach the webhook at this URL (`https://host:port`) instead of the Service (a manager
    /// running outside the cluster).
    #[arg(long, conflicts_with_all = ["service_name", "service_namespace", "service_port"])]
    pub url: Option<String>,
    /// Let cert-manager's CA injector fill `caBundle` from this Certificate
    /// (`<namespace>/<name>`), for a manager run with `--webhook-cert-dir`.
    #[arg(long)]
    pub cert_manager_certificate: Option<String>,
}

/// Default `--webhook-configuration-name`.
pub const DEFAULT_WEBHOOK_CONFIGURATION: &str = "kuvryn-sync";
/// Default `--webhook-service-name`.
pub const DEFAULT_WEBHOOK_SERVICE: &str = "kuvryn-sync-webhook";
/// Default namespace of the manager (when `POD_NAMESPACE` is unset).
pub const DEFAULT_NAMESPACE: &str = "kuvryn-system";

/// Settings of `ksync-controller run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Directory of the shared Git object cache (one bare repository per remote, plus
    /// materialized checkouts).
    #[arg(long, env = "KSYNC_GIT_CACHE_DIR", default_value = "/var/cache/kuvryn-sync/git")]
    pub git_cache_dir: PathBuf,
    /// Most bytes of materialized checkouts kept in the cache (least used are evicted).
    #[arg(long, default_value_t = 1 << 30)]
    pub git_checkout_cache_bytes: u64,
    /// Most files in one checkout; a larger tree is refused.
    #[arg(long, default_value_t = 20_000)]
    pub git_max_files: u64,
    /// Most bytes in one checkout; a larger tree is refused.
    #[arg(long, default_value_t = 256 * 1024 * 1024)]
    pub git_max_bytes: u64,
    /// Accept `file://` Repository URLs. They read the controller's own disk (its service
    /// account token, other tenants' cached repositories), so they are refused unless this is
    /// set: for tests and local setups only.
    #[arg(long)]
    pub allow_local_repositories: bool,
    /// Where to serve `/metrics` (Prometheus), `/healthz` and `/readyz`; empty to disable.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_bind_address: String,
    /// Where to serve the read-only dashboard (`HOST:PORT`); empty, the default, to not serve it.
    /// Each request reads with the bearer token it carries (the sign-in form's cookie,
    /// `Authorization: Bearer`, or --dashboard-token-header), never with the manager's
    /// credentials; a request without one gets the sign-in form.
    #[arg(long, default_value = "", value_name = "HOST:PORT")]
    pub dashboard_bind_address: String,
    /// Where to serve the Git push receiver (`HOST:PORT`, plain HTTP: put TLS in front of it);
    /// empty, the default, to not serve it. Hosts post pushes to a Repository's
    /// `status.receiver.path` (`docs/receivers.md`).
    #[arg(long, default_value = "", value_name = "HOST:PORT")]
    pub receiver_bind_address: String,
    /// The header an authenticating proxy in front of the dashboard puts the user's bearer token
    /// in, such as X-Forwarded-Access-Token (`Authorization: Bearer` is always read).
    #[arg(long, value_name = "HEADER", value_parser = parse_header_name)]
    pub dashboard_token_header: Option<axum::http::HeaderName>,
    /// This replica's name in Events (the Pod name).
    #[arg(long = "replica-id", visible_alias = "instance", env = "POD_NAME")]
    pub instance: Option<String>,

    /// Shards the Applications are split into (fixed per installation).
    #[arg(long, env = "KSYNC_SHARDS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub shards: u32,

    /// Namespace of the coordination Leases. Set (the Helm chart sets it to the release
    /// namespace), the replicas split the shards between them with Leases; unset, this process
    /// owns every shard and takes no Lease (one replica only).
    #[arg(long, env = "KSYNC_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// Prefix of the Lease names: `<prefix>-member-<replica>`, `<prefix>-shard-<k>`,
    /// `<prefix>-leader`.
    #[arg(long, default_value = "kuvryn-sync")]
    pub lease_prefix: String,

    /// Lease duration; renewed every third of it, and a holder stops writing a third of it
    /// before it could expire.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: std::time::Duration,

    /// The `helm` (v4) binary rendering Helm charts.
    #[arg(long, env = "KSYNC_HELM", default_value = "helm")]
    pub helm: PathBuf,

    /// The `kubectl` binary rendering Kustomize overlays (`kubectl kustomize`).
    #[arg(long, env = "KSYNC_KUBECTL", default_value = "kubectl")]
    pub kubectl: PathBuf,

    /// Kill a renderer after this long.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub render_timeout: std::time::Duration,

    /// Most bytes a renderer may output.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    pub render_max_output_bytes: u64,

    /// Memory for rendered desired states, in bytes (an Application whose path did not change
    /// is not rendered again while its result is kept; the least recently used go first).
    #[arg(long, default_value_t = crate::render::DEFAULT_CACHE_BYTES)]
    pub render_cache_bytes: u64,

    /// How often an Application is reconciled again without a trigger.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub drift_resync_interval: std::time::Duration,

    /// Applications reconciled at once.
    #[arg(long, default_value_t = 8)]
    pub concurrent_applications: u16,

    /// Sustained Kubernetes API requests per second of this replica, for every client it makes
    /// (its own and the Applications' service accounts); 0 for no limit. Lease renewals are
    /// not counted. Default: 50 until the API server shows it applies API Priority and
    /// Fairness, then no limit (the server's fairness applies instead).
    #[arg(long, env = "KSYNC_KUBE_API_QPS")]
    pub kube_api_qps: Option<f64>,

    /// Kubernetes API requests this replica may send at once after a quiet period.
    #[arg(long, env = "KSYNC_KUBE_API_BURST", default_value_t = 100)]
    pub kube_api_burst: u32,

    /// An owned Application not reconciled for this long counts in
    /// `ksync_applications_reconcile_stale` (default: twice --drift-resync-interval).
    #[arg(long, value_parser = parse_duration)]
    pub stale_reconcile_after: Option<std::time::Duration>,

    /// Serve the admission webhook for Applications (`docs/webhook.md`). It is served only while
    /// the MutatingWebhookConfiguration `--webhook-configuration-name` is installed; false:
    /// nothing is served and nothing verifies the rollback and approval annotations.
    #[arg(long, env = "ENABLE_WEBHOOKS", default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_webhooks: bool,

    /// Where the webhook serves HTTPS.
    #[arg(long, default_value = "0.0.0.0:9443")]
    pub webhook_bind_address: std::net::SocketAddr,

    /// The manager's namespace: the webhook certificate Secret's and the webhook Service's.
    #[arg(long, env = "POD_NAMESPACE", default_value = DEFAULT_NAMESPACE)]
    pub webhook_namespace: String,

    /// The Service the API server reaches the webhook through (the certificate is issued for
    /// `<name>.<namespace>.svc`).
    #[arg(long, default_value = DEFAULT_WEBHOOK_SERVICE)]
    pub webhook_service_name: String,

    /// The MutatingWebhookConfiguration whose `caBundle` the manager keeps current.
    #[arg(long, default_value = DEFAULT_WEBHOOK_CONFIGURATION)]
    pub webhook_configuration_name: String,

    /// The Secret holding the webhook's generated certificates.
    #[arg(long, default_value = "kuvryn-sync-webhook-tls")]
    pub webhook_secret_name: String,

    /// Use `tls.crt` and `tls.key` from this directory (cert-manager) instead of generating
    /// certificates; reloaded when they change; `caBundle` is left alone.
    #[arg(long)]
    pub webhook_cert_dir: Option<PathBuf>,

    /// Another name (DNS or IP address) the generated certificate is valid for (repeatable), for
    /// a configuration that reaches the webhook by URL.
    #[arg(long = "webhook-cert-host")]
    pub webhook_cert_hosts: Vec<String>,

    /// Validity of generated webhook certificates; rotated at two thirds of it.
    #[arg(long, default_value = "8760h", value_parser = parse_duration, hide = true)]
    pub webhook_cert_validity: std::time::Duration,

    /// How often the webhook configuration, certificates and CA bundle are checked.
    #[arg(long, default_value = "1m", value_parser = parse_duration, hide = true)]
    pub webhook_check_interval: std::time::Duration,
}

impl RunArgs {
    /// The webhook's settings, when webhooks are enabled.
    pub fn webhook(&self) -> Option<crate::webhook::Settings> {
        self.enable_webhooks.then(|| crate::webhook::Settings {
            bind: self.webhook_bind_address,
            namespace: self.webhook_namespace.clone(),
            service_name: self.webhook_service_name.clone(),
            configuration_name: self.webhook_configuration_name.clone(),
            secret_name: self.webhook_secret_name.clone(),
            cert_dir: self.webhook_cert_dir.clone(),
            extra_hosts: self.webhook_cert_hosts.clone(),
            cert_validity: self.webhook_cert_validity,
            check_interval: self.webhook_check_interval,
            shards: self.shards,
        })
    }
}

/// The Git cache settings of `args`.
fn cache_config(args: &RunArgs) -> crate::source::CacheConfig {
    crate::source::CacheConfig {
        dir: args.git_cache_dir.clone(),
        checkout_bytes: args.git_checkout_cache_bytes,
        limits: crate::source::Limits { max_files: args.git_max_files, max_bytes: args.git_max_bytes },
        allow_local: args.allow_local_repositories,
    }
}

fn parse_duration(s: &str) -> std::result::Result<std::time::Duration, String> {
    crate::api::duration::parse(s)
}

fn parse_header_name(s: &str) -> std::result::Result<axum::http::HeaderName, String> {
    axum::http::HeaderName::from_bytes(s.as_bytes()).map_err(|_| format!("{s:?} is not an HTTP header name"))
}

/// Start serving the dashboard on `address` (when not empty) until `stop` completes, reading
/// with each request's token on the API server of `config` ([`crate::dashboard::auth`]).
async fn start_dashboard(
    address: &str,
    config: &kube::Config,
    proxy_header: Option<axum::http::HeaderName>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    if address.is_empty() {
        return Ok(());
    }
    let addr: std::net::SocketAddr =
        address.parse().map_err(|e| Error::Startup(format!("--dashboard-bind-address {address}: {e}")))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Startup(format!("serving the dashboard on {addr}: {e}")))?;
    tracing::info!(address = %addr, proxy_header = ?proxy_header, "serving the dashboard (each request reads with its own token)");
    let base = config.clone();
    tokio::spawn(async move {
        if let Err(e) = crate::dashboard::serve_with_tokens(listener, base, proxy_header, stop).await {
            tracing::error!(error = %e, "the dashboard stopped");
        }
    });
    Ok(())
}

/// What `/readyz` says before the controllers run.
const STARTING: &str = "the controllers are starting";

/// The log filter when `RUST_LOG` is unset.
pub const DEFAULT_LOG_FILTER: &str = "info";

/// Parse the process arguments and run.
pub fn main() -> std::process::ExitCode {
    crate::command::main(|a: &Args| a.log_format, |_| DEFAULT_LOG_FILTER, |a| matches!(a.command, Command::Run(_)), run)
}

/// Run parsed arguments.
pub fn run(args: Args) -> Result<()> {
    match args.command {
        Command::Crds { out: None, .. } => {
            let docs: Vec<String> =
                crd::generate().into_iter().filter(|f| f.path.ends_with(".yaml")).map(|f| f.contents).collect();
            print!("{}", docs.join("---\n"));
            Ok(())
        }
        Command::Crds { out: Some(dir), check: false } => write_crds(&dir),
        Command::Crds { out: Some(dir), check: true } => check_crds(&dir),
        Command::Run(args) => run_controllers(*args),
        Command::WebhookConfiguration(w) => {
            let target = match w.url {
                Some(url) => crate::webhook::configuration::Target::Url(url),
                None => crate::webhook::configuration::Target::Service {
                    name: w.service_name,
                    namespace: w.service_namespace,
                    port: w.service_port,
                },
            };
            let config =
                crate::webhook::configuration::configuration(&w.name, &target, w.cert_manager_certificate.as_deref());
            print!("{}", crate::yaml::to_string(&config).map_err(|e| Error::Startup(e.to_string()))?);
            Ok(())
        }
    }
}

/// How long a replica drains after SIGTERM (in-flight reconciles end, Leases are released) before
/// it exits anyway: no stuck request, such as one to an API server that is gone, holds it past
/// this. Within the 30 s a kubelet waits before SIGKILL by default.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

/// How long the start-up waits to learn the manager's own identity ([`crate::identity`]).
const IDENTITY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

fn run_controllers(args: RunArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Startup(format!("starting the runtime: {e}")))?;
    let result = runtime.block_on(async move {
        let (ready_tx, ready_rx) = tokio::sync::watch::channel(Err::<(), String>(STARTING.to_string()));
        let (http_stop, http_stopped) = tokio::sync::oneshot::channel::<()>();
        if !args.metrics_bind_address.is_empty() {
            let addr: std::net::SocketAddr = args
                .metrics_bind_address
                .parse()
                .map_err(|e| Error::Startup(format!("--metrics-bind-address {}: {e}", args.metrics_bind_address)))?;
            let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .map_err(|e| Error::Startup(format!("installing the metrics recorder: {e}")))?;
            let listener = crate::telemetry::http::bind(addr)
                .await
                .map_err(|e| Error::Startup(format!("serving /metrics, /healthz and /readyz on {addr}: {e}")))?;
            tokio::spawn(async move {
                let stopped = async move {
                    let _ = http_stopped.await;
                };
                if let Err(e) = crate::telemetry::http::serve(listener, handle, ready_rx, stopped).await {
                    tracing::error!(error = %e, "the HTTP endpoints stopped");
                }
            });
        }
        let kube_config = kube::Config::infer()
            .await
            .map(crate::client::without_retries)
            .map_err(|e| Error::Startup(format!("loading the Kubernetes client configuration: {e}")))?;
        let dashboard_config = kube_config.clone();
        let renewal_config = kube_config.clone();
        let limiter = crate::client::Limiter::new(crate::client::Budget {
            qps: args.kube_api_qps.unwrap_or(crate::client::Budget::default().qps),
            burst: args.kube_api_burst,
            until_priority_and_fairness: args.kube_api_qps.is_none(),
        });
        let client = limiter
            .client(kube_config.clone())
            .map_err(|e| Error::Startup(format!("connecting to the Kubernetes API: {e}")))?;
        // Leases are renewed outside the budget: a busy replica must not lose its shards.
        let lease_client = kube::Client::try_from(kube_config.clone())
            .map_err(|e| Error::Startup(format!("connecting to the Kubernetes API: {e}")))?;
        if args.allow_local_repositories {
            tracing::warn!(
                "--allow-local-repositories: file:// Repository URLs are accepted and read this machine's disk"
            );
        }
        let cache =
            crate::source::GitCache::new(cache_config(&args)).map_err(|e| Error::Startup(e.to_string()))?;
        let renderer = crate::render::Renderer::new(
            crate::render::Tools { helm: args.helm.clone(), kubectl: args.kubectl.clone() },
            crate::render::Limits { timeout: args.render_timeout, max_output_bytes: args.render_max_output_bytes },
            args.render_cache_bytes,
        );
        let charts = renderer.charts().clone();
        let repositories = std::sync::Arc::new(
            crate::controller::repository::Context::new(client.clone(), cache.clone(), args.instance.clone())
                .with_charts(charts.clone()),
        );
        let (settings_limiter, leader_config) = (limiter.clone(), kube_config.clone());
        let settings = crate::controller::application::Settings {
            resync: args.drift_resync_interval,
            concurrency: args.concurrent_applications.max(1),
            shards: args.shards,
            limiter,
            ..Default::default()
        };
        let stale_after = args.stale_reconcile_after.unwrap_or(2 * args.drift_resync_interval);
        let mut applications =
            crate::controller::application::Context::new(kube_config, cache, renderer, args.instance.clone(), settings)
                .map_err(|e| Error::Startup(format!("connecting to the Kubernetes API: {e}")))?;
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| Error::Startup(format!("installing the SIGTERM handler: {e}")))?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
            tracing::info!("shutting down");
            let _ = stop.send(true);
            // A thread, not a task: it must fire even if every runtime thread is stuck.
            std::thread::spawn(|| {
                std::thread::sleep(DRAIN_LIMIT);
                tracing::warn!(limit = ?DRAIN_LIMIT, "still draining after SIGTERM; exiting anyway");
                std::process::exit(0);
            });
        });
        let on_stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        // After the signal handler: an API server that never answers must not hold up a stop.
        applications.manager_identity = tokio::select! {
            found = tokio::time::timeout(IDENTITY_WAIT, crate::identity::own_service_account(&lease_client)) => {
                found.unwrap_or_else(|_| {
                    tracing::warn!(
                        "who am I (SelfSubjectReview) did not answer: approvals are told from the manager's by field manager only"
                    );
                    None
                })
            }
            () = on_stop(stopped.clone()) => None,
        };
        start_dashboard(
            &args.dashboard_bind_address,
            &dashboard_config,
            args.dashboard_token_header.clone(),
            on_stop(stopped.clone()),
        )
        .await?;
        // Every replica serves the receiver: it only writes annotations, which the leader's
        // Repository controller acts on.
        if !args.receiver_bind_address.is_empty() {
            let addr: std::net::SocketAddr = args.receiver_bind_address.parse().map_err(|e| {
                Error::Startup(format!("--receiver-bind-address {}: {e}", args.receiver_bind_address))
            })?;
            let bound = crate::receiver::start(client.clone(), addr, Default::default(), on_stop(stopped.clone()))
                .await
                .map_err(|e| Error::Startup(format!("serving the receiver on {addr}: {e}")))?;
            tracing::info!(address = %bound, "serving the Git push receiver");
        }
        // Every replica serves the webhook (the Service spreads calls over them); its lookups
        // are outside the request budget, since the API server waits for its answer.
        let webhook = {
            let (settings, client, stopped) = (args.webhook(), lease_client.clone(), stopped.clone());
            async move {
                match settings {
                    Some(settings) => crate::webhook::run(client, settings, on_stop(stopped)).await,
                    None => tracing::warn!(
                        "ENABLE_WEBHOOKS=false: no admission webhook; rollback and approval annotations are not verified and are trusted as written"
                    ),
                }
            }
        };
        let shards = args.shards;
        let Some(lease_ns) = args.lease_namespace.clone() else {
            tracing::info!(git_cache_dir = %args.git_cache_dir.display(), shards, "starting (one replica, every shard)");
            let applications = std::sync::Arc::new(applications);
            let notifications = std::sync::Arc::new(crate::controller::notifications::Context::new(
                client.clone(),
                args.instance.clone().unwrap_or_else(|| "ksync".into()),
                None,
                args.lease_duration,
            ));
            let _ = ready_tx.send(Ok(()));
            tokio::join!(
                crate::controller::notifications::run(notifications, on_stop(stopped.clone())),
                crate::controller::repository::run(repositories, on_stop(stopped.clone())),
                crate::controller::labeller::run(client.clone(), shards, on_stop(stopped.clone())),
                crate::controller::healthcheck::run(client, on_stop(stopped.clone())),
                crate::controller::application::progress::report(
                    &applications.progress,
                    stale_after,
                    on_stop(stopped.clone())
                ),
                crate::controller::application::run(applications.clone(), on_stop(stopped)),
                webhook,
            );
            let _ = http_stop.send(());
            return Ok(());
        };
        let identity = args.instance.clone().unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "ksync".into());
            format!("{host}-{}", std::process::id())
        });
        let timing = sharding::lease::Timing::new(args.lease_duration);
        // Shard Leases are renewed on a thread of their own, over a client of their own
        // (`sharding::thread`): a runtime saturated by reconciles must not make a renewal late.
        let lease_thread = sharding::thread::LeaseThread::start("ksync-leases")
            .map_err(|e| Error::Startup(format!("starting the Lease renewal thread: {e}")))?;
        let renewal_client = lease_thread
            .client(renewal_config)
            .map_err(|e| Error::Startup(format!("connecting to the Kubernetes API: {e}")))?;
        // The leader Lease is renewed there too (`sharding::leader::spawn_elected_fenced`).
        let leader_leases =
            sharding::lease::Leases::new(kube::Api::namespaced(renewal_client.clone(), &lease_ns), identity.as_str(), timing)
                .with_shards(shards);
        let shard_leases =
            sharding::lease::Leases::new(kube::Api::namespaced(renewal_client, &lease_ns), identity.as_str(), timing);
        let (coordinator, ownership) =
            sharding::coordinator::Coordinator::new(shard_leases, args.lease_prefix.clone(), shards);
        // A write needs a tenth of the Lease duration to spare on top of the Lease's own margin
        // (`Timing::fence_spare`).
        applications.fence = Some(sharding::coordinator::Fence::new(ownership, timing.fence_spare()));
        // Notifications are delivered by the replica owning each Application's shard.
        let notifications = std::sync::Arc::new(crate::controller::notifications::Context::new(
            client.clone(),
            identity.clone(),
            applications.fence.clone(),
            args.lease_duration,
        ));
        let applications = std::sync::Arc::new(applications);
        let workers = crate::controller::application::shards::ShardWorkers::new(applications.clone(), args.lease_duration);
        tracing::info!(replica = %identity, shards, lease_namespace = %lease_ns, "starting (sharded)");
        // Ready, and allowed to lead, only while this replica takes part: not while a live replica
        // uses another shard count.
        let (may_lead_tx, may_lead) = tokio::sync::watch::channel(false);
        let mut status = coordinator.status();
        tokio::spawn(async move {
            loop {
                let now = status.borrow_and_update().clone();
                let taking_part = now == sharding::coordinator::Status::TakingPart;
                let _ = may_lead_tx.send(taking_part);
                let _ = ready_tx.send(match now {
                    sharding::coordinator::Status::TakingPart => Ok(()),
                    sharding::coordinator::Status::Starting => Err(STARTING.to_string()),
                    sharding::coordinator::Status::Waiting(why) => Err(why),
                });
                if status.changed().await.is_err() {
                    break;
                }
            }
        });
        let leader_name = format!("{}-leader", args.lease_prefix);
        let (prefix, duration) = (args.lease_prefix.clone(), args.lease_duration);
        // Every write of the leader's singleton work is fenced by the leader Lease, as a
        // reconcile's are by its shard's: a deposed leader lands nothing.
        let (term, term_rx) = tokio::sync::watch::channel(None);
        let leader_fence = sharding::leader::LeaderFence::new(term_rx, timing.fence_spare());
        let fenced = crate::client::Fenced::new(move || leader_fence.until());
        let connect = |e: kube::Error| Error::Startup(format!("connecting to the Kubernetes API: {e}"));
        let leader_client = settings_limiter.fenced_client(leader_config.clone(), fenced.clone()).map_err(connect)?;
        // Shard labels are written outside the budget too: no replica sees a new Application
        // before it has its label, and at 1,000 new Applications a budget shared with the
        // leader's reconciles held some back for minutes. One patch per new Application.
        let leader_unbudgeted =
            crate::client::Limiter::unlimited().fenced_client(leader_config, fenced).map_err(connect)?;
        let repositories = std::sync::Arc::new(
            crate::controller::repository::Context::new(
                leader_client.clone(),
                repositories.cache.clone(),
                args.instance.clone(),
            )
            .with_charts(charts.clone()),
        );
        let lease_ns_for_leader = lease_ns.clone();
        let singleton = move |rx: tokio::sync::watch::Receiver<bool>| {
            let (repositories, client) = (repositories.clone(), leader_client.clone());
            let (lease_ns, prefix) = (lease_ns_for_leader.clone(), prefix.clone());
            let labels_client = leader_unbudgeted.clone();
            async move {
                tokio::join!(
                    crate::controller::repository::run(repositories, on_stop(rx.clone())),
                    crate::controller::labeller::run(labels_client.clone(), shards, on_stop(rx.clone())),
                    crate::controller::healthcheck::run(labels_client, on_stop(rx.clone())),
                    crate::controller::orphans::run(client, lease_ns, prefix, shards, duration, on_stop(rx)),
                );
            }
        };
        let coordinating = lease_thread.spawn(coordinator.run(workers, on_stop(stopped.clone())));
        let leading = sharding::leader::spawn_elected_fenced(
            &lease_thread,
            leader_leases,
            leader_name,
            may_lead,
            singleton,
            on_stop(stopped.clone()),
            term,
        );
        tokio::join!(
            crate::controller::notifications::run(notifications, on_stop(stopped.clone())),
            crate::controller::application::progress::report(
                &applications.progress,
                stale_after,
                on_stop(stopped.clone())
            ),
            async move {
                if let Err(e) = coordinating.await {
                    tracing::error!(error = %e, "the shard coordinator stopped");
                }
            },
            async move {
                if let Err(e) = leading.await {
                    tracing::error!(error = %e, "the leader election stopped");
                }
            },
            webhook,
        );
        drop(lease_thread);
        let _ = http_stop.send(());
        Ok(())
    });
    // Dropping a runtime waits for its blocking tasks without limit (a git read on a dead
    // connection); what is still running now is abandoned.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    result
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.display().to_string(), source }
}

fn write_crds(dir: &Path) -> Result<()> {
    for f in crd::generate() {
        let path = dir.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, f.contents).map_err(io(&path))?;
        tracing::info!(path = %path.display(), "wrote");
    }
    Ok(())
}

/// Names of generated files that are missing or differ under `dir`, and files under `dir` that
/// the generator no longer writes.
pub fn stale_files(dir: &Path) -> Result<Vec<String>> {
    let generated = crd::generate();
    let mut stale = Vec::new();
    for f in &generated {
        let path = dir.join(&f.path);
        match std::fs::read_to_string(&path) {
            Ok(on_disk) if on_disk == f.contents => {}
            Ok(_) => stale.push(format!("{} differs", f.path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => stale.push(format!("{} is missing", f.path)),
            Err(e) => return Err(io(&path)(e)),
        }
    }
    let mut on_disk = Vec::new();
    list_files(dir, dir, &mut on_disk)?;
    for rel in on_disk {
        if !generated.iter().any(|f| f.path == rel) {
            stale.push(format!("{rel} is not generated any more"));
        }
    }
    Ok(stale)
}

fn list_files(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        if path.is_dir() {
            list_files(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            let rel = rel.to_string_lossy().replace('\\', "/");
            if rel != "README.md" {
                out.push(rel);
            }
        }
    }
    Ok(())
}

fn check_crds(dir: &Path) -> Result<()> {
    let stale = stale_files(dir)?;
    if stale.is_empty() {
        return Ok(());
    }
    Err(Error::Stale(format!(
        "{} is stale ({}); regenerate with `cargo run --bin ksync-controller -- crds --out {}`",
        dir.display(),
        stale.join(", "),
        dir.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(extra: &[&str]) -> RunArgs {
        let argv = ["ksync-controller", "run"].iter().chain(extra).copied();
        match Args::try_parse_from(argv).unwrap().command {
            Command::Run(args) => *args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn webhooks_are_on_unless_turned_off() {
        let on = run_args(&[]).webhook().expect("on by default");
        assert_eq!(on.bind.to_string(), "0.0.0.0:9443");
        assert_eq!(on.hosts()[0], "kuvryn-sync-webhook.kuvryn-system.svc");
        assert!(run_args(&["--enable-webhooks=false"]).webhook().is_none());
        assert!(run_args(&["--enable-webhooks", "false"]).webhook().is_none());
    }

    // See: issue 18. file:// Repositories read the controller's disk: off unless asked for.
    #[test]
    fn local_repositories_are_refused_unless_the_flag_is_given() {
        assert!(!cache_config(&run_args(&[])).allow_local);
        assert!(cache_config(&run_args(&["--allow-local-repositories"])).allow_local);
    }
}
