//! `lead=auto`: the shortest lead the site's own measurements allow, kept
//! as the site changes.
//!
//! A time to act is in time at a device when the device has read the
//! message by then. The live join gives, for every copy a probe uploaded,
//! how long after the broadcast's start the probe read it, in the agent's
//! clock and with the probe's clock bound on top (`read_upper`: the latest
//! the read can truly have been). The lead is the [`QUANTILE`] of those
//! over the last [`WINDOW_BROADCASTS`] judged broadcasts, plus a margin
//! ([`with_margin`]). It rises at once when a judged broadcast asks
//! for more (a slower link shows in the next broadcasts judged) and falls
//! by [`FALL_FRACTION`] of the gap a broadcast once the slow ones left the
//! window, so one fast spell does not shorten it at once.
//!
//! With no probe copies in the window (no probe uploads, or none for
//! [`STALE_AFTER_NS`]) it is the hub's own fan-out span (the same quantile
//! over the last [`WINDOW_BROADCASTS`] broadcasts) plus
//! [`NETWORK_ALLOWANCE_NS`] for the network nobody measured, plus the
//! margin; with nothing at all yet, the allowance and the margin.
//!
//! Sans-IO: every moment is handed in.

use std::collections::VecDeque;

/// The share of copies the lead covers: at most one action in a thousand
/// late, as the goal and the report's own lead advice (p99.9).
pub const QUANTILE: f64 = 0.999;
/// Judged broadcasts whose copies count.
pub const WINDOW_BROADCASTS: usize = 64;
/// Copies kept at most (a hub of thousands of probes' connections).
pub const MAX_COPIES: usize = 262_144;
/// Added to the quantile, at least. An action is late when its message is
/// read after its time (the device's timer then has nothing to wait for),
/// and each read already carries its clock's bound, so the margin covers
/// what the device does between reading a message and planning its timer
/// (tens of µs) and the window's quantile being a sample: a quarter
/// millisecond, or [`MARGIN_SHARE`] of the quantile when that is more. A
/// margin of milliseconds would be most of a wired LAN's lead.
pub const MARGIN_NS: u64 = 250_000;
/// The margin's share of the quantile: a link's jitter grows with its
/// delay, and a window that has seen a slower link only a few times holds
/// a small sample of it (found over the link emulator: a copy 0.14 ms
/// past the largest of the first slow ones, at a 40 ms lead).
pub const MARGIN_SHARE: f64 = 1.0 / 16.0;
/// Without probes: the network from the hub to a device, unmeasured. A
/// wired LAN is well under it; a Wi-Fi in power save is not, and then only
/// probes can say what the site needs.
pub const NETWORK_ALLOWANCE_NS: u64 = 20_000_000;
/// How much of the gap to a lower target a judged broadcast closes.
pub const FALL_FRACTION: f64 = 1.0 / 8.0;
/// Probe copies older than this (agent wall clock) no longer count.
pub const STALE_AFTER_NS: u64 = 600_000_000_000;

/// What the chosen lead rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeadBasis {
    /// Probes' measured reads: this many copies in the window.
    Probes {
        /// Copies the quantile was taken over.
        copies: usize,
    },
    /// The hub's fan-out span over this many broadcasts, plus the network
    /// allowance: no probe uploads.
    FanoutOnly {
        /// Broadcasts the quantile was taken over.
        broadcasts: usize,
    },
    /// Nothing measured yet: the allowance and the margin.
    Nothing,
}

/// The lead `lead=auto` gives now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoLeadNow {
    /// The lead, ns.
    pub lead_ns: u64,
    /// What it rests on.
    pub basis: LeadBasis,
}

/// One judged broadcast's copies.
#[derive(Debug)]
struct Judged {
    judged_at_wall_ns: u64,
    reads_upper_ns: Vec<u64>,
}

/// The `lead=auto` state: the window of measurements and the lead chosen.
#[derive(Debug, Default)]
pub struct AutoLead {
    judged: VecDeque<Judged>,
    copies: usize,
    spans: VecDeque<u64>,
    current: Option<AutoLeadNow>,
}

impl AutoLead {
    /// Nothing measured.
    pub fn new() -> AutoLead {
        AutoLead::default()
    }

