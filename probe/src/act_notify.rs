//! Telling the app beside the probe when to act (`--act-notify`): at each
//! action's moment the actor sends one datagram
//! ([`skewscope_core::act_notice::ActNotice`]) to a Unix datagram socket or
//! a UDP port, so a native app acts when the probe's timer fires.
//!
//! The socket never blocks: an app that is not listening (no socket at the
//! path, a closed port, a full receive queue) costs the actor one failed
//! send, and is counted; the first failure is logged at once, the total
//! when the run ends. Nothing is queued or sent again: a notice later than
//! its moment would be worse than none.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::str::FromStr;

use skewscope_core::act_notice::ActNotice;

/// Where the notices go, as `--act-notify` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotifyTarget {
    /// `unix:PATH`: a Unix datagram socket the app has bound.
    Unix(PathBuf),
    /// `udp:HOST:PORT`: a UDP port (on this device, or one next to it).
    Udp(String),
}

impl FromStr for NotifyTarget {
    type Err = String;

    fn from_str(s: &str) -> Result<NotifyTarget, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a socket path, like unix:/run/kiosk/act.sock".into());
            }
            Ok(NotifyTarget::Unix(path.into()))
        } else if let Some(addr) = s.strip_prefix("udp:") {
            if addr
                .rsplit_once(':')
                .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
            {
                return Err(format!(
                    "udp:{addr}: needs HOST:PORT, like udp:127.0.0.1:7000 or udp:[::1]:7000"
                ));
            }
            Ok(NotifyTarget::Udp(addr.into()))
        } else {
            Err(format!(
                "{s}: say unix:PATH (a Unix datagram socket) or udp:HOST:PORT"
            ))
        }
    }
}

impl std::fmt::Display for NotifyTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotifyTarget::Unix(path) => write!(f, "unix:{}", path.display()),
            NotifyTarget::Udp(addr) => write!(f, "udp:{addr}"),
        }
    }
}

enum Socket {
    Unix(UnixDatagram, PathBuf),
    /// Connected, so a port nobody listens on is reported (the kernel's
    /// ICMP answer fails the next send) rather than silently swallowed.
    Udp(UdpSocket),
}

/// The actor's end of `--act-notify`: sends and counts.
pub struct Notifier {
    target: NotifyTarget,
    socket: Socket,
    sent: u64,
    undelivered: u64,
}

impl Notifier {
    /// Opens the socket (a UDP target's host is resolved once, here): an
    /// address that does not resolve fails the run's start, not each action.
    pub fn open(target: NotifyTarget) -> io::Result<Notifier> {
        let socket = match &target {
            NotifyTarget::Unix(path) => {
                let socket = UnixDatagram::unbound()?;
                socket.set_nonblocking(true)?;
                Socket::Unix(socket, path.clone())
            }
            NotifyTarget::Udp(addr) => {
                let to: SocketAddr = addr.to_socket_addrs()?.next().ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{addr} resolves to nothing"),
                    )
                })?;
                let from: SocketAddr = if to.is_ipv4() {
                    "0.0.0.0:0".parse().expect("literal")
                } else {
                    "[::]:0".parse().expect("literal")
                };
                let socket = UdpSocket::bind(from)?;
                socket.connect(to)?;
                socket.set_nonblocking(true)?;
                Socket::Udp(socket)
            }
        };
        Ok(Notifier {
            target,
            socket,
            sent: 0,
            undelivered: 0,
        })
    }

    /// Sends one notice now; a failure is counted, never retried.
    pub fn notify(&mut self, notice: &ActNotice) {
        let bytes = notice.to_datagram();
        let result = match &self.socket {
            Socket::Unix(socket, path) => socket.send_to(&bytes, path),
            Socket::Udp(socket) => socket.send(&bytes),
        };
        match result {
            Ok(_) => self.sent += 1,
            Err(e) => {
                if self.undelivered == 0 {
                    tracing::warn!(
                        target: "probe::act",
                        "--act-notify {}: the app is not taking notices ({e}); the probe goes on acting and counts what it could not deliver",
                        self.target
                    );
                }
                self.undelivered += 1;
            }
        }
    }

    /// How many notices went out, and how many could not be delivered.
    pub fn counts(&self) -> (u64, u64) {
        (self.sent, self.undelivered)
    }

    /// Where the notices go.
    pub fn target(&self) -> &NotifyTarget {
        &self.target
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_and_say_what_is_wrong() {
        assert_eq!(
            "unix:/run/kiosk/act.sock".parse(),
            Ok(NotifyTarget::Unix("/run/kiosk/act.sock".into()))
        );
        assert_eq!(
            "udp:127.0.0.1:7000".parse(),
            Ok(NotifyTarget::Udp("127.0.0.1:7000".into()))
        );
        assert_eq!(
            "udp:[::1]:7000".parse(),
            Ok(NotifyTarget::Udp("[::1]:7000".into()))
        );
        for bad in [
            "unix:",
            "udp:7000",
            "udp:host:port",
            "tcp:1.2.3.4:5",
            "/tmp/x",
        ] {
            let e = bad.parse::<NotifyTarget>().unwrap_err();
            assert!(e.contains("unix:") || e.contains("HOST:PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_app_not_listening_is_counted_not_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let mut n = Notifier::open(NotifyTarget::Unix(dir.path().join("nobody.sock"))).unwrap();
        let notice = ActNotice {
            conn: 0,
            seq: Some(1),
            hash: "0000000000000001".into(),
            occurrence: None,
            act_at_ns: 1,
            target_wall_ns: 1,
            target_mono_ns: 1,
            done_wall_ns: 1,
            done_mono_ns: 1,
            late: false,
            late_ns: 0,
            offset_ns: None,
            offset_bound_ns: None,
        };
        n.notify(&notice);
        n.notify(&notice);
        assert_eq!(n.counts(), (0, 2));

        let app = UnixDatagram::bind(dir.path().join("app.sock")).unwrap();
        let mut n = Notifier::open(NotifyTarget::Unix(dir.path().join("app.sock"))).unwrap();
        n.notify(&notice);
        let mut buf = [0u8; 1024];
        let len = app.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], notice.to_datagram());
        assert_eq!(n.counts(), (1, 0));

        // An app that stopped reading: its queue fills, and the sends that
        // do not fit fail at once rather than wait.
        for _ in 0..10_000 {
            n.notify(&notice);
        }
        let (sent, undelivered) = n.counts();
        assert_eq!(sent + undelivered, 10_001);
        assert!(undelivered > 0, "{sent} sent");
    }
}
