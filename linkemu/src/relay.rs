//! The relays: a device's link between it and the server, as sockets. One
//! port number takes both TCP (the WebSocket, uploads) and UDP (the time
//! exchange), as the agent's does, so a probe pointed at the relay finds its
//! time exchange there too. Every packet's fate comes from the
//! [`LinkModel`]; one scheduler thread sends each when its time comes, and
//! the [`Applied`] log keeps what was planned and when it really left.
//!
//! A test harness, not a product: threads per connection, blocking writes
//! (with a timeout), everything on loopback.

use std::collections::{BinaryHeap, HashMap};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use crate::model::{Carrier, Direction, Fate, LinkModel};
use crate::profile::Profile;

/// How long a blocked read waits before it looks whether the link stopped.
const POLL: Duration = Duration::from_millis(100);
/// A write that cannot go on this long gives up on its connection.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// The scheduler sleeps until this long before a packet's time, then
/// reads the clock until it has come.
const SPIN_NS: u64 = 20_000;

/// What the link did to one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Applied {
    /// Which way.
    pub direction: Direction,
    /// On what.
    pub carrier: Carrier,
    /// Its size.
    pub bytes: usize,
    /// When it reached the relay (monotonic ns).
    pub arrived_ns: u64,
    /// When the model said it should leave (`None`: lost).
    pub planned_ns: Option<u64>,
    /// When it left (`None`: lost, or not yet).
    pub delivered_ns: Option<u64>,
}

impl Applied {
    /// The delay it was given, as delivered.
    pub fn delay_ns(&self) -> Option<u64> {
        Some(self.delivered_ns? - self.arrived_ns)
    }
}

/// The delays a link applied to datagrams: the least each way, and half
/// their sum, the physical limit of any two-way bound through it.
pub fn physical_limit_ns(applied: &[Applied]) -> Option<u64> {
    let least = |d: Direction| {
        applied
            .iter()
            .filter(|a| a.direction == d && a.carrier == Carrier::Udp)
            .filter_map(Applied::delay_ns)
            .min()
    };
    Some((least(Direction::Up)? + least(Direction::Down)?) / 2)
}

enum Send {
    Tcp(Arc<TcpStream>, Vec<u8>),
    TcpEnd(Arc<TcpStream>),
    Udp(Arc<UdpSocket>, Option<SocketAddr>, Vec<u8>),
}

struct Job {
    due: u64,
    seq: u64,
    send: Send,
    logged: usize,
}

impl PartialEq for Job {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Job {}
impl PartialOrd for Job {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Job {
    /// Earliest first, in a max-heap.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

/// What every thread of one link shares.
struct Shared {
    model: Mutex<LinkModel>,
    log: Mutex<Vec<Applied>>,
    log_file: Option<Mutex<io::LineWriter<std::fs::File>>>,
    stop: AtomicBool,
    seq: AtomicU64,
    streams: Mutex<Vec<Arc<TcpStream>>>,
}

impl Shared {
    /// Asks the model about a packet, logs it, and hands it to the scheduler.
    fn carry(
        &self,
        jobs: &Sender<Job>,
        direction: Direction,
        carrier: Carrier,
        send: Send,
        bytes: usize,
    ) {
        let arrived = skewscope_os::clock::mono_ns();
        let fate = self
            .model
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .fate(direction, carrier, arrived, bytes);
        let planned = match fate {
            Fate::Deliver { at_ns } => Some(at_ns),
            Fate::Lose => None,
        };
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.push(Applied {
            direction,
            carrier,
            bytes,
            arrived_ns: arrived,
            planned_ns: planned,
            delivered_ns: None,
        });
        let logged = log.len() - 1;
        drop(log);
        match planned {
            Some(due) => {
                let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                let _ = jobs.send(Job {
                    due,
                    seq,
                    send,
                    logged,
                });
            }
            None => self.write_log_line(logged),
        }
    }

    fn write_log_line(&self, index: usize) {
        if let Some(file) = &self.log_file {
            let entry = self.log.lock().unwrap_or_else(|p| p.into_inner())[index];
            if let Ok(line) = serde_json::to_string(&entry) {
                let _ = writeln!(file.lock().unwrap_or_else(|p| p.into_inner()), "{line}");
            }
        }
    }
}

/// A running link: a relay from its own port to a server's, both TCP and UDP.
pub struct Link {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    jobs: Option<Sender<Job>>,
    scheduler: Option<JoinHandle<()>>,
}

impl Link {
    /// Starts a link of `profile` (chance from `seed`) listening on `listen`
    /// (port 0: any free port number free for both TCP and UDP) and
    /// relaying to `server` (TCP and UDP on its one port); every applied
    /// delay also goes to `log_file` as a JSON line when given.
    pub fn start(
        profile: Profile,
        seed: u64,
        listen: SocketAddr,
        server: SocketAddr,
        log_file: Option<std::fs::File>,
    ) -> io::Result<Link> {
        let (listener, udp) = bind_both(listen)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            model: Mutex::new(LinkModel::new(profile, seed)),
            log: Mutex::new(Vec::new()),
            log_file: log_file.map(|f| Mutex::new(io::LineWriter::new(f))),
            stop: AtomicBool::new(false),
            seq: AtomicU64::new(0),
            streams: Mutex::new(Vec::new()),
        });
        let (jobs, queue) = mpsc::channel();
        let scheduler = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("link-scheduler".into())
                .spawn(move || schedule(&queue, &shared))?
        };
        let mut threads = Vec::new();
        {
            let (shared, jobs) = (shared.clone(), jobs.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("link-accept".into())
                    .spawn(move || accept(&listener, server, &shared, &jobs))?,
            );
        }
        {
            let (shared, jobs) = (shared.clone(), jobs.clone());
            let udp = Arc::new(udp);
            threads.push(
                std::thread::Builder::new()
                    .name("link-udp".into())
                    .spawn(move || datagrams(&udp, server, &shared, &jobs))?,
            );
        }
        Ok(Link {
            addr,
            shared,
            threads,
            jobs: Some(jobs),
            scheduler: Some(scheduler),
        })
    }

