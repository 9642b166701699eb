use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    #[serde(default)]
    prune: bool,
    desired: Vec<Value>,
    #[serde(default)]
    live: Vec<Value>,
    #[serde(default)]
    managed: Vec<Value>,
    #[serde(default)]
    hooks: Vec<Value>,
    /// `spec.strategy.hooks` (default true).
    #[serde(default = "yes")]
    run_hooks: bool,
    want: Vec<String>,
}

fn yes() -> bool {
    true
}

fn inputs(c: &Case) -> Inputs {
    Inputs {
        live: c.live.iter().map(|o| (validate::identity(o), o.clone())).collect(),
        managed: c.managed.clone(),
        prune: c.prune,
        hooks: c.hooks.clone(),
        run_hooks: c.run_hooks,
        ..Default::default()
    }
}

fn show(e: &Entry) -> String {
    let mut s = format!("{:?} {}/{} ", e.action, e.group, e.kind);
    if !e.namespace.is_empty() {
        s.push_str(&format!("{}/", e.namespace));
    }
    s.push_str(&e.name);
    if e.wave != 0 {
        s.push_str(&format!(" (wave {})", e.wave));
    }
    if let Some(h) = e.hook {
        s.push_str(&format!(" ({h} hook)"));
    }
    if !e.changed.is_empty() {
        s.push_str(&format!(" {}", e.changed.join(",")));
    }
    if !e.warnings.is_empty() {
        s.push_str(&format!(" [{}]", e.warnings.join("; ")));
    }
    s
}

fn cases() -> Vec<Case> {
    crate::yaml::from_str(include_str!("../../testdata/plan/plan.yaml")).unwrap()
}

#[test]
fn table() {
    let cases = cases();
    assert!(cases.len() >= 6);
    for c in cases {
        let plan = build(&c.desired, &inputs(&c));
        let got: Vec<String> = plan.entries.iter().map(show).collect();
        assert_eq!(got, c.want, "{}", c.name);
        assert!(plan.digest.starts_with("sha256:") && plan.digest.len() == 71, "{}", plan.digest);
    }
}

/// An entry's identity is its object's: the applies, health and drift look objects up by either.
#[test]
fn an_entry_is_known_by_its_objects_identity() {
    for c in cases() {
        let plan = build(&c.desired, &inputs(&c));
        for d in &c.desired {
            let id = validate::identity(d);
            let found = plan.entries.iter().filter(|e| e.identity() == id).count();
            assert_eq!(found, 1, "{}: {id}", c.name);
        }
    }
}

/// Two plans changing the same paths to different values (blue to red, red to blue) have
/// different digests: approving one never approves the other.
#[test]
fn the_digest_covers_the_values_set() {
    let cm = |color: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "team"}, "data": {"color": color}});
    let plan_of = |desired: &str, live: &str| {
        let live = [(validate::identity(&cm(live)), cm(live))].into_iter().collect();
        build(&[cm(desired)], &Inputs { live, ..Default::default() })
    };
    let (to_red, to_blue) = (plan_of("red", "blue"), plan_of("blue", "red"));
    assert_eq!(to_red.entries, to_blue.entries, "the same paths change");
    assert_ne!(to_red.digest, to_blue.digest);
    assert_eq!(plan_of("red", "blue").digest, to_red.digest, "and the same plan, the same digest");
}

/// Same inputs in any order: a byte-identical plan and digest.
#[test]
fn any_input_order_gives_the_same_plan() {
    for c in cases() {
        let reference = build(&c.desired, &inputs(&c));
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..50 {
            let mut desired = c.desired.clone();
            let mut managed = c.managed.clone();
            let mut hooks = c.hooks.clone();
            for list in [&mut desired, &mut managed, &mut hooks] {
                for i in (1..list.len()).rev() {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    list.swap(i, (seed % (i as u64 + 1)) as usize);
                }
            }
            let shuffled = Case {
                name: c.name.clone(),
                prune: c.prune,
                desired,
                live: c.live.clone(),
                managed,
                hooks,
                run_hooks: c.run_hooks,
                want: Vec::new(),
            };
            let plan = build(&shuffled.desired, &inputs(&shuffled));
            assert_eq!(serde_json::to_vec(&plan).unwrap(), serde_json::to_vec(&reference).unwrap(), "{}", c.name);
        }
    }
}

