//! Reading the log files a report is built from.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use skewscope_core::analysis::join::{Joined, Window};
use skewscope_core::analysis::report::InputSummary;
use skewscope_core::log::{AnyLog, read_file};
use skewscope_core::record::{AgentRecord, ProbeRecord};

/// Every record from the files given, sorted by writer.
pub struct Inputs {
    /// Each agent run's records (its segments in order), in the order given.
    pub agents: Vec<Vec<AgentRecord>>,
    /// Each probe log's records, in the order given.
    pub probes: Vec<Vec<ProbeRecord>>,
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

/// Reads every file; damage inside a file is recovered and counted, a foreign
/// or unreadable file is an error naming it.
pub fn read_inputs(files: &[PathBuf]) -> anyhow::Result<Inputs> {
    let mut inputs = Inputs {
        agents: Vec::new(),
        probes: Vec::new(),
        summaries: Vec::new(),
    };
    for path in files {
        let file = path.display().to_string();
        match read_file(path)? {
            AnyLog::Agent(decoded) => {
                inputs.summaries.push(InputSummary {
                    file: file.clone(),
                    kind: "agent",
                    records: decoded.records.len() as u64,
                    skipped_bytes: decoded.skipped_bytes,
                    torn_tail: decoded.torn_tail,
                });
                let run = agent_run(&decoded.records);
                // Another segment of a run already read (rotated by size or
                // SIGHUP) continues it; else it is another run (a restart).
                match inputs
                    .agents
                    .iter_mut()
                    .find(|a| run.is_some() && agent_run(a) == run)
                {
                    Some(records) => records.extend(decoded.records),
                    None => inputs.agents.push(decoded.records),
                }
            }
            AnyLog::Probe(decoded) => {
                inputs.summaries.push(InputSummary {
                    file,
                    kind: "probe",
                    records: decoded.records.len() as u64,
                    skipped_bytes: decoded.skipped_bytes,
                    torn_tail: decoded.torn_tail,
                });
                let run = probe_run(&decoded.records);
                // A probe log reopened after rotation continues the same run.
                match inputs
                    .probes
                    .iter_mut()
                    .find(|p| run.is_some() && probe_run(p) == run)
                {
                    Some(records) => records.extend(decoded.records),
                    None => inputs.probes.push(decoded.records),
                }
            }
        }
    }
    Ok(inputs)
}

/// An agent run's identity: its `Started` record's host and time.
fn agent_run(records: &[AgentRecord]) -> Option<(String, u64)> {
    records.iter().find_map(|r| match r {
        AgentRecord::Started(s) => Some((s.host.clone(), s.at.wall_ns)),
        _ => None,
    })
}

/// A probe run's identity: its `Started` record's name, host and time.
fn probe_run(records: &[ProbeRecord]) -> Option<(String, String, u64)> {
    records.iter().find_map(|r| match r {
        ProbeRecord::Started(s) => Some((s.name.clone(), s.host.clone(), s.at.wall_ns)),
        _ => None,
    })
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

/// Joins the inputs within `scope`. A window of the agent's broadcasts
/// joins only probes the agent named (connected to its hub); a report of a
/// foreign server only probes it did not: a data directory can hold both.
pub fn join(inputs: &Inputs, scope: Scope) -> Joined {
    let hub_side = |records: &[ProbeRecord]| {
        records
            .iter()
            .any(|r| matches!(r, ProbeRecord::ConnectionOpened(o) if o.agent_conn.is_some()))
    };
    let foreign_side = |records: &[ProbeRecord]| {
        records
            .iter()
            .any(|r| matches!(r, ProbeRecord::ConnectionOpened(o) if o.agent_conn.is_none()))
    };
    let probes: Vec<&[ProbeRecord]> = inputs
        .probes
        .iter()
        .map(Vec::as_slice)
        .filter(|p| match (scope.agent_as_reference, scope.window) {
            (true, _) | (false, Some(Window::FirstReceiptBetween { .. })) => foreign_side(p),
            (false, Some(Window::AgentIds { .. })) => hub_side(p),
            (false, None) => true,
        })
        .collect();
    let agents: Vec<&[AgentRecord]> = inputs.agents.iter().map(Vec::as_slice).collect();
    let latest = agents
        .iter()
        .copied()
        .max_by_key(|a| agent_run(a).map(|r| r.1));
    let mut joined = match (latest, scope.agent_as_reference) {
        (Some(agent), true) => skewscope_core::analysis::join::join_with_reference(agent, &probes),
        _ => skewscope_core::analysis::join::join_runs(&agents, &probes),
    };
    if let Some(window) = &scope.window {
        joined.keep(window);
    }
    joined
}

/// Joins the inputs and computes the report; with trigger times (sorted), also
/// the latency from them.
pub fn report(
    inputs: Inputs,
    triggers: Option<&[u64]>,
) -> skewscope_core::analysis::report::Report {
    report_within(inputs, triggers, Scope::default())
}

/// [`report`] of the broadcasts in `scope` only.
pub fn report_within(
    inputs: Inputs,
    triggers: Option<&[u64]>,
    scope: Scope,
) -> skewscope_core::analysis::report::Report {
    analyse(inputs, triggers, scope, false).0
}

/// [`report_within`], and the series the HTML page plots when `figures`
/// (computed from the same join, so the page and the table agree).
pub fn analyse(
    inputs: Inputs,
    triggers: Option<&[u64]>,
    scope: Scope,
    figures: bool,
) -> (
    skewscope_core::analysis::report::Report,
    Option<skewscope_core::analysis::figures::Figures>,
) {
    let joined = join(&inputs, scope);
    let mut report = skewscope_core::analysis::report::Report::build(&joined, inputs.summaries);
    report.latency_from_trigger =
        triggers.map(|t| skewscope_core::analysis::triggers::latency(&joined, t));
    let figures = figures.then(|| skewscope_core::analysis::figures::figures(&joined));
    (report, figures)
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
