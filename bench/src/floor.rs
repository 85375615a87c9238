//! The CPU floor: one thread writing the same pre-encoded frame to N connected
//! sockets in a loop. No fan-out engine can do less work per client on one core.
//!
//! The sending ends can live in another network namespace (the emulated LAN of
//! `bench/run`), so the floor crosses the same veth and qdisc as the servers.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use anyhow::Context;
use skewscope_core::analysis::stats::Summary;
use skewscope_os::clock::mono_ns;

use crate::drain::Drain;

/// Where the floor's sockets live and which core writes.
pub struct Placement {
    /// Named network namespace (`ip netns`) for the sending side, if any.
    pub netns: Option<String>,
    /// Address the sending side listens on.
    pub addr: IpAddr,
    /// Writer on this core and the drain on the other (of two), as bench/run
    /// pins a server and its devices.
    pub writer_core: Option<usize>,
}

/// One size's floors, in nanoseconds.
#[derive(serde::Serialize)]
pub struct FloorRow {
    /// Connections written to.
    pub clients: usize,
    /// One `write` per socket.
    pub floor: Summary,
    /// All sends of a round submitted at once through io_uring; `None` where
    /// io_uring is unavailable (disabled by sysctl or seccomp).
    pub batched: Option<Summary>,
    /// Release span of staged sends.
    pub staged: Option<Summary>,
}

/// Measures both floors for each size, their rounds interleaved so machine
/// noise hits both alike.
pub fn measure(
    sizes: &[usize],
    rounds: usize,
    placement: &Placement,
    frame: &[u8],
) -> anyhow::Result<Vec<FloorRow>> {
    let most = sizes.iter().copied().max().unwrap_or(0) as u32;
    skewscope_os::files::ensure_open_files(most * 2)?;
    let mut ring = io_uring::IoUring::new(1024).ok();
    let mut rows = Vec::new();
    for &n in sizes {
        let (mut senders, receivers) = socket_pairs(n, placement.netns.as_deref(), placement.addr)
            .with_context(|| format!("connecting {n} floor sockets"))?;
        // The drain thread inherits the affinity it is started with.
        if let Some(core) = placement.writer_core {
            pin_current_thread(1 - core.min(1))?;
        }
        let _drain = Drain::start(receivers)?;
        if let Some(core) = placement.writer_core {
            pin_current_thread(core)?;
        }
        let mut writes = Vec::with_capacity(rounds);
        let mut batched = Vec::with_capacity(rounds);
        let mut staged = Vec::with_capacity(rounds);
        for round in 0..rounds {
            for which in (0..3).map(|i| (round + i) % 3) {
                match (&mut ring, which) {
                    (Some(ring), 1) => {
                        batched.push(uring_all_once(ring, &senders, frame)? as i64);
                    }
                    (None, 1) => continue,
                    (_, 2) => staged.push(staged_all_once(&senders, frame)? as i64),
                    _ => writes.push(write_all_once(&mut senders, frame)? as i64),
                }
                // Long enough for the receivers to drain a round.
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        rows.push(FloorRow {
            clients: n,
            floor: Summary::of(&writes).context("no rounds")?,
            batched: Summary::of(&batched),
            staged: Summary::of(&staged),
        });
    }
    Ok(rows)
}

/// One unmasked WebSocket text frame carrying `text`, encoded the way the
/// agent encodes its broadcasts.
pub fn text_frame(text: &str) -> Vec<u8> {
    use tungstenite::protocol::frame::Frame;
    use tungstenite::protocol::frame::coding::{Data, OpCode};
    agent::bench::encode(Frame::message(
        text.as_bytes().to_vec(),
        OpCode::Data(Data::Text),
        true,
    ))
}

/// Pins the calling thread (and threads it starts later) to one core.
fn pin_current_thread(core: usize) -> io::Result<()> {
    use nix::sched::{CpuSet, sched_setaffinity};
    let mut set = CpuSet::new();
    set.set(core).map_err(io::Error::from)?;
    sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).map_err(io::Error::from)
}

/// N connected socket pairs: the sending ends, and the receiving ends for a
/// drain. With `netns`, the listening (sending) side is opened inside that
/// named namespace and bound to `addr`; the receivers stay in ours.
fn socket_pairs(
    n: usize,
    netns: Option<&str>,
    addr: IpAddr,
) -> io::Result<(Vec<TcpStream>, Vec<TcpStream>)> {
    let listener = match netns {
        None => TcpListener::bind(SocketAddr::new(addr, 0))?,
        Some(name) => listen_in_namespace(name, SocketAddr::new(addr, 0))?,
    };
    let addr = listener.local_addr()?;
    let mut senders = Vec::with_capacity(n);
    let mut receivers = Vec::with_capacity(n);
    for _ in 0..n {
        let client = TcpStream::connect(addr)?;
        let (server, _) = listener.accept()?;
        server.set_nodelay(true)?;
        senders.push(server);
        receivers.push(client);
    }
    Ok((senders, receivers))
}

/// The loopback default for [`socket_pairs`].
pub fn loopback_pairs(n: usize) -> io::Result<(Vec<TcpStream>, Vec<TcpStream>)> {
    socket_pairs(n, None, IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// Binds a listener inside the namespace `/run/netns/<name>`: a short-lived
/// thread enters it (setns moves only the calling thread) and hands the socket
/// back; a socket keeps its namespace for life.
fn listen_in_namespace(name: &str, addr: SocketAddr) -> io::Result<TcpListener> {
    let ns = std::fs::File::open(format!("/run/netns/{name}"))?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // setns moves only this thread, which ends right after binding.
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(io::Error::from)?;
                TcpListener::bind(addr)
            })
            .join()
            .map_err(|_| io::Error::other("namespace thread panicked"))?
    })
}

/// Writes `frame` to every socket once; returns the span from the first write's
/// start to the last write's return, in nanoseconds.
pub fn write_all_once(senders: &mut [TcpStream], frame: &[u8]) -> io::Result<u64> {
    let start = mono_ns();
    for s in senders.iter_mut() {
        s.write_all(frame)?;
    }
    Ok(mono_ns() - start)
}

/// Sends `frame` to every socket through one io_uring: all sends queued, one
/// submission. Same span definition as [`write_all_once`].
fn uring_all_once(
    ring: &mut io_uring::IoUring,
    senders: &[TcpStream],
    frame: &[u8],
) -> io::Result<u64> {
    let start = mono_ns();
    skewscope_os::uring::send_to_all(ring, senders, frame)?;
    Ok(mono_ns() - start)
}

/// Staged: every frame queued with MSG_MORE (held by the kernel), then each
/// socket released with TCP_NODELAY, which pushes what it holds. Returns the
/// release span only.
pub fn staged_all_once(senders: &[TcpStream], frame: &[u8]) -> io::Result<u64> {
    for s in senders {
        stage(s, frame)?;
    }
    let start = mono_ns();
    for s in senders {
        s.set_nodelay(true)?;
    }
    Ok(mono_ns() - start)
}

/// Queues `frame` on `socket` with MSG_MORE: copied into the kernel, not sent.
pub fn stage(socket: &TcpStream, frame: &[u8]) -> io::Result<()> {
    use nix::sys::socket::{MsgFlags, send};
    let flags = MsgFlags::from_bits_retain(libc::MSG_MORE)
        | MsgFlags::MSG_NOSIGNAL
        | MsgFlags::MSG_DONTWAIT;
    let n = send(socket.as_raw_fd(), frame, flags).map_err(io::Error::from)?;
    if n != frame.len() {
        return Err(io::Error::other(format!("short staged send: {n}")));
    }
    Ok(())
}