/// See: issue 18 (fuzz harness). An object listed twice as a prune candidate (two versions of
/// its kind) gave a different version, or with an opt-out on one copy a Delete instead of a
/// skipped prune, depending on which copy came first.
#[test]
fn a_candidate_listed_twice_gives_the_same_plan_in_either_order() {
    let v1 = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "web"}});
    let v2 = json!({"apiVersion": "example.com/v2", "kind": "Widget", "metadata": {"name": "w", "namespace": "web",
                    "annotations": {"sync.kuvryn.io/prune": "disabled"}}});
    let v3 = json!({"apiVersion": "example.com/v3", "kind": "Widget", "metadata": {"name": "w", "namespace": "web"}});
    let plan = |managed: &[&Value]| {
        let inputs =
            Inputs { managed: managed.iter().map(|v| (*v).clone()).collect(), prune: true, ..Default::default() };
        build(&[], &inputs)
    };
    let kept = plan(&[&v1, &v2]);
    assert_eq!(kept, plan(&[&v2, &v1]));
    assert_eq!((kept.entries[0].action, kept.entries[0].version.as_str()), (Action::Unchanged, "v2"));
    let deleted = plan(&[&v3, &v1]);
    assert_eq!(deleted, plan(&[&v1, &v3]));
    assert_eq!((deleted.entries[0].action, deleted.entries[0].version.as_str()), (Action::Delete, "v1"));
}

#[test]
fn secret_values_never_appear_in_a_plan() {
    let desired = [json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "web"},
                          "stringData": {"password": "super-secret-value"}, "data": {"token": "c2VjcmV0LXRva2Vu"}})];
    let live = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "web"},
                      "data": {"password": "b2xk", "token": "b3RoZXItdG9rZW4="}});
    let inputs = Inputs { live: BTreeMap::from([(validate::identity(&live), live)]), ..Default::default() };
    let plan = build(&desired, &inputs);
    assert_eq!(plan.entries[0].changed, ["data.password", "data.token"]);
    let text = serde_json::to_string(&plan).unwrap();
    for secret in ["super-secret-value", "c2VjcmV0LXRva2Vu", "b2xk", "b3RoZXItdG9rZW4=", "secret-token"] {
        assert!(!text.contains(secret), "{text}");
    }
}

#[test]
fn changed_paths_are_bounded() {
    let data: serde_json::Map<String, Value> = (0..50).map(|i| (format!("k{i:02}"), json!("new"))).collect();
    let desired =
        [json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big", "namespace": "a"}, "data": data})];
    let live =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big", "namespace": "a"}, "data": {}});
    let plan =
        build(&desired, &Inputs { live: BTreeMap::from([(validate::identity(&live), live)]), ..Default::default() });
    assert_eq!(plan.entries[0].changed.len(), MAX_PATHS);
    assert_eq!(plan.entries[0].more_changed, 30);
}

#[test]
fn dry_run_results_are_compared_over_the_desired_fields() {
    // The server normalizes "1000m" to "1": comparing the dry-run result, not the desired
    // spelling, avoids a false difference.
    let desired = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"},
                         "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1000m"}}}]}});
    let normalized = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"},
                            "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}], "dnsPolicy": "ClusterFirst"}});
    let id = validate::identity(&desired);
    let without = build(
        std::slice::from_ref(&desired),
        &Inputs { live: BTreeMap::from([(id.clone(), normalized.clone())]), ..Default::default() },
    );
    assert_eq!(without.entries[0].action, Action::Update);
    let with = build(
        std::slice::from_ref(&desired),
        &Inputs {
            live: BTreeMap::from([(id.clone(), normalized.clone())]),
            dry_run: BTreeMap::from([(id, normalized)]),
            ..Default::default()
        },
    );
    assert_eq!(with.entries[0].action, Action::Unchanged);
}

#[test]
fn conflicts_are_listed_sorted() {
    let desired = [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a"}, "data": {"x": "1"}}),
    ];
    let id = validate::identity(&desired[0]);
    let conflicts = vec![
        Conflict { field: "data.y".into(), manager: "kubectl".into() },
        Conflict { field: "data.x".into(), manager: "helm".into() },
    ];
    let plan = build(&desired, &Inputs { conflicts: BTreeMap::from([(id, conflicts)]), ..Default::default() });
    assert_eq!(plan.entries[0].conflicts[0].field, "data.x");
    assert_eq!(plan.entries[0].conflicts[1].manager, "kubectl");
}

/// `spec.strategy.waves: false`: one group, in kind order, every entry in wave 0.
#[test]
fn without_waves_everything_is_one_group() {
    let desired = [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late", "namespace": "web",
               "annotations": {"sync.kuvryn.io/sync-wave": "5"}}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app", "namespace": "web",
               "annotations": {"sync.kuvryn.io/sync-wave": "-1"}}}),
    ];
    let plan = build(&desired, &Inputs { one_wave: true, ..Default::default() });
    let got: Vec<String> = plan.entries.iter().map(show).collect();
    assert_eq!(got, ["Create /ConfigMap web/late", "Create apps/Deployment web/app"]);
    assert_eq!(plan.waves(), [0]);
    assert_eq!(build(&desired, &Inputs::default()).waves(), [-1, 5]);
}

