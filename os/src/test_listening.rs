//! (feature `test-support`) Whether a server a test started listens yet.
//!
//! A test that picks a free port, starts a server on it and polls with
//! `connect` until it succeeds can be fooled: on loopback, a connect to a
//! port nobody listens on can pick that very port as its own ephemeral
//! port and connect to itself (TCP's simultaneous open). The poll then
//! returns before the server listens, and the test's clients are refused
//! (seen once in `collector/tests/sweep.rs` under the whole suite: "no
//! connection opened").
//!
//! A port picked free can also be taken by a test running in parallel
//! before the server binds it, and the server then exits (RabbitMQ said
//! "dist_port_already_used" once in a fresh machine's run):
//! [`start_on_free_ports`] tries again on fresh ones. Worse, what took it
//! may be another test's server of the same kind, which then answers for
//! both until its test ends and the other test's clients are refused
//! (`collector/tests/sweep.rs`, two uvicorns on one port: "no connection
//! opened ... Connection refused"). So [`until_listening`] waits for the
//! port's listener to be the server's own: a socket its process, or one
//! of its children, holds.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

/// A port free on loopback when asked, for a server that cannot be given
/// port 0 (it may be taken before the server binds it: see
/// [`start_on_free_ports`]).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Waits until `addr` [`accepts`] and its listener is `child`'s (the
/// server's, or a process it started), at most `limit` (past it, panics);
/// `Err` saying so if `child` exited first.
pub fn until_listening(
    addr: SocketAddr,
    child: &mut Child,
    what: &str,
    limit: Duration,
) -> Result<Duration, String> {
    let start = Instant::now();
    while !(accepts(addr) && listener_is_of(addr.port(), child.id())) {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "{what} exited ({status}) before listening on {addr}"
            ));
        }
        assert!(
            start.elapsed() < limit,
            "{what} not listening on {addr} within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(start.elapsed())
}

/// Starts a server on ports from [`free_port`], up to three times: `start`
/// picks fresh ports on each try and returns `Err` when the server exited
/// before listening (each is said); any other failure panics inside it.
pub fn start_on_free_ports<T>(what: &str, mut start: impl FnMut() -> Result<T, String>) -> T {
    const TRIES: usize = 3;
    let mut failures = Vec::new();
    for _ in 0..TRIES {
        match start() {
            Ok(started) => return started,
            Err(exited) => {
                eprintln!("{exited}: trying again on fresh ports");
                failures.push(exited);
            }
        }
    }
    panic!("{what} did not start in {TRIES} tries: {failures:?}")
}

/// Whether a TCP socket listening on `port` (this network namespace) is
/// held by process `pid` or one of its descendants, from /proc.
pub fn listener_is_of(port: u16, pid: u32) -> bool {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return false;
    }
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return false;
    };
    processes
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| holds_any(p, &inodes))
        .any(|p| descends_from(p, pid))
}

/// The inodes of the sockets listening on `port`, IPv4 and IPv6.
fn listening_inodes(port: u16) -> Vec<u64> {
    const LISTEN: &str = "0A";
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let local_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if *state == LISTEN
                && local_port == Some(port)
                && let Ok(inode) = inode.parse()
            {
                inodes.push(inode);
            }
        }
    }
    inodes
}

/// Whether process `pid` has one of the sockets `inodes` open.
fn holds_any(pid: u32, inodes: &[u64]) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok())
                .is_some_and(|inode: u64| inodes.contains(&inode))
        })
    })
}

/// Whether process `pid` is `ancestor` or one of its descendants.
fn descends_from(mut pid: u32, ancestor: u32) -> bool {
    for _ in 0..64 {
        if pid == ancestor {
            return true;
        }
        let Some(parent) = parent_of(pid) else {
            return false;
        };
        if parent == 0 || parent == pid {
            return false;
        }
        pid = parent;
    }
    false
}

/// The parent of `pid`, from /proc/PID/stat (its fourth field, after the
/// name in parentheses, which may hold spaces).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, after_name) = stat.rsplit_once(')')?;
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// Whether something other than the connecting socket itself accepted a
/// connection to `addr`.
pub fn accepts(addr: SocketAddr) -> bool {
    match TcpStream::connect(addr) {
        Ok(stream) => stream.local_addr().ok() != Some(addr),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_accepts_and_a_closed_port_does_not() {
        // One socket throughout, bound before it listens: a port freed and
        // looked at again can be handed to a test running beside this one
        // meanwhile (it was, and listened on).
        let socket =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket
            .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        let addr = socket.local_addr().unwrap().as_socket().unwrap();
        assert!(!accepts(addr), "bound, not listening");
        socket.listen(8).unwrap();
        assert!(accepts(addr), "listening");
    }

    #[test]
    fn a_server_that_exits_is_tried_again_and_one_that_listens_is_waited_for() {
        // A "server" that exits at once: said, and tried again. Its port
        // stays bound and never listens, so nothing else answers on it.
        let held =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        held.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        let addr = held.local_addr().unwrap().as_socket().unwrap();
        let mut tries = 0;
        let started = start_on_free_ports("true", || {
            tries += 1;
            let mut child = std::process::Command::new("true").spawn().unwrap();
            match until_listening(addr, &mut child, "true", Duration::from_secs(30)) {
                Err(e) if tries < 3 => Err(e),
                _ => Ok(tries),
            }
        });
        assert_eq!(started, 3);
        // One that listens: waited for. Its listener is this process's,
        // so the server here is this test process's own child...
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        // ...and a listener that is not the server's is not taken for it:
        // the sleeper holds no socket, so only its exit ends the wait.
        assert!(listener_is_of(addr.port(), std::process::id()));
        assert!(!listener_is_of(addr.port(), sleeper.id()));
        let _ = sleeper.kill();
        let waited = until_listening(addr, &mut sleeper, "sleep", Duration::from_secs(30));
        assert!(
            waited.as_ref().is_err_and(|e| e.contains("exited")),
            "{waited:?}"
        );
    }

    #[test]
    fn a_listener_held_by_a_child_of_the_server_is_the_servers() {
        // python3 binds and listens, then idles; its parent, sh, is "the
        // server" a test started.
        let mut server = std::process::Command::new("sh")
            .args([
                "-c",
                "python3 -c 'import socket,time,sys; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(30)'; exit 0",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(server.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let port: u16 = line.trim().parse().unwrap();
        let waited = until_listening(
            SocketAddr::from(([127, 0, 0, 1], port)),
            &mut server,
            "sh",
            Duration::from_secs(30),
        );
        // Not a sibling's: a process beside the server holds none of it.
        let mut sibling = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let siblings = listener_is_of(port, sibling.id());
        let _ = sibling.kill();
        let _ = sibling.wait();
        assert!(!siblings, "a sibling's");
        let _ = std::process::Command::new("pkill")
            .args(["-P", &server.id().to_string()])
            .status();
        let _ = server.kill();
        let _ = server.wait();
        assert!(waited.is_ok(), "{waited:?}");
    }
}
