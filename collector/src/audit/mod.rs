//! `skewscope audit`: a post-deployment sync audit in one command. It checks
//! the agent answers and enough probes upload to it, triggers K broadcasts
//! (the agent's `/start_test`, or a foreign server's trigger URL with the
//! agent as clock reference and collector), waits until every connection
//! has reported each broadcast or `--settle` passes, and judges the report
//! against the thresholds.
//!
//! [`agent_api`] is the HTTP side, [`mirror`] the local copy of the agent's
//! logs, [`progress`] what stderr shows; the report and the verdict are the
//! same engine as `skewscope report`.

pub mod agent_api;
pub mod mirror;
pub mod progress;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use skewscope_core::analysis::join::{BroadcastKey, Joined, Window};
use skewscope_core::analysis::report::{ReferenceKind, Report};
use skewscope_core::analysis::settled::moved_past;
use skewscope_core::analysis::verdict::{Check, Thresholds, Unit, Verdict, judge};

use crate::inputs::{self, Scope};
use crate::matching::Matcher;
use agent_api::{AgentApi, ApiError, Status};
use mirror::Mirror;
use progress::Progress;

/// How often the audit looks for new receipts while it waits.
const POLL: Duration = Duration::from_millis(250);

/// How far before the first trigger (and after the last look) a foreign
/// server's broadcast may be first received and still be the audit's: the
/// device clocks are NTP-synced, so a receipt is never this far off.
const FOREIGN_MARGIN_NS: u64 = 100_000_000;

/// What the operator asked for.
#[derive(Clone, Debug)]
pub struct AuditOptions {
    /// The agent's base URL, `http://server:8080`.
    pub agent: String,
    /// The agent's bearer token.
    pub token: Option<String>,
    /// Broadcasts to trigger.
    pub broadcasts: u64,
    /// Pause between triggers.
    pub interval: Duration,
    /// Longest wait for receipts after the last trigger (and for probes
    /// before the first).
    pub settle: Duration,
    /// Probes that must be uploading before the audit starts.
    pub require_probes: usize,
    /// A foreign server's trigger URL; `None` triggers the agent's hub.
    pub trigger: Option<String>,
    /// `GET` or `POST` for `trigger`.
    pub trigger_method: String,
    /// The time to act the hub's test broadcasts carry, after their start
    /// (`/start_test?lead=`); a foreign server's trigger carries its own.
    pub lead: Option<Duration>,
    /// What the verdict holds the report to.
    pub thresholds: Thresholds,
    /// Where to keep the copy of the agent's logs (a temporary directory
    /// otherwise).
    pub keep: Option<PathBuf>,
    /// Also compute the series the HTML page plots.
    pub figures: bool,
    /// Judge only broadcasts whose payload matches (`--match`), given as
    /// the expression and its parse.
    pub matching: Option<(String, Matcher)>,
    /// Trigger nothing: judge the broadcasts the site sends itself.
    pub passive: Option<Passive>,
}

/// `--passive`: what a live site sends on its own is judged, nothing is
/// triggered.
#[derive(Clone, Copy, Debug)]
pub struct Passive {
    /// How long to watch.
    pub window: Duration,
    /// Stop watching once this many broadcasts were seen (`--broadcasts`).
    pub broadcasts: Option<u64>,
}

/// What the audit sent or watched, for the wait and the verdict.
struct Observed {
    /// The hub's test broadcasts, as `/start_test` answered.
    sent: Vec<agent_api::Sent>,
    /// The agent's clock before each foreign trigger.
    trigger_times: Vec<u64>,
    /// The broadcasts judged.
    window: Option<Window>,
    /// The probes listen to a server that is not the agent's hub.
    foreign: bool,
    /// The agent's clock after the last broadcast could have started:
    /// every probe's records must reach past it.
    last_wall: u64,
    /// The agent's clock when the audit began.
    first_wall: u64,
    /// Broadcasts that must have arrived (a foreign server's triggers).
    expected: u64,
}

/// Why the audit could not run (exit status 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CannotAudit(pub String);

impl From<ApiError> for CannotAudit {
    fn from(e: ApiError) -> CannotAudit {
        CannotAudit(e.to_string())
    }
}

impl From<mirror::SyncError> for CannotAudit {
    fn from(e: mirror::SyncError) -> CannotAudit {
        CannotAudit(e.to_string())
    }
}

