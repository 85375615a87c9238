//! `lead=auto`: the shortest lead the site's own measurements allow, kept
//! as the site changes, never above a ceiling.
//!
//! The live join gives, for every copy a probe or an app uploaded, how long
//! after the broadcast's start it was read, in the agent's clock with its
//! clock bound (the latest and earliest the read can truly have been), and
//! for every late action how long the device took from reading it to
//! acting (its readiness). The lead is [`crate::analysis::lead_rule`] over the
//! reads of the last [`WINDOW_NS`] (ten minutes: a radio's rare power-save
//! holds stay in it for minutes, not for a count of broadcasts), plus the
//! slowest device's readiness and the margin: the same rule the report's
//! advice follows. It rises at once when a judged broadcast asks for more
//! and falls by [`FALL_FRACTION`] of the gap a judged broadcast, so one
//! fast spell does not shorten it at once.
//!
//! A device whose reads are implausible is left out of the lead and named
//! ([`AutoLeadNow::left_out`]): its typical read later than the ceiling
//! while another device's is within it,
//! before the broadcast's start even at its bound's end, or, among three
//! devices or more, over [`OUTLIER_FACTOR`] times every other device's
//! plus [`OUTLIER_SLACK_NS`]. Anyone holding the token can upload reads;
//! one device cannot move the lead for the others.
//!
//! The lead never exceeds the ceiling (`--max-lead`, [`DEFAULT_CEILING_NS`]):
//! a site that needs more gets the ceiling, and [`AutoLeadNow::wanted_ns`]
//! says what it wanted, so the response, the metrics and the report warn.
//!
//! With no reads in the window (no uploads) it is the hub's own fan-out
//! span (the same rule over the last [`WINDOW_BROADCASTS`] broadcasts) plus
//! [`NETWORK_ALLOWANCE_NS`] for the network nobody measured; with nothing
//! at all yet, the allowance and the margin.
//!
//! Sans-IO: every moment is handed in.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::analysis::lead_rule::{self, Evidence, MARGIN_NS};
use crate::analysis::stats::{Summary, SummaryBuilder};
use crate::convert;

/// How long reads and action delays count (agent wall clock).
pub const WINDOW_NS: u64 = 600_000_000_000;
/// Reads kept at most (a hub of thousands of connections acting): past it
/// the oldest go first.
pub const MAX_COPIES: usize = 262_144;
/// Action delays kept per device at most.
pub const MAX_DELAYS_PER_DEVICE: usize = 4_096;
/// Fan-out spans kept for the basis without uploads.
pub const WINDOW_BROADCASTS: usize = 64;
/// Without uploads: the network from the hub to a device, unmeasured. A
/// wired LAN is well under it; a Wi-Fi in power save is not, and then only
/// probes can say what the site needs.
pub const NETWORK_ALLOWANCE_NS: u64 = 20_000_000;
/// How much of the gap to a lower target a judged broadcast closes.
pub const FALL_FRACTION: f64 = 1.0 / 8.0;
/// The ceiling when none is given (`--max-lead`): a time to act a second
/// away is already a slow reaction for a kiosk.
pub const DEFAULT_CEILING_NS: u64 = 1_000_000_000;
/// A device whose typical read is over this many times every other
/// device's (plus [`OUTLIER_SLACK_NS`]) is left out, among three or more.
pub const OUTLIER_FACTOR: i64 = 10;
/// See [`OUTLIER_FACTOR`]: what a slower but plausible link may add.
pub const OUTLIER_SLACK_NS: i64 = 10_000_000;
/// How often the window is read again whole when nothing asks for more:
/// a read or a delay past what the lead covers reads it at once.
pub const RECOMPUTE_EVERY_NS: u64 = 1_000_000_000;

/// One copy's read, as the live join measured it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    /// The run (device or app) that read it.
    pub run: u128,
    /// Start to read in the agent's clock, at the latest the read's clock
    /// bound allows.
    pub upper_ns: i64,
    /// The same at the earliest.
    pub lower_ns: i64,
}

