//! The numbers in `docs/sharding.md`, as Markdown tables:
//!
//! - Applications to shards: keys per shard for 10,000 keys with jump consistent hash (the crate's
//!   [`sharding::shard_of`]), rendezvous hashing over the shards, and the `consistent_hash` crate's
//!   virtual-node ring (160 virtual nodes per shard); the time per key.
//! - Shards to replicas: balance and movement on join and leave for the crate's [`sharding::assign`]
//!   and the alternatives it was chosen over.
//!
//! `cargo run --release -p sharding --example balance` (about 40 s on 2 cores).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use consistent_hash::{DefaultHash, Node, StaticHashRing};
use sha2::{Digest, Sha256};

const KEYS: usize = 10_000;
const SHARD_COUNTS: [u32; 5] = [4, 8, 16, 64, 256];
const TRIALS: usize = 20;

fn main() {
    let key_sets: [(&str, Vec<String>); 2] = [
        ("`app-00000` … `app-09999`", (0..KEYS).map(|i| format!("app-{i:05}")).collect()),
        (
            "`team-00/app-0000` … `team-49/app-0199` (50 namespaces × 200)",
            (0..KEYS).map(|i| format!("team-{:02}/app-{:04}", i / 200, i % 200)).collect(),
        ),
    ];
    for (name, keys) in &key_sets {
        key_balance(name, keys);
    }
    worst_jump_balance(&key_sets);
    key_speed(&key_sets[1].1);
    assign_speed();
    movement();
}

// ---------------------------------------------------------------------------------------------
// Applications to shards

/// Rendezvous hashing over the shards: the shard with the highest `SHA-256(key ‖ shard)` prefix.
fn rendezvous_shard(key: &str, shards: u32) -> u32 {
    (0..shards)
        .max_by_key(|shard| {
            let mut hasher = Sha256::new();
            hasher.update(key.as_bytes());
            hasher.update(shard.to_be_bytes());
            let digest = hasher.finalize();
            (u64::from_be_bytes(digest[..8].try_into().unwrap()), std::cmp::Reverse(*shard))
        })
        .unwrap()
}

fn spread(counts: &[usize]) -> String {
    let max = *counts.iter().max().unwrap();
    let min = *counts.iter().min().unwrap();
    let mean = counts.iter().sum::<usize>() as f64 / counts.len() as f64;
    let ratio = if min == 0 { "∞".to_owned() } else { format!("{:.2}", max as f64 / min as f64) };
    format!(
        "{max}/{min} = {ratio} ({:+.0}%/{:+.0}%)",
        (max as f64 / mean - 1.0) * 100.0,
        (min as f64 / mean - 1.0) * 100.0
    )
}

fn key_balance(name: &str, keys: &[String]) {
    println!("\n### Keys per shard, max/min (vs mean), {} keys: {name}\n", keys.len());
    println!("| shards | jump (chosen) | rendezvous (SHA-256) | consistent_hash 0.1.4, 160 vnodes |");
    println!("|---:|---|---|---|");
    for shards in SHARD_COUNTS {
        let mut jump = vec![0; shards as usize];
        let mut hrw = vec![0; shards as usize];
        let mut ring = vec![0; shards as usize];
        let nodes = (0..shards).map(|shard| Node::new(shard).quantity(160));
        let chash = StaticHashRing::new(DefaultHash, nodes);
        for key in keys {
            jump[sharding::shard_of(key, shards) as usize] += 1;
            hrw[rendezvous_shard(key, shards) as usize] += 1;
            ring[chash.calc_candidates(&key.as_str()).next().unwrap().key as usize] += 1;
        }
        println!("| {shards} | {} | {} | {} |", spread(&jump), spread(&hrw), spread(&ring));
    }
}

/// What `tests/ring.rs` bounds: the worst max/min and the worst deviation from the mean in standard
/// deviations over every shard count in 4..=64.
fn worst_jump_balance(key_sets: &[(&str, Vec<String>)]) {
    println!("\n### Jump, every shard count 4..=64: the worst shard\n");
    println!("| keys | worst max/min (shards) | worst deviation from the mean, in σ (shards) |");
    println!("|---|---|---|");
    for (name, keys) in key_sets {
        let (mut ratio, mut ratio_at, mut z, mut z_at) = (0.0f64, 0, 0.0f64, 0);
        for shards in 4..=64u32 {
            let mut counts = vec![0usize; shards as usize];
            for key in keys {
                counts[sharding::shard_of(key, shards) as usize] += 1;
            }
            let n = keys.len() as f64;
            let p = 1.0 / f64::from(shards);
            let (mean, sigma) = (n * p, (n * p * (1.0 - p)).sqrt());
            let r = *counts.iter().max().unwrap() as f64 / *counts.iter().min().unwrap() as f64;
            if r > ratio {
                (ratio, ratio_at) = (r, shards);
            }
            for &c in &counts {
                let d = (c as f64 - mean).abs() / sigma;
                if d > z {
                    (z, z_at) = (d, shards);
                }
            }
        }
        println!("| {name} | {ratio:.2} ({ratio_at}) | {z:.2} ({z_at}) |");
    }
}