/// What the audit found.
#[derive(Debug, Serialize)]
pub struct AuditOutcome {
    /// The audit itself: what it did and how long it waited.
    pub audit: AuditFacts,
    /// The thresholds, judged.
    pub verdict: Verdict,
    /// The full report of the audited broadcasts.
    pub report: Report,
    /// Its plot series, when [`AuditOptions::figures`] asked for them.
    #[serde(skip)]
    pub figures: Option<skewscope_core::analysis::figures::Figures>,
}

/// What the audit did.
#[derive(Debug, Serialize)]
pub struct AuditFacts {
    /// The agent asked.
    pub agent: String,
    /// The foreign trigger, when the agent was not the server.
    pub trigger: Option<String>,
    /// Broadcasts triggered (0 for a passive audit).
    pub triggered: u64,
    /// A passive audit: it triggered nothing and judged the site's own
    /// broadcasts in its window.
    pub passive: bool,
    /// Probe runs uploading when the audit started.
    pub probes_uploading: usize,
    /// Every connection reported every audited broadcast before `--settle`.
    pub complete: bool,
    /// Milliseconds from the last trigger to the verdict.
    pub last_broadcast_to_verdict_ms: u64,
    /// `skewscope report` arguments that reproduce this report from the
    /// logs (`DIR` is the copy, or the agent's data directory).
    pub reproduce: String,
    /// Where the copy of the agent's logs is, when kept.
    pub kept: Option<String>,
}

/// The audit's exit status, the whole policy (docs/audit.md, `--help`).
pub mod exit {
    /// Every threshold passes.
    pub const PASS: u8 = 0;
    /// A threshold fails (the report and the failing lines are printed).
    pub const FAIL: u8 = 1;
    /// The audit could not run, or ran and had nothing to judge.
    pub const CANNOT_AUDIT: u8 = 2;
}

impl AuditOutcome {
    /// Why the audit ran but has nothing to judge, when so: no broadcast
    /// reached two connections, so there is no skew to hold a threshold to.
    pub fn nothing_to_judge(&self) -> Option<&'static str> {
        self.report
            .skew_ns
            .is_none()
            .then_some("no broadcast reached two connections")
    }

    /// [`exit::PASS`] when every threshold passes, [`exit::FAIL`] when one
    /// fails, [`exit::CANNOT_AUDIT`] when there was nothing to judge.
    pub fn exit_code(&self) -> u8 {
        if self.nothing_to_judge().is_some() {
            exit::CANNOT_AUDIT
        } else if self.verdict.pass {
            exit::PASS
        } else {
            exit::FAIL
        }
    }
}

