//! The one rule for how long a broadcast's lead must be: what the report
//! advises and what `lead=auto` gives (over its recent window) are this
//! function of the same figures.
//!
//! A time to act is in time at a device when the device has read the
//! message and can still arm its timer before it. So the lead covers
//! [`QUANTILE`] of the copies' reads (start to read, in the agent's clock,
//! each at the latest its clock bound allows), plus the **readiness** of
//! the slowest device (what it needs from reading a message to acting on
//! it, as its own actions show it: the p99 of its late actions' reaction,
//! read to acted, [`reaction_ns`]), plus a margin. A timer that fires late
//! is not cured by a longer lead, so an action in time adds nothing.
//!
//! A quantile needs evidence: the p99.9 of a few hundred reads is only
//! their maximum. Evidence is counted in **independent reads**: a device's
//! copies of one broadcast count once, since its connections share its
//! radio and are held together (three connections on a dozing device give
//! three late copies for one hold). With [`MIN_EVIDENCE`] of them (ten
//! times 1/(1 − q)) the empirical quantile is used. With fewer, an
//! exponential tail is fitted above the p90 (its slope from the p90 and the
//! p99) and extrapolated to the quantile, its slope widened by a factor
//! that shrinks with the reads above the p90 (about an upper 97.5 % limit
//! of an exponential's mean), and never below the largest read seen:
//! [`Evidence::TailModel`] says it. The largest is a floor, not a cap:
//! the actions that came late over the link emulator were each the first
//! hold longer than any before it (a model held under the largest left
//! 9 of 2,004 late on good Wi-Fi, against none without). Past 199 reads
//! the floor is itself extrapolated: the largest of `k` reads is about
//! the 1 − 1/(k + 1) quantile, so the p99.9 lies past it by the slope from
//! the p99 to it, which is where a tail of rare long holds shows its
//! slope (a radio dozing 30-600 ms behind beacon holds of at most 307 ms:
//! the p90-to-p99 slope sees only the beacon).
//!
//! The margin is [`MARGIN_NS`], and with the empirical quantile also
//! [`MARGIN_SHARE`] of the read when that is more: the tail model already
//! reaches past what the reads show, which the share was for.

use serde::Serialize;

use crate::analysis::stats::Summary;
use crate::convert;

/// The share of copies a lead covers: at most one action in a thousand late.
pub const QUANTILE: f64 = 0.999;
/// Reads needed before the empirical [`QUANTILE`] is used: ten times
/// 1/(1 − q).
pub const MIN_EVIDENCE: u64 = 10_000;
/// Added at least: what a device does between reading a message and
/// planning its timer beyond its measured readiness, and rounding.
pub const MARGIN_NS: u64 = 250_000;
/// The margin's share of the covering read: a link's jitter grows with its
/// delay (found over the link emulator: a copy 0.14 ms past the largest of
/// the first slow ones, at a 40 ms lead).
pub const MARGIN_SHARE: f64 = 1.0 / 16.0;

/// What the covering read rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Evidence {
    /// The empirical quantile, over this many independent reads
    /// ([`MIN_EVIDENCE`] or more).
    Quantile {
        /// Independent reads: one a device and broadcast.
        reads: u64,
    },
    /// Too few independent reads for it: an exponential tail fitted above
    /// their p90, held to what the reads show.
    TailModel {
        /// Independent reads: one a device and broadcast.
        reads: u64,
    },
}

impl Evidence {
    /// The reads it rests on.
    pub fn reads(&self) -> u64 {
        match *self {
            Evidence::Quantile { reads } | Evidence::TailModel { reads } => reads,
        }
    }
}

/// The read a lead must cover, and what says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Covering {
    /// The read (start to read, ns) that [`QUANTILE`] of copies are within.
    pub read_ns: i64,
    /// Its evidence.
    pub evidence: Evidence,
}