    /// Where devices connect: TCP and UDP on this one port.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Makes the link follow `profile` from now on (in flight packets keep
    /// their fate; streams stay in order): a site whose link gets slower,
    /// or faster again.
    pub fn set_profile(&self, profile: Profile) {
        self.shared
            .model
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_profile(profile);
    }

    /// What the link did to every packet so far.
    pub fn applied(&self) -> Vec<Applied> {
        self.shared
            .log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops relaying (every connection through it is closed) and returns
    /// what it did to every packet.
    pub fn stop(mut self) -> Vec<Applied> {
        self.shut();
        self.applied()
    }

    fn shut(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop.
        let _ = TcpStream::connect(self.addr);
        for s in self
            .shared
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = s.shutdown(Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.jobs = None;
        if let Some(s) = self.scheduler.take() {
            let _ = s.join();
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.shut();
    }
}

/// A TCP listener and a UDP socket on the same port number.
fn bind_both(listen: SocketAddr) -> io::Result<(TcpListener, UdpSocket)> {
    for _ in 0..50 {
        let listener = TcpListener::bind(listen)?;
        let port = listener.local_addr()?.port();
        match UdpSocket::bind(SocketAddr::new(listen.ip(), port)) {
            Ok(udp) => return Ok((listener, udp)),
            Err(e) if listen.port() != 0 => return Err(e),
            Err(_) => continue,
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "no port free for both TCP and UDP",
    ))
}

fn schedule(queue: &Receiver<Job>, shared: &Shared) {
    let _ = skewscope_os::priority::precise_timers_this_thread();
    let mut heap: BinaryHeap<Job> = BinaryHeap::new();
    let mut open = true;
    loop {
        let now = skewscope_os::clock::mono_ns();
        match heap.peek() {
            Some(job) if job.due <= now + SPIN_NS => {
                while skewscope_os::clock::mono_ns() < job.due {
                    std::hint::spin_loop();
                }
                let job = heap.pop().expect("just looked");
                perform(job.send);
                let left = skewscope_os::clock::mono_ns();
                if let Some(entry) = shared
                    .log
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_mut(job.logged)
                {
                    entry.delivered_ns = Some(left);
                }
                shared.write_log_line(job.logged);
                continue;
            }
            Some(job) if open => {
                match queue.recv_timeout(Duration::from_nanos(job.due - now - SPIN_NS)) {
                    Ok(j) => heap.push(j),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => open = false,
                }
            }
            Some(job) => std::thread::sleep(Duration::from_nanos(job.due - now - SPIN_NS)),
            None if open => match queue.recv() {
                Ok(j) => heap.push(j),
                Err(_) => open = false,
            },
            None => return,
        }
        while let Ok(j) = queue.try_recv() {
            heap.push(j);
        }
    }
}

fn perform(send: Send) {
    match send {
        Send::Tcp(stream, bytes) => {
            let _ = (&*stream).write_all(&bytes);
        }
        Send::TcpEnd(stream) => {
            let _ = stream.shutdown(Shutdown::Write);
        }
        Send::Udp(socket, to, bytes) => {
            let _ = match to {
                Some(to) => socket.send_to(&bytes, to),
                None => socket.send(&bytes),
            };
        }
    }
}

fn accept(listener: &TcpListener, server: SocketAddr, shared: &Arc<Shared>, jobs: &Sender<Job>) {
    let mut flow = 0u64;
    for client in listener.incoming() {
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(client) = client else { continue };
        let Ok(upstream) = TcpStream::connect(server) else {
            continue;
        };
        flow += 1;
        for s in [&client, &upstream] {
            let _ = s.set_nodelay(true);
            let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
        }
        let (Ok(client_w), Ok(upstream_w)) = (client.try_clone(), upstream.try_clone()) else {
            continue;
        };
        let (client_w, upstream_w) = (Arc::new(client_w), Arc::new(upstream_w));
        shared
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend([client_w.clone(), upstream_w.clone()]);
        for (from, to, direction) in [
            (client, upstream_w, Direction::Up),
            (upstream, client_w, Direction::Down),
        ] {
            let (shared, jobs) = (shared.clone(), jobs.clone());
            let _ = std::thread::Builder::new()
                .name("link-tcp".into())
                .spawn(move || pump(from, &to, direction, flow, &shared, &jobs));
        }
    }
}

/// One direction of one TCP connection, until it ends.
fn pump(
    mut from: TcpStream,
    to: &Arc<TcpStream>,
    direction: Direction,
    flow: u64,
    shared: &Shared,
    jobs: &Sender<Job>,
) {
    let carrier = Carrier::Tcp { flow };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => shared.carry(
                jobs,
                direction,
                carrier,
                Send::Tcp(to.clone(), buf[..n].to_vec()),
                n,
            ),
        }
    }
    // The end goes in order after the last bytes; then nothing of this
    // direction needs its order kept.
    shared.carry(jobs, direction, carrier, Send::TcpEnd(to.clone()), 0);
    shared
        .model
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .end_stream(flow, direction);
}

fn datagrams(
    socket: &Arc<UdpSocket>,
    server: SocketAddr,
    shared: &Arc<Shared>,
    jobs: &Sender<Job>,
) {
    let _ = socket.set_read_timeout(Some(POLL));
    let mut upstreams: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
    let mut replies: Vec<JoinHandle<()>> = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while !shared.stop.load(Ordering::Relaxed) {
        let Ok((n, client)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let upstream = match upstreams.get(&client) {
            Some(u) => u.clone(),
            None => {
                let bind = SocketAddr::new(
                    if server.is_ipv4() {
                        IpAddr::from([127, 0, 0, 1])
                    } else {
                        IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1])
                    },
                    0,
                );
                let Ok(u) = UdpSocket::bind(bind) else {
                    continue;
                };
                if u.connect(server).is_err() {
                    continue;
                }
                let u = Arc::new(u);
                upstreams.insert(client, u.clone());
                let (socket, shared, jobs, up) =
                    (socket.clone(), shared.clone(), jobs.clone(), u.clone());
                if let Ok(t) = std::thread::Builder::new()
                    .name("link-udp-reply".into())
                    .spawn(move || replies_to(&up, &socket, client, &shared, &jobs))
                {
                    replies.push(t);
                }
                u
            }
        };
        shared.carry(
            jobs,
            Direction::Up,
            Carrier::Udp,
            Send::Udp(upstream, None, buf[..n].to_vec()),
            n,
        );
    }
    for t in replies {
        let _ = t.join();
    }
}

