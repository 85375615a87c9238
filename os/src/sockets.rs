//! What std and tokio do not do with a socket: a listener that takes a
//! reconnecting crowd, connections that find out a peer that vanished
//! without closing, and a UDP receive woken to stop.

use std::net::SocketAddr;
use std::time::Duration;

use socket2::{Domain, Socket, TcpKeepalive, Type};

/// TCP keepalive probes after this long without traffic...
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// ...this far apart...
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// ...this many before the connection is given up.
pub const KEEPALIVE_PROBES: u32 = 3;
/// Sent data unacknowledged this long ends the connection too.
pub const UNACKED_TIMEOUT: Duration = Duration::from_secs(60);

/// A device that vanished without closing (power cut, Wi-Fi gone) is found
/// out: an idle connection within 30 s + 3 × 10 s of keepalive probes, one
/// with unacknowledged broadcasts within 60 s. The socket then fails, and
/// the shard closes the client and records why.
pub fn detect_vanished_peers(stream: &std::net::TcpStream) -> std::io::Result<()> {
    let socket = socket2::SockRef::from(stream);
    let keepalive = TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_PROBES);
    socket.set_tcp_keepalive(&keepalive)?;
    socket.set_tcp_user_timeout(Some(UNACKED_TIMEOUT))
}

/// Wakes a thread blocked receiving on `socket`, so it can stop: Linux
/// wakes a receive on a UDP socket whose read side is shut down, connected
/// or not (the call itself reports ENOTCONN for an unconnected one, and
/// still does it, so its result says nothing).
pub fn wake_receiver(socket: &std::net::UdpSocket) {
    let _ = socket2::SockRef::from(socket).shutdown(std::net::Shutdown::Read);
}

/// A non-blocking listener on `addr` with `SO_REUSEADDR` (a restarted agent
/// binds again at once) and a `backlog` of pending connections the kernel
/// holds for it.
pub fn listener(addr: SocketAddr, backlog: i32) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_sockets_find_out_a_vanished_peer() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        detect_vanished_peers(&server).unwrap();
        let s = socket2::SockRef::from(&server);
        assert!(s.keepalive().unwrap());
        assert_eq!(s.tcp_keepalive_time().unwrap(), KEEPALIVE_IDLE);
        assert_eq!(s.tcp_keepalive_interval().unwrap(), KEEPALIVE_INTERVAL);
        assert_eq!(s.tcp_keepalive_retries().unwrap(), KEEPALIVE_PROBES);
        assert_eq!(s.tcp_user_timeout().unwrap(), Some(UNACKED_TIMEOUT));
    }

    #[test]
    fn a_listener_takes_connections_without_blocking() {
        let l = listener("127.0.0.1:0".parse().unwrap(), 16).unwrap();
        assert!(matches!(l.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock));
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let s = socket2::SockRef::from(&l);
        assert!(s.reuse_address().unwrap());
    }
}
