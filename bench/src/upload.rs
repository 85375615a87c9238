//! `skewscope-bench upload`: what probes streaming their receipts costs the
//! agent. One agent process (the release binary) serves N raw WebSocket
//! clients and P uploading probe sessions, and in one run:
//! - the fan-out span of broadcasts with and without an upload of one
//!   receipt per connection arriving at the same moment, rounds interleaved
//!   so machine noise hits both alike (spans from the agent's own log);
//! - ingest alone: P sessions sending batches as fast as they are
//!   acknowledged, for records per second and the agent's CPU per 1,000
//!   records (from /proc: all its threads).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use futures_util::{SinkExt, StreamExt};
use skewscope_core::Stamp;
use skewscope_core::analysis::join::{BroadcastKey, join};
use skewscope_core::analysis::stats::Summary;
use skewscope_core::ingest::{INGEST_VERSION, ToAgent, ToProbe, decode_to_probe, encode};
use skewscope_core::log::{AnyLog, HEADER_LEN, LogKind, LogWriter};
use skewscope_core::record::{MessageKey, ProbeRecord, Receipt, RunIdentity};
use skewscope_os::log_files::read_file;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::drain::Drain;
use crate::processes::sibling;

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// What to measure.
pub struct Options {
    /// Raw WebSocket clients of the hub.
    pub connections: usize,
    /// Uploading probe sessions; each carries connections / probes receipts
    /// per broadcast.
    pub probes: usize,
    /// Broadcasts, half of them with an upload arriving.
    pub rounds: usize,
    /// How long the ingest-only phase runs.
    pub ingest_for: Duration,
}

/// The agent as its own process, as deployed.
pub struct AgentProcess {
    /// Its process.
    pub child: Child,
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    /// Its first log segment.
    pub log: PathBuf,
}

impl AgentProcess {
    /// Starts the release agent on 127.0.0.1:0 with its data in `dir`.
    pub fn start(dir: &Path, extra: &[&str]) -> anyhow::Result<AgentProcess> {
        let mut child = Command::new(sibling("skewscope-agent")?)
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()?;
        let mut lines = BufReader::new(child.stdout.take().context("agent stdout")?).lines();
        let addr = lines
            .next()
            .context("agent said nothing")??
            .strip_prefix("listening on ")
            .context("agent did not say where it listens")?
            .parse()?;
        let log = PathBuf::from(
            lines
                .next()
                .context("agent did not say where it records")??
                .strip_prefix("recording to ")
                .context("no log line")?,
        );
        Ok(AgentProcess { child, addr, log })
    }

    /// CPU time of all its threads so far.
    pub fn cpu(&self) -> anyhow::Result<Duration> {
        process_cpu(self.child.id())
    }

    /// SIGTERM, and wait until its log is flushed and synced.
    pub fn stop(mut self) -> anyhow::Result<PathBuf> {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )?;
        self.child.wait()?;
        Ok(std::mem::take(&mut self.log))
    }
}

/// A bench that fails half way leaves no agent behind (one left running
/// was taken for the next run's agent by whoever looked it up by name).
impl Drop for AgentProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// CPU time of every thread of process `pid` so far, from the scheduler's
/// own nanosecond count (`/proc/PID/task/*/schedstat`), not 10 ms ticks.
pub fn process_cpu(pid: u32) -> anyhow::Result<Duration> {
    let mut ns = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let stat = std::fs::read_to_string(task?.path().join("schedstat"))?;
        ns += stat
            .split(' ')
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .context("odd schedstat")?;
    }
    Ok(Duration::from_nanos(ns))
}

/// One uploading probe run, as the probe's uploader speaks.
struct Session {
    ws: Ws,
    run_id: u128,
    next_seq: u64,
    sent_receipts: u64,
}

impl Session {
    async fn open(addr: std::net::SocketAddr, run_id: u128) -> anyhow::Result<Session> {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ingest")).await?;
        let mut s = Session {
            ws,
            run_id,
            next_seq: 0,
            sent_receipts: 0,
        };
        s.ask(&ToAgent::Hello {
            version: INGEST_VERSION,
            run_id,
        })
        .await?;
        let start = vec![
            skewscope_core::fixtures::probe_started_on(
                &format!("bench-{run_id}"),
                "bench",
                1,
                skewscope_os::clock::now(),
            ),
            ProbeRecord::Identity(RunIdentity {
                run_id,
                boot_id: None,
            }),
        ];
        s.send(&start).await?;
        Ok(s)
    }

    /// `n` receipts of one broadcast, as a probe with `n` connections logs them.
    async fn send_receipts(&mut self, n: usize) -> anyhow::Result<()> {
        let batch = self.receipts(n)?;
        self.send_frames(batch).await
    }

