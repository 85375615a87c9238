//! The inputs joined within a scope: which probe logs a window reads, the
//! join, and the report and figures built from what it joined.

use skewscope_core::analysis::figures::{Figures, FiguresBuilder};
use skewscope_core::analysis::join::{
    self, AgentSource, BroadcastSink, Joined, JoinedBroadcast, ProbeSource, Window,
};
use skewscope_core::analysis::report::{Report, ReportBuilder};
use skewscope_core::analysis::tapped;
use skewscope_core::analysis::triggers::TriggerLatencyBuilder;
use skewscope_core::record::AgentRecord;

use crate::log_files::AgentFiles;
use crate::matching::{PayloadMatch, PayloadVerdicts};
use skewscope_core::analysis::report::MatchCounts;

use crate::inputs::Inputs;

pub use crate::reference::Scope;

/// The probe logs a join within `scope` reads: a window of the agent's
/// broadcasts joins only probes the agent named (connected to its hub); a
/// report of a foreign server only probes it did not: a data directory can
/// hold both. Without an agent log there is no hub to tell apart: a window
/// of first receipts (`--between`, a sweep's stage) keeps every probe, the
/// hub's own included.
fn probes_in(inputs: &Inputs, scope: Scope) -> Vec<&dyn ProbeSource> {
    inputs
        .probes
        .iter()
        .filter(|p| match (scope.agent_as_reference, scope.window) {
            (false, Some(Window::FirstReceiptBetween { .. })) if inputs.agents.is_empty() => true,
            (true, _) | (false, Some(Window::FirstReceiptBetween { .. })) => p.foreign_side,
            (false, Some(Window::AgentIds { .. })) => p.hub_side,
            // The hub's broadcasts: a run that only listened to another
            // server would match none of them ([`crate::reference`] says so).
            (false, None) => inputs.agents.is_empty() || p.hub_side || !p.foreign_side,
        })
        .map(|p| p as &dyn ProbeSource)
        .collect()
}

/// Joins the inputs within `scope`, every broadcast to `sink`.
fn join_into(
    inputs: &Inputs,
    scope: Scope,
    sink: &mut dyn BroadcastSink,
) -> anyhow::Result<(Joined, Option<MatchCounts>)> {
    let probes = probes_in(inputs, scope);
    let agents: Vec<&dyn AgentSource> = inputs
        .agents
        .iter()
        .map(|a| a as &dyn AgentSource)
        .collect();
    let latest = inputs
        .agents
        .iter()
        .max_by_key(|a| a.run.as_ref().map(|r| r.1))
        .map(|a| a as &dyn AgentSource);
    let mut within = Within {
        window: scope.window,
        matching: inputs.matching.as_ref().map(|m| {
            (
                &m.verdicts,
                MatchCounts {
                    expression: m.expression.clone(),
                    ..MatchCounts::default()
                },
            )
        }),
        inner: sink,
    };
    let joined = match (latest, scope.agent_as_reference) {
        (Some(agent), true) => tapped::join_sources_with_reference(agent, &probes, &mut within),
        _ => join::join_runs_sources(&agents, &probes, &mut within),
    };
    for files in inputs
        .probes
        .iter()
        .map(|p| &p.files)
        .chain(inputs.agents.iter().map(|a| &a.files))
    {
        files.check()?;
    }
    Ok((joined, within.matching.map(|(_, counts)| counts)))
}

/// Passes on the broadcasts inside a window that `--match` keeps, counting
/// what it leaves out.
struct Within<'a> {
    window: Option<Window>,
    matching: Option<(&'a PayloadVerdicts, MatchCounts)>,
    inner: &'a mut dyn BroadcastSink,
}

