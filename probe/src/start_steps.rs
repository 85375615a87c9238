//! The steps a probe run starts in, in the order
//! [`crate::RunningProbe::start`] takes them: room in the log directory, the
//! log and its writer, the run's first records, the uploads, the actor, and
//! the clock's helpers. Each is one thing that can fail with its own error,
//! so a start that fails says which step did.

use skewscope_core::log::{LogKind, LogWriter};
use skewscope_core::record::{ActPlan, LogsPruned, ProbeRecord, ProbeStarted};
use skewscope_core::time_exchange::TimeKey;
use skewscope_os::log_files::FileLogWriter;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::act::{Acting, Actor};
use crate::clock_estimate::ClockEstimate;
use crate::config::ProbeConfig;
use crate::error::ProbeError;
use crate::previous_runs::{self, PreviousRun};
use crate::recorder::{self, Recorder};
use crate::shutdown::{self, Shutdown, StopHandle};
use crate::uploader::{self, UploadState};
use crate::{act_notify, clock_watch, request, retention, time_exchange};

/// What the log directory holds for this run: the earlier runs still to
/// upload, what was pruned to make room, and the size this run's log may
/// reach.
pub(crate) struct LogRoom {
    /// Earlier runs' logs the agent has not acknowledged.
    pub to_upload: Vec<PreviousRun>,
    /// What `--out-dir`'s limits deleted, to be recorded.
    pub pruned: Option<LogsPruned>,
    /// `--max-log-bytes`, or less when `--out-dir`'s budget is smaller.
    pub max_log_bytes: Option<u64>,
}

/// Keeps (with an upload) or lists the earlier runs' logs beside
/// `config.out`, and makes room for this run within `--keep-runs` and
/// `--keep-bytes`, deleting only what the agent has.
pub(crate) async fn make_room(config: &ProbeConfig) -> Result<LogRoom, ProbeError> {
    // With an upload, an earlier run's log is kept, not truncated: what
    // the agent has not acknowledged of it is uploaded too.
    let earlier = match (&config.upload, &config.retention) {
        (Some(_), _) => previous_runs::keep_and_list(&config.out, &config.name),
        (None, Some(_)) => previous_runs::list(&config.out, &config.name),
        (None, None) => Ok(Vec::new()),
    }
    .map_err(|e| {
        ProbeError::Config(format!(
            "cannot keep or list the earlier logs beside {}: {e}",
            config.out.display()
        ))
    })?;
    let Some(limits) = config.retention else {
        return Ok(LogRoom {
            to_upload: earlier,
            pruned: None,
            max_log_bytes: config.max_log_bytes,
        });
    };
    let asks = match &config.upload {
        Some(base) => Some(uploader::upload_to(base, config, 0, false)?),
        None => None,
    };
    let dir = config.out.parent().unwrap_or(std::path::Path::new("."));
    let empty = previous_runs::empty_logs(&config.out, &config.name).unwrap_or_default();
    let room = retention::make_room(limits, dir, earlier, empty, asks.as_ref()).await?;
    let max_log_bytes = match (config.max_log_bytes, room.budget) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(LogRoom {
        to_upload: room.to_upload,
        pruned: Some(room.pruned),
        max_log_bytes,
    })
}

/// The log, its header flushed at once (a probe killed before its first
/// record still leaves a readable, empty log), and the thread that writes
/// it; with the stop signal the run's deadline and signals share.
pub(crate) fn open_log(
    config: &ProbeConfig,
    max_log_bytes: Option<u64>,
) -> Result<(Recorder, recorder::Finished, StopHandle, Shutdown), ProbeError> {
    let log = LogWriter::create(&config.out, LogKind::Probe)
        .and_then(|mut log| log.flush().map(|()| log))
        .map_err(|source| ProbeError::CreateLog {
            path: config.out.clone(),
            source,
        })?;
    let deadline = config.duration.map(|d| Instant::now() + d);
    let (stop, shutdown) = shutdown::channel(deadline);
    let (recorder, finished) =
        recorder::spawn(log, config.out.clone(), max_log_bytes, stop.clone()).map_err(
            |source| ProbeError::WriteLog {
                path: config.out.clone(),
                source,
            },
        )?;
    Ok((recorder, finished, stop, shutdown))
}

/// The run's first records: who started it, its identity, and what was
/// pruned to make room for it. Returns the run's id.
pub(crate) fn record_start(
    recorder: &Recorder,
    config: &ProbeConfig,
    pruned: Option<LogsPruned>,
) -> Result<u128, ProbeError> {
    recorder.record(ProbeRecord::Started(Box::new(ProbeStarted {
        name: config.name.clone(),
        host: skewscope_os::host::host_name(),
        // Never a password in the log.
        url: request::redacted(&config.url),
        connections: config.connections,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        at: skewscope_os::clock::now_raw(),
    })));
    let identity = skewscope_os::host::new_run_identity().map_err(ProbeError::RunId)?;
    let run_id = identity.run_id;
    recorder.record(ProbeRecord::Identity(identity));
    if let Some(pruned) = pruned {
        recorder.record(ProbeRecord::LogsPruned(pruned));
    }
    Ok(run_id)
}

