//! `skewscope-bench auto-lead`: `lead=auto` against the best fixed lead in
//! hindsight, over emulated links.
//!
//! Per link profile: the release agent on loopback and two real probe
//! processes (3 connections each, acting at `/at_ns`), each behind its own
//! skewscope-linkemu link that carries its WebSocket and its time exchange;
//! they upload straight to the agent, whose live join measures their reads.
//! Every broadcast asks `/start_test?lead=auto`: a warm-up while the probes
//! settle, then the measured ones, one every 200 ms.
//!
//! The truth comes from the logs (every clock is this host's): a copy
//! needed, as its lead, the time from its message's build (its time to act
//! minus the lead the agent gave) to its read. The best fixed lead in
//! hindsight is the p99.9 of those over the measured copies: the shortest
//! one lead that would have left at most one action in a thousand late.
//! Printed: late actions under `lead=auto`, the leads it chose, and those
//! against that best fixed lead; and per broadcast, how far apart its
//! copies were read (receive skew) against how far apart the devices
//! acted on it (action skew): a lead that leaves a device too little time
//! to plan and wake makes the second wider than the first.
//!
//! `loopback` is no link at all (the probes connect to the agent
//! directly), and `--busy N` runs N busy loops beside the run: the host
//! stalls alone, which is where a lead chosen too short shows.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use skewscope_core::record::{MessageKey, ProbeRecord};
use skewscope_linkemu::{Link, Profile};

use crate::processes::{Reaped, probe_records, sibling, start_agent, stop_probes, wait_for};

/// Broadcasts before the measured ones: the probes' clocks settle and the
/// live join fills its window.
const WARM_UP_BROADCASTS: usize = 80;
/// Between two broadcasts.
const INTERVAL: Duration = Duration::from_millis(200);

/// What the devices' connections and time exchanges go through.
#[derive(Clone, Debug)]
pub enum Path {
    /// Straight to the agent on loopback.
    Loopback,
    /// Each device behind its own emulated link.
    Link(Box<Profile>),
}

impl Path {
    /// `loopback`, or the link profile's name.
    pub fn named(name: &str) -> Option<Path> {
        match name {
            "loopback" => Some(Path::Loopback),
            _ => Profile::named(name).map(|p| Path::Link(Box::new(p))),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Path::Loopback => "loopback",
            Path::Link(p) => p.name,
        }
    }
}

/// Longest a busy loop spins, whatever happens to the run.
const BUSY_AT_MOST: Duration = Duration::from_secs(1800);

/// `n` threads spinning until the returned flag is set (or
/// [`BUSY_AT_MOST`]): a loaded host.
fn busy_loops(n: usize) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    for _ in 0..n {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let begun = Instant::now();
            while !stop.load(Ordering::Relaxed) && begun.elapsed() < BUSY_AT_MOST {
                std::hint::spin_loop();
            }
        });
    }
    stop
}

/// One profile's figures (ns unless said).
#[derive(Clone, Debug, Serialize)]
pub struct AutoLeadFigures {
    /// The link (`loopback`: none).
    pub profile: &'static str,
    /// Busy loops beside the run.
    pub busy: usize,
    /// Whether the probes acted from a real-time thread (`--act-realtime`).
    pub realtime: bool,
    /// Broadcasts measured, and their actions.
    pub broadcasts: usize,
    /// …
    pub actions: usize,
    /// Of those, late (the message came after its time to act).
    pub late: usize,
    /// The leads `lead=auto` chose: p50 and max.
    pub chosen_ns: (u64, u64),
    /// The shortest fixed lead with at most 0.1 % late on the same copies.
    pub best_fixed_ns: u64,
    /// The shortest fixed lead with none late.
    pub every_copy_ns: u64,
    /// Chosen ÷ best fixed: p50 and max.
    pub ratio: (f64, f64),
    /// Per measured broadcast, its last copy's arrival − its first's
    /// (kernel stamps, one clock): p50, p99, max.
    pub receive_skew_ns: (u64, u64, u64),
    /// Per measured broadcast, its last action − its first: p50, p99, max.
    pub action_skew_ns: (u64, u64, u64),
    /// Measured broadcasts whose action skew exceeded their receive skew.
    pub acted_wider: usize,
    /// Every late action, to tell a lead too short (the copy needed more
    /// than it was given) from a device that misplaced its moment.
    pub late_actions: Vec<LateAction>,
}

