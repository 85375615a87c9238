//! Where an action's true error comes from, for benchmarks whose devices all
//! run on this host (`bench/apps`): every device's clock is this host's, so
//! the truth of each action is known from the agent's store alone.
//!
//! An action aimed at the server's time `at`, mapped onto its device's
//! clock with an estimated offset θ (the agent's clock minus the device's),
//! and its timer fired at `done`. With one clock for all (the true θ is 0):
//! - **true error** = `done.wall − at`: how far after the server's moment it
//!   really acted;
//! - its **clock part** = `−θ`: where the estimate put the moment;
//! - its **timer part** = `done.mono − target.mono`: how late the device's
//!   timer and read-out were against the moment it aimed at.
//!
//! The true error is the sum of the two parts. Per broadcast, the spread of
//! the true errors across devices is the true action skew; the spread of the
//! clock parts is what the clocks alone would have given with perfect
//! timers, and the spread of the timer parts what the timers alone gave.
//! So a skew is split between the clock models and the host's scheduling.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use skewscope_core::analysis::stats::Summary;
use skewscope_core::record::{Action, ProbeRecord};

use crate::processes::probe_records;

/// One device's (or app's) actions, split.
#[derive(Debug, Serialize)]
pub struct ActorTruth {
    /// The run's name, `PROBE/APP` for an app beside a probe.
    pub name: String,
    /// Its actions in time, counted.
    pub actions: u64,
    /// `done.wall − at`, ns.
    pub true_error_ns: Option<Summary>,
    /// `−θ`, ns (actions with an offset).
    pub clock_part_ns: Option<Summary>,
    /// `done.mono − target.mono`, ns.
    pub timer_part_ns: Option<Summary>,
}

/// Per broadcast acted on by two devices or more: last − first, each part.
#[derive(Debug, Serialize)]
pub struct SkewTruth {
    /// Broadcasts acted on by two devices or more.
    pub broadcasts: u64,
    /// The spread of the true errors: the true action skew.
    pub true_skew_ns: Option<Summary>,
    /// The spread of the clock parts: the skew perfect timers would give.
    pub clock_skew_ns: Option<Summary>,
    /// The spread of the timer parts: the skew perfect clocks would give.
    pub timer_skew_ns: Option<Summary>,
}

/// Everything [`run`] found in a store.
#[derive(Debug, Serialize)]
pub struct Truth {
    /// One row per actor.
    pub actors: Vec<ActorTruth>,
    /// The spreads across actors.
    pub skew: SkewTruth,
}

/// One action's three figures, ns: true error, clock part, timer part.
fn split(a: &Action) -> (i64, Option<i64>, i64) {
    let true_error = a.done.wall_ns as i64 - a.act_at_ns as i64;
    let timer = a.done.mono_ns as i64 - a.target.mono_ns as i64;
    (true_error, a.offset_ns.map(|theta| -theta), timer)
}

/// The actions grouped per broadcast: moments within [`SAME_BROADCAST_NS`]
/// of each other are one (each module reads the server's time in its own
/// unit, seconds as a float here, ms there, and rounds it its own way).
fn broadcasts(
    by_moment: BTreeMap<u64, Vec<(i64, Option<i64>, i64)>>,
) -> Vec<Vec<(i64, Option<i64>, i64)>> {
    let mut groups: Vec<(u64, Vec<_>)> = Vec::new();
    for (at, v) in by_moment {
        match groups.last_mut() {
            Some((first, group)) if at - *first <= SAME_BROADCAST_NS => group.extend(v),
            _ => groups.push((at, v)),
        }
    }
    groups.into_iter().map(|(_, v)| v).collect()
}

/// Two aimed moments this close are one broadcast's (the benchmarks' are
/// 200 ms apart or more).
const SAME_BROADCAST_NS: u64 = 1_000_000;

/// Reads every run in the agent's store `data` (its `probes/` directory)
/// and splits each in-time action aimed at a moment in `[from_ns, to_ns]`
/// (the server's wall clock; the measured broadcasts).
pub fn run(data: &Path, from_ns: u64, to_ns: u64) -> anyhow::Result<Truth> {
    let mut actors: BTreeMap<String, Vec<(i64, Option<i64>, i64)>> = BTreeMap::new();
    let mut by_moment: BTreeMap<u64, Vec<(i64, Option<i64>, i64)>> = BTreeMap::new();
    let dir = data.join("probes");
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("sklog") {
            continue;
        }
        let records = probe_records(&path);
        let name = records
            .iter()
            .find_map(|r| match r {
                ProbeRecord::Started(s) => Some(s.name.clone()),
                _ => None,
            })
            .unwrap_or_else(|| path.display().to_string());
        for r in &records {
            let (who, action) = match r {
                ProbeRecord::Action(a) => (name.clone(), a),
                ProbeRecord::AppAction(a) => (format!("{name}/{}", a.app), &a.action),
                _ => continue,
            };
            if action.late_ns > 0 || !(from_ns..=to_ns).contains(&action.act_at_ns) {
                continue;
            }
            let figures = split(action);
            actors.entry(who).or_default().push(figures);
            by_moment.entry(action.act_at_ns).or_default().push(figures);
        }
    }
    let summary = |v: Vec<i64>| Summary::of(&v);
    let actors = actors
        .into_iter()
        .map(|(name, v)| ActorTruth {
            name,
            actions: v.len() as u64,
            true_error_ns: summary(v.iter().map(|f| f.0).collect()),
            clock_part_ns: summary(v.iter().filter_map(|f| f.1).collect()),
            timer_part_ns: summary(v.iter().map(|f| f.2).collect()),
        })
        .collect();
    let spread = |v: &mut dyn Iterator<Item = i64>| {
        let (lo, hi) = v.fold((i64::MAX, i64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
        hi - lo
    };
    let (mut true_skew, mut clock_skew, mut timer_skew) = (Vec::new(), Vec::new(), Vec::new());
    for v in broadcasts(by_moment).iter().filter(|v| v.len() >= 2) {
        true_skew.push(spread(&mut v.iter().map(|f| f.0)));
        timer_skew.push(spread(&mut v.iter().map(|f| f.2)));
        if v.iter().all(|f| f.1.is_some()) {
            clock_skew.push(spread(&mut v.iter().filter_map(|f| f.1)));
        }
    }
    Ok(Truth {
        actors,
        skew: SkewTruth {
            broadcasts: true_skew.len() as u64,
            true_skew_ns: Summary::of(&true_skew),
            clock_skew_ns: Summary::of(&clock_skew),
            timer_skew_ns: Summary::of(&timer_skew),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewscope_core::record::MessageKey;
    use skewscope_core::stamp::Stamp;

    #[test]
    fn the_true_error_is_the_clock_part_plus_the_timer_part() {
        let at = 1_000_000_000_000;
        // The estimate put the moment 300 µs early (θ = +300 µs), and the
        // timer fired 50 µs after the moment it aimed at.
        let action = Action {
            conn: 0,
            key: MessageKey::Seq(1),
            hash: 0,
            act_at_ns: at,
            offset_ns: Some(300_000),
            offset_bound_ns: Some(1_000_000),
            target: Stamp {
                wall_ns: at - 300_000,
                mono_ns: 5_000_000,
            },
            done: Stamp {
                wall_ns: at - 250_000,
                mono_ns: 5_050_000,
            },
            late_ns: 0,
        };
        let (true_error, clock, timer) = split(&action);
        assert_eq!(
            (true_error, clock, timer),
            (-250_000, Some(-300_000), 50_000)
        );
        assert_eq!(true_error, clock.unwrap() + timer);
    }
}
