//! `skewscope sweep`: the load test a real-time service gets before it
//! ships, answering its own question: up to how many clients do they still
//! receive each broadcast together? Against any server (a URL, the
//! probe's `--protocol` and its flags, and a trigger URL that makes it
//! broadcast once), stages of connections from this machine, at each
//! stage K broadcasts: receive skew, latency from the trigger, missing
//! receipts, connections refused or dropped, the server's CPU, and the
//! knee against a threshold.
//!
//! The steps, in order: [`plan`] the stages within this process's file
//! limit, then for each [`stage`] (its connections a probe in this
//! process, its log followed by [`follow`], its broadcasts asked for by
//! [`trigger`], its figures by the report's engine in [`figures`], the
//! server's CPU by [`server_cpu`], its own by [`probe_cpu`], the server's
//! fan-out span by the agent that taps it, [`tap`]), then the [`knee`].
//! With `--workers`, other machines running `skewscope sweep-worker`
//! ([`worker`]) open part of each stage: the sweep meets them on the
//! agent's board ([`board`], [`workers`]) and reads every machine's log
//! as one ([`stage_logs`]). [`options`] and
//! [`args`] say what was asked, [`environment`] where it ran, [`result`]
//! is the JSON's shape; [`text`], [`html`] and [`compare`] show it.

pub mod args;
pub mod board;
pub mod compare;
pub mod environment;
pub mod figures;
pub mod follow;
pub mod html;
pub mod knee;
pub mod options;
pub mod plan;
pub mod probe_cpu;
pub mod result;
pub mod server_cpu;
pub mod stage;
pub mod stage_logs;
pub mod tap;
pub mod text;
pub mod trigger;
pub mod worker;
pub mod workers;

use std::time::Instant;

use anyhow::Context;

use knee::KneePoint;
use options::SweepOptions;
use plan::thousands;
use result::{NotRun, SweepResult};
use stage::StageContext;
use trigger::Trigger;