    /// The next batch of `n` receipts, encoded: made before a measured
    /// round, so the probe's own encoding (done on devices) is not counted
    /// against the agent.
    fn receipts(&mut self, n: usize) -> anyhow::Result<(Vec<u8>, u64)> {
        let at: Stamp = skewscope_os::clock::now();
        let seq = self.sent_receipts;
        let records: Vec<ProbeRecord> = (0..n)
            .map(|conn| {
                ProbeRecord::Receipt(Receipt {
                    kernel_delay_ns: Some(40_000),
                    ..skewscope_core::fixtures::receipt(
                        conn as u32,
                        MessageKey::Seq(seq),
                        0x5eed_u64.wrapping_mul(seq + 1),
                        at,
                    )
                })
            })
            .collect();
        self.sent_receipts += 1;
        encoded(&records)
    }

    async fn send(&mut self, records: &[ProbeRecord]) -> anyhow::Result<()> {
        let batch = encoded(records)?;
        self.send_frames(batch).await
    }

    async fn send_frames(&mut self, (frames, count): (Vec<u8>, u64)) -> anyhow::Result<()> {
        let first_seq = self.next_seq;
        match self.ask(&ToAgent::Records { first_seq, frames }).await? {
            ToProbe::Ack { next_seq } if next_seq == first_seq + count => {
                self.next_seq = next_seq;
                Ok(())
            }
            other => bail!("run {}: unexpected answer {other:?}", self.run_id),
        }
    }

    async fn ask(&mut self, message: &ToAgent) -> anyhow::Result<ToProbe> {
        self.ws
            .send(Message::Binary(encode(message).into()))
            .await?;
        loop {
            match self
                .ws
                .next()
                .await
                .context("the agent closed the upload")??
            {
                Message::Binary(b) => return decode_to_probe(&b).context("not an answer"),
                Message::Close(f) => bail!("the agent closed the upload: {f:?}"),
                _ => continue,
            }
        }
    }
}

/// Connections to a local listener whose other ends a drain thread reads:
/// somewhere to send the control load's bytes.
async fn sink_connections(n: usize) -> anyhow::Result<Vec<TcpStream>> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..n {
        ours.push(TcpStream::connect(addr).await?);
        theirs.push(listener.accept()?.0);
    }
    // The drain lives as long as the process: a benchmark's lifetime.
    std::mem::forget(Drain::start(theirs)?);
    Ok(ours)
}

/// Records framed as in a log, and how many.
fn encoded(records: &[ProbeRecord]) -> anyhow::Result<(Vec<u8>, u64)> {
    let mut log = LogWriter::new(Vec::new(), LogKind::Probe)?;
    for r in records {
        log.append(r)?;
    }
    Ok((
        log.into_inner()[HEADER_LEN..].to_vec(),
        records.len() as u64,
    ))
}

