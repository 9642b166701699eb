#![forbid(unsafe_code)]
//! `ksync`, the command-line client. Its commands are in this package's library
//! ([`ksync::commands`]); this binary adds the API server emulator that `ksync dev` runs.

use ksync::commands::dev::emulator::{Emulator, Server, Started, Starting};

fn main() -> std::process::ExitCode {
    ksync::commands::main_with(&Simcluster)
}

/// simcluster with its kubelet simulation, as the quickstart's API server.
struct Simcluster;

/// The emulator's timing for the quickstart: Pods take a few seconds to pull, start and become
/// ready, so a rollout can be watched, yet everything is Healthy well within a minute.
fn timing() -> simcluster::state::Timing {
    simcluster::state::Timing {
        schedule_ms: 100,
        pull_ms: 1_500,
        start_ms: 300,
        ready_ms: 1_000,
        run_ms: 1_000,
        backoff_ms: 2_000,
        backoff_max_ms: 30_000,
    }
}

impl Emulator for Simcluster {
    fn start(&self, port: u16) -> Starting<'_> {
        Box::pin(async move {
            let config = simcluster::Config { timing: timing(), ..Default::default() };
            let nodes = config.nodes.len();
            let admin_token = config.admin_token.clone();
            let sim = simcluster::SimCluster::start(config, port).await?;
            Ok(Started { url: sim.url(), admin_token, nodes, server: Box::new(Running(sim)) })
        })
    }
}

/// A started simcluster.
struct Running(simcluster::SimCluster);

impl Server for Running {
    fn stop(&mut self) {
        self.0.stop();
    }
}
