//! `skewscope-bench act-notify`: what `--act-notify` adds to an action for
//! the app beside the probe.
//!
//! For a Unix datagram socket, then for a UDP port (one at a time, so each
//! has the machine as a device would): the release agent on loopback and a
//! release probe (one connection, acting at `/at_ns`) notifying this
//! process, the app, whose thread reads each datagram and stamps
//! `CLOCK_MONOTONIC` at once. The figures: the notice's latency (read − the
//! moment the probe's timer fired), the probe's own timer error (fired −
//! target) beside it, and what the app sees in all (read − target). The
//! floor: the same reader fed datagrams this process sends at a moment it
//! waits for as the actor does, on the same kind of socket (one local
//! datagram and a reader's wake-up, nothing of the probe).

use std::net::UdpSocket;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde::Serialize;
use skewscope_core::act_notice::ActNotice;
use skewscope_core::record::ProbeRecord;

use crate::processes::{Reaped, probe_records, sibling, start_agent, wait_for};

/// One socket kind's figures, ns.
#[derive(Clone, Debug, Serialize)]
pub struct NoticeFigures {
    /// `unix` or `udp`.
    pub socket: &'static str,
    /// Notices read (one per action).
    pub notices: usize,
    /// Actions the probe recorded.
    pub actions: usize,
    /// Notice read − timer fired: p50, p99, max.
    pub notice_ns: (u64, u64, u64),
    /// The floor: a datagram this process sent, read − sent: p50, p99, max.
    pub floor_ns: (u64, u64, u64),
    /// The probe's timer: fired − target, p50, p99.
    pub timer_ns: (u64, u64),
    /// What the app sees: read − target, p50, p99.
    pub app_ns: (u64, u64),
}

fn mono_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC exists on every Linux");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// A reader thread: every datagram with the moment it was read, until
/// `stop` (checked between 50 ms read timeouts).
type Reader = std::thread::JoinHandle<Vec<(u64, Vec<u8>)>>;

fn reader(
    mut recv: impl FnMut(&mut [u8]) -> std::io::Result<usize> + Send + 'static,
    stop: mpsc::Receiver<()>,
) -> Reader {
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match recv(&mut buf) {
                Ok(len) => got.push((mono_ns(), buf[..len].to_vec())),
                Err(_) => {
                    if stop.try_recv().is_ok() {
                        return got;
                    }
                }
            }
        }
    })
}

/// Sends one datagram to the app.
type SendToApp = Box<dyn FnMut(&[u8]) -> std::io::Result<usize>>;

/// The app's socket of one kind: where a probe sends to it, and a reader.
struct App {
    /// `unix:PATH` or `udp:HOST:PORT`, as `--act-notify` takes it.
    target: String,
    reader: Reader,
    stop: mpsc::Sender<()>,
    /// Sends one datagram to it, as the probe would.
    send: SendToApp,
}

