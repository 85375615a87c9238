//! Which reference a report uses when nobody said: the agent's hub, its tap
//! of the server the probes listened to, or its log as the clock only.
//!
//! The logs know: each probe connection records whether the agent's hub
//! named it (the hub answers its upgrade with a connection id) and which
//! server address it reached; the agent's log records the port its tap
//! followed. Copied logs of a tapped server and its probes therefore join
//! as a tap without `--agent-as-reference`, and the report says which
//! reference it used and why.

use std::collections::BTreeSet;

use skewscope_core::analysis::join::Window;
use skewscope_core::analysis::report::{Reference, ReferenceKind};

use crate::log_files::{AgentFiles, ProbeFiles};

/// Which broadcasts a report covers, and whose they were.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// Only these broadcasts (an audit's); all when `None`.
    pub window: Option<Window>,
    /// The probes listened to a server that is not the agent: the agent's
    /// log is the clock reference only, broadcasts are what probes received.
    pub agent_as_reference: bool,
}

/// The scope to join with (`agent_as_reference` set when the logs call for
/// it) and the reference it amounts to, with the reason.
pub fn infer(agents: &[AgentFiles], probes: &[ProbeFiles], asked: Scope) -> (Scope, Reference) {
    let hub_runs = probes.iter().filter(|p| p.hub_side).count();
    let elsewhere_runs = probes
        .iter()
        .filter(|p| p.foreign_side && !p.hub_side)
        .count();
    let ports: BTreeSet<u16> = probes
        .iter()
        .flat_map(|p| p.foreign_ports.iter().copied())
        .collect();
    let ports_text = ports_text(&ports);
    // The run the join takes as reference: the latest.
    let tapped = agents
        .iter()
        .max_by_key(|a| a.run.as_ref().map(|r| r.1))
        .and_then(|a| a.tapped_port);

    if agents.is_empty() {
        let reference = Reference {
            kind: ReferenceKind::None,
            why: "no agent log: broadcasts are the messages the probes received, on each \
                  device's clock as it is; latency, fan-out and clock correction need the \
                  agent's log"
                .into(),
            left_out: None,
        };
        return (asked, reference);
    }
    if let Some(Window::AgentIds { first, last }) = asked.window {
        let reference = Reference {
            kind: ReferenceKind::Hub,
            why: format!("the agent's hub sent broadcasts {first}-{last}, as asked"),
            left_out: left_out_elsewhere(elsewhere_runs, &ports_text),
        };
        return (asked, reference);
    }
    let beside = |why: String| {
        let kind = match tapped {
            Some(port) if ports.is_empty() || ports.contains(&port) => ReferenceKind::Tap,
            _ => ReferenceKind::Clock,
        };
        let why = match (kind, tapped) {
            (ReferenceKind::Tap, Some(port)) => {
                format!("{why}; the agent tapped port {port}: broadcasts and sends are the tap's")
            }
            (_, Some(port)) => format!(
                "{why}; the agent tapped port {port}, not theirs: its log is the clock \
                 reference only"
            ),
            _ => format!("{why}; the agent did not tap it: its log is the clock reference only"),
        };
        let left_out = (hub_runs > 0).then(|| {
            format!(
                "{hub_runs} probe run(s) that connected to the agent's hub: report them \
                 without --agent-as-reference"
            )
        });
        Reference {
            kind,
            why,
            left_out,
        }
    };
    if asked.agent_as_reference {
        let why = "the probes listened to another server, as --agent-as-reference (or an \
                   audit's --trigger) says"
            .to_owned();
        return (asked, beside(why));
    }
    if hub_runs == 0 && elsewhere_runs == 0 && tapped.is_some() {
        // A tap's log alone: the server's real clients, from its packets.
        let scope = Scope {
            agent_as_reference: true,
            ..asked
        };
        return (scope, beside("no probe log".to_owned()));
    }
    if hub_runs == 0 && elsewhere_runs > 0 {
        let why = format!("no probe connected to the agent's hub; they connected to {ports_text}");
        let scope = Scope {
            agent_as_reference: true,
            ..asked
        };
        return (scope, beside(why));
    }
    let why = if hub_runs > 0 {
        format!("{hub_runs} probe run(s) connected to the agent's hub")
    } else {
        "no probe connection in the logs: the agent's broadcasts alone".to_owned()
    };
    let reference = Reference {
        kind: ReferenceKind::Hub,
        why,
        left_out: left_out_elsewhere(elsewhere_runs, &ports_text),
    };
    (asked, reference)
}