/// What the chosen lead rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeadBasis {
    /// Uploaded reads: this many copies in the window, and the evidence
    /// the rule took from them.
    Probes {
        /// Copies the rule was taken over.
        copies: usize,
        /// The empirical quantile, or a tail model.
        evidence: Evidence,
    },
    /// The hub's fan-out span over this many broadcasts, plus the network
    /// allowance: no uploads.
    FanoutOnly {
        /// Broadcasts the rule was taken over.
        broadcasts: usize,
    },
    /// Nothing measured yet: the allowance and the margin.
    Nothing,
}

/// The lead `lead=auto` gives now, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoLeadNow {
    /// The lead, ns.
    pub lead_ns: u64,
    /// What it rests on.
    pub basis: LeadBasis,
    /// What the measurements asked for before the ceiling: above
    /// `ceiling_ns`, the ceiling was given and some copies will be late.
    pub wanted_ns: u64,
    /// The ceiling.
    pub ceiling_ns: u64,
    /// The slowest included device's readiness within it.
    pub readiness_ns: u64,
    /// Devices left out of it, by name, with why.
    pub left_out: Vec<LeftOut>,
}

impl AutoLeadNow {
    /// Whether the ceiling cut it short.
    pub fn capped(&self) -> bool {
        self.wanted_ns > self.ceiling_ns
    }
}

/// A device left out of the lead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftOut {
    /// Its name (the run's).
    pub name: String,
    /// Why, for people.
    pub why: &'static str,
}

/// A device's part of the window.
#[derive(Debug, Default)]
struct Device {
    name: String,
    /// (judged at, delay) of its actions.
    delays: VecDeque<(u64, i64)>,
    /// Its reads in the window.
    reads: usize,
}

/// The `lead=auto` state: the window of measurements and the lead chosen.
#[derive(Debug)]
pub struct AutoLead {
    ceiling_ns: u64,
    /// (judged at, the read, whether it is its device's first read of its
    /// broadcast: the independent reads the evidence counts).
    reads: VecDeque<(u64, Read, bool)>,
    devices: HashMap<u128, Device>,
    spans: VecDeque<u64>,
    current: Option<AutoLeadNow>,
    /// The window's last reading: when, what it asked for, and the
    /// largest read and readiness it covered (anything past them reads
    /// the window again at once).
    cached: Option<Cached>,
    /// The latest moment handed in.
    now_wall_ns: u64,
}

/// A reading of the window.
#[derive(Debug)]
struct Cached {
    at_wall_ns: u64,
    target: AutoLeadNow,
    covered_read_ns: i64,
}

impl Default for AutoLead {
    fn default() -> Self {
        AutoLead::new(DEFAULT_CEILING_NS)
    }
}

impl AutoLead {
    /// Nothing measured; leads at most `ceiling_ns`.
    pub fn new(ceiling_ns: u64) -> AutoLead {
        AutoLead {
            ceiling_ns,
            reads: VecDeque::new(),
            devices: HashMap::new(),
            spans: VecDeque::new(),
            current: None,
            cached: None,
            now_wall_ns: 0,
        }
    }

    /// A broadcast's fan-out span (start to last write), as the hub's
    /// records settle it. Updates the lead.
    pub fn add_fanout_span(&mut self, span_ns: u64) {
        self.spans.push_back(span_ns);
        if self.spans.len() > WINDOW_BROADCASTS {
            self.spans.pop_front();
        }
        // Without reads, a broadcast is a step; with them, only a judged one.
        let fanout_basis = self.reads.is_empty();
        if fanout_basis {
            self.cached = None;
        }
        self.step(fanout_basis);
    }

