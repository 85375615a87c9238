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
//! [`start_on_free_ports`] tries again on fresh ones.

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

/// Waits until `addr` [`accepts`], at most `limit` (past it, panics);
/// `Err` saying so if `child`, the server, exited first.
pub fn until_listening(
    addr: SocketAddr,
    child: &mut Child,
    what: &str,
    limit: Duration,
) -> Result<Duration, String> {
    let start = Instant::now();
    while !accepts(addr) {
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
        // One that listens: waited for.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let waited = until_listening(
            listener.local_addr().unwrap(),
            &mut sleeper,
            "sleep",
            Duration::from_secs(30),
        );
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert!(waited.is_ok(), "{waited:?}");
    }
}
