//! Named runs (`--scenario`): each sets the flags of one measurement of issue 23's goals, and a
//! flag given on the command line still wins.

use std::time::Duration;

use clap::parser::ValueSource;

use crate::Args;
use crate::fleet::Objects;

/// A named run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// 10,000 Applications × 3 objects (ConfigMap, Service, zero-replica Deployment), 50
    /// Repositories, 3 replicas, 32 shards: cold sync, then 200 hand edits.
    #[value(name = "cold-10k")]
    #[serde(rename = "cold-10k")]
    Cold10k,
    /// The same fleet, then a SIGKILL of the replica holding most shards.
    Takeover,
    /// 1,000 Applications × 3 objects, then a quiet window of three drift resyncs (30 s each):
    /// requests per Application per resync, and writes.
    Idle,
    /// 1,000 Applications in one Repository, then one commit changing one Application's path:
    /// renders, and the writes and dry runs of the 999 it does not touch.
    Monorepo,
    /// 1,000 Applications (a ConfigMap each), 10 Repositories, 16 shards, a budget of 50
    /// requests per second per replica: half converged on one replica, the other half on
    /// three (`--scale-out`).
    #[value(name = "scale-out")]
    #[serde(rename = "scale-out")]
    ScaleOut,
    /// 300 Applications that prune, 3 replicas, then 10 minutes of commits, SIGKILLs (the leader
    /// included) and API faults (`--chaos-duration`): what was lost.
    Chaos,
}

