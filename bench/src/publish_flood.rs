//! `skewscope-bench publish-flood`: what large stamped publishes cost
//! everyone else (issue 43: forty 1 MiB `/publish?lead=` bodies at once
//! once held `/clock` round trips for 1.1 s).
//!
//! The release agent; four `/clock` clients exchanging every 40 ms each on
//! their own thread; a `/ws` client on another, reading every broadcast, and a small
//! broadcast (`/publish`, no lead) every 20 ms whose receipt it times. A
//! quiet phase, then `rounds` floods of [`BODIES`] bodies of 1,000,000
//! bytes sent at once to `/publish?lead=1s`, each followed by a second of
//! quiet. Printed: the `/clock` round trip, split into where it was spent
//! ([`ClockSamples`]), and the small broadcasts' publish-to-receipt
//! latency, quiet and while a flood's bodies are in flight, and the agent's
//! peak memory.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::{SinkExt, StreamExt};
use skewscope_core::analysis::stats::Summary;
use tokio_tungstenite::tungstenite::Message;

use crate::flood::rss_kib;
use crate::format::us;
use crate::upload::AgentProcess;

/// Bodies sent at once in a flood.
pub const BODIES: usize = 40;
/// Each body's size, bytes (the default `--max-publish` is 1 MiB).
const BODY_BYTES: usize = 1_000_000;
/// `/clock` connections, each exchanging on its own (more samples while a
/// flood's 100 ms last).
const CLOCK_CLIENTS: usize = 4;
/// Between two `/clock` requests of one connection (the agent allows 30 a
/// second).
const CLOCK_EVERY: Duration = Duration::from_millis(40);
/// Between two small broadcasts.
const TICK_EVERY: Duration = Duration::from_millis(20);
/// The quiet phase, and the quiet after each flood.
const QUIET: Duration = Duration::from_secs(1);

/// Which phase a sample fell in: 0 quiet, 1 a flood in flight.
static FLOODING: AtomicBool = AtomicBool::new(false);

/// Samples by phase: (quiet, flooding), ns.
#[derive(Default)]
struct Samples {
    quiet: Vec<i64>,
    flooding: Vec<i64>,
}

/// A `/clock` round trip and where it was spent, from the agent's stamps
/// (`t2` the kernel's receipt of the request, `t3` just before the reply is
/// written) and the client's kernel stamp of the reply: all on this host's
/// one wall clock.
#[derive(Default)]
struct ClockSamples {
    /// Request written → reply read, as the client's process sees it.
    round_trip: Samples,
    /// Request written → the client's kernel has the reply: the round trip a
    /// client on another device sees, whose process does not share these
    /// two cores with the agent and the floods.
    at_kernel: Samples,
    /// Samples whose reply had no usable kernel stamp (only in `round_trip`).
    unsplit: u64,
    /// Request written → the agent's kernel has it (`t2 − t1`).
    up: Samples,
    /// The agent's kernel has the request → the agent writes the reply
    /// (`t3 − t2`): subtracted by every client, so it never widens a bound.
    held: Samples,
    /// The agent writes the reply → the client's kernel has it.
    down: Samples,
    /// The client's kernel has the reply → the client's process reads it:
    /// the measuring client's own wake-up on these shared cores, which a
    /// device elsewhere on the LAN does not share with the agent.
    client_wake: Samples,
    /// What bounds the client's offset: the round trip less `held`.
    bounding: Samples,
}

impl Samples {
    fn push(&mut self, flooding: bool, ns: i64) {
        if flooding {
            self.flooding.push(ns);
        } else {
            self.quiet.push(ns);
        }
    }
}

