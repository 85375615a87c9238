//! Telling the app beside the probe when to act (`--act-notify`), and
//! hearing back when it did: at each action's moment the actor sends one
//! datagram ([`skewscope_core::act_notice::ActNotice`]) to a Unix datagram
//! socket or a UDP port, so a native app acts when the probe's timer fires;
//! the app answers each with one datagram saying when it acted
//! ([`skewscope_core::act_notice::ActAnswer`]), and a thread of this module
//! records that as the app's own action. Datagrams speak the app's
//! `CLOCK_MONOTONIC`, records the probe's raw clock: the difference is read
//! with each notice and each answer, and the book converts. What was sent, refused, answered
//! and never answered is counted ([`NoticeBook`]) and written at the end.
//!
//! The socket never blocks the actor: an app that is not listening (no
//! socket at the path, a closed port, a full receive queue) costs one
//! failed send, counted; the first failure is logged at once, the totals
//! when the run ends. Nothing is queued or sent again: a notice later than
//! its moment would be worse than none.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use skewscope_core::act_notice::{MAX_ANSWER_BYTES, NoticeBook};
use skewscope_core::record::{Action, NoticeTotals, ProbeRecord};

use crate::recorder::Recorder;

/// How long the run's end waits for the last notices' answers.
pub const FINISH_ANSWERS: Duration = Duration::from_secs(2);
/// How often the answers thread looks up from its socket (to expire
/// notices and to see the run end).
const ANSWERS_TICK: Duration = Duration::from_millis(100);
/// The most bytes of a Unix socket path (`sun_path` holds 108 with its
/// terminating zero).
const MAX_UNIX_PATH: usize = 107;

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
            if path.len() > MAX_UNIX_PATH {
                return Err(format!(
                    "unix:{}...: a socket path is at most {MAX_UNIX_PATH} bytes (this one is {}): use a shorter directory",
                    path.chars().take(40).collect::<String>(),
                    path.len()
                ));
            }
            Ok(NotifyTarget::Unix(path.into()))
        } else if let Some(addr) = s.strip_prefix("udp:") {
            match addr.rsplit_once(':') {
                Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0) => {}
                Some((_, "0")) => {
                    return Err(format!(
                        "udp:{addr}: port 0 is no app's port: give the port the app listens on"
                    ));
                }
                _ => {
                    return Err(format!(
                        "udp:{addr}: needs HOST:PORT, like udp:127.0.0.1:7000 or udp:[::1]:7000"
                    ));
                }
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
    /// Bound to an address of its own in the abstract namespace, so the
    /// app can answer (`recvfrom` gives it); answers from any other sender
    /// than the app's path are refused.
    Unix(UnixDatagram, PathBuf),
    /// Connected: only the app's port can answer, and a port nobody listens
    /// on is reported (the kernel's ICMP answer fails a later call).
    Udp(UdpSocket),
}