    /// A judged broadcast, at agent wall time `at_wall_ns`: its copies'
    /// reads (copies without a clock bound are left out by the caller),
    /// its late actions' reactions by run ([`lead_rule::reaction_ns`]), and
    /// the names of the runs in them. Updates the lead.
    pub fn add_judged(
        &mut self,
        at_wall_ns: u64,
        reads: &[Read],
        delays: &[(u128, i64)],
        names: &[(u128, String)],
    ) {
        self.now_wall_ns = self.now_wall_ns.max(at_wall_ns);
        for (run, name) in names {
            let d = self.devices.entry(*run).or_default();
            if d.name != *name {
                d.name.clone_from(name);
            }
        }
        // More asked for than the last reading covered, or the first reads
        // after a reading without any: read it again now.
        if let Some(c) = &self.cached {
            let past_reads = reads.iter().any(|r| r.upper_ns > c.covered_read_ns);
            let past_readiness = delays
                .iter()
                .any(|(_, d)| *d > i64::try_from(c.target.readiness_ns).unwrap_or(i64::MAX));
            let first_reads =
                !reads.is_empty() && !matches!(c.target.basis, LeadBasis::Probes { .. });
            if past_reads || past_readiness || first_reads {
                self.cached = None;
            }
        }
        for &(run, delay) in delays {
            let d = self.devices.entry(run).or_default();
            d.delays.push_back((at_wall_ns, delay));
            if d.delays.len() > MAX_DELAYS_PER_DEVICE {
                d.delays.pop_front();
            }
        }
        let mut devices_read = HashSet::new();
        for r in reads {
            let independent = devices_read.insert(r.run);
            self.reads.push_back((at_wall_ns, *r, independent));
            self.devices.entry(r.run).or_default().reads += 1;
        }
        while self.reads.len() > MAX_COPIES {
            self.pop_read();
        }
        self.forget(at_wall_ns);
        self.step(!reads.is_empty());
    }

    /// Forgets what left the window by `now_wall_ns` (no uploads: the lead
    /// goes back to the fan-out basis) and updates the lead.
    pub fn tick(&mut self, now_wall_ns: u64) {
        self.now_wall_ns = self.now_wall_ns.max(now_wall_ns);
        let before = self.reads.len();
        self.forget(now_wall_ns);
        if self.reads.is_empty() && before > 0 {
            self.cached = None;
        }
        if self.reads.len() != before || self.current.is_none() {
            self.step(false);
        }
    }

    /// The lead to give now.
    pub fn now(&self) -> AutoLeadNow {
        self.current.clone().unwrap_or_else(|| self.nothing())
    }

    fn nothing(&self) -> AutoLeadNow {
        let lead = NETWORK_ALLOWANCE_NS + MARGIN_NS;
        AutoLeadNow {
            lead_ns: lead.min(self.ceiling_ns),
            basis: LeadBasis::Nothing,
            wanted_ns: lead,
            ceiling_ns: self.ceiling_ns,
            readiness_ns: 0,
            left_out: Vec::new(),
        }
    }

    fn pop_read(&mut self) {
        if let Some((_, r, _)) = self.reads.pop_front()
            && let Some(d) = self.devices.get_mut(&r.run)
        {
            d.reads -= 1;
        }
    }

    fn forget(&mut self, now_wall_ns: u64) {
        let old = |at: u64| at.saturating_add(WINDOW_NS) < now_wall_ns;
        while self.reads.front().is_some_and(|(at, _, _)| old(*at)) {
            self.pop_read();
        }
        for d in self.devices.values_mut() {
            while d.delays.front().is_some_and(|(at, _)| old(*at)) {
                d.delays.pop_front();
            }
        }
        self.devices
            .retain(|_, d| !d.delays.is_empty() || d.reads > 0);
    }

    /// What the window asks for, and the lead moved toward it: up at
    /// once; down by [`FALL_FRACTION`] of the gap only when `fall` (one
    /// judged broadcast, one step, whatever else updates it between).
    fn step(&mut self, fall: bool) {
        let fresh = self
            .cached
            .as_ref()
            .is_some_and(|c| self.now_wall_ns < c.at_wall_ns.saturating_add(RECOMPUTE_EVERY_NS));
        if !fresh {
            let (target, covered_read_ns) = self.target();
            self.cached = Some(Cached {
                at_wall_ns: self.now_wall_ns,
                target,
                covered_read_ns,
            });
        }
        let target = self.cached.as_ref().expect("just read").target.clone();
        let lead_ns = match &self.current {
            // A change of basis, or more asked for: at once.
            Some(c) if c.lead_ns > target.lead_ns && same_kind(c.basis, target.basis) => {
                if fall {
                    let gap = (c.lead_ns - target.lead_ns) as f64;
                    c.lead_ns - convert::from_float((gap * FALL_FRACTION).ceil())
                } else {
                    c.lead_ns
                }
            }
            _ => target.lead_ns,
        };
        self.current = Some(AutoLeadNow { lead_ns, ..target });
    }

