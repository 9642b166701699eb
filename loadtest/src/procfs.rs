//! What a process costs, from `/proc/<pid>`: peak and current resident memory, CPU time; and the
//! machine's load average.

use std::time::Duration;

use serde::Serialize;

/// Memory and CPU of one process at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Usage {
    /// Peak resident set (`VmHWM`), KiB.
    pub hwm_kib: u64,
    /// Resident set now (`VmRSS`), KiB.
    pub rss_kib: u64,
    /// User plus system CPU time so far, seconds.
    pub cpu_s: f64,
}

/// `VmHWM` and `VmRSS` (KiB) from the text of `/proc/<pid>/status`.
pub fn parse_status(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

/// User plus system CPU time (clock ticks) from the text of `/proc/<pid>/stat`.
pub fn parse_stat_ticks(text: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may hold spaces: count from the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 (utime) and 15 (stime) of the whole line are 11 and 12 after the name.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on every Linux this runs on).
fn ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

/// The usage of process `pid`, `None` once it is gone.
pub fn usage(pid: u32) -> Option<Usage> {
    let (hwm_kib, rss_kib) = parse_status(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)?;
    let ticks = parse_stat_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
    #[allow(clippy::cast_precision_loss)] // tick counts far below 2^52
    let cpu_s = ticks as f64 / ticks_per_second() as f64;
    Some(Usage { hwm_kib, rss_kib, cpu_s })
}

/// The 1-, 5- and 15-minute load averages (`/proc/loadavg`).
pub fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = text.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// CPU cores online and total memory (GiB), for the report's machine line.
pub fn machine() -> (usize, f64) {
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:").map(|r| r.trim().trim_end_matches("kB").trim().to_string()))
        })
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    #[allow(clippy::cast_precision_loss)]
    (cores, mem_kib as f64 / 1024.0 / 1024.0)
}

/// Share of one core used between two samples of the same process taken `elapsed` apart.
pub fn cpu_share(before: &Usage, after: &Usage, elapsed: Duration) -> f64 {
    if elapsed.is_zero() {
        return 0.0;
    }
    (after.cpu_s - before.cpu_s).max(0.0) / elapsed.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_status_and_stat() {
        let status = "Name:\tksync-controller\nVmPeak:\t 1000 kB\nVmHWM:\t   81234 kB\nVmRSS:\t   70000 kB\n";
        assert_eq!(parse_status(status), Some((81234, 70000)));
        assert_eq!(parse_status("Name: x\n"), None);
        // A name with spaces and parentheses; utime 250, stime 50.
        let stat = "1234 (ksync (ctl) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 100 0 0";
        assert_eq!(parse_stat_ticks(stat), Some(300));
        assert_eq!(parse_stat_ticks("1 (x) S 1"), None);
    }

    #[test]
    fn cpu_share_of_one_core() {
        let a = Usage { cpu_s: 1.0, ..Default::default() };
        let b = Usage { cpu_s: 3.0, ..Default::default() };
        assert!((cpu_share(&a, &b, Duration::from_secs(4)) - 0.5).abs() < 1e-9);
        assert_eq!(cpu_share(&a, &b, Duration::ZERO), 0.0);
    }

    #[test]
    fn this_process_has_usage() {
        let me = usage(std::process::id()).expect("own /proc entry");
        assert!(me.rss_kib > 0 && me.hwm_kib >= me.rss_kib);
        assert!(load_average().is_some());
    }
}
