//! One stage of a sweep, in order: open its connections (a probe in this
//! process), warm up until a broadcast reaches every one of them, ask for
//! the broadcasts one at a time (each waited for until every open
//! connection has it, or `--settle` passes), close them, and measure the
//! log. Every wait is on what the log says, bounded in time.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use probe::{MAX_HANDSHAKES_IN_FLIGHT, RunningProbe};

use std::collections::BTreeMap;

use super::figures;
use super::follow::Compressed;
use super::options::{SweepOptions, WARMUP_TRIES};
use super::plan::{PlannedStage, thousands};
use super::probe_cpu::ProbeCpuMeter;
use super::result::{MachineShare, StageResult};
use super::server_cpu::CpuMeter;
use super::stage_logs::StageLogs;
use super::tap::TapAgent;
use super::trigger::Trigger;
use super::workers::Workers;

/// How often the log is looked at while waiting on it (the probe hands
/// its records to the file at least every 100 ms).
const POLL: Duration = Duration::from_millis(10);
/// Longest wait for the connections to close once the stage is done.
const STOP_WAIT: Duration = Duration::from_secs(60);
/// Longest wait for the probe's log to show what the probe said (it
/// writes at least every 100 ms).
const LOG_WAIT: Duration = Duration::from_secs(10);
/// Added to the connect bound: the last handshakes' own time.
pub const CONNECT_SLACK: Duration = Duration::from_secs(30);

/// What a stage is run with.
pub struct StageContext<'a> {
    /// The sweep's options.
    pub options: &'a SweepOptions,
    /// The trigger.
    pub trigger: &'a Trigger,
    /// The runtime the probe's helpers run on.
    pub runtime: &'a tokio::runtime::Runtime,
    /// Where the stage's log goes.
    pub dir: &'a Path,
    /// Progress, a line at a time.
    pub say: &'a dyn Fn(&str),
    /// The agent tapping the server, when given (`--agent`).
    pub tap: Option<&'a TapAgent>,
    /// The other machines' workers (`--workers`), if any.
    pub workers: Option<&'a Workers>,
    /// Connections this machine can hold in a stage.
    pub local_room: u32,
}

/// A stage run: its result, the server's `Server:` header if a trigger's
/// answer had one, and whether the sweep can go on.
pub struct StageRun {
    /// What the stage found.
    pub result: StageResult,
    /// The `Server:` header of the trigger's answers.
    pub server_header: Option<String>,
    /// Why the sweep cannot go on to larger stages, if it cannot.
    pub fatal: Option<String>,
}

/// Runs one stage.
pub fn run(ctx: &StageContext, stage: &PlannedStage) -> StageRun {
    let out = log_path(ctx.dir, stage.connections);
    let mut run = StageRun {
        result: StageResult {
            asked: stage.asked,
            connections: stage.connections,
            cut: stage.cut.clone(),
            opened: 0,
            refused: 0,
            first_refusal: None,
            dropped: 0,
            first_drop: None,
            connect_ms: 0,
            warmups: 0,
            never_warmed: 0,
            late_to_warm: 0,
            figures: None,
            server_cpu: None,
            probe_cpu: None,
            compressed: Compressed::default(),
            tap_short: None,
            machines: Vec::new(),
            stopped: None,
            log: ctx.options.keep.as_ref().map(|_| out.display().to_string()),
        },
        server_header: None,
        fatal: None,
    };
    if let Err(why) = measure(ctx, stage, &out, &mut run) {
        let why = format!("{why:#}");
        run.result.stopped.get_or_insert(why.clone());
        run.fatal = Some(why);
    }
    run
}

/// What a stage's broadcasts left: their trigger times and the
/// connections listening to them.
struct Broadcasts {
    triggers: Vec<u64>,
    listening: u32,
}