/// One late action under `lead=auto` (ns).
#[derive(Clone, Debug, Serialize)]
pub struct LateAction {
    /// Which device (0 or 1), connection and broadcast.
    pub device: usize,
    /// …
    pub conn: u32,
    /// …
    pub seq: u64,
    /// The lead the agent gave the broadcast.
    pub lead_ns: u64,
    /// What the copy needed: its read (host wall clock) minus its build.
    pub needed_ns: u64,
    /// The largest need of any copy (warm-up ones too) read before this
    /// broadcast was built: what a rule could have known.
    pub largest_before_ns: u64,
    /// How late the probe said it was (its read minus its target, on its
    /// monotonic clock).
    pub late_ns: u64,
    /// The offset the probe mapped the time to act with, and its bound.
    pub offset_ns: Option<i64>,
    /// …
    pub offset_bound_ns: Option<u64>,
}

/// Runs every path: `broadcasts` measured broadcasts each, with `busy`
/// busy loops beside each run.
pub fn run(
    paths: &[Path],
    broadcasts: usize,
    busy: usize,
    realtime: bool,
) -> anyhow::Result<Vec<AutoLeadFigures>> {
    paths
        .iter()
        .map(|p| {
            let stop = busy_loops(busy);
            let figures = run_profile(p, broadcasts, busy, realtime);
            stop.store(true, Ordering::Relaxed);
            figures
        })
        .collect()
}