impl App {
    fn bind(kind: &str, dir: &std::path::Path) -> anyhow::Result<App> {
        let (stop, stopped) = mpsc::channel();
        Ok(if kind == "unix" {
            let path = dir.join(format!("app-{}.sock", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let socket = UnixDatagram::bind(&path)?;
            socket.set_read_timeout(Some(Duration::from_millis(50)))?;
            let sender = UnixDatagram::unbound()?;
            let to = path.clone();
            App {
                target: format!("unix:{}", path.display()),
                reader: reader(move |b| socket.recv(b), stopped),
                stop,
                send: Box::new(move |b| sender.send_to(b, &to)),
            }
        } else {
            let socket = UdpSocket::bind("127.0.0.1:0")?;
            socket.set_read_timeout(Some(Duration::from_millis(50)))?;
            let addr = socket.local_addr()?;
            let sender = UdpSocket::bind("127.0.0.1:0")?;
            sender.connect(addr)?;
            App {
                target: format!("udp:{addr}"),
                reader: reader(move |b| socket.recv(b), stopped),
                stop,
                send: Box::new(move |b| sender.send(b)),
            }
        })
    }

    /// Stops the reader: every datagram read, with its moment.
    fn finish(self) -> anyhow::Result<Vec<(u64, Vec<u8>)>> {
        self.stop.send(())?;
        self.reader
            .join()
            .map_err(|_| anyhow::anyhow!("the reader panicked"))
    }
}

/// The floor: `count` datagrams sent every `every` at a moment this
/// process waits for as the probe's actor does (sleep, then read the
/// clock until it has come): read − sent.
fn floor(kind: &str, count: usize, every: Duration) -> anyhow::Result<Vec<u64>> {
    let dir = tempfile::tempdir()?;
    let mut app = App::bind(kind, dir.path())?;
    for _ in 0..count {
        let target = mono_ns() + every.as_nanos() as u64;
        std::thread::sleep(every.saturating_sub(Duration::from_micros(300)));
        while mono_ns() < target {
            std::thread::yield_now();
        }
        let sent = mono_ns();
        (app.send)(sent.to_string().as_bytes())?;
    }
    app.finish()?
        .into_iter()
        .map(|(read, bytes)| {
            let sent: u64 = std::str::from_utf8(&bytes)?.parse()?;
            Ok(read.saturating_sub(sent))
        })
        .collect()
}

/// Runs it for each socket kind in turn (never both at once: each has the
/// machine as a device would): `broadcasts` test broadcasts, one every
/// 100 ms, `lead` ahead.
pub fn run(broadcasts: usize, lead: Duration) -> anyhow::Result<Vec<NoticeFigures>> {
    ["unix", "udp"]
        .into_iter()
        .map(|kind| run_kind(kind, broadcasts, lead))
        .collect()
}

fn run_kind(
    kind: &'static str,
    broadcasts: usize,
    lead: Duration,
) -> anyhow::Result<NoticeFigures> {
    let every = Duration::from_millis(100);
    eprintln!("bench: act-notify: {kind}, the floor");
    let floor = floor(kind, broadcasts, every)?;
    eprintln!("bench: act-notify: {kind}, a probe");
    let dir = tempfile::tempdir()?;
    let (agent, addr) = start_agent(dir.path())?;
    let app = App::bind(kind, dir.path())?;
    let log = dir.path().join("probe.sklog");
    let mut probe = Reaped(
        Command::new(sibling("skewscope-probe")?)
            .args(["--url", &format!("ws://{addr}/ws"), "--name", kind])
            .args(["--duration", "600s", "--act-at", "/at_ns"])
            .args(["--act-notify", &app.target])
            .arg("--out")
            .arg(&log)
            .stderr(Stdio::null())
            .spawn()?,
    );
    let count =
        |what: fn(&ProbeRecord) -> bool| probe_records(&log).iter().filter(|r| what(r)).count();
    wait_for(
        "the probe's first exchanges",
        Duration::from_secs(60),
        || count(|r| matches!(r, ProbeRecord::TimeSample(_))) >= 8,
    )?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for _ in 0..broadcasts {
        let r = runtime.block_on(agent::http_client::request(
            addr,
            "GET",
            &format!("/start_test?lead={}us", lead.as_micros()),
            b"",
            None,
        ))?;
        anyhow::ensure!(r.status == 200, "start_test: {}", r.body);
        std::thread::sleep(every);
    }
    wait_for("every action", Duration::from_secs(60), || {
        count(|r| matches!(r, ProbeRecord::Action(_))) >= broadcasts
    })?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(probe.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    probe.0.wait()?;
    drop(agent);
    let notices: Vec<(u64, ActNotice)> = app
        .finish()?
        .into_iter()
        .map(|(at, bytes)| Ok((at, serde_json::from_slice(&bytes)?)))
        .collect::<anyhow::Result<_>>()?;
    let on_time: Vec<&(u64, ActNotice)> = notices.iter().filter(|(_, n)| !n.late).collect();
    let (timer50, timer99, _) = crate::format::quantiles(
        on_time
            .iter()
            .map(|(_, n)| n.done_mono_ns - n.target_mono_ns)
            .collect(),
    );
    let (app50, app99, _) = crate::format::quantiles(
        on_time
            .iter()
            .map(|(at, n)| at.saturating_sub(n.target_mono_ns))
            .collect(),
    );
    Ok(NoticeFigures {
        socket: kind,
        notices: notices.len(),
        actions: count(|r| matches!(r, ProbeRecord::Action(_))),
        notice_ns: crate::format::quantiles(
            notices
                .iter()
                .map(|(at, n)| at.saturating_sub(n.done_mono_ns))
                .collect(),
        ),
        floor_ns: crate::format::quantiles(floor),
        timer_ns: (timer50, timer99),
        app_ns: (app50, app99),
    })
}

/// The table.
pub fn print(figures: &[NoticeFigures]) {
    let us = |ns: u64| format!("{:.1}", ns as f64 / 1e3);
    println!(
        "| socket | notices / actions | notice: read − fired p50 / p99 / max (µs) | floor: one datagram p50 / p99 / max (µs) | notice ÷ floor (p50) | probe's timer p50 / p99 (µs) | app: read − target p50 / p99 (µs) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for f in figures {
        println!(
            "| {} | {} / {} | {} / {} / {} | {} / {} / {} | {:.2} | {} / {} | {} / {} |",
            f.socket,
            f.notices,
            f.actions,
            us(f.notice_ns.0),
            us(f.notice_ns.1),
            us(f.notice_ns.2),
            us(f.floor_ns.0),
            us(f.floor_ns.1),
            us(f.floor_ns.2),
            f.notice_ns.0 as f64 / f.floor_ns.0.max(1) as f64,
            us(f.timer_ns.0),
            us(f.timer_ns.1),
            us(f.app_ns.0),
            us(f.app_ns.1),
        );
    }
}