    /// The devices left out of the lead, with why.
    fn left_out(&self) -> HashMap<u128, &'static str> {
        let mut per_device: HashMap<u128, (Vec<i64>, Vec<i64>)> = HashMap::new();
        for (_, r, _) in &self.reads {
            let (uppers, lowers) = per_device.entry(r.run).or_default();
            uppers.push(r.upper_ns);
            lowers.push(r.lower_ns);
        }
        let median = |v: &mut Vec<i64>| {
            let mid = v.len() / 2;
            *v.select_nth_unstable(mid).1
        };
        let typical: HashMap<u128, (i64, i64)> = per_device
            .into_iter()
            .map(|(run, (mut up, mut low))| (run, (median(&mut up), median(&mut low))))
            .collect();
        let ceiling = i64::try_from(self.ceiling_ns).unwrap_or(i64::MAX);
        // Later than the ceiling is implausible beside a device that is
        // within it; when every device is past it, the site needs more
        // than the ceiling, and gets the ceiling.
        let some_within = typical.values().any(|(_, lower)| *lower <= ceiling);
        let mut out = HashMap::new();
        for (&run, &(upper, lower)) in &typical {
            let why = if lower > ceiling && some_within {
                Some("its reads are later than the ceiling (--max-lead)")
            } else if upper < 0 {
                Some("its reads are before the broadcasts' start: its clock bound does not hold")
            } else if typical.len() >= 3 {
                let others = typical
                    .iter()
                    .filter(|(r, _)| **r != run)
                    .map(|(_, (u, _))| *u)
                    .max()
                    .unwrap_or(0);
                (upper > others.max(0).saturating_mul(OUTLIER_FACTOR) + OUTLIER_SLACK_NS)
                    .then_some("its reads are far outside every other device's")
            } else {
                None
            };
            if let Some(why) = why {
                out.insert(run, why);
            }
        }
        out
    }

    /// What the window asks for, and the largest read it covers.
    fn target(&self) -> (AutoLeadNow, i64) {
        let left = self.left_out();
        let mut named: Vec<LeftOut> = left
            .iter()
            .map(|(run, why)| LeftOut {
                name: self
                    .devices
                    .get(run)
                    .map_or_else(|| format!("run {run:032x}"), |d| d.name.clone()),
                why,
            })
            .collect();
        named.sort_by(|a, b| a.name.cmp(&b.name));
        let mut reads = SummaryBuilder::new();
        let mut independent = 0;
        for (_, r, first) in self
            .reads
            .iter()
            .filter(|(_, r, _)| !left.contains_key(&r.run))
        {
            reads.add(r.upper_ns);
            independent += u64::from(*first);
        }
        let readiness_ns = self
            .devices
            .iter()
            .filter(|(run, _)| !left.contains_key(run))
            .filter_map(|(_, d)| {
                let delays: Vec<i64> = d.delays.iter().map(|(_, x)| *x).collect();
                Summary::of(&delays).map(|s| lead_rule::readiness_ns(&s))
            })
            .max()
            .unwrap_or(0);
        let mut covered = i64::MAX;
        let (wanted_ns, basis) = if let Some(s) = reads.finish() {
            let covering = lead_rule::covering(&s, independent);
            covered = covering.read_ns;
            (
                lead_rule::lead_ns(&covering, readiness_ns),
                LeadBasis::Probes {
                    copies: convert::index(s.count),
                    evidence: covering.evidence,
                },
            )
        } else if !self.spans.is_empty() {
            let spans: Vec<i64> = self.spans.iter().map(|&s| convert::signed(s)).collect();
            let s = Summary::of(&spans).expect("not empty");
            let covering = lead_rule::covering(&s, s.count);
            (
                lead_rule::lead_ns(&covering, 0).saturating_add(NETWORK_ALLOWANCE_NS),
                LeadBasis::FanoutOnly {
                    broadcasts: spans.len(),
                },
            )
        } else {
            let nothing = AutoLeadNow {
                left_out: named,
                ..self.nothing()
            };
            return (nothing, covered);
        };
        let target = AutoLeadNow {
            lead_ns: wanted_ns.min(self.ceiling_ns),
            basis,
            wanted_ns,
            ceiling_ns: self.ceiling_ns,
            readiness_ns,
            left_out: named,
        };
        (target, covered)
    }
}