fn run_profile(
    path: &Path,
    broadcasts: usize,
    busy: usize,
    realtime: bool,
) -> anyhow::Result<AutoLeadFigures> {
    eprintln!(
        "bench: auto-lead: {} (busy loops: {busy}{})",
        path.name(),
        if realtime { ", --act-realtime" } else { "" }
    );
    let dir = tempfile::tempdir()?;
    let (agent, addr) = start_agent(dir.path())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut links = Vec::new();
    let mut probes = Vec::new();
    for i in 0..2u64 {
        let via = match path {
            Path::Loopback => addr,
            Path::Link(profile) => {
                let link = Link::start(**profile, 301 + i, "127.0.0.1:0".parse()?, addr, None)?;
                let via = link.addr();
                links.push(link);
                via
            }
        };
        let log = dir.path().join(format!("device-{i}.sklog"));
        let child = Command::new(sibling("skewscope-probe")?)
            .args(["--url", &format!("ws://{via}/ws")])
            .args(["--name", &format!("device-{i}"), "--connections", "3"])
            .args(["--duration", "600s", "--act-at", "/at_ns"])
            .args(["--upload", &format!("http://{addr}")])
            .args(realtime.then_some("--act-realtime"))
            .arg("--out")
            .arg(&log)
            .stderr(Stdio::null())
            .spawn()?;
        probes.push((Reaped(child), log));
    }
    for (_, log) in &probes {
        wait_for("probe connected", Duration::from_secs(60), || {
            probe_records(log)
                .iter()
                .filter(|r| matches!(r, ProbeRecord::ConnectionOpened(_)))
                .count()
                == 3
        })?;
    }
    // seq → the lead the agent gave it.
    let mut given: std::collections::BTreeMap<u64, u64> = Default::default();
    let mut measured = Vec::new();
    for i in 0..WARM_UP_BROADCASTS + broadcasts {
        let r = runtime.block_on(agent::http_client::request(
            addr,
            "GET",
            "/start_test?lead=auto",
            b"",
            None,
        ))?;
        let body: serde_json::Value = serde_json::from_str(&r.body)?;
        let (Some(seq), Some(lead)) = (body["seq"].as_u64(), body["lead_ns"].as_u64()) else {
            anyhow::bail!("/start_test?lead=auto answered {}", r.body);
        };
        given.insert(seq, lead);
        if i >= WARM_UP_BROADCASTS {
            measured.push(seq);
        }
        std::thread::sleep(INTERVAL);
    }
    let total = WARM_UP_BROADCASTS + broadcasts;
    for (_, log) in &probes {
        wait_for("every copy read", Duration::from_secs(60), || {
            probe_records(log)
                .iter()
                .filter(|r| matches!(r, ProbeRecord::Receipt(_)))
                .count()
                >= 3 * total
        })?;
    }
    stop_probes(&mut probes)?;
    drop(agent);
    drop(links);

    // Each measured copy: what lead it needed (build to read, one clock:
    // the host's), and whether its action was late under the lead given.
    let mut needed = Vec::new();
    // Every copy acted on, warm-up ones too: (read, needed); and
    // the measured ones' late actions.
    let mut copies = Vec::new();
    let mut late_actions = Vec::new();
    let (mut actions, mut late) = (0, 0);
    for (device, (_, log)) in probes.iter().enumerate() {
        let records = probe_records(log);
        let mut action_of = std::collections::HashMap::new();
        for r in &records {
            if let ProbeRecord::Action(a) = r
                && let MessageKey::Seq(seq) = a.key
                && given.contains_key(&seq)
            {
                if measured.contains(&seq) {
                    actions += 1;
                    late += usize::from(a.late_ns > 0);
                }
                action_of.insert((a.conn, seq), *a);
            }
        }
        for r in &records {
            if let ProbeRecord::Receipt(rc) = r
                && let MessageKey::Seq(seq) = rc.key
                && let Some(a) = action_of.get(&(rc.conn, seq))
            {
                let built = a.act_at_ns.saturating_sub(given[&seq]);
                let need = rc.at.wall_ns.saturating_sub(built);
                copies.push((rc.at.wall_ns, need));
                if !measured.contains(&seq) {
                    continue;
                }
                needed.push(need);
                if a.late_ns > 0 {
                    late_actions.push((
                        built,
                        LateAction {
                            device,
                            conn: a.conn,
                            seq,
                            lead_ns: given[&seq],
                            needed_ns: need,
                            largest_before_ns: 0,
                            late_ns: a.late_ns,
                            offset_ns: a.offset_ns,
                            offset_bound_ns: a.offset_bound_ns,
                        },
                    ));
                }
            }
        }
    }
    // Per measured broadcast: its copies' arrivals and its actions, every
    // device's (one clock: the host's).
    let mut spread: std::collections::BTreeMap<u64, (Vec<u64>, Vec<u64>)> = Default::default();
    for (_, log) in &probes {
        for r in probe_records(log) {
            match r {
                ProbeRecord::Receipt(rc) => {
                    if let MessageKey::Seq(seq) = rc.key
                        && measured.contains(&seq)
                    {
                        let arrival = rc.at.wall_ns - rc.kernel_delay_ns.unwrap_or(0);
                        spread.entry(seq).or_default().0.push(arrival);
                    }
                }
                ProbeRecord::Action(a) => {
                    if let MessageKey::Seq(seq) = a.key
                        && measured.contains(&seq)
                    {
                        spread.entry(seq).or_default().1.push(a.done.wall_ns);
                    }
                }
                _ => {}
            }
        }
    }
    let width = |v: &[u64]| v.iter().max().zip(v.iter().min()).map(|(a, b)| a - b);
    let (mut receive_skew, mut action_skew, mut acted_wider) = (Vec::new(), Vec::new(), 0);
    for (arrivals, acted) in spread.values() {
        if let (Some(r), Some(a)) = (width(arrivals), width(acted)) {
            receive_skew.push(r);
            action_skew.push(a);
            acted_wider += usize::from(a > r);
        }
    }

    // What a rule could have known of each late one: the needs read
    // before its broadcast was built.
    let mut late_actions: Vec<LateAction> = late_actions
        .into_iter()
        .map(|(built, l)| LateAction {
            largest_before_ns: copies
                .iter()
                .filter(|(read, _)| *read < built)
                .map(|(_, need)| *need)
                .max()
                .unwrap_or(0),
            ..l
        })
        .collect();
    late_actions.sort_by_key(|l| (l.seq, l.device, l.conn));
    anyhow::ensure!(!needed.is_empty(), "no measured copy was acted on");
    needed.sort_unstable();
    let rank = ((needed.len() as f64 * 0.999).ceil() as usize).clamp(1, needed.len());
    let best_fixed = needed[rank - 1];
    let every_copy = *needed.last().expect("not empty");
    let mut chosen: Vec<u64> = measured.iter().map(|s| given[s]).collect();
    chosen.sort_unstable();
    let p50 = chosen[chosen.len() / 2];
    let max = *chosen.last().expect("not empty");
    Ok(AutoLeadFigures {
        profile: path.name(),
        busy,
        realtime,
        broadcasts,
        actions,
        late,
        chosen_ns: (p50, max),
        best_fixed_ns: best_fixed,
        every_copy_ns: every_copy,
        ratio: (
            p50 as f64 / best_fixed.max(1) as f64,
            max as f64 / best_fixed.max(1) as f64,
        ),
        receive_skew_ns: crate::format::quantiles(receive_skew),
        action_skew_ns: crate::format::quantiles(action_skew),
        acted_wider,
        late_actions,
    })
}

