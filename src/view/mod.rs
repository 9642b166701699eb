//! The text views `ksync` and the dashboard share, as pure functions: API objects (and a `now`
//! for ages) in, a `String` out. No client, no terminal, no clock: the commands of `ksync` (the
//! `cli/` package, which has its other views) and [`crate::dashboard`] fetch the objects, pick
//! the colours and the time, and show what these return, so every view is tested
//! deterministically (unit tests here, snapshots in `cli/tests/cli.rs`).
//!
//! Shared pieces: a column aligner ([`Table`]) in the manner of `kubectl get` (three spaces
//! between columns, no trailing spaces), [`age`] in kubectl's short form, and a [`Palette`] that
//! colours words only when asked to.

pub mod apps;
pub mod graph;
pub mod history;
pub mod plan;

use anstyle::{AnsiColor, Style};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::common::HealthStatus;
use crate::api::conditions;
use crate::api::names;
use crate::api::revision::{Revision, RevisionPhase};

/// What an absent value prints as in a table.
pub const NONE: &str = "-";

/// Characters of a commit id shown in tables (as in the controller's Events).
pub const SHORT_COMMIT: usize = 12;

/// How a view colours words: not at all, or with ANSI escapes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Palette {
    /// Whether to emit ANSI escapes.
    pub enabled: bool,
}

/// The role of a word, which picks its colour.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tone {
    /// Printed as is.
    #[default]
    Plain,
    /// Good news: Synced, Healthy, Ready, create.
    Good,
    /// Something moving or to look at: OutOfSync, Progressing, update.
    Warn,
    /// Something wrong: Degraded, Failed, delete.
    Bad,
    /// Background: Unknown, unchanged.
    Dim,
    /// Headings.
    Bold,
}

impl Palette {
    /// A palette that colours.
    pub const COLOR: Palette = Palette { enabled: true };
    /// A palette that does not.
    pub const PLAIN: Palette = Palette { enabled: false };

    /// `text` in `tone` (unchanged when colour is off or the tone is plain).
    pub fn paint(&self, tone: Tone, text: &str) -> String {
        let style = match tone {
            Tone::Plain => return text.to_string(),
            Tone::Good => Style::new().fg_color(Some(AnsiColor::Green.into())),
            Tone::Warn => Style::new().fg_color(Some(AnsiColor::Yellow.into())),
            Tone::Bad => Style::new().fg_color(Some(AnsiColor::Red.into())),
            Tone::Dim => Style::new().dimmed(),
            Tone::Bold => Style::new().bold(),
        };
        if !self.enabled || text.is_empty() {
            return text.to_string();
        }
        format!("{}{text}{}", style.render(), style.render_reset())
    }
}

/// A table cell: its text and the tone it is printed in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cell {
    /// The visible text (one line).
    pub text: String,
    /// Its colour.
    pub tone: Tone,
}

impl Cell {
    /// A cell in `tone`; line breaks become spaces.
    pub fn new(text: impl Into<String>, tone: Tone) -> Cell {
        Cell { text: one_line(&text.into()), tone }
    }

    /// A plain cell; an empty text prints as [`NONE`].
    pub fn plain(text: impl Into<String>) -> Cell {
        let text = text.into();
        if text.is_empty() { Cell::new(NONE, Tone::Plain) } else { Cell::new(text, Tone::Plain) }
    }
}

impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::plain(s)
    }
}

impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::plain(s)
    }
}