impl BroadcastSink for Within<'_> {
    fn broadcast(&mut self, run: &Joined, broadcast: JoinedBroadcast) {
        let latest = run.agent_runs.saturating_sub(1);
        if !self.window.is_none_or(|w| w.contains(&broadcast, latest)) {
            return;
        }
        if let Some((verdicts, counts)) = &mut self.matching {
            match broadcast.hash.and_then(|h| verdicts.of(h)) {
                Some(PayloadMatch::Matches) => counts.matched += 1,
                Some(PayloadMatch::Differs) => {
                    counts.left_out += 1;
                    return;
                }
                Some(PayloadMatch::Unknown) | None => {
                    counts.unknown += 1;
                    return;
                }
            }
        }
        self.inner.broadcast(run, broadcast);
    }
}

/// Joins the inputs within `scope`, every broadcast kept (the audit's
/// progress needs them; a report streams them instead).
pub fn join(inputs: &Inputs, scope: Scope) -> anyhow::Result<Joined> {
    let (scope, _) = crate::reference::infer(&inputs.agents, &inputs.probes, scope);
    let mut rows: Vec<JoinedBroadcast> = Vec::new();
    let (mut joined, _) = join_into(inputs, scope, &mut rows)?;
    joined.broadcasts = rows;
    Ok(joined)
}

/// Joins the inputs and computes the report; with trigger times (sorted), also
/// the latency from them.
pub fn report(inputs: Inputs, triggers: Option<&[u64]>) -> anyhow::Result<Report> {
    report_within(inputs, triggers, Scope::default())
}

/// [`report`] of the broadcasts in `scope` only.
pub fn report_within(
    inputs: Inputs,
    triggers: Option<&[u64]>,
    scope: Scope,
) -> anyhow::Result<Report> {
    Ok(analyse(inputs, triggers, scope, false)?.0)
}

/// The report, and the plot series when asked, built as the join hands
/// over each broadcast: neither holds the run's receipts.
struct Analysis<'t> {
    report: Option<ReportBuilder>,
    figures: Option<FiguresBuilder>,
    triggers: Option<TriggerLatencyBuilder<'t>>,
    want_figures: bool,
}

impl Analysis<'_> {
    /// The builders, made from the run's logs when the first broadcast (or
    /// the end) comes.
    fn started(&mut self, run: &Joined) -> &mut ReportBuilder {
        if self.report.is_none() {
            let report = ReportBuilder::new(run);
            if self.want_figures {
                let clocks = report.timing().clocks().to_vec();
                self.figures = Some(FiguresBuilder::new(run, clocks));
            }
            self.report = Some(report);
        }
        self.report.as_mut().expect("made above")
    }
}

impl BroadcastSink for Analysis<'_> {
    fn broadcast(&mut self, run: &Joined, broadcast: JoinedBroadcast) {
        self.started(run).add(run, &broadcast);
        if let Some(f) = &mut self.figures {
            f.add(run, &broadcast);
        }
        if let Some(t) = &mut self.triggers {
            let clocks = self
                .report
                .as_ref()
                .expect("started above")
                .timing()
                .clocks();
            t.add_corrected(run, &broadcast, clocks);
        }
    }
}

/// [`report_within`], and the series the HTML page plots when `figures`
/// (computed from the same join, so the page and the table agree).
pub fn analyse(
    inputs: Inputs,
    triggers: Option<&[u64]>,
    scope: Scope,
    figures: bool,
) -> anyhow::Result<(Report, Option<Figures>)> {
    let (scope, reference) = crate::reference::infer(&inputs.agents, &inputs.probes, scope);
    let mut analysis = Analysis {
        report: None,
        figures: None,
        triggers: triggers.map(TriggerLatencyBuilder::new),
        want_figures: figures,
    };
    let (joined, matched) = join_into(&inputs, scope, &mut analysis)?;
    analysis.started(&joined);
    let mut report = analysis
        .report
        .as_mut()
        .expect("started above")
        .finish(&joined, inputs.summaries);
    report.set_trigger_latency(analysis.triggers.as_ref().map(|t| t.finish()));
    if let (
        Some(Window::FirstReceiptBetween {
            from_wall_ns,
            to_wall_ns,
        }),
        Some(_),
    ) = (scope.window, &report.tap)
    {
        report.tap = tap_within(&inputs.agents, &joined, from_wall_ns, to_wall_ns);
    }
    report.reference = Some(reference);
    report.matched = matched;
    let figures = analysis.figures.map(|f| f.finish(&joined));
    Ok((report, figures))
}

