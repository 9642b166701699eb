//! Finding the cluster the way kubectl does, and turning client errors into the one-line
//! reasons `ksync` prints.
//!
//! The kubeconfig is `--kubeconfig FILE` when given, else the files `KUBECONFIG` lists (merged),
//! else `~/.kube/config`; without any of them, the in-cluster configuration of a Pod. The context
//! is `--context`, else the kubeconfig's current context; the namespace is `-n`, else the
//! context's, else `default`.

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::core::Status;
use kube::{Client, Config};

use crate::command::{Error, Result};

/// Where to connect, from the global flags.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ClusterArgs {
    /// Path to the kubeconfig file (default: the files in KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace (default: the context's namespace, else "default").
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

/// A connected client and where it points.
#[derive(Clone)]
pub struct Cluster {
    /// The client.
    pub client: Client,
    /// The namespace commands act in (`-n`, else the context's, else `default`).
    pub namespace: String,
    /// The API server URL, for error messages.
    pub url: String,
    /// The configuration the client was made from (`ksync diff` makes an impersonating client
    /// from it).
    pub config: kube::Config,
}

/// What a request was for, so an error can name what was not found.
#[derive(Clone, Copy, Debug)]
pub enum Request<'a> {
    /// Reading one object.
    Get {
        /// Its kind.
        kind: &'a str,
        /// Its name.
        name: &'a str,
        /// Its namespace.
        namespace: &'a str,
    },
    /// Listing or watching a kind.
    List {
        /// The resource, as the error names it (`sync.kuvryn.io/v1alpha1 applications`).
        what: &'a str,
    },
}

/// The innermost cause in `e`'s source chain: where only it says anything useful
/// (`Connection refused (os error 111)`).
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

fn kubeconfig_error(e: KubeconfigError) -> Error {
    match &e {
        KubeconfigError::ReadConfig(io, path) => Error::Kubeconfig(format!("reading {}: {io}", path.display())),
        KubeconfigError::CurrentContextNotSet => {
            Error::Kubeconfig("no current context is set: pass --context NAME".to_string())
        }
        _ => {
            let inner = innermost(&e);
            let outer = e.to_string();
            Error::Kubeconfig(if outer.contains(&inner) { outer } else { format!("{outer}: {inner}") })
        }
    }
}

/// The kubeconfig to use, if there is one (see the module documentation).
fn find_kubeconfig(args: &ClusterArgs) -> Result<Option<Kubeconfig>> {
    if let Some(path) = &args.kubeconfig {
        return Kubeconfig::read_from(path).map(Some).map_err(kubeconfig_error);
    }
    if let Some(k) = Kubeconfig::from_env().map_err(kubeconfig_error)? {
        return Ok(Some(k));
    }
    match Kubeconfig::read() {
        Ok(k) => Ok(Some(k)),
        Err(KubeconfigError::FindPath) => Ok(None),
        Err(KubeconfigError::ReadConfig(io, _)) if io.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(kubeconfig_error(e)),
    }
}

/// Connect as the kubeconfig (or the Pod's service account) says.
pub async fn connect(args: &ClusterArgs) -> Result<Cluster> {
    let config = match find_kubeconfig(args)? {
        Some(kubeconfig) => {
            let options = KubeConfigOptions { context: args.context.clone(), cluster: None, user: None };
            Config::from_custom_kubeconfig(kubeconfig, &options).await.map_err(kubeconfig_error)?
        }
        None if args.context.is_some() => {
            return Err(Error::NoCluster(
                "--context needs a kubeconfig: set KUBECONFIG or pass --kubeconfig (no ~/.kube/config found)".into(),
            ));
        }
        None => Config::incluster().map_err(|_| {
            Error::NoCluster(
                "set KUBECONFIG or pass --kubeconfig (no ~/.kube/config found, and not running in a Pod)".into(),
            )
        })?,
    };
    let url = config.cluster_url.to_string();
    let url = url.strip_suffix('/').unwrap_or(&url).to_string();
    let namespace = args.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config.clone()).map_err(|e| Error::Kubeconfig(innermost(&e)))?;
    Ok(Cluster { client, namespace, url, config })
}

fn status_message(s: &Status) -> String {
    if s.message.is_empty() { format!("{} {}", s.code, s.reason) } else { s.message.clone() }
}

impl Cluster {
    /// The error to report for a failed request.
    pub fn error(&self, e: kube::Error, request: Request<'_>) -> Error {
        match &e {
            kube::Error::Api(s) if s.code == 404 => match request {
                // A 404 that names the object is the object missing; one that does not (the
                // resource itself is unknown) means the CRDs are not installed.
                Request::Get { kind, name, namespace }
                    if s.details.as_ref().is_some_and(|d| d.name == name)
                        || s.message.contains(&format!("\"{name}\" not found")) =>
                {
                    Error::NotFound { kind: kind.to_string(), name: name.to_string(), namespace: namespace.to_string() }
                }
                Request::Get { kind, .. } => Error::NotServed(format!("the kind {kind}")),
                Request::List { what } => Error::NotServed(what.to_string()),
            },
            kube::Error::Api(s) if s.code == 403 => {
                let message = status_message(s);
                let message = if message.contains("forbidden") { message } else { format!("forbidden: {message}") };
                Error::Forbidden { message, source: e }
            }
            kube::Error::Api(s) if s.code == 401 => Error::Unauthorized { message: status_message(s), source: e },
            kube::Error::Api(s) => {
                Error::Api { message: format!("the API server answered {}: {}", s.code, status_message(s)), source: e }
            }
            kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::HttpError(_) => {
                Error::Unreachable { url: self.url.clone(), reason: innermost(&e), source: e }
            }
            kube::Error::Auth(_) => Error::Kubeconfig(format!("credentials: {}", innermost(&e))),
            _ => Error::Api {
                message: format!("talking to the API server at {}: {}", self.url, innermost(&e)),
                source: e,
            },
        }
    }

    /// The error to report for a failed watch.
    pub fn watch_error(&self, e: kube::runtime::watcher::Error, what: &str) -> Error {
        use kube::runtime::watcher::Error as W;
        match e {
            W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => {
                self.error(e, Request::List { what })
            }
            W::WatchError(s) => self.error(kube::Error::Api(s), Request::List { what }),
            W::NoResourceVersion => Error::Unavailable(format!("watching {what}: no resourceVersion in the list")),
        }
    }
}