/// Probe runs a hub report leaves out, said.
fn left_out_elsewhere(runs: usize, ports_text: &str) -> Option<String> {
    (runs > 0).then(|| {
        format!(
            "{runs} probe run(s) that connected to another server ({ports_text}): report them \
             with --agent-as-reference"
        )
    })
}

/// `port 8000` or `ports 8000, 8001`, for people.
fn ports_text(ports: &BTreeSet<u16>) -> String {
    match ports.len() {
        0 => "a server whose address they did not record".to_owned(),
        1 => format!("port {}", ports.iter().next().copied().unwrap_or(0)),
        _ => format!(
            "ports {}",
            ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log_files::LogFiles;

    fn agent(tapped_port: Option<u16>) -> AgentFiles {
        AgentFiles {
            files: LogFiles::default(),
            run: Some(("server".into(), 1)),
            tapped_port,
            page_runs: Default::default(),
        }
    }

    fn probe(hub_side: bool, ports: &[u16]) -> ProbeFiles {
        ProbeFiles {
            files: LogFiles::default(),
            run: None,
            run_id: None,
            hub_side,
            foreign_side: !ports.is_empty(),
            foreign_ports: ports.iter().copied().collect(),
        }
    }

    #[test]
    fn probes_of_a_tapped_server_join_the_tap_without_a_flag() {
        let (scope, r) = infer(
            &[agent(Some(8000))],
            &[probe(false, &[8000])],
            Scope::default(),
        );
        assert!(scope.agent_as_reference);
        assert_eq!(r.kind, ReferenceKind::Tap);
        assert!(r.why.contains("connected to port 8000"), "{}", r.why);
        assert!(r.why.contains("tapped port 8000"), "{}", r.why);
        assert_eq!(r.left_out, None);
    }

    #[test]
    fn probes_of_an_untapped_server_take_the_agent_as_clock_only() {
        let (scope, r) = infer(
            &[agent(None)],
            &[probe(false, &[8000, 8001])],
            Scope::default(),
        );
        assert!(scope.agent_as_reference);
        assert_eq!(r.kind, ReferenceKind::Clock);
        assert!(r.why.contains("ports 8000, 8001"), "{}", r.why);
        // A tap of another port does not make them the tap's.
        let (_, r) = infer(
            &[agent(Some(9000))],
            &[probe(false, &[8000])],
            Scope::default(),
        );
        assert_eq!(r.kind, ReferenceKind::Clock);
        assert!(r.why.contains("not theirs"), "{}", r.why);
    }

    #[test]
    fn the_hub_wins_when_a_probe_listened_to_it_and_the_others_are_said_left_out() {
        let (scope, r) = infer(
            &[agent(None)],
            &[probe(true, &[]), probe(false, &[8000])],
            Scope::default(),
        );
        assert!(!scope.agent_as_reference);
        assert_eq!(r.kind, ReferenceKind::Hub);
        let left_out = r.left_out.expect("the other server's run is said");
        assert!(left_out.contains("1 probe run(s)"), "{left_out}");
        assert!(left_out.contains("--agent-as-reference"), "{left_out}");
    }

    #[test]
    fn the_flag_overrides_and_no_agent_log_says_what_is_missing() {
        let asked = Scope {
            window: None,
            agent_as_reference: true,
        };
        let (_, r) = infer(&[agent(None)], &[probe(true, &[])], asked);
        assert_eq!(r.kind, ReferenceKind::Clock);
        assert!(r.why.contains("as --agent-as-reference"), "{}", r.why);
        assert!(r.left_out.is_some());
        // A tap's log alone is the tap's.
        let (scope, r) = infer(&[agent(Some(8000))], &[], Scope::default());
        assert!(scope.agent_as_reference);
        assert_eq!(r.kind, ReferenceKind::Tap);
        let (_, r) = infer(&[], &[probe(false, &[8000])], Scope::default());
        assert_eq!(r.kind, ReferenceKind::None);
        assert!(r.why.contains("need the agent's log"), "{}", r.why);
    }
}
