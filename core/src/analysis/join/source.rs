//! Where a join reads its records from, and where it hands each final
//! broadcast: in memory for tests and small runs, files read as they come
//! for the collector, so a long log is never held whole.

use super::model::{Joined, JoinedBroadcast};
use crate::record::{AgentRecord, ProbeRecord};

/// A probe log the join can read more than once: the first pass reads its
/// own side, the second its receipts. Files are read as they come, so a
/// long log is never held whole.
pub trait ProbeSource {
    /// Its records, in log order, from the start.
    fn records(&self) -> Box<dyn Iterator<Item = ProbeRecord> + '_>;
}

/// Records in memory: a slice, a Vec, or a reference to either.
impl<R: AsRef<[ProbeRecord]>> ProbeSource for R {
    fn records(&self) -> Box<dyn Iterator<Item = ProbeRecord> + '_> {
        Box::new(self.as_ref().iter().cloned())
    }
}

/// An agent run's records, read once by the join for its index of the
/// broadcasts: in memory, or files read as they come.
pub trait AgentSource {
    /// Its records, in log order (its segments in turn), from the start.
    fn records(&self) -> Box<dyn Iterator<Item = AgentRecord> + '_>;
}

/// Records in memory: a slice, a Vec, or a reference to either.
impl<R: AsRef<[AgentRecord]>> AgentSource for R {
    fn records(&self) -> Box<dyn Iterator<Item = AgentRecord> + '_> {
        Box::new(self.as_ref().iter().cloned())
    }
}

/// Where a streamed join hands each broadcast once it is final, with the run
/// it belongs to (connections, probes, agent; not yet its final counts).
pub trait BroadcastSink {
    /// One final broadcast.
    fn broadcast(&mut self, run: &Joined, broadcast: JoinedBroadcast);
}

impl BroadcastSink for Vec<JoinedBroadcast> {
    fn broadcast(&mut self, _run: &Joined, broadcast: JoinedBroadcast) {
        self.push(broadcast);
    }
}
