//! Placing each receipt in its broadcast (the matching rule), and judging
//! each broadcast once it is final: its spread, its actions, its reads.

use super::*;
use crate::analysis::timebase::{arrival_ns, raw_spread};
use crate::convert;

impl LiveJoin {
    /// Puts a receipt in its broadcast; `false` when no pending broadcast
    /// is its yet. A duplicate, or a copy of a broadcast its connection was
    /// not sent, is counted unmatched (and placed: it will not match later).
    pub(super) fn place(&mut self, e: Early) -> bool {
        let Some(id) = self.match_receipt(e.key, e.hash, e.agent_conn) else {
            return false;
        };
        let placed =
            e.agent_conn
                .zip(self.pending.get_mut(&id))
                .map_or(Placed::NotATarget, |(conn, p)| {
                    let placed = p.targets.place(conn, e.arrival);
                    if placed == Placed::Taken {
                        let at = e.arrival.at.wall_ns;
                        p.first_receipt_wall_ns =
                            Some(p.first_receipt_wall_ns.map_or(at, |f| f.min(at)));
                    }
                    placed
                });
        match placed {
            Placed::Taken => {
                let acts = self.runs.get(&e.arrival.run).is_some_and(|r| r.acts);
                if let (Some(conn), true) = (e.agent_conn, acts) {
                    self.placed.insert((conn, e.key), id);
                    if let Some(p) = self.pending.get_mut(&id) {
                        p.placed_keys.push((conn, e.key));
                    }
                }
                true
            }
            Placed::Duplicate => {
                self.counts.unmatched += 1;
                true
            }
            // Its shard's record of the sends may not be here yet.
            Placed::NotATarget => false,
        }
    }

    pub(super) fn match_receipt(
        &self,
        key: MessageKey,
        hash: u64,
        conn: Option<u64>,
    ) -> Option<u64> {
        let by_seq = |seq| {
            let id = *self.by_seq.get(&seq)?;
            Some((id, self.pending.get(&id)?.hash))
        };
        copy_of(key, hash, conn, by_seq, &self.copies).filter(|id| self.pending.contains_key(id))
    }

    /// Judges every broadcast that is final at agent wall time `now_wall_ns`.
    pub fn judge_final(&mut self, now_wall_ns: u64) -> Vec<Judged> {
        // Receipts that came before their broadcast's record, first; tried
        // again only when the agent's records have moved on.
        let waiting = if self.agent_progress != self.early_tried_at {
            self.early_tried_at = self.agent_progress;
            std::mem::take(&mut self.early)
        } else {
            let now_stale =
                |e: &Early| e.arrival.at.wall_ns.saturating_add(FINAL_TIMEOUT_NS) < now_wall_ns;
            let before = self.early.len();
            self.early.retain(|e| !now_stale(e));
            self.counts.unmatched += (before - self.early.len()) as u64;
            VecDeque::new()
        };
        for e in waiting {
            if !self.place(e) {
                let stale = e.arrival.at.wall_ns.saturating_add(FINAL_TIMEOUT_NS) < now_wall_ns;
                if stale {
                    self.counts.unmatched += 1;
                } else {
                    self.early.push_back(e);
                }
            }
        }
        let mut judged = Vec::new();
        while let Some((&id, p)) = self.pending.first_key_value() {
            let early = self.pending.len() > MAX_PENDING;
            if !early && !self.is_final(p, now_wall_ns) {
                break;
            }
            self.counts.judged_early += u64::from(early);
            let p = self.pending.remove(&id).expect("first key");
            judged.push(self.judge_one(id, &p));
            if let Some(seq) = p.seq {
                self.by_seq.remove(&seq);
            }
            if numbered_by_copy(p.seq) {
                self.copies
                    .forget(p.targets.iter().map(|(conn, _)| conn), p.hash, id);
            }
            for key in &p.placed_keys {
                self.placed.remove(key);
            }
        }
        self.forget(now_wall_ns);
        judged
    }

    pub(super) fn judge_one(&mut self, id: u64, p: &Pending) -> Judged {
        let mut raw = Vec::new();
        let mut corrected = Vec::new();
        let mut reads = Vec::new();
        let (mut missing, mut unjudged) = (0u32, 0u32);
        for (conn, arrival) in p.targets.iter() {
            if let Some(a) = arrival {
                let wall = arrival_ns(a.at.wall_ns, Some(a.kernel_delay_ns));
                raw.push(wall);
                let correction = self.runs.get(&a.run).and_then(|r| r.correction(a.at));
                corrected.push(correction.map(|c| place(c, wall)));
                if let Some(c) = correction {
                    let (read, bound) = place(c, a.at.wall_ns);
                    let since_start = read - convert::signed(p.start.wall_ns);
                    reads.push(crate::analysis::auto_lead::Read {
                        run: a.run,
                        upper_ns: since_start.saturating_add(bound),
                        lower_ns: since_start.saturating_sub(bound),
                    });
                }
                continue;
            }
            match self.holder.get(&conn) {
                // Not a probe's connection, unless it said it was.
                None if self.labelled.contains_key(&conn) => unjudged += 1,
                None => {}
                // Closed by the probe before the broadcast: not listening.
                Some(h) if h.closed_wall_ns.is_some_and(|t| t < p.start.wall_ns) => {}
                Some(h) if h.closed_wall_ns.is_some() || self.run_done(h.run, p) => missing += 1,
                Some(_) => unjudged += 1,
            }
        }
        let skew_ns = raw_spread(raw.iter().copied());
        let skew_upper_ns = spread_of_all(corrected).map(|(_, _, hi)| convert::unsigned(hi));
        // Actions, in the agent's timebase as receipts are.
        let acted = p.actions.iter().map(|(_, a)| {
            let run = self.runs.get(&a.run);
            run.and_then(|r| r.correction(a.done))
                .map(|c| place(c, a.done.wall_ns))
        });
        let action_skew_upper_ns = spread_of_all(acted).map(|(_, _, hi)| convert::unsigned(hi));
        Judged {
            id,
            skew_ns,
            skew_upper_ns,
            receipts: convert::count(raw.len()),
            missing,
            unjudged,
            actions: convert::count(p.actions.len()),
            late: convert::count(p.actions.iter().filter(|(_, a)| a.late).count()),
            action_skew_upper_ns,
            act_delays: p
                .actions
                .iter()
                .filter_map(|(_, a)| Some((a.run, a.reaction_ns?)))
                .collect(),
            names: {
                let mut runs: Vec<u128> = reads.iter().map(|r| r.run).collect();
                runs.extend(p.actions.iter().map(|(_, a)| a.run));
                runs.sort_unstable();
                runs.dedup();
                runs.into_iter()
                    .filter_map(|r| Some((r, self.runs.get(&r)?.name.clone())))
                    .collect()
            },
            reads,
        }
    }
}