/// Runs the phases and prints a table.
pub fn run(rounds: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let agent = AgentProcess::start(dir.path(), &[])?;
    let addr = agent.addr;
    let pid = agent.child.id();
    let stop = Arc::new(AtomicBool::new(false));
    let clock = Arc::new(Mutex::new(ClockSamples::default()));
    let ticks = Arc::new(Mutex::new(Samples::default()));
    let big_copies = Arc::new(AtomicU64::new(0));
    let clock_thread = {
        let (stop, clock) = (stop.clone(), clock.clone());
        std::thread::spawn(move || {
            on_own_runtime(async move {
                let clients: Vec<_> = (0..CLOCK_CLIENTS)
                    .map(|_| tokio::spawn(clock_client(addr, stop.clone(), clock.clone())))
                    .collect();
                for c in clients {
                    c.await??;
                }
                Ok(())
            })
        })
    };
    let tick_thread = {
        let (stop, ticks, big) = (stop.clone(), ticks.clone(), big_copies.clone());
        std::thread::spawn(move || on_own_runtime(ticker(addr, stop, ticks, big)))
    };
    let peak = Arc::new(AtomicU64::new(0));
    let rss_thread = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(kib) = rss_kib(pid) {
                    peak.fetch_max(kib, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    std::thread::sleep(QUIET);
    let rss_quiet = rss_kib(pid)?;
    // The floods' senders stand in for other machines on the LAN: on these
    // shared cores they step aside (nice 19), so what the clients measure
    // is the agent's, not their own bench's, contention.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(|| {
            let _ = skewscope_os::priority::lower_this_thread();
        })
        .enable_all()
        .build()?;
    let body = Arc::new(format!(
        r#"{{"type":"go","pad":"{}"}}"#,
        "x".repeat(BODY_BYTES - r#"{"type":"go","pad":""}"#.len())
    ));
    let mut flood_took = Vec::new();
    for round in 0..rounds {
        eprintln!("bench: publish-flood, round {} of {rounds}", round + 1);
        FLOODING.store(true, Ordering::SeqCst);
        let start = Instant::now();
        let statuses = runtime.block_on(async {
            let mut sent = Vec::new();
            for _ in 0..BODIES {
                let body = body.clone();
                sent.push(tokio::spawn(async move {
                    agent::http_client::request(
                        addr,
                        "POST",
                        "/publish?lead=1s",
                        body.as_bytes(),
                        None,
                    )
                    .await
                    .map(|r| r.status)
                }));
            }
            let mut statuses = Vec::new();
            for s in sent {
                statuses.push(s.await?);
            }
            anyhow::Ok(statuses)
        })?;
        flood_took.push(start.elapsed().as_nanos() as i64);
        FLOODING.store(false, Ordering::SeqCst);
        for s in statuses {
            anyhow::ensure!(s.context("a publish")? == 200, "a publish was refused");
        }
        std::thread::sleep(QUIET);
    }
    stop.store(true, Ordering::Relaxed);
    clock_thread.join().expect("the clock thread")?;
    tick_thread.join().expect("the tick thread")?;
    rss_thread.join().expect("the memory thread");
    agent.stop()?;

    let clock = clock.lock().expect("not poisoned");
    let ticks = ticks.lock().expect("not poisoned");
    let took = Summary::of(&flood_took).context("no flood")?;
    println!(
        "the release agent; {rounds} flood(s) of {BODIES} bodies of {BODY_BYTES} bytes at once to /publish?lead=1s (all answered in {} p50, {} max); {CLOCK_CLIENTS} /clock connections exchanging every {} ms each and a small broadcast every {} ms throughout; {} large copies read\n",
        us(took.p50),
        us(took.max),
        CLOCK_EVERY.as_millis(),
        TICK_EVERY.as_millis(),
        big_copies.load(Ordering::Relaxed),
    );
    println!(
        "| what | quiet: n, p50 / p99 / max | a flood in flight: n, p50 / p99 / max | p99 ÷ quiet |"
    );
    println!("|---|---|---|---:|");
    for (what, s) in [
        ("/clock round trip", &clock.round_trip),
        ("  to the client's kernel (t4 − t1)", &clock.at_kernel),
        ("  request to the agent's kernel (t2 − t1)", &clock.up),
        ("  held by the agent (t3 − t2)", &clock.held),
        ("  reply to the client's kernel", &clock.down),
        ("  the client's own wake-up", &clock.client_wake),
        (
            "  round trip less held (what bounds an offset)",
            &clock.bounding,
        ),
        ("small broadcast: publish to receipt", &*ticks),
    ] {
        let (q, f) = (Summary::of(&s.quiet), Summary::of(&s.flooding));
        let cell = |x: &Option<Summary>| {
            x.as_ref().map_or("-".to_owned(), |x| {
                format!("{}, {} / {} / {}", x.count, us(x.p50), us(x.p99), us(x.max))
            })
        };
        let ratio = match (&q, &f) {
            (Some(q), Some(f)) => format!("{:.1}", f.p99 as f64 / q.p99.max(1) as f64),
            _ => "-".into(),
        };
        println!("| {what} | {} | {} | {ratio} |", cell(&q), cell(&f));
    }
    if clock.unsplit > 0 {
        println!(
            "\n{} /clock sample(s) without a usable kernel stamp: in the round trip only",
            clock.unsplit
        );
    }
    println!(
        "\nagent memory: {rss_quiet} KiB quiet, {} KiB at its peak",
        peak.load(Ordering::Relaxed)
    );
    Ok(())
}

fn on_own_runtime(f: impl std::future::Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f)
}

