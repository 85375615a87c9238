//! `skewscope sweep-worker`: one more machine's connections for a sweep.
//! A single machine holds as many connections as its open-file limit and
//! its two cores allow; a sweep to tens of thousands of clients, or one
//! whose clients must come from where the real ones are, needs several.
//!
//! The worker asks the agent's board what to do (every [`POLL`]), and does
//! it with a probe of its own, in this process: opens its share of the
//! stage's connections exactly as `skewscope sweep` would (the sweep's
//! connection flags travel in the plan), exchanges time with the agent so
//! its receipts are placed on the agent's clock, uploads every record to
//! it, and closes when told. The sweep reads the records from the agent;
//! nothing flows between the machines directly.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use probe::{MAX_HANDSHAKES_IN_FLIGHT, RunningProbe};

use super::board::{self, MAX_WORKER_NAME, Plan, Step, WorkerState, WorkerStatus};
use crate::audit::agent_api::{AgentApi, ApiError};

/// Pause between two looks at the board.
pub const POLL: Duration = Duration::from_millis(200);

/// The flags of `skewscope sweep-worker`.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// The agent the sweep runs through, http://HOST:PORT (https:// with
    /// its --tls-cert): the sweep's --agent.
    #[arg(long, value_name = "URL")]
    pub agent: String,

    /// File holding the agent's bearer token (the file it was given with
    /// its --token-file).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// This worker's name on the board and in the results (its host name
    /// by default): at most 32 printable characters, unique among the
    /// sweep's workers.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// Trust only the CA certificates in this PEM file, for an https://
    /// agent and a wss:// server.
    #[arg(long, value_name = "PEM")]
    pub ca_file: Option<PathBuf>,

    /// Keep each stage's probe log in this directory (they are uploaded
    /// to the agent either way); a temporary directory otherwise.
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,

    /// Exit once a sweep it took part in is over, instead of waiting for
    /// the next.
    #[arg(long)]
    pub once: bool,
}

/// The worker's share of one stage, open.
struct OpenShare {
    sweep: String,
    stage: u32,
    probe: RunningProbe,
}