/// The tap's summary of the broadcasts it saw between `from` and `to`
/// (the first byte of each, in the agent's clock) only: the window a
/// report of a foreign server judges. Without it the tap's section of an
/// audit of a long-running agent would tell of every client since the tap
/// started. Its counters (connections followed, segments) stay the
/// tap's totals, and say so.
fn tap_within(
    agents: &[AgentFiles],
    joined: &Joined,
    from: u64,
    to: u64,
) -> Option<tapped::TapSummary> {
    let latest = agents.iter().max_by_key(|a| a.run.as_ref().map(|r| r.1))?;
    let records = AgentSource::records(latest).filter(|r| match r {
        AgentRecord::TapBroadcast(b) => b
            .copies
            .iter()
            .map(|c| c.first_byte_wall_ns)
            .min()
            .is_some_and(|t| from <= t && t <= to),
        _ => true,
    });
    let tap = tapped::TapJoin::new(joined, records)?;
    Some(tap.finish(joined, &mut Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::read_inputs;
    use skewscope_core::log::LogKind;
    use skewscope_os::log_files::FileLogWriter;

    #[test]
    fn the_tap_section_of_a_window_is_of_that_window_only() {
        use skewscope_core::log::LogWriter;
        use skewscope_core::record::{AgentStarted, SendOrder, TapBroadcast, TapCopy, TapStarted};
        let second = 1_000_000_000u64;
        let t0 = 1_764_000_000 * second;
        let stamp = |ns: u64| skewscope_core::Stamp {
            wall_ns: t0 + ns,
            mono_ns: ns,
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent-1-0000.sklog");
        let mut w = LogWriter::create(&path, LogKind::Agent).unwrap();
        w.append(&AgentRecord::Started(AgentStarted {
            host: "server".into(),
            version: "t".into(),
            at: stamp(0),
            shards: 1,
            order: SendOrder::Fixed,
            per_client_times: true,
        }))
        .unwrap();
        w.append(&AgentRecord::TapStarted(TapStarted {
            port: 8000,
            interface: None,
            at: stamp(1),
        }))
        .unwrap();
        // An earlier client at 1 s, this window's two at 2 s.
        for (id, at, clients) in [(1, 1, &["early:1"][..]), (2, 2, &["a:1", "b:1"][..])] {
            w.append(&AgentRecord::TapBroadcast(TapBroadcast {
                id,
                seq: None,
                hash: id,
                len: 10,
                copies: clients
                    .iter()
                    .map(|c| TapCopy {
                        client: (*c).into(),
                        first_byte_wall_ns: t0 + at * second,
                        last_byte_wall_ns: t0 + at * second + 1_000,
                    })
                    .collect(),
            }))
            .unwrap();
        }
        w.sync().unwrap();
        let scope = |window| Scope {
            window,
            agent_as_reference: true,
        };
        let all = analyse(
            read_inputs(std::slice::from_ref(&path)).unwrap(),
            None,
            scope(None),
            false,
        )
        .unwrap()
        .0;
        assert_eq!(all.tap.as_ref().unwrap().clients, 3);
        let window = Window::FirstReceiptBetween {
            from_wall_ns: t0 + 3 * second / 2,
            to_wall_ns: t0 + 3 * second,
        };
        let within = analyse(
            read_inputs(&[path]).unwrap(),
            None,
            scope(Some(window)),
            false,
        )
        .unwrap()
        .0;
        let tap = within.tap.unwrap();
        assert_eq!((tap.broadcasts, tap.clients), (1, 2), "{tap:?}");
        assert!(tap.per_client.iter().all(|c| c.client != "early:1"));
    }
}
