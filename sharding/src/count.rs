//! Whether a replica may take part with its shard count.
//!
//! Every replica must split the Applications into the same number of shards: a replica with
//! `--shards 6` next to one with `--shards 4` computes other shards for the same Application, so
//! both would own "its" shard and both would pass the fence for it. Every Lease a replica writes
//! carries its count ([`crate::lease::SHARDS_ANNOTATION`]), and each round a replica decides with
//! [`decide`] from the Leases it sees live whether to take part.

use jiff::Timestamp;

/// A live Lease not held by this replica under its own count, as one round saw it.
///
/// "Live" is judged as a takeover is ([`crate::lease`]): held, and not seen unchanged for a whole
/// Lease duration on this process's monotonic clock. A Lease of this replica's identity written
/// under another count (an earlier process with other flags) counts as another replica's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Live {
    /// The Lease's name.
    pub lease: String,
    /// Its holder.
    pub holder: String,
    /// The count it carries; `None` when the annotation is missing or not a number.
    pub shards: Option<u32>,
    /// For a membership Lease, its `acquireTime`: when that replica joined. `None` for shard and
    /// leader Leases.
    pub joined: Option<Timestamp>,
}

/// What a replica does this round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No live Lease carries another count: take part with this replica's count.
    TakePart,
    /// A live Lease carries another count: hold no shard and do not lead.
    Wait {
        /// This replica's count.
        ours: u32,
        /// The other count.
        theirs: u32,
        /// The Lease that carries it (the first by name, when several do).
        lease: String,
        /// Its holder.
        holder: String,
        /// Whether to give up (or not take) this replica's membership Lease as well: true unless
        /// this replica is a member that joined before every member of another count.
        withdraw: bool,
    },
}

/// Decide whether a replica with `ours` shards takes part, given the `live` Leases of others
/// and, if it holds its membership Lease, when it joined (`joined`, with its identity `me`).
///
/// # Contract
///
/// - **The count of the live replicas wins.** If any Lease in `live` carries a count other than
///   `ours`, the verdict is [`Verdict::Wait`]: the replica holds no shard Lease and
///   does not lead. With no such Lease (in particular when no other replica is live) it is
///   [`Verdict::TakePart`], with its own count.
/// - **Only a written count counts.** A Lease without a readable count (written by hand, or by a
///   release before counts were written) is no evidence of another count and is ignored: waiting
///   on it would stop the shards it does not hold for as long as someone keeps it alive.
/// - **A newcomer never disturbs running replicas.** A replica that is not a member
///   (`joined == None`) and waits also withdraws (`withdraw: true`): it writes no Lease at all,
///   so the replicas already running never see it and go on.
/// - **Two replicas that joined at once settle.** Two replicas of different counts can both
///   become members when neither saw the other. Then the one that joined later (by
///   `acquireTime`, ties by identity: both compare the same two values, whatever their clocks)
///   withdraws, and the earlier one waits without shards until the other's membership Lease is
///   released, then takes part.
///
/// # Safety
///
/// The coordinator takes shards only in a round whose list of Leases ran after its membership
/// Lease was written and found [`Verdict::TakePart`]. Two replicas of different counts can then
/// not both take shards: each list would have to run before the other's membership Lease was
/// written, and after its own.
///
/// ```
/// use sharding::count::{Live, Verdict, decide};
/// let old = Live { lease: "k-member-a".into(), holder: "a".into(), shards: Some(4), joined: None };
/// assert_eq!(decide(4, None, "b", &[old.clone()]), Verdict::TakePart);
/// assert!(matches!(decide(6, None, "b", &[old]), Verdict::Wait { theirs: 4, withdraw: true, .. }));
/// ```
pub fn decide(ours: u32, joined: Option<Timestamp>, me: &str, live: &[Live]) -> Verdict {
    let mut others: Vec<(&Live, u32)> =
        live.iter().filter_map(|l| l.shards.filter(|&n| n != ours).map(|n| (l, n))).collect();
    others.sort_by(|a, b| a.0.lease.cmp(&b.0.lease));
    let Some(&(first, theirs)) = others.first() else { return Verdict::TakePart };
    let withdraw = match joined {
        None => true,
        Some(mine) => others.iter().any(|(l, _)| l.joined.is_some_and(|since| (since, l.holder.as_str()) < (mine, me))),
    };
    Verdict::Wait { ours, theirs, lease: first.lease.clone(), holder: first.holder.clone(), withdraw }
}

