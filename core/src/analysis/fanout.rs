//! A broadcast's fan-out as the agent's records tell it: how many clients
//! it targeted, queued behind a full send buffer or dropped, and its
//! **span**, from the start to the last completed write over every shard.
//!
//! The one definition of the span, used by the report's join, the live
//! join and the agent's `/metrics`, so the three cannot disagree:
//! - a copy counts when its write completed: at its slot's time when the
//!   shard wrote it whole (a slot time of 0 is "not recorded"), or at its
//!   `SendCompleted` when it was queued first;
//! - a queued copy is waited for until it completes or its client closes
//!   (then it never counts); a dropped or failed one never counts;
//! - a broadcast is **settled** once every shard has reported its sends and
//!   no queued copy is still waited for: nothing can change its span then.

use std::collections::BTreeMap;

use crate::Stamp;
use crate::record::{AgentRecord, SendOutcome};

/// One broadcast's fan-out, as far as its records have come.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fanout {
    /// The broadcast's start.
    pub start: Stamp,
    /// Clients targeted, over the shards that reported.
    pub targets: u32,
    /// Of those, copies queued because their send buffer was full.
    pub queued: u32,
    /// Of those, clients dropped or failed during the broadcast.
    pub dropped: u32,
    /// The last completed write of any copy (agent's monotonic clock).
    pub last_done_mono_ns: Option<u64>,
    /// Shards whose sends have not been recorded yet.
    shards_left: usize,
    /// Connections whose queued copy has neither completed nor closed.
    waiting: Vec<u64>,
}

impl Fanout {
    /// Start to the last completed write; `None` while no copy completed.
    pub fn span_ns(&self) -> Option<u64> {
        self.last_done_mono_ns
            .map(|done| done.saturating_sub(self.start.mono_ns))
    }

    /// Whether every shard has reported its sends: the targets are all known.
    pub fn shards_reported(&self) -> bool {
        self.shards_left == 0
    }

    /// Whether nothing more can change the span.
    pub fn settled(&self) -> bool {
        self.shards_reported() && self.waiting.is_empty()
    }

    fn completed(&mut self, mono_ns: u64) {
        if mono_ns != 0 {
            self.last_done_mono_ns = self.last_done_mono_ns.max(Some(mono_ns));
        }
    }
}

/// Follows every broadcast of one agent run from its start to settled.
#[derive(Debug)]
pub struct FanoutTracker {
    pending: BTreeMap<u64, Fanout>,
    shards: usize,
    /// Broadcasts followed at most; past it the oldest is handed on as it is.
    limit: usize,
}

impl Default for FanoutTracker {
    fn default() -> Self {
        FanoutTracker::new(1, usize::MAX)
    }
}

impl FanoutTracker {
    /// A tracker for an agent of `shards` shards (its `Started` record, if
    /// it comes, says again), following at most `limit` broadcasts at once:
    /// a run that records no sends (`--no-send-times`) never settles one, so
    /// a tracker that runs for ever must forget them.
    pub fn new(shards: usize, limit: usize) -> FanoutTracker {
        FanoutTracker {
            pending: BTreeMap::new(),
            shards: shards.max(1),
            limit: limit.max(1),
        }
    }

    /// Takes in one of the agent's records; returns the broadcasts it
    /// settled (and any the limit pushed out), each handed on exactly once.
    pub fn observe(&mut self, record: &AgentRecord) -> Vec<(u64, Fanout)> {
        let mut out = Vec::new();
        match record {
            AgentRecord::Started(s) => self.shards = usize::from(s.shards).max(1),
            AgentRecord::Broadcast(b) => {
                self.pending.insert(
                    b.id,
                    Fanout {
                        start: b.at,
                        targets: 0,
                        queued: 0,
                        dropped: 0,
                        last_done_mono_ns: None,
                        shards_left: self.shards,
                        waiting: Vec::new(),
                    },
                );
                while self.pending.len() > self.limit {
                    out.extend(self.pending.pop_first());
                }
            }
            AgentRecord::ShardSends(s) => {
                if let Some(f) = self.pending.get_mut(&s.broadcast) {
                    for slot in &s.slots {
                        f.targets += 1;
                        match slot.outcome {
                            SendOutcome::Written => f.completed(slot.mono_ns),
                            SendOutcome::Queued => {
                                f.queued += 1;
                                f.waiting.push(slot.conn);
                            }
                            SendOutcome::Dropped | SendOutcome::Failed => f.dropped += 1,
                        }
                    }
                    f.shards_left = f.shards_left.saturating_sub(1);
                }
                self.settle(s.broadcast, &mut out);
            }
            AgentRecord::SendCompleted(c) => {
                if let Some(f) = self.pending.get_mut(&c.broadcast) {
                    f.waiting.retain(|&conn| conn != c.conn);
                    f.completed(c.mono_ns);
                }
                self.settle(c.broadcast, &mut out);
            }
            AgentRecord::ConnectionClosed(c) => {
                // Its queued copies will never complete.
                let mut freed = Vec::new();
                for (&id, f) in &mut self.pending {
                    if f.waiting.contains(&c.conn) {
                        f.waiting.retain(|&conn| conn != c.conn);
                        freed.push(id);
                    }
                }
                for id in freed {
                    self.settle(id, &mut out);
                }
            }
            _ => {}
        }
        out
    }