    /// A broadcast's fan-out span (start to last write), as the hub's
    /// records settle it. Updates the lead.
    pub fn add_fanout_span(&mut self, span_ns: u64) {
        self.spans.push_back(span_ns);
        if self.spans.len() > WINDOW_BROADCASTS {
            self.spans.pop_front();
        }
        // Without probes, a broadcast is a step; with them, only a judged one.
        let fanout_basis = self.copies == 0;
        self.step(fanout_basis);
    }

    /// A judged broadcast: each copy's read, start to read in the agent's
    /// clock plus its clock bound (copies without a bound are left out).
    /// Updates the lead.
    pub fn add_judged(&mut self, judged_at_wall_ns: u64, reads_upper_ns: Vec<u64>) {
        let measured = !reads_upper_ns.is_empty();
        if measured {
            self.copies += reads_upper_ns.len();
            self.judged.push_back(Judged {
                judged_at_wall_ns,
                reads_upper_ns,
            });
        }
        while self.judged.len() > WINDOW_BROADCASTS || self.copies > MAX_COPIES {
            let Some(old) = self.judged.pop_front() else {
                break;
            };
            self.copies -= old.reads_upper_ns.len();
        }
        self.step(measured);
    }

    /// Forgets probe copies gone stale by `now_wall_ns` (no probe uploads:
    /// the lead goes back to the fan-out basis) and updates the lead.
    pub fn tick(&mut self, now_wall_ns: u64) {
        let before = self.judged.len();
        while self
            .judged
            .front()
            .is_some_and(|j| j.judged_at_wall_ns.saturating_add(STALE_AFTER_NS) < now_wall_ns)
        {
            let old = self.judged.pop_front().expect("a front");
            self.copies -= old.reads_upper_ns.len();
        }
        if self.judged.len() != before || self.current.is_none() {
            self.step(false);
        }
    }

    /// The lead to give now.
    pub fn now(&self) -> AutoLeadNow {
        self.current.unwrap_or(AutoLeadNow {
            lead_ns: NETWORK_ALLOWANCE_NS + MARGIN_NS,
            basis: LeadBasis::Nothing,
        })
    }

    /// What the window asks for, and the lead moved toward it: up at
    /// once; down by [`FALL_FRACTION`] of the gap only when `fall` (one
    /// judged broadcast, one step, whatever else updates it between).
    fn step(&mut self, fall: bool) {
        let target = self.target();
        let lead_ns = match self.current {
            // A change of basis, or more asked for: at once.
            Some(c) if c.lead_ns > target.lead_ns && same_kind(c.basis, target.basis) => {
                if fall {
                    let gap = (c.lead_ns - target.lead_ns) as f64;
                    c.lead_ns - (gap * FALL_FRACTION).ceil() as u64
                } else {
                    c.lead_ns
                }
            }
            _ => target.lead_ns,
        };
        self.current = Some(AutoLeadNow {
            lead_ns,
            basis: target.basis,
        });
    }

    fn target(&self) -> AutoLeadNow {
        if self.copies > 0 {
            let mut all: Vec<u64> = self
                .judged
                .iter()
                .flat_map(|j| j.reads_upper_ns.iter().copied())
                .collect();
            return AutoLeadNow {
                lead_ns: with_margin(quantile(&mut all)),
                basis: LeadBasis::Probes { copies: all.len() },
            };
        }
        if !self.spans.is_empty() {
            let mut spans: Vec<u64> = self.spans.iter().copied().collect();
            return AutoLeadNow {
                lead_ns: quantile(&mut spans)
                    .saturating_add(NETWORK_ALLOWANCE_NS)
                    .saturating_add(MARGIN_NS),
                basis: LeadBasis::FanoutOnly {
                    broadcasts: spans.len(),
                },
            };
        }
        AutoLeadNow {
            lead_ns: NETWORK_ALLOWANCE_NS + MARGIN_NS,
            basis: LeadBasis::Nothing,
        }
    }
}

/// `quantile_ns` and the margin on top.
pub fn with_margin(quantile_ns: u64) -> u64 {
    let share = (quantile_ns as f64 * MARGIN_SHARE) as u64;
    quantile_ns.saturating_add(share.max(MARGIN_NS))
}

fn same_kind(a: LeadBasis, b: LeadBasis) -> bool {
    std::mem::discriminant(&a) == std::mem::discriminant(&b)
}