fn key_speed(keys: &[String]) {
    println!("\n### Time per key (release build, this machine)\n");
    println!("| shards | jump | rendezvous (SHA-256) |");
    println!("|---:|---:|---:|");
    for shards in [16, 256, 4096] {
        let start = Instant::now();
        let mut sum = 0u64;
        for key in keys {
            sum += u64::from(sharding::shard_of(key, shards));
        }
        let jump = start.elapsed() / keys.len() as u32;
        let start = Instant::now();
        for key in keys {
            sum += u64::from(rendezvous_shard(key, shards));
        }
        let hrw = start.elapsed() / keys.len() as u32;
        std::hint::black_box(sum);
        println!("| {shards} | {jump:.2?} | {hrw:.2?} |");
    }
}

// ---------------------------------------------------------------------------------------------
// Shards to replicas

type Assign = fn(u32, &[String]) -> BTreeMap<u32, String>;

/// Distinct replicas, sorted.
fn members(replicas: &[String]) -> Vec<&String> {
    replicas.iter().collect::<BTreeSet<_>>().into_iter().collect()
}

/// All (score, shard, replica index) pairs, highest score first, as [`sharding::assign`] orders them.
fn sorted_pairs(shards: u32, members: &[&String]) -> Vec<(u64, u32, usize)> {
    let mut pairs = vec![];
    for shard in 0..shards {
        for (i, r) in members.iter().enumerate() {
            pairs.push((sharding::score(shard, r), shard, i));
        }
    }
    pairs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    pairs
}

/// Plain rendezvous: every shard to its highest-scoring replica.
fn plain_hrw(shards: u32, replicas: &[String]) -> BTreeMap<u32, String> {
    (0..shards)
        .map(|shard| {
            let best = replicas.iter().max_by_key(|r| (sharding::score(shard, r), std::cmp::Reverse(*r))).unwrap();
            (shard, best.clone())
        })
        .collect()
}

/// Bounded loads shard by shard: shard 0, 1, … each to its best replica with room (same caps as the
/// crate's).
fn shard_order(shards: u32, replicas: &[String]) -> BTreeMap<u32, String> {
    let members = members(replicas);
    let n = members.len() as u32;
    let (floor, extra) = (shards / n, shards % n);
    let mut loads = vec![0u32; members.len()];
    let mut at_ceiling = 0;
    let mut owners = BTreeMap::new();
    for shard in 0..shards {
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(sharding::score(shard, members[i])));
        let i = *order
            .iter()
            .find(|&&i| loads[i] < floor || (loads[i] == floor && at_ceiling < extra))
            .expect("total capacity equals the shard count");
        if loads[i] == floor {
            at_ceiling += 1;
        }
        loads[i] += 1;
        owners.insert(shard, members[i].clone());
    }
    owners
}

/// Bounded loads in global order with the ceilings fixed up front: the `S mod R` replicas with the
/// highest `key_hash(replica)` may own `ceil(S/R)`.
fn fixed_caps(shards: u32, replicas: &[String]) -> BTreeMap<u32, String> {
    let members = members(replicas);
    let n = members.len() as u32;
    let (floor, extra) = (shards / n, shards % n);
    let mut by_hash: Vec<usize> = (0..members.len()).collect();
    by_hash.sort_by_key(|&i| std::cmp::Reverse(sharding::key_hash(members[i])));
    let mut caps = vec![floor; members.len()];
    for &i in by_hash.iter().take(extra as usize) {
        caps[i] += 1;
    }
    let pairs = sorted_pairs(shards, &members);
    let mut loads = vec![0u32; members.len()];
    let mut owners = BTreeMap::new();
    for (_, shard, i) in pairs {
        if owners.contains_key(&shard) || loads[i] >= caps[i] {
            continue;
        }
        loads[i] += 1;
        owners.insert(shard, members[i].clone());
    }
    owners
}