/// The server's datagrams back to one device.
fn replies_to(
    upstream: &UdpSocket,
    socket: &Arc<UdpSocket>,
    client: SocketAddr,
    shared: &Shared,
    jobs: &Sender<Job>,
) {
    let _ = upstream.set_read_timeout(Some(POLL));
    let mut buf = vec![0u8; 65_536];
    while !shared.stop.load(Ordering::Relaxed) {
        if let Ok(n) = upstream.recv(&mut buf) {
            shared.carry(
                jobs,
                Direction::Down,
                Carrier::Udp,
                Send::Udp(socket.clone(), Some(client), buf[..n].to_vec()),
                n,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_and_udp_pass_with_their_delays_and_the_log_says_what_was_applied() {
        // An echo server on TCP and UDP, one port.
        let (listener, udp) = bind_both("127.0.0.1:0".parse().unwrap()).unwrap();
        let server = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut s = s;
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            while let Ok((n, from)) = udp.recv_from(&mut buf) {
                let _ = udp.send_to(&buf[..n], from);
            }
        });
        let link = Link::start(
            Profile::ASYMMETRIC,
            1,
            "127.0.0.1:0".parse().unwrap(),
            server,
            None,
        )
        .unwrap();
        let mut tcp = TcpStream::connect(link.addr()).unwrap();
        for i in 0..20u8 {
            tcp.write_all(&[i; 10]).unwrap();
            let mut back = [0u8; 10];
            tcp.read_exact(&mut back).unwrap();
            assert_eq!(back, [i; 10], "a stream keeps its bytes and order");
        }
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        client.connect(link.addr()).unwrap();
        for i in 0..20u8 {
            let start = skewscope_os::clock::mono_ns();
            client.send(&[i]).unwrap();
            let mut back = [0u8; 8];
            let n = client.recv(&mut back).unwrap();
            assert_eq!(&back[..n], &[i]);
            let rtt = skewscope_os::clock::mono_ns() - start;
            assert!(rtt >= Profile::ASYMMETRIC.up.base_ns + Profile::ASYMMETRIC.down.base_ns);
        }
        let applied = link.stop();
        let udp_done: Vec<&Applied> = applied
            .iter()
            .filter(|a| a.carrier == Carrier::Udp && a.delivered_ns.is_some())
            .collect();
        assert_eq!(udp_done.len(), 40);
        for a in &applied {
            if let (Some(planned), Some(done)) = (a.planned_ns, a.delivered_ns) {
                assert!(done >= planned, "{a:?}");
            }
        }
        let limit = physical_limit_ns(&applied).unwrap();
        assert!(limit >= Profile::ASYMMETRIC.physical_limit_ns(), "{limit}");
    }
}
