//! Reading the log files a report is built from: the paths given, expanded
//! (a data directory stands for its logs), sorted by writer and run.

use std::path::PathBuf;

use anyhow::{Context, bail};
use skewscope_core::analysis::report::InputSummary;
use skewscope_core::log::LogKind;
use skewscope_core::page_ingest::parse_page_label;
use skewscope_core::record::{AgentRecord, ProbeRecord};
use skewscope_os::log_files::LogFileReader;

use crate::log_files::{AgentFiles, LogFiles, ProbeFiles};
use crate::matching::{Matcher, PayloadVerdicts};

/// The logs given, sorted by writer and run, as files the join reads as it
/// goes (a log can be far larger than memory should be).
pub struct Inputs {
    /// Each agent run's files (its segments in order), in the order given.
    pub agents: Vec<AgentFiles>,
    /// Each probe run's files (a rotated log's segments), in the order given.
    pub probes: Vec<ProbeFiles>,
    /// What each file contributed and what was lost reading it.
    pub summaries: Vec<InputSummary>,
    /// `--match`: the expression and its verdict on every payload the
    /// probes recorded; `None` judges every broadcast.
    pub matching: Option<Matching>,
}

/// `--match` applied to the payloads read.
#[derive(Debug)]
pub struct Matching {
    /// The expression, as given.
    pub expression: String,
    /// Its verdict on each recorded payload, by hash.
    pub verdicts: PayloadVerdicts,
}

/// The record logs a report reads, and the files it passed over.
#[derive(Debug, Default, PartialEq)]
pub struct Expanded {
    /// The logs to read, in order.
    pub files: Vec<PathBuf>,
    /// Empty `.sklog` files of a directory: a writer killed (or out of
    /// disk) before its header; nothing of a run is in them.
    pub empty: Vec<PathBuf>,
}

impl Expanded {
    /// The report's inputs table says each empty file passed over (as an
    /// `"empty"` input of no records), so no file named is left unsaid.
    pub fn note_in(&self, report: &mut skewscope_core::analysis::report::Report) {
        report.inputs.extend(self.empty.iter().map(|p| {
            skewscope_core::analysis::report::InputSummary {
                file: p.display().to_string(),
                kind: "empty",
                records: 0,
                skipped_bytes: 0,
                torn_tail: false,
            }
        }));
    }
}

/// The record logs named: files as given, and for a directory (an agent's
/// data directory) every `.sklog` in it and in its `probes/` (uploaded runs),
/// sorted by name; an empty file there is passed over ([`Expanded::empty`]).
pub fn expand(paths: &[PathBuf]) -> anyhow::Result<Expanded> {
    let mut files = Vec::new();
    let mut empty = Vec::new();
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
                if !(p.extension().is_some_and(|x| x == "sklog") && p.is_file()) {
                    continue;
                }
                // A writer killed (or out of disk) between creating its file
                // and writing the header leaves an empty one: nothing of the
                // run is in it, and it must not refuse the whole directory.
                if std::fs::metadata(&p).is_ok_and(|m| m.len() == 0) {
                    empty.push(p);
                    continue;
                }
                found.push(p);
            }
        }
        if found.is_empty() && empty.is_empty() {
            bail!(
                "{}: a directory with no record logs (*.sklog) in it",
                path.display()
            );
        }
        found.sort();
        files.extend(found);
    }
    empty.sort();
    Ok(Expanded { files, empty })
}

/// Reads every file through once; damage inside a file is recovered and
/// counted, a foreign or unreadable file is an error naming it. Nothing is
/// kept but what the report's inputs table says and which run each file is.
pub fn read_inputs(files: &[PathBuf]) -> anyhow::Result<Inputs> {
    read_inputs_matching(files, None)
}