fn ms(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1e6)
}

fn ms3(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

/// Prints the figures side by side.
pub fn print(figures: &[AutoLeadFigures]) {
    println!(
        "lead=auto over emulated links: 2 devices x 3 connections uploading to the agent, {WARM_UP_BROADCASTS} warm-up broadcasts then the measured ones, one every {} ms; ms",
        INTERVAL.as_millis()
    );
    println!(
        "{:<12} {:>6} {:>8} {:>10} {:>11} {:>11} {:>11} {:>11} {:>12}",
        "profile",
        "bcasts",
        "actions",
        "late",
        "chosen p50",
        "chosen max",
        "best fixed",
        "every copy",
        "p50/max x"
    );
    for f in figures {
        println!(
            "{:<12} {:>6} {:>8} {:>10} {:>11} {:>11} {:>11} {:>11} {:>12}",
            f.profile,
            f.broadcasts,
            f.actions,
            format!(
                "{} ({:.2}%)",
                f.late,
                100.0 * f.late as f64 / f.actions.max(1) as f64
            ),
            ms(f.chosen_ns.0),
            ms(f.chosen_ns.1),
            ms(f.best_fixed_ns),
            ms(f.every_copy_ns),
            format!("{:.2}/{:.2}", f.ratio.0, f.ratio.1)
        );
    }
    println!(
        "\nper broadcast, its copies' spread (receive skew) against its actions' (action skew), ms:"
    );
    println!(
        "{:<12} {:>5} {:>24} {:>24} {:>22}",
        "profile", "busy", "receive p50/p99/max", "action p50/p99/max", "acted wider than read"
    );
    for f in figures {
        let three = |(a, b, c): (u64, u64, u64)| format!("{}/{}/{}", ms3(a), ms3(b), ms3(c));
        println!(
            "{:<12} {:>5} {:>24} {:>24} {:>22}",
            f.profile,
            f.busy,
            three(f.receive_skew_ns),
            three(f.action_skew_ns),
            format!("{} of {}", f.acted_wider, f.broadcasts)
        );
    }
    for f in figures.iter().filter(|f| !f.late_actions.is_empty()) {
        println!(
            "{}: late actions (device/conn #seq: lead given, the copy needed, largest need read before its build, late by, offset ± bound)",
            f.profile
        );
        for l in &f.late_actions {
            println!(
                "  {}/{} #{}: {} {} {} {} {}",
                l.device,
                l.conn,
                l.seq,
                ms(l.lead_ns),
                ms(l.needed_ns),
                ms(l.largest_before_ns),
                ms(l.late_ns),
                match (l.offset_ns, l.offset_bound_ns) {
                    (Some(o), Some(b)) => format!("{:.3} ± {:.3}", o as f64 / 1e6, b as f64 / 1e6),
                    _ => "none".to_string(),
                }
            );
        }
    }
}
