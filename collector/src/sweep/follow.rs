//! A stage's probe log, read as the probe writes it: how many receipts
//! each connection has, which are open, which failed or were dropped.
//! The sweep waits on it (a broadcast is complete when every open
//! connection has received it), so it never sleeps a fixed time where
//! the log can say.

use std::path::Path;

use skewscope_core::record::ProbeRecord;
use skewscope_os::log_files::LogFollower;

/// What the log of one stage says so far.
pub struct StageLog {
    follower: LogFollower,
    /// Receipts so far, by connection index.
    receipts: Vec<u64>,
    /// Whether each connection is open now (opened, and not closed).
    open: Vec<bool>,
    opened: u32,
    /// Of those, connections a skewscope agent's hub named.
    named_by_hub: u32,
    failed: u32,
    closed: u32,
    first_failure: Option<String>,
    first_close: Option<String>,
    compressed: Compressed,
}

/// Connections whose server compressed what it sent them (permessage-deflate):
/// the probe inflates each of their messages, so their receipts cost more
/// than a plain one, and more again with a window kept per connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Compressed {
    /// Connections that negotiated permessage-deflate.
    pub connections: u32,
    /// Of them, those whose server keeps its context between messages (RFC
    /// 7692 context takeover): each holds its own 32 KiB window to inflate
    /// with; the others share one per thread.
    pub keeping_context: u32,
}

impl Compressed {
    /// What a reader of the own-CPU figure must know, when any connection
    /// was compressed: it includes inflating, which a plain server spares.
    pub fn note(&self, opened: u32) -> Option<String> {
        (self.connections > 0).then(|| {
            let how = match self.keeping_context {
                0 => "each message compressed alone".to_owned(),
                n if n == self.connections => {
                    "keeping its context: a 32 KiB window each to inflate with".to_owned()
                }
                n => format!("{n} of them keeping its context"),
            };
            format!(
                "the server compressed what it sent on {} of {} connection(s) (permessage-deflate, {how}): the own CPU per receipt includes inflating (--no-deflate to compare plain)",
                self.connections, opened
            )
        })
    }
}

impl StageLog {
    /// Follows the log at `path` of a probe of `connections` connections.
    pub fn open(path: &Path, connections: u32) -> anyhow::Result<StageLog> {
        Ok(StageLog {
            follower: LogFollower::open(path)?,
            receipts: vec![0; connections as usize],
            open: vec![false; connections as usize],
            opened: 0,
            named_by_hub: 0,
            failed: 0,
            closed: 0,
            first_failure: None,
            first_close: None,
            compressed: Compressed::default(),
        })
    }

    /// Reads what the probe has written since the last call.
    pub fn catch_up(&mut self) -> anyhow::Result<()> {
        while let Some(record) = self.follower.next_record::<ProbeRecord>()? {
            match record {
                ProbeRecord::Receipt(r) => {
                    if let Some(n) = self.receipts.get_mut(r.conn as usize) {
                        *n += 1;
                    }
                }
                ProbeRecord::ConnectionOpened(o) => {
                    if let Some(open) = self.open.get_mut(o.conn as usize) {
                        *open = true;
                    }
                    self.opened += 1;
                    self.named_by_hub += u32::from(o.agent_conn.is_some());
                }
                ProbeRecord::ConnectionFailed(f) => {
                    self.failed += 1;
                    self.first_failure.get_or_insert(f.error);
                }
                ProbeRecord::ConnectionClosed(c) => {
                    if let Some(open) = self.open.get_mut(c.conn as usize) {
                        *open = false;
                    }
                    self.closed += 1;
                    self.first_close.get_or_insert(c.reason);
                }
                ProbeRecord::ConnectionDeflate(d) => {
                    self.compressed.connections += 1;
                    if !d.server_no_context_takeover {
                        self.compressed.keeping_context += 1;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Receipts so far, by connection index.
    pub fn receipts(&self) -> &[u64] {
        &self.receipts
    }

    /// Receipts so far on every connection.
    pub fn total_receipts(&self) -> u64 {
        self.receipts.iter().sum()
    }

    /// The connections open now.
    pub fn open_connections(&self) -> impl Iterator<Item = usize> + '_ {
        self.open
            .iter()
            .enumerate()
            .filter(|(_, open)| **open)
            .map(|(i, _)| i)
    }

    /// Connections whose opening the log holds (the probe says a
    /// connection is open a moment before its record reaches the file).
    pub fn opened(&self) -> u32 {
        self.opened
    }

    /// Connections a skewscope agent's hub named as it took them in: the
    /// server is such a hub.
    pub fn named_by_hub(&self) -> u32 {
        self.named_by_hub
    }

    /// Whether every open connection, and at least one, has received
    /// something since `before` (the receipts as they were when a
    /// broadcast was asked for).
    pub fn each_received_since(&self, before: &[u64]) -> bool {
        let mut open = self.open_connections().peekable();
        open.peek().is_some()
            && open.all(|c| self.receipts[c] > before.get(c).copied().unwrap_or(0))
    }

    /// Connection attempts that failed, and the first one's error.
    pub fn failed(&self) -> (u32, Option<&str>) {
        (self.failed, self.first_failure.as_deref())
    }

    /// Connections whose server compresses what it sends them.
    pub fn compressed(&self) -> Compressed {
        self.compressed
    }

    /// Connections that closed, and the first one's reason.
    pub fn closed(&self) -> (u32, Option<&str>) {
        (self.closed, self.first_close.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compressed_stage_says_how_and_a_plain_one_says_nothing() {
        assert_eq!(Compressed::default().note(100), None);
        let own = Compressed {
            connections: 100,
            keeping_context: 100,
        };
        assert!(own.note(100).unwrap().contains(
            "on 100 of 100 connection(s) (permessage-deflate, keeping its context: a 32 KiB window each"
        ));
        let alone = Compressed {
            connections: 3,
            keeping_context: 0,
        };
        assert!(alone.note(5).unwrap().contains(
            "on 3 of 5 connection(s) (permessage-deflate, each message compressed alone)"
        ));
        let some = Compressed {
            connections: 4,
            keeping_context: 1,
        };
        assert!(
            some.note(4)
                .unwrap()
                .contains("1 of them keeping its context")
        );
    }
}