/// The wave annotation: an integer, or the object is refused with the value named.
#[test]
fn waves_are_integers() {
    let with = |v: Value| json!({"metadata": {"annotations": {"sync.kuvryn.io/sync-wave": v}}});
    let cases: Vec<(Value, Result<i32, &str>)> = vec![
        (json!({"metadata": {}}), Ok(0)),
        (with(json!("3")), Ok(3)),
        (with(json!("-10")), Ok(-10)),
        (with(json!(" 2 ")), Ok(2)),
        (
            with(json!("1.5")),
            Err("annotation sync.kuvryn.io/sync-wave: \"1.5\" is not a wave (an integer such as -1, 0 or 5)"),
        ),
        (
            with(json!("")),
            Err("annotation sync.kuvryn.io/sync-wave: \"\" is not a wave (an integer such as -1, 0 or 5)"),
        ),
        (
            with(json!("99999999999")),
            Err("annotation sync.kuvryn.io/sync-wave: \"99999999999\" is not a wave (an integer such as -1, 0 or 5)"),
        ),
        (with(json!(2)), Err("annotation sync.kuvryn.io/sync-wave: 2 is not a string")),
    ];
    for (obj, want) in cases {
        assert_eq!(super::wave_of(&obj), want.map_err(str::to_string), "{obj}");
    }
}

/// Hooks: Sync hooks add their waves; no hook is a change (drift) of the plan.
#[test]
fn hooks_are_not_changes_and_sync_hooks_have_waves() {
    let hook = |name: &str, phase: &str, wave: &str| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "web",
               "annotations": {"sync.kuvryn.io/hook": phase, "sync.kuvryn.io/sync-wave": wave}}})
    };
    let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "web"}});
    let inputs = Inputs {
        live: BTreeMap::from([(validate::identity(&live), live.clone())]),
        hooks: vec![hook("pre", "PreSync", "-3"), hook("seed", "Sync", "4"), hook("post", "PostSync", "9")],
        run_hooks: true,
        ..Default::default()
    };
    let plan = build(std::slice::from_ref(&live), &inputs);
    assert!(!plan.changes(), "{:?}", plan.entries);
    assert_eq!(plan.waves(), [0, 4]);
    let off = build(std::slice::from_ref(&live), &Inputs { run_hooks: false, ..inputs });
    assert_eq!(off.waves(), [0]);
    assert!(off.entries.iter().filter(|e| e.is_hook()).all(|e| e.action == Action::Skip));
    let stored = revision::stored(&plan, false);
    assert_eq!((stored.summary.hooks, stored.summary.unchanged, stored.summary.create), (3, 1, 0));
}

#[test]
fn a_carried_out_plan_is_the_plan_a_replica_computes_after_the_rollout() {
    // For every plan of the table: carry it out on a pretend server (desired objects applied,
    // with the fields a server adds; deletes gone), then plan again as a replica that kept
    // nothing (reads and dry runs). Its digest is the carried-out plan's.
    for c in cases() {
        let before = inputs(&c);
        let plan = build(&c.desired, &before);
        let done = carried_out(&plan, &c.desired, &c.hooks);
        let served = |o: &Value| {
            let mut o = o.clone();
            // What the server stores of a Secret's stringData.
            if let Some(strings) = o.as_object_mut().and_then(|m| m.remove("stringData")) {
                use base64::Engine;
                for (k, v) in strings.as_object().into_iter().flatten() {
                    let encoded = base64::engine::general_purpose::STANDARD.encode(v.as_str().unwrap_or_default());
                    o["data"][k] = json!(encoded);
                }
            }
            o["metadata"]["resourceVersion"] = json!("42");
            o["metadata"]["uid"] = json!("0d1c");
            o["metadata"]["labels"]["sync.kuvryn.io/application-id"] = json!("a1");
            o
        };
        let live: BTreeMap<String, Value> = c.desired.iter().map(|d| (validate::identity(d), served(d))).collect();
        let deleted: Vec<String> =
            plan.entries.iter().filter(|e| e.action == Action::Delete).map(|e| e.identity()).collect();
        let mut managed: Vec<Value> = c
            .managed
            .iter()
            .filter(|m| {
                let (g, k, n, name) = key(m);
                !deleted.contains(&format!("{g}/{k}/{n}/{name}"))
            })
            .cloned()
            .collect();
        managed.extend(live.values().cloned());
        let fresh = build(&c.desired, &Inputs { live: live.clone(), dry_run: live, managed, ..before.clone() });
        assert_eq!(done.digest, fresh.digest, "{}: {:#?}\nagainst {:#?}", c.name, done.entries, fresh.entries);
        assert!(
            done.entries.iter().all(|e| e.is_hook() || matches!(e.action, Action::Unchanged)),
            "{}: {:#?}",
            c.name,
            done.entries
        );
    }
}
