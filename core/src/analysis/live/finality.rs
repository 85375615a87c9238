//! When a broadcast is final (nothing more can come for any target), and
//! what the join forgets once nothing pending can need it.

use super::*;

impl LiveJoin {
    /// Whether nothing more can come for any target: each has its receipt,
    /// or is not a probe's, or its probe closed it, stopped, or uploaded
    /// past the broadcast; or the broadcast timed out.
    pub(super) fn is_final(&self, p: &Pending, now_wall_ns: u64) -> bool {
        if now_wall_ns >= p.start.wall_ns.saturating_add(FINAL_TIMEOUT_NS) {
            return true;
        }
        self.fanouts.get(p.id).is_none_or(Fanout::shards_reported)
            && p.targets.iter().all(|(conn, arrival)| {
                arrival.is_some_and(|a| {
                    // A probe that acts: its action comes after the receipt.
                    !self.runs.get(&a.run).is_some_and(|r| r.acts)
                        || p.actions.iter().any(|(c, _)| *c == conn)
                        || self.run_done(a.run, p)
                }) || arrival.is_none()
                    && match self.holder.get(&conn) {
                        Some(h) => h.closed_wall_ns.is_some() || self.run_done(h.run, p),
                        // A probe's connection whose open has not been uploaded
                        // (its probe may upload late, even after it closed):
                        // wait, unless a run of that name has uploaded past
                        // the broadcast without it.
                        None => self.labelled.get(&conn).is_none_or(|l| {
                            self.runs
                                .iter()
                                .any(|(&id, r)| r.name == l.name && self.run_done(id, p))
                        }),
                    }
            })
    }

    /// Whether run `run` can send nothing more about broadcast `p`: it
    /// stopped, or its records moved past it ([`moved_past`], from its first
    /// receipt, or its start before any).
    pub(super) fn run_done(&self, run: u128, p: &Pending) -> bool {
        let since = p.first_receipt_wall_ns.unwrap_or(p.start.wall_ns);
        self.runs
            .get(&run)
            .is_none_or(|r| r.stopped || moved_past(r.through_wall_ns, since, self.lead_seen.ns()))
    }

    /// Drops connections no pending broadcast can need and runs long silent.
    pub(super) fn forget(&mut self, now_wall_ns: u64) {
        let runs = &self.runs;
        let pending = &self.pending;
        // A closed connection stays while broadcasts that may have targeted
        // it can still arrive (the agent's records lag the uploads at
        // times); open ones stay, and few are closed at a time.
        let recent = |closed: u64| {
            closed.saturating_add(FINAL_TIMEOUT_NS + CLOCK_TOLERANCE_NS) > now_wall_ns
        };
        self.holder.retain(|conn, h| {
            runs.contains_key(&h.run)
                && h.closed_wall_ns.is_none_or(|t| {
                    recent(t) || pending.values().any(|p| p.targets.contains(*conn))
                })
        });
        self.labelled
            .retain(|conn, l| !l.closed || pending.values().any(|p| p.targets.contains(*conn)));
        self.runs.retain(|_, r| {
            now_wall_ns.saturating_sub(r.last_upload_wall_ns) < RUN_FORGOTTEN_AFTER_NS
        });
        let (holder, labelled) = (&self.holder, &self.labelled);
        self.copies
            .retain_conns(|conn| holder.contains_key(&conn) || labelled.contains_key(&conn));
        self.copies.cap(MAX_COPY_COUNTS);
        self.counts.copy_counts_dropped = self.copies.dropped();
    }
}