/// Exchanges on `/clock` every [`CLOCK_EVERY`] until `stop`, reading the
/// socket with kernel receive stamps so the round trip splits into where it
/// was spent ([`ClockSamples`]).
async fn clock_client(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<ClockSamples>>,
) -> anyhow::Result<()> {
    use skewscope_os::clock::kernel_realtime_ns;
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (stamped, last_rx) = skewscope_os::rx_stamp::RxStamped::new(tcp);
    let (mut ws, _) =
        tokio_tungstenite::client_async(format!("ws://{addr}/clock"), stamped).await?;
    let mut id = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if id > 0 {
            tokio::time::sleep(CLOCK_EVERY).await;
        }
        id += 1;
        let flooding = FLOODING.load(Ordering::SeqCst);
        let sent = Instant::now();
        let t1 = kernel_realtime_ns();
        ws.send(Message::text(format!(r#"{{"id": {id}, "t1": {id}}}"#)))
            .await?;
        let reply = loop {
            let m = tokio::time::timeout(Duration::from_secs(30), ws.next())
                .await
                .context("no /clock reply in 30 s")?
                .context("/clock closed")??;
            if !m.is_text() {
                continue;
            }
            let reply: serde_json::Value = serde_json::from_str(m.to_text()?)?;
            if reply["id"].as_u64() == Some(id) {
                break reply;
            }
        };
        let rtt = sent.elapsed().as_nanos() as i64;
        let read_at = kernel_realtime_ns();
        let stamp = |name: &str| {
            reply[name]
                .as_i64()
                .with_context(|| format!("a /clock reply without {name}"))
        };
        let (t2, t3) = (stamp("t2_ns")?, stamp("t3_ns")?);
        let flooding = flooding || FLOODING.load(Ordering::SeqCst);
        {
            let mut s = samples.lock().expect("not poisoned");
            s.round_trip.push(flooding, rtt);
            // Now and then the kernel's stamp is missing or a hair after
            // the clock read: that sample is left out of the split, counted.
            let Some(wake) = last_rx.delay_ns(read_at) else {
                s.unsplit += 1;
                continue;
            };
            let wake = wake as i64;
            let t4 = read_at as i64 - wake;
            s.at_kernel.push(flooding, t4 - t1 as i64);
            s.up.push(flooding, t2 - t1 as i64);
            s.held.push(flooding, t3 - t2);
            s.down.push(flooding, t4 - t3);
            s.client_wake.push(flooding, wake);
            s.bounding.push(flooding, rtt - (t3 - t2));
        }
    }
    Ok(())
}

/// Publishes a small broadcast every [`TICK_EVERY`] and times its receipt
/// on a `/ws` client that reads everything (the floods' copies too).
async fn ticker(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Samples>>,
    big: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws")).await?;
    let (_, mut read) = ws.split();
    let sent_at: Arc<Mutex<std::collections::HashMap<u64, (Instant, bool)>>> = Arc::default();
    let reader = {
        let (sent_at, samples) = (sent_at.clone(), samples.clone());
        tokio::spawn(async move {
            while let Some(Ok(m)) = read.next().await {
                let Ok(text) = m.to_text() else { continue };
                let Some(n) = text
                    .strip_prefix(r#"{"tick":"#)
                    .and_then(|t| t.strip_suffix('}'))
                    .and_then(|t| t.parse::<u64>().ok())
                else {
                    big.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if let Some((at, flooding)) = sent_at.lock().expect("not poisoned").remove(&n) {
                    let flooding = flooding || FLOODING.load(Ordering::SeqCst);
                    samples
                        .lock()
                        .expect("not poisoned")
                        .push(flooding, at.elapsed().as_nanos() as i64);
                }
            }
        })
    };
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let flooding = FLOODING.load(Ordering::SeqCst);
        sent_at
            .lock()
            .expect("not poisoned")
            .insert(n, (Instant::now(), flooding));
        let body = format!(r#"{{"tick":{n}}}"#);
        let r = agent::http_client::request(addr, "POST", "/publish", body.as_bytes(), None)
            .await
            .context("a small publish")?;
        anyhow::ensure!(r.status == 200, "a small publish: {}", r.body);
        tokio::time::sleep(TICK_EVERY).await;
    }
    // The last ticks' receipts: a moment to arrive, then stop reading.
    tokio::time::sleep(Duration::from_millis(500)).await;
    reader.abort();
    Ok(())
}