/// Runs the audit.
pub fn run(options: &AuditOptions, progress: &mut Progress) -> Result<AuditOutcome, CannotAudit> {
    let api = AgentApi::new(&options.agent, options.token.clone());
    let temp;
    let dir = match &options.keep {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::tempdir()
                .map_err(|e| CannotAudit(format!("cannot create a temporary directory: {e}")))?;
            temp.path().to_owned()
        }
    };
    let mirror = Mirror::new(&dir).map_err(|e| CannotAudit(format!("{e:#}")))?;

    let status = wait_for_probes(&api, options, progress)?;
    let run = status.agent_run.clone();
    let uploading = status.probes.iter().filter(|p| p.uploading).count();
    progress.say(&format!(
        "audit: agent {} answers (run {}, {} clients); {uploading} probe(s) uploading: {}",
        options.agent,
        &run[..8.min(run.len())],
        status.clients,
        status
            .probes
            .iter()
            .filter(|p| p.uploading)
            .map(|p| p.label())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let observed = match &options.passive {
        None => trigger(&api, options, &status, progress)?,
        Some(passive) => observe(&api, &mirror, options, passive, &status, progress)?,
    };
    let Observed {
        sent,
        trigger_times,
        mut window,
        foreign,
        last_wall: last_trigger_wall,
        first_wall,
        expected,
    } = observed;
    let last_trigger = Instant::now();
    let deadline = last_trigger + options.settle;
    let scope = |window| Scope {
        window,
        agent_as_reference: foreign,
    };
    // The copy is read again only when a poll fetched something new.
    let mut read: Option<inputs::Inputs> = None;
    let (inputs, state) = loop {
        let status = match api.status() {
            Ok(s) => s,
            // The agent may be restarting: keep trying until the deadline.
            Err(e) if Instant::now() < deadline => {
                progress.waiting(&format!("the agent did not answer ({e}); trying again"));
                std::thread::sleep(POLL);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if status.agent_run != run {
            return Err(CannotAudit(format!(
                "the agent restarted during the audit (run {run} is now {}); its broadcasts so far are in its data directory; run the audit again",
                status.agent_run
            )));
        }
        let wall_now = status.now_wall_ns;
        if foreign && options.passive.is_none() {
            window = Some(Window::FirstReceiptBetween {
                from_wall_ns: first_wall.saturating_sub(FOREIGN_MARGIN_NS),
                to_wall_ns: wall_now + FOREIGN_MARGIN_NS,
            });
        }
        let (files, fetched) = sync_logs(&api, &mirror, &status)?;
        if fetched > 0 || read.is_none() {
            read = Some(read_copy(&files, options)?);
        }
        let inputs = read.as_ref().expect("read above");
        let joined =
            inputs::join(inputs, scope(window)).map_err(|e| CannotAudit(format!("{e:#}")))?;
        let uploading: Vec<(u128, String)> = status
            .probes
            .iter()
            .filter(|p| p.uploading)
            .filter_map(|p| Some((u128::from_str_radix(&p.run, 16).ok()?, p.label())))
            .collect();
        // Runs whose records are here but left out of this audit's scope
        // (probes of the hub during an audit of another server, or the
        // other way round) are not waited for.
        let out_of_scope: Vec<u128> = inputs
            .probes
            .iter()
            .filter_map(|log| log.run_id)
            .filter(|run| {
                !joined
                    .probes
                    .iter()
                    .any(|p| p.identity.as_ref().is_some_and(|i| i.run_id == *run))
            })
            .collect();
        let uploading: Vec<(u128, String)> = uploading
            .into_iter()
            .filter(|(run, _)| !out_of_scope.contains(run))
            .collect();
        let state = Completion::of(&joined, &sent, expected, &uploading, last_trigger_wall);
        let probes_uploading = status.probes.iter().filter(|p| p.uploading).count();
        progress.waiting(&format!(
            "waiting for receipts: {} received, {} outstanding over {} broadcasts; {probes_uploading} probe(s) uploading",
            state.receipts, state.outstanding, state.broadcasts
        ));
        if state.done || Instant::now() >= deadline {
            break (read.take().expect("read above"), state);
        }
        std::thread::sleep(POLL);
    };
    let triggers = (!trigger_times.is_empty()).then_some(trigger_times.as_slice());
    let (mut report, figures) = inputs::analyse(inputs, triggers, scope(window), options.figures)
        .map_err(|e| CannotAudit(format!("{e:#}")))?;
    // Name the logs as the agent does, not by the copy's (maybe temporary) path.
    for input in &mut report.inputs {
        if let Ok(name) = std::path::Path::new(&input.file).strip_prefix(&dir) {
            input.file = name.display().to_string();
        }
    }
    let mut verdict = judge(&report, &options.thresholds);
    // Only the audit knows which probes were uploading: one whose records
    // never arrived would otherwise just be absent from the report.
    let lagging = state.lagging.len();
    verdict.checks.push(Check {
        check: "probes-reported",
        unit: Unit::Count,
        limit: 0,
        measured: Some(lagging as i64),
        pass: lagging == 0,
        basis: if lagging == 0 {
            "uploading probes whose records since the last broadcast had not arrived".into()
        } else {
            format!(
                "records since the last broadcast had not arrived within --settle from: {}",
                state.lagging.join(", ")
            )
        },
    });
    verdict.pass &= lagging == 0;
    let complete = state.done;
    let waited = last_trigger.elapsed();
    let reproduce = match window {
        Some(Window::AgentIds { first, last }) => format!("report DIR --broadcasts {first}-{last}"),
        Some(Window::FirstReceiptBetween {
            from_wall_ns,
            to_wall_ns,
        }) => format!("report DIR --agent-as-reference --between {from_wall_ns}-{to_wall_ns}"),
        None => "report DIR".to_owned(),
    };
    let reproduce = match &options.matching {
        Some((expression, _)) => format!("{reproduce} --match '{expression}'"),
        None => reproduce,
    };
    Ok(AuditOutcome {
        audit: AuditFacts {
            agent: options.agent.clone(),
            trigger: options.trigger.clone(),
            triggered: if options.passive.is_some() {
                0
            } else {
                options.broadcasts
            },
            passive: options.passive.is_some(),
            probes_uploading: uploading,
            complete,
            last_broadcast_to_verdict_ms: waited.as_millis() as u64,
            reproduce,
            kept: options.keep.as_ref().map(|d| d.display().to_string()),
        },
        verdict,
        report,
        figures,
    })
}

/// Triggers `--broadcasts` broadcasts: the hub's test message, or a foreign
/// server's trigger URL.
fn trigger(
    api: &AgentApi,
    options: &AuditOptions,
    status: &Status,
    progress: &mut Progress,
) -> Result<Observed, CannotAudit> {
    let first_wall = status.now_wall_ns;
    let trigger_http = agent_api::trigger_client();
    let mut sent = Vec::new();
    let mut last_wall = first_wall;
    let mut trigger_times = Vec::new();
    for i in 1..=options.broadcasts {
        if i == options.broadcasts && i > 1 {
            // Every receipt of the last broadcast comes after this.
            last_wall = api.status()?.now_wall_ns;
        }
        match &options.trigger {
            None => {
                let s = api.start_test(options.lead)?;
                progress.triggered(
                    i,
                    options.broadcasts,
                    &format!("(id {}, sent to {} clients)", s.broadcast, s.clients),
                );
                sent.push(s);
            }
            Some(url) => {
                // The agent's clock just before the trigger is sent: the
                // trigger reaches the server after it, so latency from it is
                // never short (long by at most one round trip to the agent).
                trigger_times.push(api.status()?.now_wall_ns);
                agent_api::trigger(&trigger_http, url, &options.trigger_method)?;
                progress.triggered(i, options.broadcasts, &format!("({url})"));
            }
        }
        if i < options.broadcasts {
            std::thread::sleep(options.interval);
        }
    }
    let window = match (&options.trigger, sent.first(), sent.last()) {
        (None, Some(first), Some(last)) => Some(Window::AgentIds {
            first: first.broadcast,
            last: last.broadcast,
        }),
        _ => None,
    };
    Ok(Observed {
        sent,
        trigger_times,
        window,
        foreign: options.trigger.is_some(),
        last_wall,
        first_wall,
        expected: if options.trigger.is_some() {
            options.broadcasts
        } else {
            0
        },
    })
}

/// `--passive`: watches the window (or until `--broadcasts` were seen)
/// while the site broadcasts on its own. Whether its broadcasts are the
/// hub's or another server's the probes' logs say ([`crate::reference`]).
fn observe(
    api: &AgentApi,
    mirror: &Mirror,
    options: &AuditOptions,
    passive: &Passive,
    start: &Status,
    progress: &mut Progress,
) -> Result<Observed, CannotAudit> {
    let begun = Instant::now();
    progress.say(&format!(
        "audit: passive, triggering nothing; watching for {}{}",
        humantime::format_duration(passive.window),
        passive
            .broadcasts
            .map(|n| format!(" or {n} broadcasts"))
            .unwrap_or_default()
    ));
    let from_wall_ns = start.now_wall_ns;
    let mut read: Option<inputs::Inputs> = None;
    let mut said: Option<String> = None;
    // Whether the probes listen to the hub or to another server, their
    // logs say once they hold a connection; until then, and to count a
    // foreign server's broadcasts for --broadcasts, they are read as they
    // grow. Otherwise the window passes without reading them.
    let mut foreign: Option<bool> = None;
    let end = loop {
        let status = api.status()?;
        if status.agent_run != start.agent_run {
            return Err(CannotAudit(
                "the agent restarted during the audit's window; run the audit again".into(),
            ));
        }
        // Counting the hub's broadcasts needs only its status; counting a
        // foreign server's, or only the matching ones, needs the logs.
        let hub_count = (foreign == Some(false) && options.matching.is_none())
            .then(|| status.broadcasts.saturating_sub(start.broadcasts));
        let mut seen = hub_count;
        if foreign.is_none() || (hub_count.is_none() && passive.broadcasts.is_some()) {
            let (files, fetched) = sync_logs(api, mirror, &status)?;
            if fetched > 0 || read.is_none() {
                read = Some(read_copy(&files, options)?);
            }
            let inputs = read.as_ref().expect("read above");
            if inputs.probes.iter().any(|p| p.hub_side || p.foreign_side) {
                let (_, reference) =
                    crate::reference::infer(&inputs.agents, &inputs.probes, Scope::default());
                let line = crate::sentences::reference_line(&reference);
                if said.as_ref() != Some(&line) {
                    progress.say(&format!("audit: {line}"));
                    said = Some(line);
                }
                foreign = Some(reference.kind != ReferenceKind::Hub);
            }
            if let Some(foreign) = foreign {
                let window = passive_window(foreign, from_wall_ns, start, &status, None);
                let scope = Scope {
                    window: Some(window),
                    agent_as_reference: foreign,
                };
                let joined =
                    inputs::join(inputs, scope).map_err(|e| CannotAudit(format!("{e:#}")))?;
                seen = Some(joined.broadcasts.len() as u64);
            }
        }
        let elapsed = begun.elapsed();
        progress.waiting(&format!(
            "watching: {} in {} of {}",
            seen.map_or("the site's broadcasts".to_owned(), |n| format!(
                "{n} broadcast(s)"
            )),
            humantime::format_duration(Duration::from_secs(elapsed.as_secs())),
            humantime::format_duration(passive.window)
        ));
        if elapsed >= passive.window || passive.broadcasts.zip(seen).is_some_and(|(n, s)| s >= n) {
            break status;
        }
        std::thread::sleep(PASSIVE_POLL.min(passive.window.saturating_sub(elapsed)));
    };
    let Some(foreign) = foreign else {
        return Err(CannotAudit(
            "no probe's records hold a connection yet: nothing to judge the window with".into(),
        ));
    };
    if !foreign && end.broadcasts <= start.broadcasts {
        return Err(CannotAudit(format!(
            "the hub sent no broadcast in the window ({})",
            humantime::format_duration(passive.window)
        )));
    }
    let at_most = passive.broadcasts.filter(|_| options.matching.is_none());
    let window = passive_window(foreign, from_wall_ns, start, &end, at_most);
    Ok(Observed {
        sent: Vec::new(),
        trigger_times: Vec::new(),
        window: Some(window),
        foreign,
        last_wall: end.now_wall_ns,
        first_wall: from_wall_ns,
        expected: 0,
    })
}

/// The broadcasts a passive audit judges: a foreign server's first received
/// in the window; the hub's sent in it (its first `at_most` with no
/// `--match`, which otherwise picks among them).
fn passive_window(
    foreign: bool,
    from_wall_ns: u64,
    start: &Status,
    now: &Status,
    at_most: Option<u64>,
) -> Window {
    if foreign {
        Window::FirstReceiptBetween {
            from_wall_ns,
            to_wall_ns: now.now_wall_ns,
        }
    } else {
        let last = match at_most {
            Some(n) => now.broadcasts.min(start.broadcasts + n),
            None => now.broadcasts,
        };
        Window::AgentIds {
            first: start.broadcasts + 1,
            last,
        }
    }
}

/// Reads the local copy of the logs, judging payloads with `--match`.
fn read_copy(files: &[PathBuf], options: &AuditOptions) -> Result<inputs::Inputs, CannotAudit> {
    let matcher = options.matching.as_ref().map(|(e, m)| (e.as_str(), m));
    inputs::read_inputs_matching(files, matcher).map_err(|e| CannotAudit(format!("{e:#}")))
}

/// How often a passive audit looks while it watches.
const PASSIVE_POLL: Duration = Duration::from_secs(1);

/// Asks for the agent's status until `--require-probes` probes upload, or
/// `--settle` passes.
fn wait_for_probes(
    api: &AgentApi,
    options: &AuditOptions,
    progress: &mut Progress,
) -> Result<Status, CannotAudit> {
    let deadline = Instant::now() + options.settle;
    loop {
        let status = api.status()?;
        let uploading = status.probes.iter().filter(|p| p.uploading).count();
        if uploading >= options.require_probes {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            return Err(CannotAudit(format!(
                "{uploading} probe(s) upload to the agent and --require-probes is {}; start the probes with --upload {}",
                options.require_probes, options.agent
            )));
        }
        progress.waiting(&format!(
            "waiting for probes: {uploading} of {} uploading",
            options.require_probes
        ));
        std::thread::sleep(POLL);
    }
}

/// Copies what is new of this agent run's segments and of every probe run
/// it stores; returns the local copies to read and the bytes fetched.
fn sync_logs(
    api: &AgentApi,
    mirror: &Mirror,
    status: &Status,
) -> Result<(Vec<PathBuf>, u64), CannotAudit> {
    let prefix = format!("{}-", status.segment_stem);
    let wanted = status
        .logs
        .iter()
        .filter(|l| l.name.starts_with(&prefix) || status.probes.iter().any(|p| p.file == l.name));
    let (mut files, mut fetched) = (Vec::new(), 0);
    for log in wanted {
        fetched += mirror.sync(api, &log.name, log.bytes)?;
        let path = mirror.path_of(&log.name);
        if path.exists() {
            files.push(path);
        }
    }
    files.sort();
    Ok((files, fetched))
}

/// How far the audited broadcasts have been reported.
struct Completion {
    /// Probes uploading whose records since the last trigger have not arrived.
    lagging: Vec<String>,
    broadcasts: usize,
    receipts: usize,
    outstanding: usize,
    done: bool,
}

/// Receipts on connections of probes that act (`--act-at`) whose action has
/// not arrived and may still: their probe's records have not moved past
/// them (the one rule of [`skewscope_core::analysis::settled`], which the
/// agent's live join follows too), the margin on top of the largest lead
/// seen.
fn awaiting_actions(joined: &Joined) -> usize {
    let acting = |c: usize| {
        joined.probes[joined.connections[c].probe]
            .act_plan
            .is_some()
    };
    if !joined.probes.iter().any(|p| p.act_plan.is_some()) {
        return 0;
    }
    let latest: Vec<u64> = joined
        .probes
        .iter()
        .map(|p| p.stamps.iter().map(|s| s.wall_ns).max().unwrap_or(0))
        .collect();
    // How long after its broadcast's first receipt an action has come.
    let lead = joined
        .broadcasts
        .iter()
        .filter_map(|b| {
            let first = b.receipts.iter().map(|r| r.wall_ns).min()?;
            b.actions
                .iter()
                .map(|a| a.done.wall_ns.saturating_sub(first))
                .max()
        })
        .max()
        .unwrap_or(0);
    joined
        .broadcasts
        .iter()
        .flat_map(|b| {
            let first = b.receipts.iter().map(|r| r.wall_ns).min().unwrap_or(0);
            b.receipts.iter().map(move |r| (b, r, first))
        })
        .filter(|(b, r, first)| {
            acting(r.connection)
                && !b.actions.iter().any(|a| a.connection == r.connection)
                && !moved_past(latest[joined.connections[r.connection].probe], *first, lead)
        })
        .count()
}

impl Completion {
    /// Every probe uploading now has reported something after the last
    /// trigger (so one whose upload lags is not taken for one that was not
    /// connected), no probe connection is missing an audited broadcast, and:
    /// hub, each triggered broadcast has all its targets recorded; foreign
    /// server, at least `k` broadcasts arrived.
    fn of(
        joined: &Joined,
        sent: &[agent_api::Sent],
        k: u64,
        uploading: &[(u128, String)],
        last_trigger_wall_ns: u64,
    ) -> Completion {
        let receipts = joined.broadcasts.iter().map(|b| b.receipts.len()).sum();
        let missing: usize = joined.broadcasts.iter().map(|b| b.missing.len()).sum();
        let lagging: Vec<String> = uploading
            .iter()
            .filter(|(run, _)| {
                let latest = joined
                    .probes
                    .iter()
                    .filter(|p| p.identity.as_ref().is_some_and(|i| i.run_id == *run))
                    .flat_map(|p| p.stamps.iter().map(|s| s.wall_ns))
                    .max();
                latest.is_none_or(|t| t < last_trigger_wall_ns)
            })
            .map(|(_, name)| name.clone())
            .collect();
        let caught_up = lagging.is_empty() && awaiting_actions(joined) == 0;
        let broadcasts_done = if sent.is_empty() {
            // With the agent tapping the server (and following these
            // probes' connections), wait for its record of each broadcast.
            let tapped =
                joined.tap.is_some() && joined.broadcasts.iter().any(|b| b.agent.is_some());
            joined.broadcasts.len() as u64 >= k
                && (!tapped || joined.broadcasts.iter().all(|b| b.agent.is_some()))
        } else {
            sent.iter().all(|s| {
                joined.broadcasts.iter().any(|b| {
                    matches!(b.key, BroadcastKey::Agent { id, .. } if id == s.broadcast)
                        && b.agent.is_some_and(|a| u64::from(a.targets) == s.clients)
                })
            })
        };
        let done = caught_up && missing == 0 && broadcasts_done;
        Completion {
            lagging,
            broadcasts: joined.broadcasts.len(),
            receipts,
            outstanding: missing,
            done,
        }
    }
}