/// Global order, every replica capped at `ceil(S/R)` (looser balance: the lowest load is not bounded).
fn ceil_caps(shards: u32, replicas: &[String]) -> BTreeMap<u32, String> {
    let members = members(replicas);
    let n = members.len() as u32;
    let cap = shards.div_ceil(n);
    let pairs = sorted_pairs(shards, &members);
    let mut loads = vec![0u32; members.len()];
    let mut owners = BTreeMap::new();
    for (_, shard, i) in pairs {
        if owners.contains_key(&shard) || loads[i] >= cap {
            continue;
        }
        loads[i] += 1;
        owners.insert(shard, members[i].clone());
    }
    owners
}

/// Maglev-style draft: replicas (by id) take turns, each claiming its highest-scoring free shard.
fn draft(shards: u32, replicas: &[String]) -> BTreeMap<u32, String> {
    let members = members(replicas);
    let prefs: Vec<Vec<u32>> = members
        .iter()
        .map(|r| {
            let mut p: Vec<u32> = (0..shards).collect();
            p.sort_by_key(|&s| std::cmp::Reverse(sharding::score(s, r)));
            p
        })
        .collect();
    let mut next = vec![0usize; members.len()];
    let mut owners = BTreeMap::new();
    'outer: loop {
        for (i, r) in members.iter().enumerate() {
            if owners.len() == shards as usize {
                break 'outer;
            }
            while owners.contains_key(&prefs[i][next[i]]) {
                next[i] += 1;
            }
            owners.insert(prefs[i][next[i]], (*r).clone());
        }
    }
    owners
}

/// Bounded loads level by level: in level `k` every replica may reach `k` shards, pairs in global order.
fn levels(shards: u32, replicas: &[String]) -> BTreeMap<u32, String> {
    let members = members(replicas);
    let n = members.len() as u32;
    let (floor, extra) = (shards / n, shards % n);
    let pairs = sorted_pairs(shards, &members);
    let mut loads = vec![0u32; members.len()];
    let mut owners = BTreeMap::new();
    let mut at_ceiling = 0;
    for level in 1..=floor + 1 {
        for &(_, shard, i) in &pairs {
            if owners.contains_key(&shard) || loads[i] >= level {
                continue;
            }
            if level == floor + 1 {
                if at_ceiling >= extra {
                    continue;
                }
                at_ceiling += 1;
            }
            loads[i] += 1;
            owners.insert(shard, members[i].clone());
        }
    }
    owners
}

fn crate_assign(shards: u32, replicas: &[String]) -> BTreeMap<u32, String> {
    sharding::assign(shards, replicas)
}

/// Replica names like a Deployment's pods, different in every trial.
fn replica_names(trial: usize, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            let digest = Sha256::digest(format!("{trial}/{i}"));
            format!("ksync-controller-{:x}", u32::from_be_bytes(digest[..4].try_into().unwrap()))
        })
        .collect()
}

fn assign_speed() {
    println!("\n### Time of one `assign` (release build, this machine)\n");
    println!("| shards | replicas | time |");
    println!("|---:|---:|---:|");
    for (shards, replicas) in [(16, 3), (256, 16), (4096, 16), (4096, 64)] {
        let names = replica_names(0, replicas);
        let runs = 20;
        let start = Instant::now();
        for _ in 0..runs {
            std::hint::black_box(sharding::assign(shards, &names));
        }
        println!("| {shards} | {replicas} | {:.2?} |", start.elapsed() / runs);
    }
}

fn load_gap(owners: &BTreeMap<u32, String>, replicas: &[String]) -> u32 {
    let mut loads: BTreeMap<&str, u32> = replicas.iter().map(|r| (r.as_str(), 0)).collect();
    for owner in owners.values() {
        *loads.get_mut(owner.as_str()).unwrap() += 1;
    }
    loads.values().max().unwrap() - loads.values().min().unwrap()
}

fn moved(before: &BTreeMap<u32, String>, after: &BTreeMap<u32, String>) -> usize {
    before.iter().filter(|(shard, owner)| after[shard] != **owner).count()
}

/// Mean and maximum of a series.
#[derive(Default, Clone)]
struct Stats {
    sum: f64,
    max: f64,
    count: usize,
}

impl Stats {
    fn add(&mut self, x: f64) {
        self.sum += x;
        self.max = self.max.max(x);
        self.count += 1;
    }
    fn merge(&mut self, other: &Stats) {
        self.sum += other.sum;
        self.max = self.max.max(other.max);
        self.count += other.count;
    }
    fn percent(&self) -> String {
        if self.count == 0 {
            "—".to_owned()
        } else {
            format!("{:.1}% ({:.1}%)", 100.0 * self.sum / self.count as f64, 100.0 * self.max)
        }
    }
    fn ratio(&self) -> String {
        if self.count == 0 {
            "—".to_owned()
        } else {
            format!("{:.2} ({:.2})", self.sum / self.count as f64, self.max)
        }
    }
}