impl Verdict {
    /// What a waiting replica logs and `/readyz` answers; `None` for [`Verdict::TakePart`].
    pub fn explain(&self) -> Option<String> {
        let Verdict::Wait { ours, theirs, lease, holder, .. } = self else { return None };
        Some(format!(
            "not taking part: this replica has --shards {ours}, but the live replica {holder} (Lease {lease}) uses \
             --shards {theirs}; every replica must use the same --shards. This one holds no shard and waits until no \
             replica of another count is live (stop or scale down the old replicas: a Recreate rollout), then \
             joins by itself"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn member(holder: &str, shards: Option<u32>, joined: i64) -> Live {
        Live { lease: format!("k-member-{holder}"), holder: holder.into(), shards, joined: Some(at(joined)) }
    }

    fn shard(k: u32, holder: &str, shards: Option<u32>) -> Live {
        Live { lease: format!("k-shard-{k}"), holder: holder.into(), shards, joined: None }
    }

    fn wait(theirs: u32, lease: &str, holder: &str, withdraw: bool) -> Verdict {
        Verdict::Wait { ours: 6, theirs, lease: lease.into(), holder: holder.into(), withdraw }
    }

    #[test]
    fn the_count_of_the_live_replicas_wins() {
        // (what it sees, whether it is a member and since when, verdict for a replica "me" with 6)
        let cases: Vec<(&str, Vec<Live>, Option<i64>, Verdict)> = vec![
            ("nobody live: its own count", vec![], None, Verdict::TakePart),
            (
                "live replicas of the same count",
                vec![member("a", Some(6), 0), shard(0, "a", Some(6))],
                None,
                Verdict::TakePart,
            ),
            ("a newcomer next to another count", vec![member("a", Some(4), 0)], None, wait(4, "k-member-a", "a", true)),
            (
                "only a shard Lease of another count is still live (its member is gone)",
                vec![shard(3, "a", Some(4))],
                None,
                wait(4, "k-shard-3", "a", true),
            ),
            (
                "a member that sees a shard Lease of another count waits and keeps its membership",
                vec![shard(3, "a", Some(4))],
                Some(5),
                wait(4, "k-shard-3", "a", false),
            ),
            ("a Lease without a count is ignored", vec![member("a", None, 0)], None, Verdict::TakePart),
            (
                "joined at once, the other earlier: withdraw",
                vec![member("a", Some(4), 1)],
                Some(2),
                wait(4, "k-member-a", "a", true),
            ),
            (
                "joined at once, this one earlier: stay",
                vec![member("z", Some(4), 2)],
                Some(1),
                wait(4, "k-member-z", "z", false),
            ),
            (
                "same acquireTime: the lower identity stays",
                vec![member("a", Some(4), 1)],
                Some(1),
                wait(4, "k-member-a", "a", true),
            ),
            (
                "same acquireTime, higher identity",
                vec![member("z", Some(4), 1)],
                Some(1),
                wait(4, "k-member-z", "z", false),
            ),
            (
                "the first Lease by name is named; same-count Leases are ignored",
                vec![shard(1, "b", Some(6)), shard(2, "c", Some(8)), member("a", Some(4), 9)],
                Some(5),
                wait(4, "k-member-a", "a", false),
            ),
        ];
        for (what, live, joined, verdict) in cases {
            assert_eq!(decide(6, joined.map(at), "me", &live), verdict, "{what}");
        }
    }

    #[test]
    fn the_explanation_names_both_counts_and_what_to_do() {
        let text = wait(4, "k-member-a", "a", true).explain().unwrap();
        for part in ["--shards 6", "--shards 4", "k-member-a", "Recreate"] {
            assert!(text.contains(part), "{part}: {text}");
        }
        assert_eq!(Verdict::TakePart.explain(), None);
    }
}
