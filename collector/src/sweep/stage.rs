//! One stage of a sweep, in order: open its connections (a probe in this
//! process), warm up until a broadcast reaches every one of them, ask for
//! the broadcasts one at a time (each waited for until every open
//! connection has it, or `--settle` passes), close them, and measure the
//! log. Every wait is on what the log says, bounded in time.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use probe::{MAX_HANDSHAKES_IN_FLIGHT, RunningProbe};

use super::figures;
use super::follow::{Compressed, StageLog};
use super::options::{SweepOptions, WARMUP_TRIES};
use super::plan::{PlannedStage, thousands};
use super::probe_cpu::ProbeCpuMeter;
use super::result::StageResult;
use super::server_cpu::CpuMeter;
use super::tap::TapAgent;
use super::trigger::Trigger;

/// How often the log is looked at while waiting on it (the probe hands
/// its records to the file at least every 100 ms).
const POLL: Duration = Duration::from_millis(10);
/// Longest wait for the connections to close once the stage is done.
const STOP_WAIT: Duration = Duration::from_secs(60);
/// Longest wait for the probe's log to show what the probe said (it
/// writes at least every 100 ms).
const LOG_WAIT: Duration = Duration::from_secs(10);
/// Added to the connect bound: the last handshakes' own time.
const CONNECT_SLACK: Duration = Duration::from_secs(30);

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
    let mut config = ctx.options.probe.clone();
    config.connections = stage.connections;
    config.out = out.to_owned();
    config.name = format!("sweep-{}", stage.connections);
    let begun = Instant::now();
    let probe = ctx.runtime.block_on(RunningProbe::start(config))?;
    let mut log = StageLog::open(out, stage.connections)?;
    // Every attempt ends, opened or failed, within its connect timeout
    // once through the handshake gate.
    let rounds = u32::try_from(stage.connections as usize / MAX_HANDSHAKES_IN_FLIGHT + 1)
        .unwrap_or(u32::MAX);
    let bound = ctx.options.probe.connect_timeout * rounds + CONNECT_SLACK;
    let attempts = ctx
        .runtime
        .block_on(async { tokio::time::timeout(bound, probe.connected()).await });
    run.result.connect_ms = begun.elapsed().as_millis() as u64;
    log.catch_up()?;
    if let Ok(attempts) = &attempts {
        // The probe writes its records at least every 100 ms: wait for the
        // failures to be there, so the first refusal's reason is said.
        wait_for(&mut log, LOG_WAIT, |log| log.failed().0 >= attempts.failed)?;
    }
    let (refused, first_refusal) = log.failed();
    run.result.refused = refused;
    run.result.first_refusal = first_refusal.map(str::to_owned);
    let measured = match attempts {
        Err(_) => Err(anyhow::anyhow!(
            "the connections were still being opened after {}",
            humantime::format_duration(Duration::from_secs(bound.as_secs()))
        )),
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
            } else if !wait_for(&mut log, LOG_WAIT, |log| log.opened() >= attempts.opened)? {
                Err(anyhow::anyhow!(
                    "the probe's log did not show its {} open connections within {}",
                    attempts.opened,
                    humantime::format_duration(LOG_WAIT)
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
    let stopped = ctx
        .runtime
        .block_on(async { tokio::time::timeout(STOP_WAIT, probe.finish()).await });
    if stopped.is_err() {
        (ctx.say)(&format!(
            "sweep: the connections had not all closed {} after the stage; they were dropped",
            humantime::format_duration(STOP_WAIT)
        ));
    }
    let broadcasts = measured?;
    if !broadcasts.triggers.is_empty() {
        run.result.figures = Some(match ctx.tap {
            None => figures::measure(out, &broadcasts.triggers, broadcasts.listening, &[])?.0,
            Some(tap) => {
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
    log: &mut StageLog,
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
        let before = log.receipts().to_vec();
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
    let open: Vec<usize> = log.open_connections().collect();
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
        let before = log.receipts().to_vec();
        let at = skewscope_os::clock::now().wall_ns;
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
    log: &mut StageLog,
    limit: Duration,
    done: impl Fn(&StageLog) -> bool,
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
