//! What the audit makes happen or watches before it waits: `--broadcasts`
//! triggers (the hub's test message or a foreign server's URL), or, with
//! `--passive`, the site's own broadcasts over a window.

use std::time::{Duration, Instant};

use skewscope_core::analysis::join::Window;
use skewscope_core::analysis::report::ReferenceKind;

use super::agent_api::{self, AgentApi, Status};
use super::error::CannotAudit;
use super::mirror::Mirror;
use super::options::{AuditOptions, Passive};
use super::progress::Progress;
use crate::inputs;
use crate::joined::{self, Scope};

/// What the audit sent or watched, for the wait and the verdict.
pub(super) struct Observed {
    /// The hub's test broadcasts, as `/start_test` answered.
    pub(super) sent: Vec<agent_api::Sent>,
    /// The agent's clock before each foreign trigger.
    pub(super) trigger_times: Vec<u64>,
    /// The broadcasts judged.
    pub(super) window: Option<Window>,
    /// The probes listen to a server that is not the agent's hub.
    pub(super) foreign: bool,
    /// The agent's clock after the last broadcast could have started:
    /// every probe's records must reach past it.
    pub(super) last_wall: u64,
    /// The agent's clock when the audit began.
    pub(super) first_wall: u64,
    /// Broadcasts that must have arrived (a foreign server's triggers).
    pub(super) expected: u64,
}

/// Triggers `--broadcasts` broadcasts: the hub's test message, or the
/// operator's trigger URL. A trigger may make a server of its own send
/// (the agent is then the clock reference), or make an app publish through
/// the hub (`POST /publish`): the probes' logs say which
/// ([`crate::reference`]), and for the hub the audit judges the hub's
/// broadcasts that followed the first trigger.
pub(super) fn trigger(
    api: &AgentApi,
    mirror: &Mirror,
    options: &AuditOptions,
    status: &Status,
    progress: &mut Progress,
) -> Result<Observed, CannotAudit> {
    let first_wall = status.now_wall_ns;
    let trigger_http = api.http();
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
                agent_api::trigger(trigger_http, url, &options.trigger_method)?;
                progress.triggered(i, options.broadcasts, &format!("({url})"));
            }
        }
        if i < options.broadcasts {
            std::thread::sleep(options.interval);
        }
    }
    if options.trigger.is_some()
        && let Some(hub) = through_the_hub(api, mirror, options, status, progress)?
    {
        return Ok(Observed {
            sent,
            trigger_times: Vec::new(),
            window: Some(hub),
            foreign: false,
            last_wall,
            first_wall,
            expected: 0,
        });
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

/// After the operator's triggers: when they made the agent's hub send (an
/// app that publishes through the hub) and probes listen to it, the hub's
/// broadcasts since the first trigger, waited for up to `--settle`; `None`
/// when the triggers made another server send. Probes that all listen to
/// the hub while it sent nothing is a reason of its own.
fn through_the_hub(
    api: &AgentApi,
    mirror: &Mirror,
    options: &AuditOptions,
    before: &Status,
    progress: &mut Progress,
) -> Result<Option<Window>, CannotAudit> {
    let status = api.status()?;
    let (files, _) = mirror.sync_run(api, &status)?;
    let inputs = options.read_copy(&files)?;
    let on_hub = inputs.probes.iter().any(|p| p.hub_side);
    let elsewhere = |inputs: &crate::inputs::Inputs| {
        inputs.probes.iter().any(|p| p.foreign_side && !p.hub_side)
    };
    let mut elsewhere_now = elsewhere(&inputs);
    if !on_hub {
        return Ok(None);
    }
    let first = before.broadcasts + 1;
    let deadline = Instant::now() + options.settle;
    let mut now = status;
    // Another server's probes: the hub sent nothing, so the triggers were
    // that server's. Only the hub's probes: wait for what it sends. Those
    // of another server may not have uploaded their first connection yet
    // (the audit can start a moment after they do): while the hub sends
    // nothing, their logs are looked at again.
    loop {
        if now.broadcasts < first && elsewhere_now {
            return Ok(None);
        }
        if now.broadcasts >= before.broadcasts + options.broadcasts || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        now = api.status()?;
        if now.broadcasts < first {
            let (files, fetched) = mirror.sync_run(api, &now)?;
            if fetched > 0 {
                elsewhere_now = elsewhere(&options.read_copy(&files)?);
            }
        }
    }
    if now.broadcasts < first {
        return Err(CannotAudit::TriggerSentNothing {
            trigger: options.trigger.clone().unwrap_or_default(),
            settle: humantime::format_duration(options.settle).to_string(),
        });
    }
    progress.say(&format!(
        "audit: the probes listen to the agent's hub, and after the trigger it sent broadcasts {first}-{}: judging those",
        now.broadcasts
    ));
    Ok(Some(Window::AgentIds {
        first,
        last: now.broadcasts,
    }))
}

/// `--passive`: watches the window (or until `--broadcasts` were seen)
/// while the site broadcasts on its own. Whether its broadcasts are the
/// hub's or another server's the probes' logs say ([`crate::reference`]).
pub(super) fn observe(
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
            return Err(CannotAudit::AgentRestarted {
                was: start.agent_run.clone(),
                now: status.agent_run,
            });
        }
        // Counting the hub's broadcasts needs only its status; counting a
        // foreign server's, or only the matching ones, needs the logs.
        let hub_count = (foreign == Some(false) && options.matching.is_none())
            .then(|| status.broadcasts.saturating_sub(start.broadcasts));
        let mut seen = hub_count;
        if foreign.is_none() || (hub_count.is_none() && passive.broadcasts.is_some()) {
            let (files, fetched) = mirror.sync_run(api, &status)?;
            if fetched > 0 || read.is_none() {
                read = Some(options.read_copy(&files)?);
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
                let joined = joined::join(inputs, scope).map_err(CannotAudit::Logs)?;
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
        return Err(CannotAudit::NoConnection);
    };
    if !foreign && end.broadcasts <= start.broadcasts {
        return Err(CannotAudit::NoBroadcast {
            window: humantime::format_duration(passive.window).to_string(),
        });
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

/// How often a passive audit looks while it watches.
const PASSIVE_POLL: Duration = Duration::from_secs(1);