/// [`read_inputs`], judging every recorded payload with `--match`'s
/// `matcher` (given as `expression`) on the way.
pub fn read_inputs_matching(
    files: &[PathBuf],
    matcher: Option<(&str, &Matcher)>,
) -> anyhow::Result<Inputs> {
    let mut inputs = Inputs {
        agents: Vec::new(),
        probes: Vec::new(),
        summaries: Vec::new(),
        matching: matcher.map(|(expression, _)| Matching {
            expression: expression.to_owned(),
            verdicts: PayloadVerdicts::default(),
        }),
    };
    for path in files {
        let file = path.display().to_string();
        let mut reader = LogFileReader::open(path)?;
        let mut count = 0u64;
        let kind = match reader.kind() {
            LogKind::Agent => {
                let mut run = None;
                let mut tapped_port = None;
                let mut page_runs = std::collections::BTreeSet::new();
                while let Some(r) = reader.next_record::<AgentRecord>()? {
                    count += 1;
                    match r {
                        AgentRecord::Started(s) if run.is_none() => {
                            run = Some((s.host, s.at.wall_ns));
                        }
                        AgentRecord::TapStarted(t) => tapped_port = Some(t.port),
                        AgentRecord::ConnectionOpened(o) => {
                            if let Some((run_id, _)) = o.label.as_deref().and_then(parse_page_label)
                            {
                                page_runs.insert(run_id);
                            }
                        }
                        _ => {}
                    }
                }
                let mut log = AgentFiles {
                    files: LogFiles::default(),
                    run,
                    tapped_port,
                    page_runs,
                };
                log.files.push(path.clone(), reader.read_len(), count);
                // Another segment of a run already read (rotated by size or
                // SIGHUP) continues it; else it is another run (a restart).
                match inputs
                    .agents
                    .iter_mut()
                    .find(|a| log.run.is_some() && a.run == log.run)
                {
                    Some(earlier) => {
                        earlier.files.extend(log.files);
                        earlier.tapped_port = earlier.tapped_port.or(log.tapped_port);
                        earlier.page_runs.extend(log.page_runs);
                    }
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
                    foreign_ports: Default::default(),
                };
                let mut foreign_conns = std::collections::HashSet::new();
                let mut opened_conns = std::collections::HashSet::new();
                let mut app_run = false;
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
                            opened_conns.insert(o.conn);
                            if o.agent_conn.is_none() {
                                foreign_conns.insert(o.conn);
                            }
                        }
                        // An app's own socket, which it never reports
                        // opening (it hands the module what it read): a
                        // server the agent did not name.
                        ProbeRecord::Receipt(r) if app_run && !opened_conns.contains(&r.conn) => {
                            log.foreign_side = true;
                        }
                        ProbeRecord::App(_) => app_run = true,
                        ProbeRecord::Payload(p) => {
                            if let (Some((_, m)), Some(matching)) = (matcher, &mut inputs.matching)
                            {
                                matching.verdicts.add(m, &p);
                            }
                        }
                        ProbeRecord::ConnectionAddresses(a) if foreign_conns.contains(&a.conn) => {
                            if let Some(port) =
                                a.remote.rsplit_once(':').and_then(|(_, p)| p.parse().ok())
                            {
                                log.foreign_ports.insert(port);
                            }
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
                        earlier.foreign_ports.extend(log.foreign_ports);
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
    // A browser probe cannot name the hub in its records; the hub named it.
    for probe in &mut inputs.probes {
        if let Some(run_id) = probe.run_id
            && inputs.agents.iter().any(|a| a.page_runs.contains(&run_id))
        {
            probe.hub_side = true;
            probe.foreign_side = false;
        }
    }
    Ok(inputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::joined::{Scope, analyse};
    use skewscope_os::log_files::FileLogWriter;

    #[test]
    fn an_empty_log_in_a_data_directory_is_skipped_not_fatal() {
        use skewscope_core::log::LogWriter;
        let dir = tempfile::tempdir().unwrap();
        let kept = dir.path().join("agent-1.sklog");
        LogWriter::create(&kept, LogKind::Agent).unwrap();
        // What an agent killed (or out of disk) before its header leaves.
        std::fs::write(dir.path().join("agent-2.sklog"), b"").unwrap();
        let expanded = expand(&[dir.path().to_owned()]).unwrap();
        assert_eq!(expanded.files, vec![kept.clone()]);
        assert_eq!(expanded.empty, vec![dir.path().join("agent-2.sklog")]);
        // The report says so in its inputs.
        let inputs = read_inputs(&expanded.files).unwrap();
        let (mut report, _) = analyse(inputs, None, Scope::default(), false).unwrap();
        expanded.note_in(&mut report);
        let noted = report.inputs.iter().find(|i| i.kind == "empty").unwrap();
        assert!(noted.file.ends_with("agent-2.sklog"), "{noted:?}");
        // Named on its own, it is still an error that says what it is.
        let empty = dir.path().join("agent-2.sklog");
        assert!(read_inputs(&[empty]).is_err());
    }

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
            std::fs::write(dir.path().join(name), b"not empty").unwrap();
        }
        let files = expand(&[dir.path().to_owned()]).unwrap().files;
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
