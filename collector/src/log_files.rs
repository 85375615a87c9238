//! Log files as the join reads them: again on each of its passes, each file
//! up to the length it had when first read, and checked to hold the records
//! it held then. Nothing here keeps a file's records in memory.

use std::cell::RefCell;
use std::path::PathBuf;

use anyhow::bail;
use serde::de::DeserializeOwned;
use skewscope_core::analysis::join::{AgentSource, ProbeSource};
use skewscope_core::record::{AgentRecord, ProbeRecord};
use skewscope_os::log_files::LogFileReader;

/// One run's files (a rotated log's segments, in order).
#[derive(Default)]
pub struct LogFiles {
    /// Each file, the bytes read of it and the records found in them.
    files: Vec<(PathBuf, u64, u64)>,
    /// Why a later pass could not read a file, if one could not.
    failed: RefCell<Option<String>>,
}

impl LogFiles {
    /// Adds the next segment: `len` bytes of `path` held `records` records.
    pub fn push(&mut self, path: PathBuf, len: u64, records: u64) {
        self.files.push((path, len, records));
    }

    /// Appends another run's files (a later segment of the same run).
    pub fn extend(&mut self, other: LogFiles) {
        self.files.extend(other.files);
    }

    /// An error if a pass after the first could not read one of the files,
    /// or found it changed.
    pub fn check(&self) -> anyhow::Result<()> {
        match self.failed.borrow().as_ref() {
            Some(e) => bail!("{e}"),
            None => Ok(()),
        }
    }

    fn fail(&self, why: String) {
        self.failed.borrow_mut().get_or_insert(why);
    }

    /// The records of every file in turn.
    fn records<R: DeserializeOwned + 'static>(&self) -> Box<dyn Iterator<Item = R> + '_> {
        Box::new(self.files.iter().flat_map(move |(path, len, records)| {
            let mut reader = LogFileReader::open_upto(path, *len)
                .map_err(|e| self.fail(e.to_string()))
                .ok();
            let mut read = 0u64;
            std::iter::from_fn(move || match reader.as_mut()?.next_record() {
                Ok(Some(record)) => {
                    read += 1;
                    Some(record)
                }
                Ok(None) => {
                    // Rewritten in place (a copytruncate rotation) while the
                    // report read it: the passes would disagree.
                    if read != *records {
                        self.fail(format!(
                            "{}: changed while the report read it ({records} records, then {read}); report a copy",
                            path.display()
                        ));
                    }
                    None
                }
                Err(e) => {
                    self.fail(e.to_string());
                    None
                }
            })
        }))
    }
}

/// One probe run's log files, and what the report needs to know of them
/// before joining.
pub struct ProbeFiles {
    /// The files.
    pub files: LogFiles,
    /// Name, host and start of its `Started` record.
    pub run: Option<(String, String, u64)>,
    /// Its `Identity` record's run id.
    pub run_id: Option<u128>,
    /// Whether any connection was to the agent's hub (the agent named it).
    pub hub_side: bool,
    /// Whether any connection was to a server that is not the agent.
    pub foreign_side: bool,
    /// The server ports those connections went to (their remote address).
    pub foreign_ports: std::collections::BTreeSet<u16>,
}

impl ProbeSource for ProbeFiles {
    fn records(&self) -> Box<dyn Iterator<Item = ProbeRecord> + '_> {
        self.files.records()
    }
}

/// One agent run's log files (its segments).
pub struct AgentFiles {
    /// The files.
    pub files: LogFiles,
    /// Host and start of its `Started` record: what names the run.
    pub run: Option<(String, u64)>,
    /// The server port its tap followed (`--tap-port`), if it tapped one.
    pub tapped_port: Option<u16>,
    /// Browser probe runs whose connections its hub served (by their
    /// `page.RUNID.CONN` labels): their records cannot name the hub.
    pub page_runs: std::collections::BTreeSet<u128>,
}

impl AgentSource for AgentFiles {
    fn records(&self) -> Box<dyn Iterator<Item = AgentRecord> + '_> {
        self.files.records()
    }
}
