//! Reading the log files a report is built from.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use skewscope_core::analysis::figures::{Figures, FiguresBuilder};
use skewscope_core::analysis::join::{
    self, AgentSource, BroadcastSink, Joined, JoinedBroadcast, ProbeSource, Window,
};
use skewscope_core::analysis::report::{InputSummary, Report, ReportBuilder};
use skewscope_core::analysis::triggers::TriggerLatencyBuilder;
use skewscope_core::log::{LogFileReader, LogKind};
use skewscope_core::record::{AgentRecord, ProbeRecord};

use crate::log_files::{AgentFiles, LogFiles, ProbeFiles};

/// The logs given, sorted by writer and run, as files the join reads as it
/// goes (a log can be far larger than memory should be).
pub struct Inputs {
    /// Each agent run's files (its segments in order), in the order given.
    pub agents: Vec<AgentFiles>,
    /// Each probe run's files (a rotated log's segments), in the order given.
    pub probes: Vec<ProbeFiles>,
    /// What each file contributed and what was lost reading it.
    pub summaries: Vec<InputSummary>,
}

/// The record logs named: files as given, and for a directory (an agent's
/// data directory) every `.sklog` in it and in its `probes/` (uploaded runs),
/// sorted by name.
pub fn expand(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        if !path.is_dir() {
            files.push(path.clone());
            continue;
        }
        let mut found = Vec::new();
        for dir in [path.clone(), path.join("probes")] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
                let p = entry.path();
                if p.extension().is_some_and(|x| x == "sklog") && p.is_file() {
                    found.push(p);
                }
            }
        }
        if found.is_empty() {
            bail!(
                "{}: a directory with no record logs (*.sklog) in it",
                path.display()
            );
        }
        found.sort();
        files.extend(found);
    }
    Ok(files)
}

/// Reads every file through once; damage inside a file is recovered and
/// counted, a foreign or unreadable file is an error naming it. Nothing is
/// kept but what the report's inputs table says and which run each file is.
pub fn read_inputs(files: &[PathBuf]) -> anyhow::Result<Inputs> {
    let mut inputs = Inputs {
        agents: Vec::new(),
        probes: Vec::new(),
        summaries: Vec::new(),
    };
    for path in files {
        let file = path.display().to_string();
        let mut reader = LogFileReader::open(path)?;
        let mut count = 0u64;
        let kind = match reader.kind() {
            LogKind::Agent => {
                let mut run = None;
                while let Some(r) = reader.next_record::<AgentRecord>()? {
                    count += 1;
                    if let (None, AgentRecord::Started(s)) = (&run, r) {
                        run = Some((s.host, s.at.wall_ns));
                    }
                }
                let mut log = AgentFiles {
                    files: LogFiles::default(),
                    run,
                };
                log.files.push(path.clone(), reader.read_len(), count);
                // Another segment of a run already read (rotated by size or
                // SIGHUP) continues it; else it is another run (a restart).
                match inputs
                    .agents
                    .iter_mut()
                    .find(|a| log.run.is_some() && a.run == log.run)
                {
                    Some(earlier) => earlier.files.extend(log.files),
                    None => inputs.agents.push(log),
                }
                "agent"
            }
            LogKind::Probe => {
                let mut log = ProbeFiles {
                    files: LogFiles::default(),
                    run: None,
                    run_id: None,
                    hub_side: false,
                    foreign_side: false,
                };
                while let Some(r) = reader.next_record::<ProbeRecord>()? {
                    count += 1;
                    match r {
                        ProbeRecord::Started(s) if log.run.is_none() => {
                            log.run = Some((s.name, s.host, s.at.wall_ns));
                        }
                        ProbeRecord::Identity(i) if log.run_id.is_none() => {
                            log.run_id = Some(i.run_id)
                        }
                        ProbeRecord::ConnectionOpened(o) => {
                            log.hub_side |= o.agent_conn.is_some();
                            log.foreign_side |= o.agent_conn.is_none();
                        }
                        _ => {}
                    }
                }
                log.files.push(path.clone(), reader.read_len(), count);
                // A probe log reopened after rotation continues the same run.
                match inputs
                    .probes
                    .iter_mut()
                    .find(|p| log.run.is_some() && p.run == log.run)
                {
                    Some(earlier) => {
                        earlier.files.extend(log.files);
                        earlier.run_id = earlier.run_id.or(log.run_id);
                        earlier.hub_side |= log.hub_side;
                        earlier.foreign_side |= log.foreign_side;
                    }
                    None => inputs.probes.push(log),
                }
                "probe"
            }
        };
        inputs.summaries.push(InputSummary {
            file,
            kind,
            records: count,
            skipped_bytes: reader.skipped_bytes(),
            torn_tail: reader.torn_tail(),
        });
    }
    Ok(inputs)
}

/// Which broadcasts a report covers, and whose they were.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// Only these broadcasts (an audit's); all when `None`.
    pub window: Option<Window>,
    /// The probes listened to a server that is not the agent: the agent's
    /// log is the clock reference only, broadcasts are what probes received.
    pub agent_as_reference: bool,
}