    /// Broadcast `id`, while it is followed (not settled yet).
    pub fn get(&self, id: u64) -> Option<&Fanout> {
        self.pending.get(&id)
    }

    /// Broadcasts followed now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Hands on every broadcast still followed, as far as it came (a log
    /// that ended: no record will settle them).
    pub fn finish(self) -> impl Iterator<Item = (u64, Fanout)> {
        self.pending.into_iter()
    }

    fn settle(&mut self, id: u64, out: &mut Vec<(u64, Fanout)>) {
        if self.pending.get(&id).is_some_and(Fanout::settled) {
            out.extend(self.pending.remove(&id).map(|f| (id, f)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{
        AgentConnectionClosed, BroadcastStarted, CloseReason, SendCompleted, SendSlot, ShardSends,
    };

    fn at(mono_ns: u64) -> Stamp {
        Stamp {
            wall_ns: mono_ns,
            mono_ns,
        }
    }

    fn started(id: u64, mono_ns: u64) -> AgentRecord {
        AgentRecord::Broadcast(BroadcastStarted {
            id,
            seq: None,
            hash: 0,
            len: 3,
            text: true,
            at: at(mono_ns),
        })
    }

    fn sends(id: u64, shard: u16, slots: &[(u64, SendOutcome, u64)]) -> AgentRecord {
        AgentRecord::ShardSends(ShardSends {
            broadcast: id,
            shard,
            loop_start_mono_ns: 0,
            slots: slots
                .iter()
                .enumerate()
                .map(|(i, &(conn, outcome, mono_ns))| SendSlot {
                    conn,
                    position: i as u32,
                    outcome,
                    mono_ns,
                })
                .collect(),
        })
    }

    #[test]
    fn a_span_settles_once_every_shard_reported_and_no_queued_copy_is_waited_for() {
        let mut t = FanoutTracker::new(2, 16);
        assert!(t.observe(&started(1, 1_000_000)).is_empty());
        let first = sends(
            1,
            0,
            &[
                (1, SendOutcome::Written, 1_500_000),
                (10, SendOutcome::Queued, 1_600_000),
            ],
        );
        assert!(t.observe(&first).is_empty());
        let second = sends(
            1,
            1,
            &[
                (2, SendOutcome::Written, 3_000_000),
                (11, SendOutcome::Queued, 3_100_000),
                (12, SendOutcome::Dropped, 3_200_000),
            ],
        );
        assert!(t.observe(&second).is_empty(), "two copies still queued");
        assert!(t.get(1).unwrap().shards_reported());
        let completed = AgentRecord::SendCompleted(SendCompleted {
            broadcast: 1,
            conn: 10,
            mono_ns: 5_000_000,
        });
        assert!(t.observe(&completed).is_empty());
        let closed = AgentRecord::ConnectionClosed(AgentConnectionClosed {
            conn: 11,
            at: at(6_000_000),
            reason: CloseReason::QueueOverflow,
        });
        let settled = t.observe(&closed);
        assert_eq!(settled.len(), 1);
        let (id, f) = &settled[0];
        assert_eq!(*id, 1);
        // To the queued copy that completed; the closed one never counts.
        assert_eq!(f.span_ns(), Some(4_000_000));
        assert_eq!((f.targets, f.queued, f.dropped), (5, 2, 1));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn an_unrecorded_slot_time_is_not_a_completed_write() {
        let mut t = FanoutTracker::new(1, 16);
        t.observe(&started(1, 1_000));
        let settled = t.observe(&sends(1, 0, &[(1, SendOutcome::Written, 0)]));
        assert_eq!(settled[0].1.span_ns(), None);
        assert_eq!(settled[0].1.targets, 1);
    }

    #[test]
    fn past_the_limit_the_oldest_is_handed_on_unsettled() {
        let mut t = FanoutTracker::new(1, 2);
        t.observe(&started(1, 0));
        t.observe(&started(2, 0));
        let out = t.observe(&started(3, 0));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, 1);
        assert!(!out[0].1.settled());
        let rest: Vec<u64> = t.finish().map(|(id, _)| id).collect();
        assert_eq!(rest, vec![2, 3]);
    }

    #[test]
    fn the_started_record_says_how_many_shards_report() {
        let mut t = FanoutTracker::default();
        t.observe(&AgentRecord::Started(crate::record::AgentStarted {
            host: "h".into(),
            version: "0".into(),
            at: at(0),
            shards: 2,
            order: crate::record::SendOrder::Fixed,
            per_client_times: true,
        }));
        t.observe(&started(1, 0));
        assert!(
            t.observe(&sends(1, 0, &[(1, SendOutcome::Written, 5)]))
                .is_empty()
        );
        assert_eq!(
            t.observe(&sends(1, 1, &[(2, SendOutcome::Written, 9)]))[0]
                .1
                .span_ns(),
            Some(9)
        );
    }
}