/// Runs the sweep; what it is doing goes to `say`, a line at a time.
/// A stage that fails ends the sweep there (larger ones would fail too),
/// and the result says where and why; only what stops it from starting is
/// an error.
pub fn run(options: &SweepOptions, say: &dyn Fn(&str)) -> anyhow::Result<SweepResult> {
    let begun = Instant::now();
    let settings = &options.settings;
    if let Some(pid) = settings.server_pid
        && !skewscope_os::process::exists(pid)
    {
        anyhow::bail!(
            "--server-pid {pid}: no such process on this host (its CPU is read from /proc/{pid}/task); give the server's pid, or leave the flag out"
        );
    }
    let room = skewscope_os::files::socket_room().context("cannot read the open-file limit")?;
    let http = crate::audit::agent_api::http_client(options.ca_file.as_deref())?;
    let trigger = Trigger::new(options.trigger.clone(), http.clone());
    let (dir, _temp) = crate::work_dir::kept_or_temporary(options.keep.as_deref())?;
    let tap = options
        .agent
        .as_ref()
        .map(|a| {
            tap::TapAgent::connect(
                &a.url,
                a.token.clone(),
                a.token_file.clone(),
                http.clone(),
                &dir,
            )
        })
        .transpose()?;
    let workers = match (&options.workers, &options.agent) {
        (None, _) => None,
        (Some(w), Some(agent)) => {
            let api = crate::audit::agent_api::AgentApi::new(
                &agent.url,
                agent.token.clone(),
                http.clone(),
            )
            .token_from(agent.token_file.clone());
            Some(workers::Workers::gather(
                api,
                &dir,
                w.count,
                w.wait,
                w.connect.clone(),
                say,
            )?)
        }
        (Some(_), None) => {
            anyhow::bail!("--workers needs --agent: the workers meet the sweep on its board")
        }
    };
    let local_room = room.sockets().saturating_sub(plan::STAGE_OVERHEAD);
    let others: u64 = workers
        .as_ref()
        .map_or(0, |w| w.rooms().iter().map(|&r| u64::from(r)).sum());
    let (mut planned, skipped) = plan::plan(&settings.stages, room.sockets() + others, room.limit);
    if let Some(w) = &workers {
        // The room is every machine's: say so where a stage is cut.
        for stage in planned.iter_mut().filter(|s| s.cut.is_some()) {
            stage.cut = Some(format!(
                "cut to {} connections: this machine and its {} worker(s) hold that many together (each its open-file limit; raise it with ulimit -Hn, or LimitNOFILE= in a unit)",
                thousands(u64::from(stage.connections)),
                w.names().len()
            ));
        }
    }
    let runtime = probe_runtime()?;
    let mut environment =
        environment::gather(room.limit, settings.server_pid, options.command.clone());
    let mut not_run: Vec<NotRun> = skipped
        .into_iter()
        .map(|s| NotRun {
            asked: s.asked,
            why: s.why,
        })
        .collect();
    let ctx = StageContext {
        options,
        trigger: &trigger,
        runtime: &runtime,
        dir: &dir,
        say,
        tap: tap.as_ref(),
        workers: workers.as_ref(),
        local_room: u32::try_from(local_room).unwrap_or(u32::MAX),
    };
    let mut stages = Vec::new();
    for (i, stage) in planned.iter().enumerate() {
        say(&format!(
            "sweep: stage {} of {}: {} connections{}",
            i + 1,
            planned.len(),
            thousands(u64::from(stage.connections)),
            stage
                .cut
                .as_deref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default()
        ));
        let run = stage::run(&ctx, stage);
        if environment.server_header.is_none() {
            environment.server_header = run.server_header.clone();
        }
        say(&format!("sweep: {}", stage_line(&run.result)));
        stages.push(run.result);
        if run.fatal.is_some() {
            let at = thousands(u64::from(stage.connections));
            not_run.extend(planned[i + 1..].iter().map(|later| NotRun {
                asked: later.asked,
                why: format!("the sweep stopped at {at} connections, whose line says why"),
            }));
            break;
        }
    }
    not_run.sort_by_key(|n| n.asked);
    let points: Vec<KneePoint> = stages
        .iter()
        .map(|s| KneePoint {
            clients: s.opened,
            skew_p99_ns: s.skew_p99_ns(),
            unmeasured: s.stopped.clone(),
        })
        .collect();
    let knee = knee::find(&points, settings.max_skew_p99_ns);
    Ok(SweepResult {
        kind: "skewscope sweep".to_owned(),
        format: result::FORMAT,
        settings: settings.clone(),
        environment,
        stages,
        not_run,
        knee,
        took_ms: begun.elapsed().as_millis() as u64,
    })
}

/// The runtime a sweep's (or a worker's) probes run on: the connections
/// run on the probe's own threads, this runtime only its helpers and the
/// waits. The probe's warnings go to stderr; the result is the output.
pub(crate) fn probe_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    let _ = skewscope_os::logging::init(None, "warn");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the runtime")
}

/// A stage's outcome in one progress line.
fn stage_line(stage: &result::StageResult) -> String {
    let at = thousands(u64::from(stage.connections));
    match (&stage.figures, &stage.stopped) {
        (Some(f), stopped) => format!(
            "{at}: skew p99 {}, latency from trigger p99 {}, {} of {} receipts, {} missing{}",
            f.skew_ns.map_or("–".to_owned(), |s| knee::short_duration(
                s.p99.max(0) as u64
            )),
            f.latency_from_trigger_ns
                .map_or("–".to_owned(), |s| knee::short_duration(
                    s.p99.max(0) as u64
                )),
            thousands(f.receipts),
            thousands(f.expected),
            thousands(f.missing),
            stopped
                .as_deref()
                .map(|w| format!("; stopped: {w}"))
                .unwrap_or_default()
        ),
        (None, Some(why)) => format!("{at}: not measured: {why}"),
        (None, None) => format!("{at}: not measured"),
    }
}