/// The probe logs a join within `scope` reads: a window of the agent's
/// broadcasts joins only probes the agent named (connected to its hub); a
/// report of a foreign server only probes it did not: a data directory can
/// hold both.
fn probes_in(inputs: &Inputs, scope: Scope) -> Vec<&dyn ProbeSource> {
    inputs
        .probes
        .iter()
        .filter(|p| match (scope.agent_as_reference, scope.window) {
            (true, _) | (false, Some(Window::FirstReceiptBetween { .. })) => p.foreign_side,
            (false, Some(Window::AgentIds { .. })) => p.hub_side,
            (false, None) => true,
        })
        .map(|p| p as &dyn ProbeSource)
        .collect()
}

/// Joins the inputs within `scope`, every broadcast to `sink`.
fn join_into(
    inputs: &Inputs,
    scope: Scope,
    sink: &mut dyn BroadcastSink,
) -> anyhow::Result<Joined> {
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
        inner: sink,
    };
    let joined = match (latest, scope.agent_as_reference) {
        (Some(agent), true) => join::join_sources_with_reference(agent, &probes, &mut within),
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
    Ok(joined)
}

/// Passes on the broadcasts inside a window.
struct Within<'a> {
    window: Option<Window>,
    inner: &'a mut dyn BroadcastSink,
}

impl BroadcastSink for Within<'_> {
    fn broadcast(&mut self, run: &Joined, broadcast: JoinedBroadcast) {
        let latest = run.agent_runs.saturating_sub(1);
        if self.window.is_none_or(|w| w.contains(&broadcast, latest)) {
            self.inner.broadcast(run, broadcast);
        }
    }
}

/// Joins the inputs within `scope`, every broadcast kept (the audit's
/// progress needs them; a report streams them instead).
pub fn join(inputs: &Inputs, scope: Scope) -> anyhow::Result<Joined> {
    let mut rows: Vec<JoinedBroadcast> = Vec::new();
    let mut joined = join_into(inputs, scope, &mut rows)?;
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
            t.add(&broadcast);
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
    let mut analysis = Analysis {
        report: None,
        figures: None,
        triggers: triggers.map(TriggerLatencyBuilder::new),
        want_figures: figures,
    };
    let joined = join_into(&inputs, scope, &mut analysis)?;
    analysis.started(&joined);
    let mut report = analysis
        .report
        .as_ref()
        .expect("started above")
        .finish(&joined, inputs.summaries);
    report.latency_from_trigger = analysis.triggers.as_ref().map(|t| t.finish());
    let figures = analysis.figures.map(|f| f.finish(&joined));
    Ok((report, figures))
}

/// Reads a triggers file (see [`skewscope_core::analysis::triggers::parse`]); errors name the file
/// and line.
pub fn read_triggers(path: &Path) -> anyhow::Result<Vec<u64>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read triggers file {}", path.display()))?;
    let times = skewscope_core::analysis::triggers::parse(&text)
        .with_context(|| format!("{}", path.display()))?;
    if times.is_empty() {
        bail!("{}: no trigger times in it", path.display());
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_rewritten_between_reading_and_joining_is_an_error_not_a_wrong_report() {
        use skewscope_core::log::LogWriter;
        use skewscope_core::record::{MessageKey, Receipt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.sklog");
        let write = |n: u64| {
            let mut w = LogWriter::create(&path, LogKind::Probe).unwrap();
            for i in 0..n {
                w.append(&ProbeRecord::Receipt(Receipt {
                    conn: 0,
                    key: MessageKey::Seq(i),
                    hash: i,
                    len: 1,
                    at: skewscope_core::Stamp {
                        wall_ns: 1_700_000_000_000_000_000 + i,
                        mono_ns: i,
                    },
                    kernel_delay_ns: None,
                }))
                .unwrap();
            }
            w.sync().unwrap();
        };
        write(100);
        let inputs = read_inputs(std::slice::from_ref(&path)).unwrap();
        // Rotated by copytruncate and written again, shorter.
        write(40);
        let err = analyse(inputs, None, Scope::default(), false).unwrap_err();
        assert!(
            err.to_string().contains("changed while the report read it"),
            "{err}"
        );
    }

    #[test]
    fn a_data_directory_stands_for_its_logs_and_uploaded_runs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("probes")).unwrap();
        for name in ["agent-1-0000.sklog", "notes.txt", "probes/probe-ab.sklog"] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let files = expand(&[dir.path().to_owned()]).unwrap();
        assert_eq!(
            files,
            vec![
                dir.path().join("agent-1-0000.sklog"),
                dir.path().join("probes/probe-ab.sklog")
            ]
        );
        let empty = tempfile::tempdir().unwrap();
        let err = expand(&[empty.path().to_owned()]).unwrap_err();
        assert!(err.to_string().contains("no record logs"), "{err}");
    }
}