impl Socket {
    /// Sends without waiting (the socket itself blocks, for the answers
    /// thread's timed reads).
    fn send(&self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Unix(socket, path) => {
                skewscope_os::sockets::send_nowait(socket, bytes, Some(path))
            }
            Socket::Udp(socket) => skewscope_os::sockets::send_nowait(socket, bytes, None),
        }
    }

    /// One answer from the app, within [`ANSWERS_TICK`]; `Ok(None)` when
    /// none came or it came from someone else (`Some(false)` in the second).
    fn receive(&self, buf: &mut [u8]) -> io::Result<Option<(usize, bool)>> {
        let got = match self {
            Socket::Unix(socket, path) => socket
                .recv_from(buf)
                .map(|(n, from)| (n, from.as_pathname() == Some(path.as_path()))),
            Socket::Udp(socket) => socket.recv(buf).map(|n| (n, true)),
        };
        match got {
            Ok(got) => Ok(Some(got)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// What the actor and the answers thread share.
struct Shared {
    book: Mutex<NoticeBook>,
    /// Signalled when the last awaited answer came.
    quiet: Condvar,
    stop: AtomicBool,
}

/// The actor's end of `--act-notify`: sends, hears back, counts.
pub struct Notifier {
    target: NotifyTarget,
    socket: Arc<Socket>,
    shared: Arc<Shared>,
    answers: Option<JoinHandle<()>>,
    recorder: Recorder,
    /// Send failures so far (the first is logged at once).
    failures: u64,
}

impl Notifier {
    /// Opens the socket (a UDP target's host is resolved once, here: an
    /// address that does not resolve fails the run's start, not each
    /// action) and starts hearing the app `app`'s answers, recorded into
    /// `recorder`.
    pub(crate) fn open(
        target: NotifyTarget,
        app: &str,
        recorder: Recorder,
    ) -> io::Result<Notifier> {
        let socket = match &target {
            NotifyTarget::Unix(path) => Socket::Unix(unix_socket()?, path.clone()),
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
                socket.set_read_timeout(Some(ANSWERS_TICK))?;
                Socket::Udp(socket)
            }
        };
        let socket = Arc::new(socket);
        let shared = Arc::new(Shared {
            book: Mutex::new(NoticeBook::new(app)),
            quiet: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let answers = {
            let (socket, shared, recorder) = (socket.clone(), shared.clone(), recorder.clone());
            std::thread::Builder::new()
                .name("act-answers".into())
                .spawn(move || hear_answers(&socket, &shared, &recorder))?
        };
        Ok(Notifier {
            target,
            socket,
            shared,
            answers: Some(answers),
            recorder,
            failures: 0,
        })
    }

    /// Sends the notice of `action` now; a failure is counted, never retried.
    pub fn notify(&mut self, action: &Action) {
        let notice = lock(&self.shared.book).notice(
            action,
            skewscope_os::clock::raw_ns(),
            skewscope_os::clock::mono_minus_raw_ns(),
        );
        let result = self.socket.send(&notice.to_datagram());
        if let Err(e) = result {
            lock(&self.shared.book).not_delivered(notice.notice);
            if self.failures == 0 {
                tracing::warn!(
                    target: "probe::act",
                    "--act-notify {}: the app is not taking notices ({e}); the probe goes on acting and counts what it could not deliver",
                    self.target
                );
            }
            self.failures += 1;
        }
    }

    /// Waits up to [`FINISH_ANSWERS`] for the answers still due, stops
    /// hearing, and records and returns the counts (every notice not
    /// answered by then counted never answered).
    pub fn finish(mut self) -> NoticeTotals {
        let deadline = Instant::now() + FINISH_ANSWERS;
        let mut book = lock(&self.shared.book);
        while book.awaiting() > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            book = self
                .shared
                .quiet
                .wait_timeout(book, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        drop(book);
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.answers.take() {
            let _ = t.join();
        }
        let totals = lock(&self.shared.book).close(skewscope_os::clock::now_raw());
        self.recorder
            .record(ProbeRecord::NoticeTotals(totals.clone()));
        totals
    }

    /// Where the notices go.
    pub fn target(&self) -> &NotifyTarget {
        &self.target
    }
}

/// A datagram socket bound to a fresh abstract address, so the app's
/// answers can reach it.
fn unix_socket() -> io::Result<UnixDatagram> {
    use std::os::linux::net::SocketAddrExt;
    let name = format!(
        "skewscope-probe/{}/{:016x}",
        std::process::id(),
        fastrand::u64(..)
    );
    let socket = UnixDatagram::bind_addr(&std::os::unix::net::SocketAddr::from_abstract_name(
        name.as_bytes(),
    )?)?;
    socket.set_read_timeout(Some(ANSWERS_TICK))?;
    Ok(socket)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The answers thread: each answer the app's action, recorded; notices
/// left unanswered too long counted.
fn hear_answers(socket: &Socket, shared: &Shared, recorder: &Recorder) {
    let mut buf = vec![0u8; MAX_ANSWER_BYTES + 1];
    let mut refused_logged = false;
    while !shared.stop.load(Ordering::Relaxed) {
        let got = socket.receive(&mut buf);
        let now = skewscope_os::clock::now_raw();
        let mono_minus_raw = skewscope_os::clock::mono_minus_raw_ns();
        let mut book = lock(&shared.book);
        match got {
            Ok(Some((n, true))) => match book.answered(&buf[..n], now, mono_minus_raw) {
                Ok(action) => recorder.record(ProbeRecord::AppAction(action)),
                Err(e) => {
                    tracing::debug!(target: "probe::act", "--act-notify: an answer refused: {e}")
                }
            },
            // Someone else than the app: refused, counted.
            Ok(Some((_, false))) => book.refused_sender(),
            Ok(None) => {}
            // A UDP port nobody listens on: the kernel's ICMP answer.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                book.refused_by_port();
                if !refused_logged {
                    refused_logged = true;
                    tracing::warn!(target: "probe::act", "--act-notify: the app's port is closed (the kernel answered the notices with ICMP): they are counted not delivered");
                }
            }
            Err(e) => {
                tracing::warn!(target: "probe::act", "--act-notify: reading the app's answers failed ({e}); notices still go out, and are counted never answered");
                drop(book);
                std::thread::sleep(ANSWERS_TICK);
                continue;
            }
        }
        book.expire(now.mono_ns);
        if book.awaiting() == 0 {
            shared.quiet.notify_all();
        }
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
        let e = "udp:127.0.0.1:0".parse::<NotifyTarget>().unwrap_err();
        assert!(e.contains("port 0"), "{e}");
        let long = format!("unix:/{}", "d".repeat(MAX_UNIX_PATH));
        let e = long.parse::<NotifyTarget>().unwrap_err();
        assert!(e.contains("at most 107 bytes"), "{e}");
        assert!(
            format!("unix:/{}", "d".repeat(MAX_UNIX_PATH - 1))
                .parse::<NotifyTarget>()
                .is_ok()
        );
    }
}
