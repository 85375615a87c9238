//! Reading the log files a report is built from.

use std::path::PathBuf;

use anyhow::bail;
use wire::log::{AnyLog, read_file};
use wire::record::{AgentRecord, ProbeRecord};
use wire::report::InputSummary;

/// Every record from the files given, sorted by writer.
pub struct Inputs {
    /// The agent's records, if an agent log was given.
    pub agent: Option<Vec<AgentRecord>>,
    /// Each probe log's records, in the order given.
    pub probes: Vec<Vec<ProbeRecord>>,
    /// What each file contributed and what was lost reading it.
    pub summaries: Vec<InputSummary>,
}

/// Reads every file; damage inside a file is recovered and counted, a foreign
/// or unreadable file is an error naming it.
pub fn read_inputs(files: &[PathBuf]) -> anyhow::Result<Inputs> {
    let mut inputs = Inputs {
        agent: None,
        probes: Vec::new(),
        summaries: Vec::new(),
    };
    for path in files {
        let file = path.display().to_string();
        match read_file(path)? {
            AnyLog::Agent(decoded) => {
                if inputs.agent.is_some() {
                    bail!(
                        "{file}: a second agent log; report one agent run at a time (with that run's probe logs)"
                    );
                }
                inputs.summaries.push(InputSummary {
                    file,
                    kind: "agent",
                    records: decoded.records.len() as u64,
                    skipped_bytes: decoded.skipped_bytes,
                    torn_tail: decoded.torn_tail,
                });
                inputs.agent = Some(decoded.records);
            }
            AnyLog::Probe(decoded) => {
                inputs.summaries.push(InputSummary {
                    file,
                    kind: "probe",
                    records: decoded.records.len() as u64,
                    skipped_bytes: decoded.skipped_bytes,
                    torn_tail: decoded.torn_tail,
                });
                inputs.probes.push(decoded.records);
            }
        }
    }
    Ok(inputs)
}

/// Joins the inputs and computes the report.
pub fn report(inputs: Inputs) -> wire::report::Report {
    let probes: Vec<&[ProbeRecord]> = inputs.probes.iter().map(Vec::as_slice).collect();
    let joined = wire::join::join(inputs.agent.as_deref(), &probes);
    wire::report::Report::build(&joined, inputs.summaries)
}
