#![forbid(unsafe_code)]
//! The `simcluster` binary: a Kubernetes API server emulator on 127.0.0.1.

use clap::Parser;

/// Kubernetes API server emulator.
#[derive(Parser, Debug)]
#[command(
    name = "simcluster",
    version,
    about = "Kubernetes API server emulator for tests",
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Write an admin kubeconfig here.
    #[arg(long)]
    kubeconfig_out: Option<std::path::PathBuf>,
    /// Run without the scheduler and kubelet simulation (control-plane controllers only).
    #[arg(long)]
    no_kubelet: bool,
    #[command(flatten)]
    sim: SimArgs,
    /// Run a dynamic provisioner for the default StorageClass `standard`.
    #[arg(long)]
    storage_provisioner: bool,
    /// Keep objects in this file across restarts.
    #[arg(long)]
    data: Option<std::path::PathBuf>,
}

/// The simulated Nodes and how fast their kubelets are.
#[derive(clap::Args, Debug)]
struct SimArgs {
    /// Number of simulated Nodes (`sim-node-1` ..), each 4 CPUs, 16 GiB, 110 Pods.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Simulated Nodes from a JSON file: a list of `{"name", "cpu", "memory", "pods", "labels",
    /// "taints"}` (overrides `--nodes`).
    #[arg(long)]
    nodes_file: Option<std::path::PathBuf>,
    /// Kubelet delays: `fast` (tests) or `realistic` (seconds to pull and start, 10 s back-off).
    #[arg(long, default_value = "fast", value_parser = ["fast", "realistic"])]
    timing: String,
}

impl SimArgs {
    fn nodes(&self) -> Result<Vec<simcluster::state::NodeConfig>, String> {
        match &self.nodes_file {
            Some(path) => std::fs::read(path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
                .map_err(|e| format!("reading nodes from {}: {e}", path.display())),
            None => Ok(simcluster::state::NodeConfig::defaults(self.nodes)),
        }
    }

    fn timing(&self) -> simcluster::state::Timing {
        if self.timing == "realistic" {
            simcluster::state::Timing::realistic()
        } else {
            simcluster::state::Timing::default()
        }
    }
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Run only the scheduler and the simulated Nodes' kubelets, as clients of another API
    /// server (a control plane without Nodes, such as kube-apiserver with
    /// kube-controller-manager): Pods there are bound and run as in the emulator.
    Nodes {
        /// The kubeconfig of that server (its current context; needs rights to create Nodes,
        /// Leases, bindings and Events and to write Pod and Node status).
        #[arg(long)]
        kubeconfig: std::path::PathBuf,
        #[command(flatten)]
        sim: SimArgs,
        /// Also publish the ConfigMap `openshift-service-ca.crt` in every namespace, as
        /// OpenShift's service CA publisher does: needed on control planes built from
        /// OpenShift's Kubernetes tree (MicroShift, realkube), whose admission projects it into
        /// every Pod.
        #[arg(long)]
        openshift_service_ca: bool,
    },
}

/// `simcluster nodes`.
async fn nodes(kubeconfig: &std::path::Path, sim: &SimArgs, service_ca: bool) -> Result<(), String> {
    let nodes = sim.nodes()?;
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .map_err(|e| format!("reading {}: {e}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    let config = simcluster::Config { nodes, timing: sim.timing(), ..Default::default() };
    let running = simcluster::nodes::Nodes::start(client, config, service_ca).await.map_err(|e| e.to_string())?;
    eprintln!("simcluster: running Nodes {}", running.names().join(", "));
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = running.wait() => Err("the simulation ended".into()),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt().with_writer(std::io::stderr).init();
    if let Some(Command::Nodes { kubeconfig, sim, openshift_service_ca }) = &args.command {
        return match nodes(kubeconfig, sim, *openshift_service_ca).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("simcluster nodes: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let nodes = match args.sim.nodes() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("simcluster: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let config = simcluster::Config {
        kubelet: !args.no_kubelet,
        data: args.data.clone(),
        nodes,
        timing: args.sim.timing(),
        storage_provisioner: args.storage_provisioner,
        ..Default::default()
    };
    let mut sim = match simcluster::SimCluster::start(config, args.port).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("simcluster: cannot listen on 127.0.0.1:{}: {e}", args.port);
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Some(path) = &args.kubeconfig_out
        && let Err(e) = std::fs::write(path, sim.kubeconfig())
    {
        eprintln!("simcluster: writing {}: {e}", path.display());
        return std::process::ExitCode::FAILURE;
    }
    println!("{}", sim.url());
    let _ = tokio::signal::ctrl_c().await;
    sim.stop();
    std::process::ExitCode::SUCCESS
}
