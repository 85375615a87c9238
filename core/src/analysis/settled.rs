//! When nothing more can come from a probe about a broadcast: one rule for
//! the agent's live join (`/metrics`) and the audit's wait.
//!
//! A probe's records come in time order. Once its latest is stamped past a
//! broadcast by more than any of its messages can lag, nothing more about
//! that broadcast will come from it. What can lag: a receipt (read just
//! after it arrived) and, for a probe that acts, its action, which comes
//! its lead after the receipt. So the margin is the largest lead seen so
//! far (how long after a broadcast's first receipt an action of it was
//! done) plus [`SETTLE_MARGIN_NS`], measured from the broadcast's first
//! receipt. A lead longer than any seen before can still outrun it: such
//! an action is counted unmatched, never silently dropped.

/// What a probe's records must pass a broadcast's first receipt by, on top
/// of the largest lead seen, before nothing more of it can come: the
/// probe's flush (100 ms) and upload (200 ms) intervals many times over, and
/// a loaded device's scheduling.
pub const SETTLE_MARGIN_NS: u64 = 2_000_000_000;

/// The largest lead seen: how long after its broadcast's first receipt an
/// action has come, over every action so far (on the probe's own clock).
/// One definition for the live join and the audit's wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeadSeen(u64);

impl LeadSeen {
    /// Takes in an action done at `done_wall_ns` of a broadcast first
    /// received at `first_receipt_wall_ns`.
    pub fn add(&mut self, first_receipt_wall_ns: u64, done_wall_ns: u64) {
        self.0 = self
            .0
            .max(done_wall_ns.saturating_sub(first_receipt_wall_ns));
    }

    /// The largest so far, ns.
    pub fn ns(self) -> u64 {
        self.0
    }
}

/// Whether a probe whose records reach `through_wall_ns` can still send
/// anything about a broadcast first received at `first_receipt_wall_ns`,
/// its actions having come up to `lead_seen_ns` after their receipts (all
/// on the probe's own clock).
pub fn moved_past(through_wall_ns: u64, first_receipt_wall_ns: u64, lead_seen_ns: u64) -> bool {
    through_wall_ns
        >= first_receipt_wall_ns
            .saturating_add(lead_seen_ns)
            .saturating_add(SETTLE_MARGIN_NS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_moves_past_a_broadcast_after_its_lead_and_the_margin() {
        let first = 10_000_000_000;
        assert!(!moved_past(first + SETTLE_MARGIN_NS - 1, first, 0));
        assert!(moved_past(first + SETTLE_MARGIN_NS, first, 0));
        let mut seen = LeadSeen::default();
        seen.add(first, first + 3_000);
        seen.add(first, first + 1_000);
        seen.add(first + 9_000, first);
        assert_eq!(seen.ns(), 3_000);
        // A probe that acts 3 s after its receipts waits 3 s longer.
        let lead = 3_000_000_000;
        assert!(!moved_past(
            first + SETTLE_MARGIN_NS + lead - 1,
            first,
            lead
        ));
        assert!(moved_past(first + SETTLE_MARGIN_NS + lead, first, lead));
    }
}