/// One flag a scenario sets: its `Args` field name (clap's id) and how to set it.
type Setting = (&'static str, fn(&mut Args));

impl Scenario {
    fn settings(self) -> Vec<Setting> {
        let fleet_10k: Vec<Setting> = vec![
            ("apps", |a| a.apps = 10_000),
            ("objects", |a| a.objects = Objects::Three),
            ("deployment_every", |a| a.deployment_every = 0),
            ("namespaces", |a| a.namespaces = 50),
            ("replicas", |a| a.replicas = 3),
            ("shards", |a| a.shards = 32),
            ("timeout", |a| a.timeout = Duration::from_secs(20 * 60)),
        ];
        match self {
            Scenario::Cold10k => {
                let mut s = fleet_10k;
                s.extend::<[Setting; 2]>([("edits", |a| a.edits = 200), ("no_takeover", |a| a.no_takeover = true)]);
                s
            }
            Scenario::Takeover => {
                let mut s = fleet_10k;
                s.extend::<[Setting; 2]>([("edits", |a| a.edits = 0), ("no_takeover", |a| a.no_takeover = false)]);
                s
            }
            Scenario::Idle => vec![
                ("apps", |a| a.apps = 1000),
                ("objects", |a| a.objects = Objects::Three),
                ("deployment_every", |a| a.deployment_every = 0),
                ("namespaces", |a| a.namespaces = 50),
                ("shards", |a| a.shards = 32),
                ("edits", |a| a.edits = 0),
                ("no_takeover", |a| a.no_takeover = true),
                ("drift_resync_interval", |a| a.drift_resync_interval = Some(Duration::from_secs(30))),
                ("idle", |a| a.idle = Duration::from_secs(90)),
            ],
            Scenario::Monorepo => vec![
                ("apps", |a| a.apps = 1000),
                ("objects", |a| a.objects = Objects::Configmap),
                ("deployment_every", |a| a.deployment_every = 0),
                ("namespaces", |a| a.namespaces = 1),
                ("edits", |a| a.edits = 0),
                ("no_takeover", |a| a.no_takeover = true),
                ("monorepo_commit", |a| a.monorepo_commit = true),
            ],
            Scenario::ScaleOut => vec![
                ("apps", |a| a.apps = 1000),
                ("objects", |a| a.objects = Objects::Configmap),
                ("deployment_every", |a| a.deployment_every = 0),
                ("namespaces", |a| a.namespaces = 10),
                ("replicas", |a| a.replicas = 3),
                ("shards", |a| a.shards = 16),
                ("kube_api_qps", |a| a.kube_api_qps = Some(50.0)),
                ("scale_out", |a| a.scale_out = true),
                ("edits", |a| a.edits = 0),
                ("no_takeover", |a| a.no_takeover = true),
            ],
            Scenario::Chaos => vec![
                ("apps", |a| a.apps = 300),
                ("replicas", |a| a.replicas = 3),
                ("chaos_duration", |a| a.chaos_duration = Duration::from_secs(600)),
                ("edits", |a| a.edits = 0),
                ("no_takeover", |a| a.no_takeover = true),
            ],
        }
    }

    /// Set `args` as this scenario says, except the flags `given` on the command line (by clap
    /// id).
    pub fn apply(self, args: &mut Args, given: impl Fn(&str) -> bool) {
        for (id, set) in self.settings() {
            if !given(id) {
                set(args);
            }
        }
    }
}

/// Parse the command line: the flags, then `--scenario`'s settings for those not given.
pub fn parse() -> Args {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Args::command().get_matches();
    let mut args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(s) = args.scenario {
        s.apply(&mut args, |id| matches.value_source(id) == Some(ValueSource::CommandLine));
    }
    args
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, FromArgMatches, Parser};

    use super::*;

    fn parsed(argv: &[&str]) -> Args {
        let matches = Args::command().try_get_matches_from(argv).unwrap();
        let mut args = Args::from_arg_matches(&matches).unwrap();
        if let Some(s) = args.scenario {
            s.apply(&mut args, |id| matches.value_source(id) == Some(ValueSource::CommandLine));
        }
        args
    }

    #[test]
    fn every_setting_names_a_flag() {
        let command = Args::command();
        for s in [
            Scenario::Cold10k,
            Scenario::Takeover,
            Scenario::Idle,
            Scenario::Monorepo,
            Scenario::ScaleOut,
            Scenario::Chaos,
        ] {
            for (id, _) in s.settings() {
                assert!(command.get_arguments().any(|a| a.get_id() == id), "{s:?}: no flag {id}");
            }
        }
    }

    #[test]
    fn a_scenario_sets_its_flags_and_the_command_line_wins() {
        let a = parsed(&["loadtest", "--scenario", "cold-10k"]);
        assert_eq!((a.apps, a.objects, a.namespaces, a.shards, a.edits), (10_000, Objects::Three, 50, 32, 200));
        assert!(a.no_takeover);
        let a = parsed(&["loadtest", "--scenario", "takeover", "--apps", "500", "--edits", "7"]);
        assert_eq!((a.apps, a.edits, a.no_takeover), (500, 7, false));
        let a = parsed(&["loadtest", "--scenario", "idle"]);
        assert_eq!((a.idle, a.drift_resync_interval), (Duration::from_secs(90), Some(Duration::from_secs(30))));
        let a = parsed(&["loadtest", "--scenario", "monorepo"]);
        assert!(a.monorepo_commit && a.namespaces == 1 && a.apps == 1000);
        let a = parsed(&["loadtest", "--scenario", "scale-out", "--kube-api-qps", "20"]);
        assert!(a.scale_out && a.replicas == 3 && a.edits == 0 && a.no_takeover);
        assert_eq!(a.kube_api_qps, Some(20.0));
        let a = parsed(&["loadtest", "--scenario", "chaos", "--chaos-duration", "2m", "--apps", "40"]);
        assert_eq!((a.apps, a.replicas, a.chaos_duration, a.edits), (40, 3, Duration::from_secs(120), 0));
        assert!(a.no_takeover);
        assert_eq!(parsed(&["loadtest", "--scenario", "chaos"]).chaos_duration, Duration::from_secs(600));
        // 0 is "none" where the help says so, bare or with a unit.
        for zero in ["0", "0s"] {
            assert_eq!(parsed(&["loadtest", "--calibration-step", zero]).calibration_step, Duration::ZERO, "{zero}");
        }
        // No scenario: the flags' defaults.
        let plain = Args::parse_from(["loadtest"]);
        assert_eq!((plain.apps, plain.idle, plain.monorepo_commit), (1000, Duration::ZERO, false));
        assert!(!plain.scale_out && plain.kube_api_qps.is_none());
    }
}
