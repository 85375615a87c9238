//! (feature `test-support`) Whether a server a test started listens yet.
//!
//! A test that picks a free port, starts a server on it and polls with
//! `connect` until it succeeds can be fooled: on loopback, a connect to a
//! port nobody listens on can pick that very port as its own ephemeral
//! port and connect to itself (TCP's simultaneous open). The poll then
//! returns before the server listens, and the test's clients are refused
//! (seen once in `collector/tests/sweep.rs` under the whole suite: "no
//! connection opened").

use std::net::{SocketAddr, TcpStream};

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
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(accepts(addr));
        drop(listener);
        assert!(!accepts(addr));
    }
}