/// Columns aligned like `kubectl get`: upper-case headers, three spaces between columns, the
/// last column unpadded. Widths count characters, so colour escapes never shift a column.
#[derive(Clone, Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        Table { header: header.into_iter().map(Into::into).collect(), rows: Vec::new() }
    }

    /// Add a row (missing cells print empty; extra ones are dropped).
    pub fn row(&mut self, cells: Vec<Cell>) -> &mut Self {
        self.rows.push(cells);
        self
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The aligned lines, each prefixed with `indent`, each ending in a newline.
    pub fn render(&self, palette: Palette, indent: &str) -> String {
        let n = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().take(n).enumerate() {
                widths[i] = widths[i].max(cell.text.chars().count());
            }
        }
        let header: Vec<Cell> = self.header.iter().map(|h| Cell::new(h.clone(), Tone::Plain)).collect();
        let mut out = String::new();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::from(indent);
            for (i, width) in widths.iter().enumerate() {
                let (text, tone) = row.get(i).map_or(("", Tone::Plain), |c| (c.text.as_str(), c.tone));
                line.push_str(&palette.paint(tone, text));
                if i + 1 < n {
                    line.push_str(&" ".repeat(width - text.chars().count() + 3));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// How long ago `then` was at `now`, as `kubectl get` prints AGE (`ShortHumanDuration`): `5s`,
/// `3m`, `2h`, `4d`, `1y`. A time a second or more in the future is `<invalid>`.
pub fn age(then: Timestamp, now: Timestamp) -> String {
    // Whole seconds, truncated toward zero, as Go's int(d.Seconds()).
    let seconds = now.duration_since(then).as_secs();
    match seconds {
        s if s < -1 => "<invalid>".to_string(),
        s if s < 0 => "0s".to_string(),
        s if s < 60 => format!("{s}s"),
        s if s < 60 * 60 => format!("{}m", s / 60),
        s if s < 24 * 60 * 60 => format!("{}h", s / (60 * 60)),
        s if s < 365 * 24 * 60 * 60 => format!("{}d", s / (24 * 60 * 60)),
        s => format!("{}y", s / (365 * 24 * 60 * 60)),
    }
}

/// [`age`] of an optional API time; [`NONE`] when absent.
pub fn age_of(then: Option<&Time>, now: Timestamp) -> String {
    then.map_or_else(|| NONE.to_string(), |t| age(t.0, now))
}

/// The first [`SHORT_COMMIT`] characters of a commit id.
pub fn short_commit(commit: &str) -> &str {
    commit.get(..SHORT_COMMIT).unwrap_or(commit)
}

/// `s` on one line: every run of line breaks and surrounding whitespace becomes one space.
pub fn one_line(s: &str) -> String {
    if !s.contains(['\n', '\r']) {
        return s.to_string();
    }
    s.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// The colour of a health status.
pub fn health_tone(h: HealthStatus) -> Tone {
    match h {
        HealthStatus::Healthy => Tone::Good,
        HealthStatus::Progressing => Tone::Warn,
        HealthStatus::Degraded => Tone::Bad,
        HealthStatus::Unknown => Tone::Dim,
    }
}

/// The name of a health status.
pub fn health_name(h: HealthStatus) -> &'static str {
    match h {
        HealthStatus::Healthy => "Healthy",
        HealthStatus::Progressing => "Progressing",
        HealthStatus::Degraded => "Degraded",
        HealthStatus::Unknown => "Unknown",
    }
}

/// The name of a Revision phase.
pub fn phase_name(p: RevisionPhase) -> &'static str {
    match p {
        RevisionPhase::Planning => "Planning",
        RevisionPhase::AwaitingApproval => "AwaitingApproval",
        RevisionPhase::Applying => "Applying",
        RevisionPhase::Progressing => "Progressing",
        RevisionPhase::Healthy => "Healthy",
        RevisionPhase::Failed => "Failed",
    }
}

/// The colour of a Revision phase.
pub fn phase_tone(p: RevisionPhase) -> Tone {
    match p {
        RevisionPhase::Healthy => Tone::Good,
        RevisionPhase::Failed => Tone::Bad,
        RevisionPhase::Planning | RevisionPhase::Applying | RevisionPhase::Progressing => Tone::Warn,
        RevisionPhase::AwaitingApproval => Tone::Warn,
    }
}

/// A Revision's phase (Planning before its first status).
pub fn phase_of(r: &Revision) -> RevisionPhase {
    r.status.as_ref().map_or(RevisionPhase::Planning, |s| s.phase)
}

/// How many times a Revision was attempted (attempt numbers keep counting after old attempts
/// are dropped).
pub fn attempts_of(r: &Revision) -> i32 {
    r.status.as_ref().and_then(|s| s.attempts.last()).map_or(0, |a| a.number)
}

/// `label:   value` lines, the values aligned after the longest label.
pub fn fields(rows: &[(&str, String)], indent: &str) -> String {
    let width = rows.iter().map(|(l, _)| l.chars().count()).max().unwrap_or(0);
    let mut out = String::new();
    for (label, value) in rows {
        let pad = " ".repeat(width - label.chars().count() + 2);
        out.push_str(format!("{indent}{label}:{pad}{}", one_line(value)).trim_end());
        out.push('\n');
    }
    out
}

/// The colour of a condition status (`True` is good for every condition the views show
/// except `Stalled` and `Reconciling`).
pub fn condition_tone(c: &Condition) -> Tone {
    let negative = c.type_ == names::conditions::STALLED || c.type_ == names::conditions::RECONCILING;
    match (c.status.as_str(), negative) {
        ("True", false) | ("False", true) => Tone::Good,
        ("True", true) => Tone::Warn,
        ("False", false) => Tone::Bad,
        _ => Tone::Dim,
    }
}

/// The `Ready` condition's status cell: `True`, `False`, `Unknown`, or [`NONE`].
pub fn ready_cell(conds: &[Condition]) -> Cell {
    match conditions::get(conds, names::conditions::READY) {
        Some(c) => Cell::new(c.status.clone(), condition_tone(c)),
        None => Cell::new(NONE, Tone::Dim),
    }
}

/// The `Ready` condition's message (empty when absent).
pub fn ready_message(conds: &[Condition]) -> String {
    conditions::get(conds, names::conditions::READY).map(|c| c.message.clone()).unwrap_or_default()
}

/// The conditions as an indented table: TYPE, STATUS, REASON, AGE (since the last transition),
/// MESSAGE.
pub fn conditions_table(conds: &[Condition], now: Timestamp, palette: Palette, indent: &str) -> String {
    let mut t = Table::new(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"]);
    for c in conds {
        t.row(vec![
            Cell::plain(c.type_.clone()),
            Cell::new(c.status.clone(), condition_tone(c)),
            Cell::plain(c.reason.clone()),
            Cell::plain(age(c.last_transition_time.0, now)),
            Cell::plain(c.message.clone()),
        ]);
    }
    t.render(palette, indent)
}

/// The output when a list is empty, as kubectl words it.
pub fn nothing_found(kind_plural: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("No {kind_plural} found in namespace \"{ns}\".\n"),
        None => format!("No {kind_plural} found.\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn age_reads_like_kubectl() {
        let now = ts("2026-03-01T12:00:00Z");
        let cases = [
            ("2026-03-01T12:00:00Z", "0s"),
            ("2026-03-01T12:00:00.5Z", "0s"),
            ("2026-03-01T12:00:01Z", "0s"),
            ("2026-03-01T12:00:05Z", "<invalid>"),
            ("2026-03-01T11:59:55Z", "5s"),
            ("2026-03-01T11:59:00.1Z", "59s"),
            ("2026-03-01T11:59:00Z", "1m"),
            ("2026-03-01T11:57:00Z", "3m"),
            ("2026-03-01T11:00:01Z", "59m"),
            ("2026-03-01T10:00:00Z", "2h"),
            ("2026-02-28T12:00:01Z", "23h"),
            ("2026-02-25T12:00:00Z", "4d"),
            ("2025-03-02T12:00:00Z", "364d"),
            ("2025-03-01T12:00:00Z", "1y"),
            ("2024-01-01T00:00:00Z", "2y"),
        ];
        for (then, want) in cases {
            assert_eq!(age(ts(then), now), want, "{then}");
        }
    }

    #[test]
    fn columns_align_without_trailing_spaces_and_colour_does_not_shift_them() {
        let mut t = Table::new(["NAME", "HEALTH", "MESSAGE"]);
        t.row(vec![Cell::plain("web"), Cell::new("Degraded", Tone::Bad), Cell::plain("Pod web-1: CrashLoopBackOff")]);
        t.row(vec![Cell::plain("api-gateway"), Cell::new("Healthy", Tone::Good), Cell::plain("")]);
        let plain = t.render(Palette::PLAIN, "");
        assert_eq!(
            plain,
            "NAME          HEALTH     MESSAGE\n\
             web           Degraded   Pod web-1: CrashLoopBackOff\n\
             api-gateway   Healthy    -\n"
        );
        let coloured = t.render(Palette::COLOR, "  ");
        assert!(coloured.contains("\u{1b}[31mDegraded\u{1b}[0m"), "{coloured:?}");
        let stripped: String = {
            let mut out = String::new();
            let mut chars = coloured.chars();
            while let Some(c) = chars.next() {
                if c == '\u{1b}' {
                    for c in chars.by_ref() {
                        if c == 'm' {
                            break;
                        }
                    }
                } else {
                    out.push(c);
                }
            }
            out
        };
        let indented: String = plain.lines().map(|l| format!("  {l}\n")).collect();
        assert_eq!(stripped, indented);
    }

    #[test]
    fn cells_are_one_line() {
        assert_eq!(Cell::plain("first\n  second\r\nthird").text, "first second third");
        assert_eq!(Cell::plain("").text, NONE);
    }

    #[test]
    fn commits_are_shortened() {
        assert_eq!(short_commit("0123456789abcdef"), "0123456789ab");
        assert_eq!(short_commit("abc"), "abc");
    }
}