/// Runs the benchmark and prints its figures.
pub async fn run(options: Options) -> anyhow::Result<()> {
    skewscope_os::files::ensure_open_files(options.connections as u32 * 2 + 64)?;
    let dir = tempfile::tempdir()?;
    let agent = AgentProcess::start(dir.path(), &[])?;
    let addr = agent.addr;
    let n = options.connections;
    let _drain = Drain::upgraded(addr, n).await?;
    let mut sessions = Vec::new();
    for p in 0..options.probes {
        sessions.push(Session::open(addr, p as u128 + 1).await?);
    }
    let per_probe = (n / options.probes.max(1)).max(1);
    let mut sinks = sink_connections(options.probes).await?;
    eprintln!(
        "bench: {n} connections, {} uploading probes of {per_probe}; {} broadcasts",
        options.probes, options.rounds
    );

    // Fan-out with no upload; with the same bytes sent elsewhere (control);
    // with each probe's upload arriving at a random moment of the pause (as
    // probes send: every flush, unaligned); and with every upload landing at
    // the broadcast's moment (the worst case). One cycle of the four after
    // another.
    let mut load_of = std::collections::HashMap::new();
    // Each cycle runs the four loads in a fresh random order, so no load
    // always follows another (what the round before left behind, in caches
    // or in the kernel, falls on every load alike).
    let mut cycle = LOADS;
    for round in 0..options.rounds {
        if round % LOADS.len() == 0 {
            fastrand::shuffle(&mut cycle);
        }
        let load = cycle[round % LOADS.len()];
        let batches = match load {
            Load::None => Vec::new(),
            Load::Control | Load::Spread | Load::SameInstant => sessions
                .iter_mut()
                .map(|s| s.receipts(per_probe))
                .collect::<anyhow::Result<Vec<_>>>()?,
        };
        let uploads = async {
            if load == Load::Control {
                let sends = sinks
                    .iter_mut()
                    .zip(&batches)
                    .map(|(sink, (frames, _))| tokio::io::AsyncWriteExt::write_all(sink, frames));
                futures_util::future::try_join_all(sends).await?;
                return anyhow::Ok(());
            }
            let sends = sessions
                .iter_mut()
                .zip(batches)
                .map(|(s, batch)| async move {
                    if load == Load::Spread {
                        tokio::time::sleep(PAUSE.mul_f64(fastrand::f64())).await;
                    }
                    s.send_frames(batch).await
                });
            futures_util::future::try_join_all(sends).await?;
            anyhow::Ok(())
        };
        let trigger = agent::http_client::start_test(addr, None);
        let (uploaded, sent, ()) = tokio::join!(uploads, trigger, tokio::time::sleep(PAUSE));
        uploaded?;
        let sent = sent?;
        ensure!(sent.status == 200, "start_test: {}", sent.body);
        let id: u64 = serde_json::from_str::<serde_json::Value>(&sent.body)?["broadcast"]
            .as_u64()
            .context("no broadcast id")?;
        load_of.insert(id, load);
    }

    // Ingest alone, as fast as acknowledgements come back.
    let cpu_before = agent.cpu()?;
    let started = Instant::now();
    let records_before: u64 = sessions.iter().map(|s| s.next_seq).sum();
    let deadline = started + options.ingest_for;
    let flood = sessions.iter_mut().map(|s| async move {
        while Instant::now() < deadline {
            s.send_receipts(per_probe).await?;
        }
        anyhow::Ok(())
    });
    futures_util::future::try_join_all(flood).await?;
    let wall = started.elapsed();
    let cpu = agent.cpu()? - cpu_before;
    let records = sessions.iter().map(|s| s.next_seq).sum::<u64>() - records_before;
    drop(sessions);
    let log = agent.stop()?;

    let spans = spans(&log, &load_of)?;
    println!(
        "upload benchmark: {n} connections, {} probes uploading {per_probe} receipts each per broadcast; {} broadcasts {} ms apart, the four loads interleaved\n",
        options.probes,
        options.rounds,
        PAUSE.as_millis()
    );
    println!(
        "| fan-out span (agent's log) | p50 | p90 | n | p50 ÷ no upload | median ÷ the quiet broadcast of its cycle |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let names = [
        "no upload",
        "control: the same bytes to a sink that is not the agent",
        "uploads at random moments of the pause (as probes send)",
        "every upload at the broadcast's moment",
    ];
    let quiet = spans[0].0.p50 as f64;
    for (name, (s, paired)) in names.iter().zip(&spans) {
        println!(
            "| {name} | {} | {} | {} | {:.3} | {paired:.3} |",
            crate::format::us(s.p50),
            crate::format::us(s.p90),
            s.count,
            s.p50 as f64 / quiet,
        );
    }
    println!(
        "\ningest alone: {records} records in {:.2} s = {:.0} records/s ({per_probe} per batch, one sync each); agent CPU {:.2} s = {:.3} ms per 1,000 records, {:.0} % of one core",
        wall.as_secs_f64(),
        records as f64 / wall.as_secs_f64(),
        cpu.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / records as f64,
        cpu.as_secs_f64() * 100.0 / wall.as_secs_f64()
    );
    Ok(())
}

/// When a round's uploads arrive, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Load {
    /// No upload.
    None,
    /// The same bytes, at the broadcast's moment, to a sink on this machine
    /// that is not the agent: the cost of loopback and of this benchmark's
    /// own sending, which on a LAN fall on the devices.
    Control,
    /// Each probe's upload at a random moment of the pause.
    Spread,
    /// Every upload at the broadcast's moment.
    SameInstant,
}

const LOADS: [Load; 4] = [Load::None, Load::Control, Load::Spread, Load::SameInstant];

/// Pause between broadcasts; spread uploads arrive within it.
const PAUSE: Duration = Duration::from_millis(50);

/// Fan-out spans from the agent's log by the load of their round, and for
/// each load the median ratio of its broadcasts to the quiet broadcast of
/// the same cycle (the machine's drift over the run cancels out of those).
fn spans(
    log: &Path,
    load_of: &std::collections::HashMap<u64, Load>,
) -> anyhow::Result<Vec<(Summary, f64)>> {
    let AnyLog::Agent(decoded) = read_file(log)? else {
        bail!("{} is not an agent log", log.display());
    };
    let joined = join(Some(&decoded.records), &[]);
    let mut in_order: Vec<(u64, Load, i64)> = Vec::new();
    for b in &joined.broadcasts {
        let (BroadcastKey::Agent { id, .. }, Some(span)) =
            (b.key, b.agent.and_then(|a| a.fanout_span_ns))
        else {
            continue;
        };
        if let Some(&load) = load_of.get(&id) {
            in_order.push((id, load, span as i64));
        }
    }
    in_order.sort_by_key(|&(id, ..)| id);
    let mut out = Vec::new();
    for load in &LOADS {
        let spans: Vec<i64> = in_order
            .iter()
            .filter(|(_, l, _)| l == load)
            .map(|&(.., s)| s)
            .collect();
        let mut ratios: Vec<f64> = in_order
            .chunks_exact(LOADS.len())
            .filter_map(|cycle| {
                let span_of = |l: Load| cycle.iter().find(|c| c.1 == l).map(|c| c.2 as f64);
                Some(span_of(*load)? / span_of(Load::None)?)
            })
            .collect();
        ratios.sort_by(f64::total_cmp);
        let median = ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN);
        out.push((
            Summary::of(&spans).context("no broadcasts of a load")?,
            median,
        ));
    }
    Ok(out)
}