fn same_kind(a: LeadBasis, b: LeadBasis) -> bool {
    std::mem::discriminant(&a) == std::mem::discriminant(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::lead_rule::MIN_EVIDENCE;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn reads(run: u128, values: impl IntoIterator<Item = u64>) -> Vec<Read> {
        values
            .into_iter()
            .map(|v| Read {
                run,
                upper_ns: v as i64,
                lower_ns: v as i64 - 100_000,
            })
            .collect()
    }

    fn names(runs: &[u128]) -> Vec<(u128, String)> {
        runs.iter().map(|r| (*r, format!("kiosk-{r}"))).collect()
    }

    #[test]
    fn nothing_measured_gives_the_allowance_then_the_fanout_basis() {
        let mut a = AutoLead::default();
        assert_eq!(a.now().lead_ns, NETWORK_ALLOWANCE_NS + MARGIN_NS);
        assert_eq!(a.now().basis, LeadBasis::Nothing);
        for _ in 0..10 {
            a.add_fanout_span(3 * MS);
        }
        assert_eq!(a.now().lead_ns, 3 * MS + NETWORK_ALLOWANCE_NS + MARGIN_NS);
        assert_eq!(a.now().basis, LeadBasis::FanoutOnly { broadcasts: 10 });
    }

    #[test]
    fn the_first_reads_after_the_fanout_basis_are_taken_at_once() {
        let mut a = AutoLead::new(30 * MS);
        a.add_fanout_span(MS);
        assert!(matches!(a.now().basis, LeadBasis::FanoutOnly { .. }));
        // Within the second the reading is otherwise kept for.
        a.add_judged(S / 10, &reads(1, [2 * MS, 3 * MS]), &[], &names(&[1]));
        assert!(
            matches!(a.now().basis, LeadBasis::Probes { .. }),
            "{:?}",
            a.now()
        );
    }

    #[test]
    fn with_enough_reads_the_lead_is_their_quantile_plus_readiness_and_margin() {
        let mut a = AutoLead::default();
        // 60 broadcasts to 200 devices: reads 1..=200 µs; each device's
        // actions 30 µs past their target.
        let runs: Vec<u128> = (1..=200).collect();
        for b in 0..60u64 {
            let r: Vec<Read> = runs
                .iter()
                .flat_map(|&run| reads(run, [run as u64 * 1_000]))
                .collect();
            a.add_judged(b * S, &r, &[(1, 30_000)], &names(&runs));
        }
        let now = a.now();
        assert_eq!(
            now.basis,
            LeadBasis::Probes {
                copies: 12_000,
                evidence: Evidence::Quantile { reads: 12_000 }
            }
        );
        const { assert!(12_000 >= MIN_EVIDENCE) };
        assert_eq!(now.readiness_ns, 30_000);
        // p99.9 of 1..=200 µs is 200 µs (within the histogram's digits);
        // the lead given falls to it from the first, shorter-read guesses.
        let wanted = now.wanted_ns as i64 - 30_000 - MARGIN_NS as i64;
        assert!((wanted - 200_000).abs() <= 200, "{now:?}");
        assert!(now.lead_ns >= now.wanted_ns);
    }

    #[test]
    fn a_stall_is_remembered_for_minutes_not_for_a_count_of_broadcasts() {
        let mut a = AutoLead::default();
        // A radio that holds a copy 400 ms now and then: a broadcast a
        // second, 10 copies each, one held in each of the first three
        // (more than one in a thousand of the 2,000 reads that follow).
        let mut t = 0;
        for _ in 0..3 {
            t += S;
            let held = reads(1, [400 * MS]);
            a.add_judged(t, &held, &[], &names(&[1]));
        }
        assert!(a.now().lead_ns >= 400 * MS);
        // 200 quiet broadcasts later (over 3 minutes), still covered.
        for _ in 0..200 {
            t += S;
            a.add_judged(t, &reads(1, vec![2 * MS; 10]), &[], &names(&[1]));
        }
        assert!(a.now().lead_ns >= 400 * MS, "{:?}", a.now());
        // Once the stall left the window, the lead falls, gradually.
        let mut leads = Vec::new();
        for _ in 0..600 {
            t += S;
            a.add_judged(t, &reads(1, vec![2 * MS; 10]), &[], &names(&[1]));
            leads.push(a.now().lead_ns);
        }
        for w in leads.windows(2) {
            assert!(w[1] <= w[0]);
        }
        assert!(*leads.last().unwrap() < 10 * MS, "{:?}", a.now());
    }

    #[test]
    fn a_device_that_reads_hours_late_is_left_out_and_named() {
        let mut a = AutoLead::default();
        for b in 0..20u64 {
            let mut r = reads(1, vec![3 * MS; 20]);
            r.extend(reads(2, vec![4 * MS; 20]));
            // Reads uploaded as if 2 h late.
            r.extend(reads(3, vec![7_200 * S; 20]));
            a.add_judged(b * S, &r, &[], &names(&[1, 2, 3]));
        }
        let now = a.now();
        assert_eq!(now.left_out.len(), 1, "{now:?}");
        assert_eq!(now.left_out[0].name, "kiosk-3");
        assert!(now.left_out[0].why.contains("ceiling"));
        assert!(now.lead_ns < 10 * MS, "{now:?}");
        assert!(!now.capped());
    }

    #[test]
    fn a_device_far_outside_the_others_is_left_out_and_acausal_reads_too() {
        let mut a = AutoLead::default();
        for b in 0..20u64 {
            let mut r = reads(1, vec![2 * MS; 20]);
            r.extend(reads(2, vec![3 * MS; 20]));
            r.extend(reads(3, vec![500 * MS; 20]));
            r.extend(reads(4, vec![0; 20]).into_iter().map(|x| Read {
                upper_ns: -5 * MS as i64,
                ..x
            }));
            a.add_judged(b * S, &r, &[], &names(&[1, 2, 3, 4]));
        }
        let now = a.now();
        let left: Vec<&str> = now.left_out.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(left, ["kiosk-3", "kiosk-4"], "{now:?}");
        assert!(now.lead_ns < 10 * MS, "{now:?}");
    }

    #[test]
    fn the_ceiling_holds_and_says_what_was_wanted() {
        let mut a = AutoLead::new(100 * MS);
        for b in 0..10u64 {
            a.add_judged(b * S, &reads(1, vec![150 * MS; 50]), &[], &names(&[1]));
        }
        let now = a.now();
        assert_eq!(now.lead_ns, 100 * MS);
        assert!(now.capped());
        assert!(now.wanted_ns >= 150 * MS + MARGIN_NS, "{now:?}");
    }

    #[test]
    fn readiness_is_the_slowest_included_device() {
        let mut a = AutoLead::default();
        for b in 0..10u64 {
            let mut r = reads(1, vec![MS; 10]);
            r.extend(reads(2, vec![MS; 10]));
            a.add_judged(
                b * S,
                &r,
                &[(1, 20_000), (2, 2_000_000), (2, 1_500_000)],
                &names(&[1, 2]),
            );
        }
        assert_eq!(a.now().readiness_ns, 2_000_000);
    }

    #[test]
    fn memory_is_bounded() {
        let mut a = AutoLead::default();
        for b in 0..400u64 {
            a.add_judged(b, &reads(1, vec![MS; 1_000]), &[(1, 1)], &names(&[1]));
        }
        assert!(a.reads.len() <= MAX_COPIES);
        assert!(a.devices[&1].delays.len() <= MAX_DELAYS_PER_DEVICE);
    }
}