/// The read [`QUANTILE`] of copies are within, from the reads' summary
/// and how many of them are independent (`independent`: one a device and
/// broadcast, at most `reads.count`).
pub fn covering(reads: &Summary, independent: u64) -> Covering {
    let independent = independent.clamp(1, reads.count.max(1));
    if independent >= MIN_EVIDENCE {
        return Covering {
            read_ns: reads.p999,
            evidence: Evidence::Quantile { reads: independent },
        };
    }
    // Exponential above the p90: the p99 is one decade further, the p99.9
    // one more. Its slope's uncertainty with k reads above the p90 is
    // about 1/sqrt(k); two of it widen the slope.
    let above_p90 = (independent as f64 * 0.1).max(1.0);
    let widen = 1.0 + 2.0 / above_p90.sqrt();
    let decade = (reads.p99 - reads.p90).max(0) as f64 * widen;
    let modelled = convert::from_float_signed(reads.p99 as f64 + decade);
    Covering {
        read_ns: modelled.max(past_the_largest(reads, independent)),
        evidence: Evidence::TailModel { reads: independent },
    }
}

/// Where the p99.9 lies by the slope from the p99 to the largest read, and
/// at least the largest: with `k` independent reads the largest sits about
/// `log10(k + 1)` decades out (the 1 − 1/(k + 1) quantile), so below a
/// thousand reads the p99.9 is past it by the p99-to-largest slope. A tail
/// whose rare holds stand far above the rest (a radio dozing 30-600 ms
/// while its beacon holds end at 307 ms) shows its slope there and not
/// between the p90 and the p99, where the slope model looks. Taken from
/// [`MIN_DECADES_TO_LARGEST`] on; nearer the p99, one read more or less
/// swings it by times.
fn past_the_largest(reads: &Summary, independent: u64) -> i64 {
    let decades = (independent as f64 + 1.0).log10() - 2.0;
    if !(MIN_DECADES_TO_LARGEST..1.0).contains(&decades) {
        return reads.max;
    }
    let slope = (reads.max - reads.p99).max(0) as f64 / decades;
    convert::from_float_signed(reads.p99 as f64 + slope).max(reads.max)
}

/// The decades from the p99 to the largest read (log10 of the independent
/// reads, less two) before their slope is trusted: 199 reads.
pub const MIN_DECADES_TO_LARGEST: f64 = 0.3;

/// The lead for a covering read and the slowest device's readiness: their
/// sum and the margin.
pub fn lead_ns(covering: &Covering, readiness_ns: u64) -> u64 {
    let read = convert::unsigned(covering.read_ns);
    let with_margin = match covering.evidence {
        Evidence::Quantile { .. } => with_margin(read),
        Evidence::TailModel { .. } => read.saturating_add(MARGIN_NS),
    };
    with_margin.saturating_add(readiness_ns)
}

/// `read_ns` and the margin on top an empirical quantile gets:
/// [`MARGIN_NS`], or [`MARGIN_SHARE`] of it when that is more.
pub fn with_margin(read_ns: u64) -> u64 {
    let share = convert::from_float(read_ns as f64 * MARGIN_SHARE);
    read_ns.saturating_add(share.max(MARGIN_NS))
}

/// A late action's reaction: from its message's read to the moment it
/// acted, what a device needs between reading and acting (`None` for an
/// action in time: its read came before its target, so it shows only
/// that the device was ready). `target_mono_ns`, `late_ns` (read minus
/// target) and `done_mono_ns` as the action records them.
pub fn reaction_ns(target_mono_ns: u64, late_ns: u64, done_mono_ns: u64) -> Option<i64> {
    (late_ns > 0).then(|| {
        convert::signed(done_mono_ns) - convert::signed(target_mono_ns.saturating_add(late_ns))
    })
}