/// The stage's steps; an error stops the sweep (what was found is kept in
/// `run`).
fn measure(
    ctx: &StageContext,
    stage: &PlannedStage,
    out: &Path,
    run: &mut StageRun,
) -> anyhow::Result<()> {
    // This machine's share first, then each worker's.
    let (local, remote) = match ctx.workers {
        None => (stage.connections, BTreeMap::new()),
        Some(workers) => {
            let mut rooms = vec![ctx.local_room];
            rooms.extend(workers.rooms());
            let shares = super::board::share(stage.connections, &rooms);
            let remote: BTreeMap<String, u32> = workers
                .names()
                .into_iter()
                .zip(shares[1..].iter().copied())
                .collect();
            (shares[0], remote)
        }
    };
    let mut config = ctx.options.probe.clone();
    config.connections = local;
    config.out = out.to_owned();
    config.name = format!("sweep-{}", stage.connections);
    let begun = Instant::now();
    let probe = ctx.runtime.block_on(RunningProbe::start(config))?;
    let workers = ctx.workers.filter(|_| remote.values().any(|&n| n > 0));
    if let Some(workers) = workers {
        workers.open(stage.connections, &remote)?;
    }
    let mut log = StageLogs::open(out, local, workers.map(|w| (w, stage.connections, &remote)))?;
    // Every attempt ends, opened or failed, within its connect timeout
    // once through the handshake gate.
    let rounds = u32::try_from(stage.connections as usize / MAX_HANDSHAKES_IN_FLIGHT + 1)
        .unwrap_or(u32::MAX);
    let bound = ctx.options.probe.connect_timeout * rounds + CONNECT_SLACK;
    let attempts = ctx
        .runtime
        .block_on(async { tokio::time::timeout(bound, probe.connected()).await })
        .map_err(|_| {
            anyhow::anyhow!(
                "the connections were still being opened after {}",
                humantime::format_duration(Duration::from_secs(bound.as_secs()))
            )
        });
    // The workers' attempts, beside this machine's.
    let attempts = attempts.and_then(|mut attempts| {
        if let Some(workers) = workers {
            let states = workers.wait_done(begun + bound)?;
            for (name, state) in &states {
                let share = remote.get(name).copied().unwrap_or(0);
                if let super::board::WorkerState::Open { opened, failed } = state {
                    attempts.opened += opened;
                    attempts.failed += failed;
                }
                run.result.machines.push(MachineShare {
                    name: name.clone(),
                    connections: share,
                    state: state.to_string(),
                });
            }
            if let Some((name, why)) = states.iter().find_map(|(n, s)| match s {
                super::board::WorkerState::Failed { why } => Some((n, why)),
                _ => None,
            }) {
                anyhow::bail!("worker {name}: {why}");
            }
        }
        Ok(attempts)
    });
    run.result.connect_ms = begun.elapsed().as_millis() as u64;
    // The workers' records come through their uploads; a worker that dies
    // meanwhile is named by the wait (after SILENT_FOR) before it ends.
    let log_wait = match workers {
        Some(_) => LOG_WAIT + super::workers::SILENT_FOR,
        None => LOG_WAIT,
    };
    log.catch_up()?;
    if let Ok(attempts) = &attempts {
        // The probe writes its records at least every 100 ms: wait for the
        // failures to be there, so the first refusal's reason is said.
        wait_for(&mut log, log_wait, |log| log.failed().0 >= attempts.failed)?;
    }
    let (refused, first_refusal) = log.failed();
    run.result.refused = refused;
    run.result.first_refusal = first_refusal.map(str::to_owned);
    let measured = match attempts {
        Err(e) => Err(e),
        Ok(attempts) => {
            run.result.opened = attempts.opened;
            (ctx.say)(&format!(
                "sweep: {} of {} connections opened in {:.1} s{}",
                thousands(u64::from(attempts.opened)),
                thousands(u64::from(stage.connections)),
                begun.elapsed().as_secs_f64(),
                match (refused, first_refusal) {
                    (0, _) => String::new(),
                    (n, why) => format!("; {n} refused: {}", why.unwrap_or("no reason given")),
                }
            ));
            if attempts.opened == 0 {
                Err(anyhow::anyhow!(
                    "no connection opened: {}",
                    first_refusal.unwrap_or("no reason given")
                ))
            } else if !wait_for(&mut log, log_wait, |log| log.opened() >= attempts.opened)? {
                Err(anyhow::anyhow!(
                    "the {} did not show its {} open connections within {}",
                    if workers.is_some() {
                        "logs (this machine's, and the workers' as uploaded to the agent)"
                    } else {
                        "probe's log"
                    },
                    attempts.opened,
                    humantime::format_duration(log_wait)
                ))
            } else if workers.is_some() && log.named_by_hub() > 0 {
                // Across machines the receipts are joined as another
                // server's, on the agent's clock; a hub's own broadcasts
                // are joined by their ids, from one machine's view.
                Err(anyhow::anyhow!(
                    "the server is a skewscope agent's hub (it named {} of the connections): sweep it from one machine (without --workers), or audit it across devices with `skewscope audit`; --workers sweeps other servers",
                    log.named_by_hub()
                ))
            } else {
                broadcast(ctx, &mut log, run)
            }
        }
    };
    // Closes seen before the stop are the server's doing.
    let _ = log.catch_up();
    let (dropped, first_drop) = log.closed();
    run.result.compressed = log.compressed();
    run.result.dropped = dropped;
    run.result.first_drop = first_drop.map(str::to_owned);
    probe.stop();
    let closing = workers.map(|w| w.close(stage.connections));
    let stopped = ctx
        .runtime
        .block_on(async { tokio::time::timeout(STOP_WAIT, probe.finish()).await });
    if stopped.is_err() {
        (ctx.say)(&format!(
            "sweep: the connections had not all closed {} after the stage; they were dropped",
            humantime::format_duration(STOP_WAIT)
        ));
    }
    if let (Some(workers), Some(closing)) = (workers, closing) {
        // Their logs are whole on the agent once they say they closed.
        let closed = closing.and_then(|()| workers.wait_done(Instant::now() + STOP_WAIT));
        match closed {
            Ok(states) => {
                for share in &mut run.result.machines {
                    if let Some(state) = states.get(&share.name) {
                        share.state = state.to_string();
                    }
                }
            }
            Err(e) => (ctx.say)(&format!("sweep: {e:#}; its receipts may be missing")),
        }
        log.read_last()?;
    }
    let broadcasts = measured?;
    if !broadcasts.triggers.is_empty() {
        run.result.figures = Some(match (ctx.workers, ctx.tap) {
            (Some(workers), _) => {
                let mut logs = vec![out.to_owned()];
                logs.extend(log.worker_copies());
                let segments = workers.agent_segments()?;
                figures::measure(&logs, &broadcasts.triggers, broadcasts.listening, &segments)?.0
            }
            (None, None) => {
                figures::measure(
                    &[out.to_owned()],
                    &broadcasts.triggers,
                    broadcasts.listening,
                    &[],
                )?
                .0
            }
            (None, Some(tap)) => {
                let tapped = tap.figures(out, &broadcasts.triggers, broadcasts.listening)?;
                if let Some(short) = &tapped.short {
                    (ctx.say)(&format!("sweep: {short}"));
                }
                run.result.tap_short = tapped.short;
                tapped.figures
            }
        });
    }
    if let Some(why) = &run.result.stopped {
        anyhow::bail!("{why}");
    }
    Ok(())
}

