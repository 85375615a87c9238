//! Latency for a server that records nothing. Without the agent's log there is
//! no broadcast start, but whoever triggers the broadcasts (a test script
//! calling the server's endpoint, bench/run) knows when it asked. Those trigger
//! times stand in for the start: each broadcast is paired with the latest
//! trigger at or before its first arrival.
//!
//! Trigger times are wall-clock nanoseconds on the triggering host. When the
//! devices' clocks are bounded against the agent's (an audit reads the
//! agent's clock for each trigger), arrivals are moved into the agent's
//! timebase first; otherwise they are compared with each device's raw wall
//! clock: exact when both are one host, else carrying the clocks' offsets
//! (which the report shows elsewhere).

use serde::Serialize;

use crate::analysis::join::{Joined, JoinedBroadcast, JoinedReceipt};
use crate::analysis::stats::{Summary, SummaryBuilder};
use crate::clock::DeviceClock;
use crate::convert;

/// A line of a triggers file that is not a time.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("line {line}: {text:?} is not a wall-clock time in nanoseconds since 1970")]
pub struct TriggerParseError {
    /// 1-based line number.
    pub line: usize,
    /// The offending text, trimmed.
    pub text: String,
}

/// Parses a triggers file: one time per line, in nanoseconds since the Unix
/// epoch (what `date +%s%N` prints); blank lines and `#` comments are skipped.
/// Returns the times sorted.
pub fn parse(text: &str) -> Result<Vec<u64>, TriggerParseError> {
    let mut times = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        match line.parse::<u64>() {
            // Before 2001 is not a plausible trigger: most likely seconds or ms.
            Ok(ns) if ns >= 1_000_000_000_000_000_000 => times.push(ns),
            _ => {
                return Err(TriggerParseError {
                    line: i + 1,
                    text: line.to_owned(),
                });
            }
        }
    }
    times.sort_unstable();
    Ok(times)
}

/// Receipt latency from the triggers.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TriggerLatency {
    /// Per receipt: arrival (kernel stamp where known) − its broadcast's trigger.
    pub latency_ns: Option<Summary>,
    /// Broadcasts paired with a trigger.
    pub broadcasts: u64,
    /// Broadcasts first seen before every trigger: not paired, not counted.
    pub before_any_trigger: u64,
    /// Triggers no broadcast was paired with (a trigger the server ignored, or
    /// one whose broadcast nobody received).
    pub unused_triggers: u64,
}

/// Pairs each broadcast with the latest trigger at or before its first arrival
/// and measures every receipt from it. `triggers` must be sorted (as
/// [`parse`] returns them).
pub fn latency(joined: &Joined, triggers: &[u64]) -> TriggerLatency {
    let mut builder = TriggerLatencyBuilder::new(triggers);
    for b in &joined.broadcasts {
        builder.add(b);
    }
    builder.finish()
}

/// [`latency`] built one broadcast at a time.
pub struct TriggerLatencyBuilder<'t> {
    triggers: &'t [u64],
    latencies: SummaryBuilder,
    used: Vec<bool>,
    paired: u64,
    before_any: u64,
}

impl<'t> TriggerLatencyBuilder<'t> {
    /// Against `triggers`, sorted.
    pub fn new(triggers: &'t [u64]) -> Self {
        TriggerLatencyBuilder {
            triggers,
            latencies: SummaryBuilder::new(),
            used: vec![false; triggers.len()],
            paired: 0,
            before_any: 0,
        }
    }

    /// Adds one broadcast, its arrivals on the devices' clocks as they are.
    pub fn add(&mut self, b: &JoinedBroadcast) {
        let arrivals: Vec<u64> = b
            .receipts
            .iter()
            .map(JoinedReceipt::arrival_wall_ns)
            .collect();
        self.add_arrivals(&arrivals);
    }

    /// Adds one broadcast with its arrivals moved into the agent's
    /// timebase, the triggers' clock, when every receipt's device clock is
    /// bounded (else as they are). A device clock a few ms off would
    /// otherwise pair a broadcast with the trigger before its own.
    pub fn add_corrected(&mut self, joined: &Joined, b: &JoinedBroadcast, clocks: &[DeviceClock]) {
        let placed = crate::analysis::placing::place_broadcast(joined, b, clocks);
        let corrected: Option<Vec<u64>> = placed
            .arrivals()
            .map(|p| p.map(|(at, _)| convert::unsigned(at)))
            .collect();
        match corrected {
            Some(arrivals) => self.add_arrivals(&arrivals),
            None => self.add(b),
        }
    }