/// A device's readiness from its reactions: their p99, at least 0.
pub fn readiness_ns(reactions: &Summary) -> u64 {
    convert::unsigned(reactions.p99)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    #[test]
    fn with_enough_reads_the_quantile_is_the_reads_own() {
        let reads: Vec<i64> = (1..=20_000).map(|i| i * 1_000).collect();
        let s = Summary::of(&reads).unwrap();
        let c = covering(&s, 20_000);
        assert_eq!(c.evidence, Evidence::Quantile { reads: 20_000 });
        // The same reads from 4,000 devices' five connections each: too
        // few independent ones, a model never under the largest.
        let c = covering(&s, 4_000);
        assert_eq!(c.evidence, Evidence::TailModel { reads: 4_000 });
        assert!(c.read_ns >= s.max, "{c:?} {s:?}");
    }

    #[test]
    fn with_few_reads_the_tail_is_modelled_above_the_largest() {
        // 500 reads of an exponential-ish tail: 1 ms, 2 ms at the p90, 4 ms
        // at the p99, 5 ms the largest. The modelled p99.9 is past 6 ms.
        let mut reads = vec![MS; 440];
        reads.extend(vec![2 * MS; 50]);
        reads.extend(vec![4 * MS; 9]);
        reads.push(5 * MS);
        let s = Summary::of(&reads).unwrap();
        let c = covering(&s, 500);
        assert_eq!(c.evidence, Evidence::TailModel { reads: 500 });
        assert!(c.read_ns > 6 * MS, "{c:?} {s:?}");
        // Never below the largest read.
        let flat = Summary::of(&[MS, MS, MS, 30 * MS]).unwrap();
        assert!(covering(&flat, 4).read_ns >= 30 * MS);
    }

    #[test]
    fn rare_long_holds_above_a_plateau_are_extrapolated_past_the_largest() {
        // 300 reads of a dozing radio: beacon holds up to 307 ms (p90 276,
        // p99 304), and one rare hold of 500 ms. The p90-to-p99 slope
        // sees only the beacon; the slope to the largest reaches past
        // 600 ms, the rare holds' own end.
        let mut reads: Vec<i64> = (0..299).map(|i| i * 307 * MS / 298).collect();
        reads.push(500 * MS);
        let s = Summary::of(&reads).unwrap();
        let c = covering(&s, 300);
        assert!(c.read_ns > 600 * MS, "{c:?} {s:?}");
        // Under 199 reads the largest is a floor only: one read more or
        // less would swing the slope by times.
        let few = Summary::of(&reads[150..]).unwrap();
        assert_eq!(past_the_largest(&few, 150), few.max);
        assert!(covering(&few, 150).read_ns < 600 * MS);
        // A smooth tail's largest is no further than its slope model says:
        // the exponential-ish reads of the test above are unchanged.
        let mut smooth = vec![MS; 440];
        smooth.extend(vec![2 * MS; 50]);
        smooth.extend(vec![4 * MS; 9]);
        smooth.push(5 * MS);
        let s = Summary::of(&smooth).unwrap();
        let slope_model = s.p99 + ((s.p99 - s.p90) as f64 * (1.0 + 2.0 / 50f64.sqrt())) as i64;
        assert!(past_the_largest(&s, 500) <= slope_model, "{s:?}");
    }

    #[test]
    fn evidence_counts_a_devices_copies_of_a_broadcast_once() {
        // 2,000 reads from 500 devices' four connections each: too few
        // independent reads for the quantile, and the model is never under
        // their largest.
        let mut reads: Vec<i64> = vec![MS; 1_996];
        reads.extend(vec![50 * MS; 4]);
        let s = Summary::of(&reads).unwrap();
        let c = covering(&s, 500);
        assert_eq!(c.evidence, Evidence::TailModel { reads: 500 });
        assert!(c.read_ns >= 50 * MS, "{c:?} {s:?}");
        // Never more independent reads than reads.
        assert_eq!(
            covering(&s, 1 << 40).evidence,
            Evidence::TailModel { reads: 2_000 }
        );
    }

    #[test]
    fn the_lead_adds_the_readiness_and_the_margin() {
        let c = Covering {
            read_ns: 40 * MS,
            evidence: Evidence::Quantile { reads: 10_000 },
        };
        assert_eq!(lead_ns(&c, 300_000), 40_000_000 + 2_500_000 + 300_000);
        let short = Covering {
            read_ns: 1_000_000,
            evidence: Evidence::TailModel { reads: 3 },
        };
        assert_eq!(lead_ns(&short, 0), 1_000_000 + MARGIN_NS);
        // A tail model reaches past the reads already: no share on top.
        let modelled = Covering {
            read_ns: 40 * MS,
            evidence: Evidence::TailModel { reads: 900 },
        };
        assert_eq!(lead_ns(&modelled, 0), 40_000_000 + MARGIN_NS);
    }

    #[test]
    fn a_late_action_shows_its_reaction_and_one_in_time_nothing() {
        // In time: its timer's error is no lack of lead.
        assert_eq!(reaction_ns(1_000, 0, 1_040), None);
        // Read 500 ns late: acted 60 ns after the read.
        assert_eq!(reaction_ns(1_000, 500, 1_560), Some(60));
    }
}