/// One row: `n` replicas, a replica joining (`n → n+1`) and each one leaving (`n → n−1`).
#[derive(Default, Clone)]
struct Row {
    gap: Stats,
    join: Stats,
    join_ideal: Stats,
    join_ratio: Stats,
    leave: Stats,
    leave_ideal: Stats,
    leave_ratio: Stats,
    bystanders: Stats,
}

fn measure(assign: Assign, shards: u32, n: usize) -> Row {
    let mut row = Row::default();
    let s = f64::from(shards);
    for trial in 0..TRIALS {
        let names = replica_names(trial, n + 1);
        let current = &names[..n];
        let before = assign(shards, current);
        row.gap.add(f64::from(load_gap(&before, current)));

        let after = assign(shards, &names);
        let newcomer = after.values().filter(|owner| **owner == names[n]).count();
        let m = moved(&before, &after);
        row.join.add(m as f64 / s);
        row.join_ideal.add(newcomer as f64 / s);
        if newcomer > 0 {
            row.join_ratio.add(m as f64 / newcomer as f64);
        }

        if n >= 2 {
            for leaver in current {
                let rest: Vec<String> = current.iter().filter(|r| *r != leaver).cloned().collect();
                let after = assign(shards, &rest);
                let held = before.values().filter(|owner| *owner == leaver).count();
                let m = moved(&before, &after);
                row.leave.add(m as f64 / s);
                row.leave_ideal.add(held as f64 / s);
                if held > 0 {
                    row.leave_ratio.add(m as f64 / held as f64);
                }
                row.bystanders.add((m - held) as f64 / s);
            }
        }
    }
    row
}

fn movement() {
    let variants: [(&str, Assign); 7] = [
        ("bounded loads, global order (chosen)", crate_assign),
        ("bounded loads, shard by shard", shard_order),
        ("bounded loads, levels", levels),
        ("bounded loads, ceilings fixed by replica hash", fixed_caps),
        ("cap ceil(S/R) for every replica", ceil_caps),
        ("draft (Maglev-style turns)", draft),
        ("plain rendezvous", plain_hrw),
    ];
    let mut summary = vec![];
    for (index, (name, assign)) in variants.into_iter().enumerate() {
        for shards in [16, 64, 256] {
            let rows: Vec<Row> = (1..=16).map(|n| measure(assign, shards, n)).collect();
            if index == 0 {
                print_rows(name, shards, &rows);
            }
            let mut all = Row::default();
            for row in &rows {
                all.gap.merge(&row.gap);
                all.join_ratio.merge(&row.join_ratio);
                all.leave_ratio.merge(&row.leave_ratio);
                all.bystanders.merge(&row.bystanders);
            }
            summary.push((name, shards, all));
        }
    }
    println!("\n### Shard assignment variants, 1–16 replicas, {TRIALS} sets of names: mean (worst)\n");
    println!(
        "| variant | shards | load max−min | join: moved/ideal | leave: moved/ideal | leave: moved not from the leaver |"
    );
    println!("|---|---:|---|---|---|---|");
    for (name, shards, all) in summary {
        println!(
            "| {name} | {shards} | {:.2} ({:.0}) | {} | {} | {} |",
            all.gap.sum / all.gap.count as f64,
            all.gap.max,
            all.join_ratio.ratio(),
            all.leave_ratio.ratio(),
            all.bystanders.percent()
        );
    }
}

fn print_rows(name: &str, shards: u32, rows: &[Row]) {
    println!("\n### {shards} shards, {name}: mean (worst) over {TRIALS} sets of replica names\n");
    println!(
        "| n | load max−min | join n→n+1: moved | ideal | moved/ideal | leave n→n−1: moved | ideal | moved/ideal | moved not from the leaver |"
    );
    println!("|---:|---|---|---|---|---|---|---|---|");
    for (i, row) in rows.iter().enumerate() {
        println!(
            "| {} | {:.2} ({:.0}) | {} | {} | {} | {} | {} | {} | {} |",
            i + 1,
            row.gap.sum / row.gap.count as f64,
            row.gap.max,
            row.join.percent(),
            row.join_ideal.percent(),
            row.join_ratio.ratio(),
            row.leave.percent(),
            row.leave_ideal.percent(),
            row.leave_ratio.ratio(),
            row.bystanders.percent()
        );
    }
}
