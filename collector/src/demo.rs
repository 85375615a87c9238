//! `skewscope demo`: the embedded default. A real agent and real probe
//! connections on loopback, real broadcasts through `/start_test`, and the
//! report of what they measured.
//!
//! By default the broadcasts carry a time to act (`/start_test?lead=`) and
//! the probe acts on it (`--act-at /at_ns`), measuring its offset to the
//! agent's clock over the UDP time exchange first: the report then puts the
//! spread of the actions beside the spread of the receipts, the product's
//! answer beside its question.

use std::path::PathBuf;
use std::time::Duration;

use agent::{AgentConfig, RunningAgent};
use anyhow::{Context, ensure};
use probe::{ProbeConfig, RunningProbe};

/// What the demo runs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Probe connections.
    pub clients: u32,
    /// Test broadcasts.
    pub broadcasts: u32,
    /// Pause between broadcasts.
    pub interval: Duration,
    /// Where to keep the logs; a temporary directory (removed) when `None`.
    pub keep: Option<PathBuf>,
    /// The time to act, this long after each broadcast's start, or what
    /// the agent's `lead=auto` picks; `None`: receive only (`--no-act`).
    pub lead: Option<skewscope_core::lead::LeadChoice>,
}

/// Longest wait for every probe connection to be served by the agent.
const CONNECT_WAIT: Duration = Duration::from_secs(30);
/// Longest wait, after the last broadcast, for the probes to receive it.
const DRAIN_WAIT: Duration = Duration::from_secs(10);
/// Longest wait for stopped probe connections to write their last records.
const STOP_WAIT: Duration = Duration::from_secs(10);
/// Longest wait for the probe's first answered time exchange (it comes in
/// milliseconds on loopback): past it the demo acts anyway, and the report
/// counts actions taken before any exchange.
const CLOCK_WAIT: Duration = Duration::from_secs(10);

/// The demo's devices: two probes sharing the connections (one when there
/// is a single connection), so that acting together is between devices,
/// each with its own clock model and timer.
const DEVICES: [&str; 2] = ["demo-a", "demo-b"];

/// Runs the demo and returns the paths of the logs it wrote: the agent's
/// and each probe's. The agent is shut down (its log flushed and synced)
/// whatever happened. What it is doing goes to `say`, a line at a time (the
/// binary writes them to stderr; the report is the output).
pub async fn run(
    options: &DemoOptions,
    say: &dyn Fn(&str),
) -> anyhow::Result<(PathBuf, Vec<PathBuf>, Option<tempfile::TempDir>)> {
    let (dir, temp) = crate::work_dir::kept_or_temporary(options.keep.as_deref())?;
    // The agent and the probes log what goes wrong; the report is the output.
    let _ = skewscope_os::logging::init(None, "warn");
    // A token, as a site should have: the probes' clocks are then
    // authenticated (the agent tags its time replies; they check the tags).
    // Random per run, on loopback only; the run id's source is good enough.
    let token = format!(
        "{:032x}",
        skewscope_os::host::new_run_identity()
            .context("cannot draw a token")?
            .run_id
    );
    let token_file = dir.join("demo.token");
    std::fs::write(&token_file, &token)
        .with_context(|| format!("cannot write {}", token_file.display()))?;
    let mut config = AgentConfig::local(dir.clone());
    config.token_file = Some(token_file);
    let agent = RunningAgent::start(config).await?;
    let devices = if options.clients >= 2 { 2 } else { 1 };
    let acting = match options.lead {
        Some(skewscope_core::lead::LeadChoice::Auto) => {
            ", each to be acted on after the lead the agent picks (lead=auto)".to_owned()
        }
        Some(lead) => format!(", each to be acted on {lead} after its start"),
        None => String::new(),
    };
    say(&format!(
        "demo: agent on {}, {} probe connections on {devices} device(s), {} broadcasts every {:?}{acting}",
        agent.addr, options.clients, options.broadcasts, options.interval
    ));
    let probes: Vec<(&str, u32, PathBuf)> = DEVICES[..devices]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            // The first device takes the odd connection out.
            let share = options.clients / devices as u32
                + u32::from(i == 0) * (options.clients % devices as u32);
            (*name, share, dir.join(format!("probe-{name}.sklog")))
        })
        .collect();
    let measured = measure(&agent, &token, options, &probes, say).await;
    let agent_log = agent.log_path.clone();
    let stopped = agent.shutdown().await;
    measured?;
    stopped?;
    Ok((agent_log, probes.into_iter().map(|p| p.2).collect(), temp))
}

/// Connects the probes, broadcasts, and waits for the probes to finish.
async fn measure(
    agent: &RunningAgent,
    token: &str,
    options: &DemoOptions,
    devices: &[(&str, u32, PathBuf)],
    say: &dyn Fn(&str),
) -> anyhow::Result<()> {
    let mut probes = Vec::new();
    for (name, connections, log) in devices {
        let mut config = ProbeConfig::new(format!("ws://{}/ws", agent.addr), log);
        config.connections = *connections;
        config.name = (*name).into();
        config.count = Some(options.broadcasts as u64);
        config.upload_token = Some(token.to_owned());
        // lead=auto takes the lead from what the probes' uploads measure.
        if options.lead == Some(skewscope_core::lead::LeadChoice::Auto) {
            config.upload = Some(format!("http://{}", agent.addr));
        }
        if options.lead.is_some() {
            config.act_at = Some(
                skewscope_core::act_at::ActAt::new("/at_ns", skewscope_core::act_at::ActUnit::Ns)
                    .map_err(anyhow::Error::msg)?,
            );
        }
        probes.push(RunningProbe::start(config).await?);
    }
    let mut opened = 0;
    for probe in &probes {
        opened += probe.connected().await.opened;
    }
    ensure!(
        opened == options.clients,
        "only {opened} of {} demo connections opened",
        options.clients
    );
    // The probe sees its upgrade a moment before the agent's shard takes it.
    let deadline = tokio::time::Instant::now() + CONNECT_WAIT;
    while agent.clients() < options.clients as usize {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the agent serves {} of {} connections after {CONNECT_WAIT:?}",
            agent.clients(),
            options.clients
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if options.lead.is_some() {
        let deadline = tokio::time::Instant::now() + CLOCK_WAIT;
        while probes.iter().any(|p| p.clock_bound_now().is_none())
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    let trigger = match options.lead {
        Some(lead) => format!("/start_test?lead={}", lead.query_value()),
        None => "/start_test".to_owned(),
    };
    for _ in 0..options.broadcasts {
        let response =
            agent::http_client::request(agent.addr, "GET", &trigger, b"", Some(token)).await?;
        ensure!(
            response.status == 200,
            "/start_test answered {}: {}",
            response.status,
            response.body
        );
        tokio::time::sleep(options.interval).await;
    }

    // Every connection stops by itself after the last broadcast; a stuck one
    // is stopped, so the report still shows what arrived (and what did not).
    for probe in probes {
        let stop = probe.stop_handle();
        let finish = probe.finish();
        tokio::pin!(finish);
        let summary = match tokio::time::timeout(DRAIN_WAIT, &mut finish).await {
            Ok(summary) => summary?,
            Err(_) => {
                say(&format!(
                    "demo: not every connection received every broadcast within {DRAIN_WAIT:?}; \
                     stopping them: the report counts what is missing"
                ));
                stop.stop();
                tokio::time::timeout(STOP_WAIT, finish)
                    .await
                    .with_context(|| format!("the probe did not stop within {STOP_WAIT:?}"))??
            }
        };
        say(&format!("demo: probe {summary}"));
    }
    Ok(())
}
