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

/// Wakes a thread blocked receiving on `socket`, so it can stop: an empty
/// datagram from loopback to its port. (Shutting its read side down wakes
/// it too, but the receive then returns no peer address, which std's
/// `recv_from` asserts on: the thread panicked at every agent stop, seen
/// in the demo's output on a fresh machine.) A read timeout bounds any
/// later wait, should the datagram not come.
pub fn wake_receiver(socket: &std::net::UdpSocket) {
    let _ = socket.set_read_timeout(Some(std::time::Duration::from_millis(50)));
    let Ok(local) = socket.local_addr() else {
        return;
    };
    let (to, from): (std::net::IpAddr, SocketAddr) = match local.ip() {
        ip if !ip.is_unspecified() => (ip, SocketAddr::new(unspecified(ip), 0)),
        std::net::IpAddr::V4(_) => (
            std::net::Ipv4Addr::LOCALHOST.into(),
            ([0, 0, 0, 0], 0).into(),
        ),
        std::net::IpAddr::V6(_) => (std::net::Ipv6Addr::LOCALHOST.into(), ([0u16; 8], 0).into()),
    };
    if let Ok(waker) = std::net::UdpSocket::bind(from) {
        let _ = waker.send_to(&[], SocketAddr::new(to, local.port()));
    }
}

fn unspecified(like: std::net::IpAddr) -> std::net::IpAddr {
    match like {
        std::net::IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        std::net::IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    }
}

/// Whether a TCP socket of this host listens on `port` (any address, IPv4
/// or IPv6), from the kernel's tables in `/proc/net`: the tap says at
/// start when the server it was told to follow is not there (a wrong
/// `--tap-port`, or a server not started yet). `None` where the tables
/// cannot be read.
pub fn someone_listens_on(port: u16) -> Option<bool> {
    let mut readable = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(table) {
            readable = true;
            if table_listens_on(&text, port) {
                return Some(true);
            }
        }
    }
    readable.then_some(false)
}

/// In one `/proc/net/tcp{,6}` table: a socket in state LISTEN (`0A`) whose
/// local address ends in `:port` (hex).
fn table_listens_on(table: &str, port: u16) -> bool {
    table.lines().skip(1).any(|line| {
        let mut fields = line.split_whitespace();
        let (Some(_), Some(local), Some(_), Some(state)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return false;
        };
        state == "0A"
            && local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(port)
    })
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

/// Sends one datagram on `socket` (to `to`, when the socket is not
/// connected) without waiting, whatever the socket's own blocking mode:
/// `MSG_DONTWAIT`. Why: a socket another thread reads with a timeout must
/// stay blocking, yet the sender must never wait on a full receive queue
/// (the probe's actor, telling the app beside it when to act).
pub fn send_nowait(
    socket: &impl std::os::fd::AsFd,
    bytes: &[u8],
    to: Option<&std::path::Path>,
) -> std::io::Result<usize> {
    use nix::sys::socket::{MsgFlags, UnixAddr, send, sendto};
    use std::os::fd::AsRawFd;
    let fd = socket.as_fd().as_raw_fd();
    let sent = match to {
        Some(path) => sendto(fd, bytes, &UnixAddr::new(path)?, MsgFlags::MSG_DONTWAIT),
        None => send(fd, bytes, MsgFlags::MSG_DONTWAIT),
    };
    sent.map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listening_port_is_found_in_the_kernels_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1107 1 0 100 0 0 10 0\n   1: 0100007F:AED7 0100007F:1F40 01 00000000:00000000 00:00000000 00000000     0        0 0 3 0\n";
        assert!(table_listens_on(table, 2024)); // 0x07E8, LISTEN
        assert!(!table_listens_on(table, 0xAED7)); // established, not listening
        assert!(!table_listens_on(table, 8000)); // only a remote port
        // This host: a listener bound here is seen.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(someone_listens_on(port), Some(true));
    }

    #[test]
    fn a_blocked_receive_wakes_without_a_panic() {
        for bind in ["0.0.0.0:0", "127.0.0.1:0"] {
            let socket = std::sync::Arc::new(std::net::UdpSocket::bind(bind).unwrap());
            let blocked = socket.clone();
            let receiver = std::thread::spawn(move || {
                let mut buf = [0u8; 64];
                blocked.recv_from(&mut buf).map(|(n, _)| n)
            });
            // Let it block (if it has not yet, the datagram waits for it).
            std::thread::sleep(std::time::Duration::from_millis(20));
            wake_receiver(&socket);
            let woke = receiver.join();
            assert!(woke.is_ok(), "{bind}: the receiving thread panicked");
            // Woken by a datagram with a sender, not by a receive that
            // failed for want of one.
            assert_eq!(woke.unwrap().ok(), Some(0), "{bind}");
            // Woken before it received (it was busy with a packet): its
            // next receive returns at once, with a peer address.
            let socket = std::net::UdpSocket::bind(bind).unwrap();
            wake_receiver(&socket);
            let next = std::thread::spawn(move || {
                let mut buf = [0u8; 64];
                socket.recv_from(&mut buf).map(|(n, _)| n)
            })
            .join();
            assert!(next.is_ok(), "{bind}: a receive after the wake panicked");
            assert_eq!(next.unwrap().ok(), Some(0), "{bind}");
        }
    }

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