    fn add_arrivals(&mut self, arrivals: &[u64]) {
        let Some(&first) = arrivals.iter().min() else {
            return;
        };
        // Index of the last trigger <= first.
        let after = self.triggers.partition_point(|&t| t <= first);
        let Some(i) = after.checked_sub(1) else {
            self.before_any += 1;
            return;
        };
        self.used[i] = true;
        self.paired += 1;
        for &a in arrivals {
            self.latencies
                .add(convert::signed(a) - convert::signed(self.triggers[i]));
        }
    }

    /// The latencies and pairing counts.
    pub fn finish(&self) -> TriggerLatency {
        TriggerLatency {
            latency_ns: self.latencies.finish(),
            broadcasts: self.paired,
            before_any_trigger: self.before_any,
            unused_triggers: self.used.iter().filter(|u| !**u).count() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stamp;
    use crate::analysis::join::join;
    use crate::record::*;

    const T0: u64 = 1_764_000_000_000_000_000;

    fn at(offset_ns: u64) -> Stamp {
        Stamp {
            wall_ns: T0 + offset_ns,
            mono_ns: 1_000 + offset_ns,
        }
    }

    /// One device, two connections, receiving a foreign payload at the given
    /// (connection, offset, kernel delay) times, occurrence by occurrence.
    fn probe_log(receipts: &[(u32, u32, u64, Option<u64>)]) -> Vec<ProbeRecord> {
        let mut r = vec![crate::fixtures::probe_started("dev", 2, at(0))];
        for conn in 0..2 {
            r.push(crate::fixtures::connection_opened(conn, None, at(1)));
        }
        for &(conn, occurrence, t, kernel_delay_ns) in receipts {
            r.push(ProbeRecord::Receipt(Receipt {
                kernel_delay_ns,
                ..crate::fixtures::receipt(
                    conn,
                    MessageKey::Hash {
                        hash: 5,
                        occurrence,
                    },
                    5,
                    at(t),
                )
            }));
        }
        r.push(ProbeRecord::Stopped(at(1_000_000)));
        r
    }

    #[test]
    fn parse_skips_comments_and_blanks_and_sorts() {
        let text = format!("# triggers\n\n{}\n  {}  # second\n", T0 + 500, T0 + 100);
        assert_eq!(parse(&text).unwrap(), vec![T0 + 100, T0 + 500]);
    }

    #[test]
    fn parse_names_the_bad_line() {
        let err = parse(&format!("{T0}\n1764000000\n")).unwrap_err();
        assert_eq!(
            err,
            TriggerParseError {
                line: 2,
                text: "1764000000".into()
            }
        );
        assert!(parse("soon\n").unwrap_err().to_string().contains("line 1"));
    }

    #[test]
    fn each_broadcast_is_measured_from_the_latest_trigger_before_it() {
        let log = probe_log(&[
            (0, 0, 1_000, None),
            (1, 0, 1_400, Some(100)), // kernel had it at 1,300
            (0, 1, 9_000, None),
            (1, 1, 9_200, None),
        ]);
        let joined = join(None, &[&log]);
        // Triggers at 800 and 8,500; 5,000 was ignored by the server.
        let triggers = [T0 + 800, T0 + 5_000, T0 + 8_500];
        let l = latency(&joined, &triggers);
        assert_eq!(l.broadcasts, 2);
        assert_eq!(l.before_any_trigger, 0);
        assert_eq!(l.unused_triggers, 1);
        let s = l.latency_ns.unwrap();
        // Broadcast 0: 200 and 500 from 800. Broadcast 1: 500 and 700 from 8,500.
        assert_eq!((s.min, s.max), (200, 700));
        assert_eq!(s.count, 4);
    }

    #[test]
    fn broadcasts_before_every_trigger_are_not_paired() {
        let log = probe_log(&[(0, 0, 1_000, None), (0, 1, 9_000, None)]);
        let joined = join(None, &[&log]);
        let l = latency(&joined, &[T0 + 8_000]);
        assert_eq!(
            (l.broadcasts, l.before_any_trigger, l.unused_triggers),
            (1, 1, 0)
        );
        let s = l.latency_ns.unwrap();
        assert_eq!((s.min, s.max), (1_000, 1_000));
        let none = latency(&joined, &[]);
        assert_eq!(none.latency_ns, None);
        assert_eq!(none.before_any_trigger, 2);
    }
}
