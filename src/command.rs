//! What the two binaries' commands share: the [`Error`] a command reports and the common
//! [`main`] (parse, log, run, print the error in one line). The manager's commands are in
//! [`crate::manager`], `ksync`'s in the `cli/` package.

/// An error a command reports to the user (exit status 1).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Generated files differ from the ones on disk.
    #[error("{0}")]
    Stale(String),
    /// The manager could not start.
    #[error("{0}")]
    Startup(String),
    /// `ksync`: the named object does not exist.
    #[error("{kind} \"{name}\" not found in namespace \"{namespace}\"")]
    NotFound {
        /// Its kind (`Application`, `Revision`).
        kind: String,
        /// Its name.
        name: String,
        /// The namespace looked in.
        namespace: String,
    },
    /// `ksync`: the API server refused the request (RBAC); its message says who may not do what.
    #[error("{message}")]
    Forbidden {
        /// The API server's message.
        message: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// `ksync`: the API server did not accept the credentials.
    #[error("unauthorized: {message}")]
    Unauthorized {
        /// The API server's message.
        message: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// `ksync`: no connection to the API server.
    #[error("cannot reach the API server at {url}: {reason}")]
    Unreachable {
        /// The API server's URL.
        url: String,
        /// The innermost cause (connection refused, timeout, certificate).
        reason: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// `ksync`: no kubeconfig and no in-cluster configuration.
    #[error("no cluster configured: {0}")]
    NoCluster(String),
    /// `ksync`: the kubeconfig could not be read or used.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// `ksync`: the API server does not serve a kind (the CRDs are not installed).
    #[error("the API server does not serve {0} (are the Kuvryn Sync CRDs installed?)")]
    NotServed(String),
    /// `ksync`: any other API error, with the API server's message.
    #[error("{message}")]
    Api {
        /// What failed and the API server's message.
        message: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// `ksync`: the object exists but has nothing to show yet, or is not the one asked for.
    #[error("{0}")]
    Unavailable(String),
    /// `ksync`: the output could not be produced or written.
    #[error("writing output: {0}")]
    Output(String),
    /// `ksync diff`: exit with this status, printing nothing more (what there was to say is
    /// said): 1 when something would change, 2 after an error.
    #[error("exit status {0}")]
    Exit(u8),
}

/// Result of a command.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The common `main` of both binaries: parse, set up logging (`default_filter` of the arguments
/// when `RUST_LOG` is unset) and, where `traces` says, the trace exporter, run, report an error
/// on stderr in one line.
pub fn main<A: clap::Parser>(
    log_format: fn(&A) -> crate::telemetry::logging::LogFormat,
    default_filter: fn(&A) -> &'static str,
    traces: fn(&A) -> bool,
    run: impl FnOnce(A) -> Result<()>,
) -> std::process::ExitCode {
    let args = A::parse();
    let traced = traces(&args);
    if let Err(e) = crate::telemetry::logging::init_with_default(log_format(&args), default_filter(&args), traced) {
        eprintln!("error: {}", crate::view::one_line(&e));
        return std::process::ExitCode::FAILURE;
    }
    let result = run(args);
    if traced {
        crate::telemetry::traces::shutdown();
    }
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(Error::Exit(status)) => std::process::ExitCode::from(status),
        Err(e) => {
            tracing::debug!(error = ?e, "command failed");
            // One line, whatever the cause's message holds.
            let message = crate::view::one_line(&e.to_string());
            eprintln!("error: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}