/// Runs the worker until it is stopped (`stop` turns true: SIGINT or
/// SIGTERM) or, with `--once`, until the sweep it took part in is over.
/// What it does goes to `say`, a line at a time.
pub fn run(args: &WorkerArgs, stop: &AtomicBool, say: &dyn Fn(&str)) -> anyhow::Result<()> {
    let url = crate::audit::options::agent_url(&args.agent).map_err(anyhow::Error::msg)?;
    let token = args
        .token_file
        .as_deref()
        .map(crate::audit::options::read_token_file)
        .transpose()?;
    let name = args
        .name
        .clone()
        .unwrap_or_else(skewscope_os::host::host_name);
    if name.is_empty()
        || name.len() > MAX_WORKER_NAME
        || !name.bytes().all(|b| b.is_ascii_graphic())
    {
        bail!("--name {name:?}: give 1 to {MAX_WORKER_NAME} printable characters without spaces");
    }
    let http = crate::audit::agent_api::http_client(args.ca_file.as_deref())?;
    let api = AgentApi::new(&url, token, http).token_from(args.token_file.clone());
    refuse_a_namesake(&api, &name)?;
    let (dir, _temp) = crate::work_dir::kept_or_temporary(args.keep.as_deref())?;
    let room = skewscope_os::files::socket_room().context("cannot read the open-file limit")?;
    let runtime = super::probe_runtime()?;
    let mut status = WorkerStatus {
        name: name.clone(),
        host: skewscope_os::host::host_name(),
        room: u32::try_from(room.sockets().saturating_sub(super::plan::STAGE_OVERHEAD))
            .unwrap_or(u32::MAX),
        acted_on: None,
        state: WorkerState::Idle,
    };
    let mut open: Option<OpenShare> = None;
    let mut took_part = false;
    let mut said_waiting = false;
    let mut last_unreachable: Option<String> = None;
    while !stop.load(Ordering::Relaxed) {
        let plan = match report(&api, &status) {
            Ok(plan) => {
                last_unreachable = None;
                plan
            }
            Err(e @ ApiError::Unauthorized { .. }) => return Err(e.into()),
            Err(e) => {
                // The agent restarting, or a moment of the network: keep
                // trying, say it once.
                let text = e.to_string();
                if last_unreachable.as_ref() != Some(&text) {
                    say(&format!("sweep-worker: {text}; trying again"));
                    last_unreachable = Some(text);
                }
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        if !said_waiting {
            say(&format!(
                "sweep-worker {name}: on the board of {url}, room for {} connections; waiting for a sweep",
                status.room
            ));
            said_waiting = true;
        }
        let Some(plan) = plan else {
            // The sweep is over (or never began): nothing stays open.
            if let Some(share) = open.take() {
                status.state = close(&runtime, &api, &status, share, say);
            }
            if took_part && args.once {
                break;
            }
            status.state = WorkerState::Idle;
            std::thread::sleep(POLL);
            continue;
        };
        let this = (plan.sweep.clone(), plan.seq);
        if status.acted_on.as_ref() == Some(&this) {
            std::thread::sleep(POLL);
            continue;
        }
        took_part = true;
        match plan.step {
            Step::Open => {
                if let Some(share) = open.take() {
                    status.state = close(&runtime, &api, &status, share, say);
                }
                let wanted = plan.shares.get(&name).copied().unwrap_or(0);
                status.state = if wanted == 0 {
                    WorkerState::Idle
                } else if wanted > status.room {
                    // A plan is the sweep's to make, but not past what
                    // this machine can hold.
                    WorkerState::Failed {
                        why: format!(
                            "asked for {wanted} connections; this machine has room for {}",
                            status.room
                        ),
                    }
                } else {
                    status.state = WorkerState::Opening;
                    let _ = report(&api, &status);
                    match open_share(
                        &runtime, &api, &url, args, &plan, &status, wanted, &dir, say,
                    ) {
                        Ok((share, state)) => {
                            open = Some(share);
                            state
                        }
                        Err(e) => WorkerState::Failed {
                            why: format!("{e:#}"),
                        },
                    }
                };
            }
            Step::Close => {
                status.state = match open.take() {
                    Some(share) => close(&runtime, &api, &status, share, say),
                    None => WorkerState::Closed {
                        receipts: 0,
                        uploaded: true,
                    },
                };
            }
        }
        status.acted_on = Some(this);
    }
    if let Some(share) = open.take() {
        close(&runtime, &api, &status, share, say);
    }
    status.state = WorkerState::Idle;
    let _ = report(&api, &status);
    Ok(())
}

/// Errors when another worker of this name is on the board and alive: two
/// workers under one name would overwrite each other's status and share
/// one run name. A status this name left behind (a worker restarted) ages
/// between two looks a second apart; a live namesake's does not.
fn refuse_a_namesake(api: &AgentApi, name: &str) -> anyhow::Result<()> {
    let heard = |api: &AgentApi| -> anyhow::Result<Option<Duration>> {
        Ok(super::workers::present(api)?
            .into_iter()
            .find(|(s, _)| s.name == name)
            .map(|(_, ago)| ago))
    };
    // A board that cannot be read now is the main loop's to wait for (and
    // a refused token its to say).
    if heard(api).map_or(true, |h| h.is_none_or(|ago| ago > Duration::from_secs(5))) {
        return Ok(());
    }
    std::thread::sleep(Duration::from_secs(1));
    match heard(api).unwrap_or(None) {
        Some(ago) if ago < Duration::from_secs(1) => bail!(
            "--name {name}: another worker of that name is on the agent's board and alive; give each worker its own --name"
        ),
        _ => Ok(()),
    }
}

/// Posts the status; the plan pinned, if any.
fn report(api: &AgentApi, status: &WorkerStatus) -> Result<Option<Plan>, ApiError> {
    api.call_json("POST", "/sweep/worker", Some(status))
}

/// Opens `wanted` connections for the plan's stage and waits until every
/// attempt is done, telling the board it is still opening meanwhile.
#[allow(clippy::too_many_arguments)]
fn open_share(
    runtime: &tokio::runtime::Runtime,
    api: &AgentApi,
    agent_url: &str,
    args: &WorkerArgs,
    plan: &Plan,
    opening: &WorkerStatus,
    wanted: u32,
    dir: &std::path::Path,
    say: &dyn Fn(&str),
) -> anyhow::Result<(OpenShare, WorkerState)> {
    let connect = &plan.connect;
    let run = board::run_name(&plan.sweep, plan.stage, &opening.name);
    let timeout = Duration::from_millis(connect.connect_timeout_ms);
    let mut config = probe::cli::Args {
        url: Some(connect.url.clone()),
        name: Some(run.clone()),
        out: Some(dir.join(format!("{run}.sklog"))),
        header: connect.headers.clone(),
        subprotocol: connect.subprotocols.clone(),
        no_deflate: !connect.deflate,
        ca_file: args.ca_file.clone(),
        insecure: connect.insecure,
        connect_timeout: timeout,
        time_server: Some(super::tap::TapAgent::time_server(agent_url)),
        upload: Some(agent_url.to_owned()),
        token_file: args.token_file.clone(),
        protocol: connect.protocol.clone(),
        ..probe::cli::Args::default()
    }
    .into_config()
    .context("the sweep's connection settings")?;
    config.connections = wanted;
    say(&format!(
        "sweep-worker: stage of {} connection(s): opening {wanted} to {}",
        plan.stage, connect.url
    ));
    let probe = runtime.block_on(RunningProbe::start(config))?;
    let rounds = wanted as usize / MAX_HANDSHAKES_IN_FLIGHT + 1;
    let bound = timeout * u32::try_from(rounds).unwrap_or(u32::MAX) + super::stage::CONNECT_SLACK;
    let connected = beating(
        runtime,
        api,
        opening,
        probe.connected(),
        Instant::now() + bound,
    );
    let share = OpenShare {
        sweep: plan.sweep.clone(),
        stage: plan.stage,
        probe,
    };
    let Some(attempts) = connected else {
        let state = WorkerState::Failed {
            why: format!(
                "the connections were still being opened after {}",
                humantime::format_duration(bound)
            ),
        };
        return Ok((share, state));
    };
    say(&format!(
        "sweep-worker: {} of {wanted} open{}",
        attempts.opened,
        match attempts.failed {
            0 => String::new(),
            n => format!(", {n} failed"),
        }
    ));
    Ok((
        share,
        WorkerState::Open {
            opened: attempts.opened,
            failed: attempts.failed,
        },
    ))
}

/// Longest a share's closing and upload may take: the probe's own limit
/// on an upload that no longer advances is within it.
const CLOSE_WAIT: Duration = Duration::from_secs(300);

/// Closes a share and waits for its log to be synced and uploaded,
/// telling the board it is closing meanwhile.
fn close(
    runtime: &tokio::runtime::Runtime,
    api: &AgentApi,
    status: &WorkerStatus,
    share: OpenShare,
    say: &dyn Fn(&str),
) -> WorkerState {
    share.probe.stop();
    let closing = WorkerStatus {
        state: WorkerState::Closing,
        ..status.clone()
    };
    let finished = beating(
        runtime,
        api,
        &closing,
        share.probe.finish(),
        Instant::now() + CLOSE_WAIT,
    );
    match finished {
        None => WorkerState::Failed {
            why: format!(
                "the stage's connections had not closed and uploaded after {}",
                humantime::format_duration(CLOSE_WAIT)
            ),
        },
        Some(Err(e)) => WorkerState::Failed {
            why: format!("the stage's connections ended badly: {e}"),
        },
        Some(Ok(summary)) => {
            let uploaded = !summary.upload_incomplete();
            say(&format!(
                "sweep-worker: sweep {} stage {} closed: {summary}",
                share.sweep, share.stage
            ));
            WorkerState::Closed {
                receipts: summary.receipts,
                uploaded,
            }
        }
    }
}

/// Runs `work` to its end or until `deadline` (`None` then), posting
/// `status` to the board every [`POLL`] meanwhile, so the sweep sees the
/// worker alive through a long open or close.
fn beating<F: std::future::Future>(
    runtime: &tokio::runtime::Runtime,
    api: &AgentApi,
    status: &WorkerStatus,
    work: F,
    deadline: Instant,
) -> Option<F::Output> {
    runtime.block_on(async {
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                done = &mut work => return Some(done),
                () = tokio::time::sleep(POLL) => {}
            }
            if Instant::now() >= deadline {
                return None;
            }
            let (api, status) = (api.clone(), status.clone());
            let _ = tokio::task::spawn_blocking(move || report(&api, &status)).await;
        }
    })
}

/// Turns `stop` true on SIGINT or SIGTERM (a service being stopped),
/// from a thread of its own; the worker then closes what it has open.
pub fn stop_on_signals(stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            runtime.block_on(async {
                use tokio::signal::unix::{SignalKind, signal};
                let (Ok(mut term), Ok(mut int)) = (
                    signal(SignalKind::terminate()),
                    signal(SignalKind::interrupt()),
                ) else {
                    return;
                };
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                stop.store(true, Ordering::Relaxed);
            });
        })?;
    Ok(())
}