/// The [`QUANTILE`] of `values` (not empty): the smallest value at least
/// that share of them is at or below (so below 1,000 values, the largest).
fn quantile(values: &mut [u64]) -> u64 {
    let rank = ((values.len() as f64 * QUANTILE).ceil() as usize).clamp(1, values.len());
    let (_, &mut v, _) = values.select_nth_unstable(rank - 1);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    #[test]
    fn nothing_measured_gives_the_allowance_then_the_fanout_basis() {
        let mut a = AutoLead::new();
        assert_eq!(a.now().lead_ns, NETWORK_ALLOWANCE_NS + MARGIN_NS);
        assert_eq!(a.now().basis, LeadBasis::Nothing);
        for _ in 0..10 {
            a.add_fanout_span(3 * MS);
        }
        assert_eq!(a.now().lead_ns, 3 * MS + NETWORK_ALLOWANCE_NS + MARGIN_NS);
        assert_eq!(a.now().basis, LeadBasis::FanoutOnly { broadcasts: 10 });
    }

    #[test]
    fn the_lead_covers_the_quantile_of_copies_plus_the_margin() {
        let mut a = AutoLead::new();
        // 10 broadcasts of 200 copies: reads 1..=200 µs each; one copy of
        // the last one 50 ms. One in 2,000 is within the 0.1 % the lead
        // may leave late: the 1,998th smallest of 2,000 is the p99.9.
        for b in 0..10u64 {
            let mut reads: Vec<u64> = (1..=200).map(|i| i * 1_000).collect();
            if b == 9 {
                reads[0] = 50 * MS;
            }
            a.add_judged(b * S, reads);
        }
        let now = a.now();
        assert_eq!(now.basis, LeadBasis::Probes { copies: 2_000 });
        // Of 2,000 copies, p99.9 is the 1,998th smallest: 200 µs.
        assert_eq!(now.lead_ns, with_margin(200_000));
        // A late-action count at that lead: at most one in a thousand.
        let late = 1;
        assert!(late as f64 / 2_000.0 <= 1.0 - QUANTILE);
    }

    #[test]
    fn a_slower_link_raises_it_at_once_and_it_falls_back_slowly() {
        let mut a = AutoLead::new();
        let fast = || vec![5 * MS; 20];
        let slow = || vec![40 * MS; 20];
        let mut t = 0;
        let mut judge = |a: &mut AutoLead, reads: Vec<u64>| {
            t += S;
            a.add_judged(t, reads);
            a.now().lead_ns
        };
        for _ in 0..WINDOW_BROADCASTS {
            judge(&mut a, fast());
        }
        assert_eq!(a.now().lead_ns, with_margin(5 * MS));
        // The first slow broadcast judged raises it to cover the slow link.
        assert_eq!(judge(&mut a, slow()), with_margin(40 * MS));
        for _ in 0..10 {
            judge(&mut a, slow());
        }
        // Fast again: held while the slow copies are in the window...
        let mut leads = Vec::new();
        for _ in 0..WINDOW_BROADCASTS + 40 {
            leads.push(judge(&mut a, fast()));
        }
        assert!(
            leads[..WINDOW_BROADCASTS - 1]
                .iter()
                .all(|&l| l == with_margin(40 * MS))
        );
        // ...then falls, never faster than an eighth of the gap a
        // broadcast, and ends where the fast link needs it.
        for w in leads.windows(2) {
            assert!(w[1] <= w[0]);
            let gap = w[0] - with_margin(5 * MS);
            assert!(w[0] - w[1] <= gap / 8 + 1, "{w:?}");
        }
        assert!(
            leads.last().unwrap() - (5 * MS + MARGIN_NS) < MS,
            "{:?}",
            leads.last()
        );
    }

    #[test]
    fn stale_probe_copies_give_way_to_the_fanout_basis() {
        let mut a = AutoLead::new();
        a.add_fanout_span(MS);
        a.add_judged(S, vec![5 * MS; 10]);
        assert_eq!(a.now().basis, LeadBasis::Probes { copies: 10 });
        a.tick(S + STALE_AFTER_NS + 1);
        assert_eq!(a.now().basis, LeadBasis::FanoutOnly { broadcasts: 1 });
        assert_eq!(a.now().lead_ns, MS + NETWORK_ALLOWANCE_NS + MARGIN_NS);
    }

    #[test]
    fn memory_is_bounded_by_the_window() {
        let mut a = AutoLead::new();
        for b in 0..100u64 {
            a.add_judged(b, vec![MS; 1_000]);
        }
        assert!(a.copies <= MAX_COPIES && a.judged.len() <= WINDOW_BROADCASTS);
        assert_eq!(a.copies, 64_000);
    }
}
