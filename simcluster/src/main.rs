#![forbid(unsafe_code)]
//! The `simcluster` binary: a Kubernetes API server emulator on 127.0.0.1.

use clap::Parser;

/// Kubernetes API server emulator.
#[derive(Parser, Debug)]
#[command(name = "simcluster", version, about = "Kubernetes API server emulator for tests")]
struct Args {
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Write an admin kubeconfig here.
    #[arg(long)]
    kubeconfig_out: Option<std::path::PathBuf>,
    /// Run without the scheduler and kubelet simulation (control-plane controllers only).
    #[arg(long)]
    no_kubelet: bool,
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
    /// Run a dynamic provisioner for the default StorageClass `standard`.
    #[arg(long)]
    storage_provisioner: bool,
    /// Keep objects in this file across restarts.
    #[arg(long)]
    data: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt().with_writer(std::io::stderr).init();
    let nodes = match &args.nodes_file {
        Some(path) => match std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        {
            Ok(nodes) => nodes,
            Err(e) => {
                eprintln!("simcluster: reading nodes from {}: {e}", path.display());
                return std::process::ExitCode::FAILURE;
            }
        },
        None => simcluster::state::NodeConfig::defaults(args.nodes),
    };
    let timing = if args.timing == "realistic" {
        simcluster::state::Timing::realistic()
    } else {
        simcluster::state::Timing::default()
    };
    let config = simcluster::Config {
        kubelet: !args.no_kubelet,
        data: args.data.clone(),
        nodes,
        timing,
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