/// The uploads of a run: this run's log and each earlier one's, and the
/// signal that this log is complete.
pub(crate) struct Uploads {
    /// Turns true once the log is complete and synced: the uploaders' cue
    /// to send the rest and stop.
    pub log_ended: watch::Sender<bool>,
    /// This run's upload, if any.
    pub task: Option<JoinHandle<()>>,
    /// How it goes.
    pub state: watch::Receiver<UploadState>,
    /// Each earlier run's upload, and how it goes.
    pub previous: Vec<(JoinHandle<()>, watch::Receiver<UploadState>)>,
}

/// Starts `--upload` for this run and the earlier runs' logs; a refused
/// token stops the run at once (asking again cannot make it better, and
/// measuring on what nobody will receive helps no one).
pub(crate) fn start_uploads(
    config: &ProbeConfig,
    run_id: u128,
    earlier: Vec<PreviousRun>,
    stop: &StopHandle,
) -> Result<Uploads, ProbeError> {
    let (log_ended, ended) = watch::channel(false);
    let (state_tx, state) = watch::channel(UploadState::default());
    let Some(base) = &config.upload else {
        return Ok(Uploads {
            log_ended,
            task: None,
            state,
            previous: Vec::new(),
        });
    };
    let upload = uploader::upload_to(base, config, run_id, true)?;
    let mut previous = Vec::new();
    for run in earlier {
        let earlier = uploader::Upload {
            log: run.path,
            run_id: run.run_id,
            follow: false,
            ..upload.clone()
        };
        let (tx, rx) = watch::channel(UploadState::default());
        previous.push((tokio::spawn(uploader::run(earlier, ended.clone(), tx)), rx));
    }
    let task = tokio::spawn(uploader::run(upload, ended, state_tx));
    for mut watched in std::iter::once(state.clone()).chain(previous.iter().map(|(_, s)| s.clone()))
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            if watched.wait_for(|s| s.token_refused).await.is_ok() {
                stop.stop();
            }
        });
    }
    Ok(Uploads {
        log_ended,
        task: Some(task),
        state,
        previous,
    })
}

/// With `--act-at`: records the plan, opens `--act-notify`'s socket and
/// starts the actor thread; the connections hand it what they read.
pub(crate) fn start_actor(
    config: &ProbeConfig,
    recorder: &Recorder,
    clock: &ClockEstimate,
) -> Result<(Option<Actor>, Option<Acting>), ProbeError> {
    let Some(act_at) = &config.act_at else {
        return Ok((None, None));
    };
    recorder.record(ProbeRecord::ActPlan(ActPlan {
        pointer: act_at.pointer().to_owned(),
        unit: act_at.unit().as_str().to_owned(),
        at: skewscope_os::clock::now_raw(),
    }));
    let notifier = match &config.act_notify {
        Some(target) => Some(
            act_notify::Notifier::open(target.clone(), &config.act_notify_name, recorder.clone())
                .map_err(|e| ProbeError::Config(format!("--act-notify {target}: {e}")))?,
        ),
        None => None,
    };
    let (actor, acting) = Actor::start(
        act_at.clone(),
        clock.clone(),
        recorder.clone(),
        config.act_realtime,
        notifier,
    )
    .map_err(ProbeError::Threads)?;
    Ok((Some(actor), Some(acting)))
}

/// The clock's helpers, which end when the connections do: what the
/// device's clock claims (once now, then as it changes) and the time
/// exchange with the agent, keyed with the upload's token (the agent's
/// replies must carry that token's tag).
pub(crate) async fn start_clock_helpers(
    config: &ProbeConfig,
    recorder: &Recorder,
    clock: &ClockEstimate,
    shutdown: &Shutdown,
) -> Result<JoinSet<()>, ProbeError> {
    let mut helpers = JoinSet::new();
    clock_watch::record_once(recorder).await;
    helpers.spawn(clock_watch::run(recorder.clone(), shutdown.clone()));
    if let Some(target) = time_target(config).await? {
        let key = config.upload_token.as_deref().map(TimeKey::from_token);
        helpers.spawn(time_exchange::run(
            target,
            config.time_interval,
            key,
            recorder.clone(),
            clock.clone(),
            shutdown.clone(),
        ));
    }
    Ok(helpers)
}

/// Where to run the time exchange: `--time-server`, else the URL's host and
/// port (a skewscope agent answers on the same port number); `None` when off.
async fn time_target(config: &ProbeConfig) -> Result<Option<std::net::SocketAddr>, ProbeError> {
    if !config.time_exchange {
        return Ok(None);
    }
    let (host, port) = match &config.time_server {
        Some(server) => {
            let (host, port) = server
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h.to_owned(), p.parse::<u16>().ok()?)))
                .ok_or_else(|| {
                    ProbeError::Config(format!("--time-server {server}: give HOST:PORT"))
                })?;
            (
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
                port,
            )
        }
        None => request::host_port(&config.url)?,
    };
    let found = tokio::net::lookup_host((host.as_str(), port)).await;
    match found.ok().and_then(|mut addrs| addrs.next()) {
        Some(addr) => Ok(Some(addr)),
        None => {
            tracing::warn!(
                target: "probe::time",
                "cannot resolve the time server {host}:{port}; no offset estimate"
            );
            Ok(None)
        }
    }
}
