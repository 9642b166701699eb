//! Loopback ports for the servers the kit starts as child processes.
//!
//! A port picked free ([`free_port`]) is released before the server binds it, so another test
//! running at the same time can pick the same one. A connection to it then proves only that
//! *someone* listens: a test once sent `helm repo add` to another test's HTTPS server and saw its
//! certificate "signed by unknown authority". [`start_on_free_port`] therefore waits until the
//! listening socket is the child's own ([`listens`], read from `/proc`).

use std::net::TcpListener;
use std::process::Child;
use std::time::{Duration, Instant};

/// A free loopback port (bound, read, released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Whether process `pid` holds a TCP socket listening on `port` (any local address, IPv4 or
/// IPv6): the listening sockets' inodes from `/proc/net/tcp{,6}` against the process's open
/// files. False when either cannot be read.
pub fn listens(pid: u32, port: u16) -> bool {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        inodes.extend(listening_inodes(&text, port));
    }
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().filter_map(|fd| std::fs::read_link(fd.path()).ok()).any(|target| {
        let target = target.to_string_lossy();
        inodes.iter().any(|inode| target == format!("socket:[{inode}]"))
    })
}

/// The inodes of the sockets in LISTEN state (`0A`) on `port` in a `/proc/net/tcp` table.
fn listening_inodes(table: &str, port: u16) -> Vec<String> {
    let suffix = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
            (local.ends_with(&suffix) && *state == "0A").then(|| inode.to_string())
        })
        .collect()
}

/// Start `spawn(port)` on free ports until the child itself listens on one within `timeout`;
/// up to five ports. A child that exits (its port taken) or does not listen in time is killed
/// and the next port tried. `None` when none worked.
pub fn start_on_free_port(timeout: Duration, mut spawn: impl FnMut(u16) -> Child) -> Option<(Child, u16)> {
    for _ in 0..5 {
        let port = free_port();
        let mut child = spawn(port);
        if comes_to_listen(&mut child, port, timeout) {
            return Some((child, port));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    None
}

/// Wait up to `timeout` for `child` itself to listen on `port`; false as soon as it exits.
fn comes_to_listen(child: &mut Child, port: u16, timeout: Duration) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if listens(child.id(), port) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listener_is_told_apart_from_another_process_on_the_port() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        assert!(listens(std::process::id(), port), "this process listens on {port}");
        let mut other = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        assert!(!listens(other.id(), port), "a process that only exists is not the listener");
        let _ = other.kill();
        let _ = other.wait();
        drop(listener);
        assert!(!listens(std::process::id(), port), "nobody listens after the drop");
    }

    #[test]
    fn only_listening_sockets_on_the_port_count() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
                     0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1\n\
                     1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 222 1\n\
                     2: 00000000:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 333 1\n";
        assert_eq!(listening_inodes(table, 8080), ["111"]);
        assert_eq!(listening_inodes(table, 8081), ["333"]);
        assert!(listening_inodes(table, 80).is_empty());
    }

    #[test]
    fn a_port_another_process_holds_is_not_the_childs() {
        // The port accepts connections (this process holds it), but the child never listens:
        // it must not be taken for started.
        let held = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = held.local_addr().expect("addr").port();
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        assert!(!comes_to_listen(&mut child, port, Duration::from_millis(300)));
        let _ = child.kill();
        let _ = child.wait();
    }
}