/// Warms up, then asks for the stage's broadcasts one at a time.
fn broadcast(
    ctx: &StageContext,
    log: &mut StageLogs,
    run: &mut StageRun,
) -> anyhow::Result<Broadcasts> {
    let options = ctx.options;
    let settle = options.settle();
    let send = |run: &mut StageRun| -> anyhow::Result<()> {
        let answer = ctx.trigger.send()?;
        if run.server_header.is_none() {
            run.server_header = answer.server;
        }
        Ok(())
    };

    // Warm-up: until one broadcast reached every open connection, the
    // server has not taken them all in.
    let mut reached = false;
    while !reached && run.result.warmups < WARMUP_TRIES {
        log.catch_up()?;
        let before = log.receipts();
        send(run).map_err(|e| anyhow::anyhow!("the warm-up's trigger failed: {e}"))?;
        run.result.warmups += 1;
        reached = wait_for(log, settle, |log| log.each_received_since(&before))?;
    }
    if log.total_receipts() == 0 {
        anyhow::bail!(
            "{} warm-up broadcast(s) asked for, and no connection received anything within --settle {} of each: check that the trigger makes this server broadcast to these connections (--protocol, --event, --destination, --topic)",
            run.result.warmups,
            humantime::format_duration(settle)
        );
    }
    let open: Vec<usize> = log.open_connections();
    let counts = log.receipts();
    let most = open.iter().map(|&c| counts[c]).max().unwrap_or(0);
    run.result.never_warmed = open.iter().filter(|&&c| counts[c] == 0).count() as u32;
    run.result.late_to_warm = open.iter().filter(|&&c| counts[c] < most).count() as u32;
    if !reached {
        (ctx.say)(&format!(
            "sweep: after {} warm-up broadcast(s), {} connection(s) had received none; measuring anyway",
            run.result.warmups, run.result.never_warmed
        ));
    }

    let listening = open.len() as u32;
    let meter = options
        .settings
        .server_pid
        .map(CpuMeter::start)
        .transpose()
        .map_err(|e| anyhow::anyhow!("cannot read the server's CPU time: {e}"))?;
    log.catch_up()?;
    let own = ProbeCpuMeter::start(log.total_receipts()).ok();
    let mut triggers = Vec::with_capacity(options.settings.broadcasts as usize);
    let mut incomplete = 0u32;
    for k in 1..=options.settings.broadcasts {
        log.catch_up()?;
        let before = log.receipts();
        // With workers, every receipt is placed on the agent's clock: the
        // trigger's time is read on it too.
        let at = match ctx.workers {
            Some(workers) => workers.agent_now_ns()?,
            None => skewscope_os::clock::now().wall_ns,
        };
        if let Err(e) = send(run) {
            run.result.stopped = Some(format!(
                "the trigger of broadcast {k} of {} failed: {e}",
                options.settings.broadcasts
            ));
            break;
        }
        triggers.push(at);
        if !wait_for(log, settle, |log| log.each_received_since(&before))? {
            incomplete += 1;
        }
        if k < options.settings.broadcasts {
            std::thread::sleep(options.interval());
        }
    }
    if let Some(meter) = meter
        && !triggers.is_empty()
    {
        run.result.server_cpu = meter.finish(triggers.len() as u32).ok();
    }
    if let Some(own) = own {
        log.catch_up()?;
        run.result.probe_cpu = own.finish(log.total_receipts()).ok().flatten();
    }
    if incomplete > 0 {
        (ctx.say)(&format!(
            "sweep: {incomplete} broadcast(s) had not reached every connection after --settle {}: their absent receipts count missing",
            humantime::format_duration(settle)
        ));
    }
    Ok(Broadcasts {
        triggers,
        listening,
    })
}

/// Waits until `done` says so of the log, or `limit` passes: whether it did.
fn wait_for(
    log: &mut StageLogs,
    limit: Duration,
    done: impl Fn(&StageLogs) -> bool,
) -> anyhow::Result<bool> {
    let deadline = Instant::now() + limit;
    loop {
        log.catch_up()?;
        if done(log) {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(POLL);
    }
}

/// The log a stage of `connections` writes in `dir`.
pub fn log_path(dir: &Path, connections: u32) -> PathBuf {
    dir.join(format!("sweep-{connections:06}.sklog"))
}
