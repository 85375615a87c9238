//! The knee: up to how many clients the server's broadcasts still reach
//! them together, against a threshold on receive skew p99, and the one
//! sentence that says it ("keeps within 10 ms up to 1,000 clients; at
//! 5,000, 43 ms"). Pure: handed each stage's figure, it scans the stages
//! in order and stops at the first over the threshold or unmeasured.

use serde::{Deserialize, Serialize};

use super::plan::thousands;

/// One stage, as the knee sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct KneePoint {
    /// Clients connected at that stage.
    pub clients: u32,
    /// Its receive skew p99, if it was measured.
    pub skew_p99_ns: Option<u64>,
    /// Why it was not measured, if it was not.
    pub unmeasured: Option<String>,
}

/// The first stage over the threshold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Over {
    /// Its clients.
    pub clients: u32,
    /// Its skew p99.
    pub skew_p99_ns: u64,
}

/// A stage the scan stopped at because it had no figure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unmeasured {
    /// Its clients.
    pub clients: u32,
    /// Why.
    pub why: String,
}

/// Where the server's skew p99 crosses the threshold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Knee {
    /// The threshold (`--max-skew-p99`).
    pub max_skew_p99_ns: u64,
    /// The largest stage within it, every stage before it within it too.
    pub within_up_to: Option<Over>,
    /// The first stage over it.
    pub first_over: Option<Over>,
    /// The first stage without a figure, before any was over.
    pub unmeasured: Option<Unmeasured>,
    /// What it comes to, for people.
    pub sentence: String,
}

/// The knee of `stages` (smallest first) against `max_skew_p99_ns`.
pub fn find(stages: &[KneePoint], max_skew_p99_ns: u64) -> Knee {
    let mut within_up_to = None;
    let mut first_over = None;
    let mut unmeasured = None;
    for stage in stages {
        match stage.skew_p99_ns {
            Some(p99) if p99 <= max_skew_p99_ns => {
                within_up_to = Some(Over {
                    clients: stage.clients,
                    skew_p99_ns: p99,
                });
            }
            Some(p99) => {
                first_over = Some(Over {
                    clients: stage.clients,
                    skew_p99_ns: p99,
                });
                break;
            }
            None => {
                unmeasured = Some(Unmeasured {
                    clients: stage.clients,
                    why: stage
                        .unmeasured
                        .clone()
                        .unwrap_or_else(|| "no broadcast reached it".to_owned()),
                });
                break;
            }
        }
    }
    let limit = short_duration(max_skew_p99_ns);
    let sentence = match (&within_up_to, &first_over, &unmeasured) {
        (Some(within), Some(over), _) => format!(
            "skew p99 keeps within {limit} up to {} clients; at {}, {}",
            thousands(u64::from(within.clients)),
            thousands(u64::from(over.clients)),
            short_duration(over.skew_p99_ns)
        ),
        (Some(within), None, Some(u)) => format!(
            "skew p99 keeps within {limit} up to {} clients; at {} it could not be measured: {}",
            thousands(u64::from(within.clients)),
            thousands(u64::from(u.clients)),
            u.why
        ),
        (Some(within), None, None) => format!(
            "skew p99 keeps within {limit} at every stage, up to {} clients ({} there)",
            thousands(u64::from(within.clients)),
            short_duration(within.skew_p99_ns)
        ),
        (None, Some(over), _) => format!(
            "skew p99 exceeds {limit} from the first stage: at {} clients, {}",
            thousands(u64::from(over.clients)),
            short_duration(over.skew_p99_ns)
        ),
        (None, None, Some(u)) => format!(
            "no stage was measured: at {} clients, {}",
            thousands(u64::from(u.clients)),
            u.why
        ),
        (None, None, None) => "no stage was run".to_owned(),
    };
    Knee {
        max_skew_p99_ns,
        within_up_to,
        first_over,
        unmeasured,
        sentence,
    }
}

/// A duration in three significant digits at most, trailing zeros left
/// out: `10 ms`, `43.2 ms`, `850 µs`, `1.25 s`: what a sentence quotes.
pub fn short_duration(ns: u64) -> String {
    let (value, unit) = match ns {
        0..1_000 => return format!("{ns} ns"),
        1_000..1_000_000 => (ns as f64 / 1e3, "µs"),
        1_000_000..1_000_000_000 => (ns as f64 / 1e6, "ms"),
        _ => (ns as f64 / 1e9, "s"),
    };
    let text = if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    };
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    };
    format!("{text} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(clients: u32, p99_ms: f64) -> KneePoint {
        KneePoint {
            clients,
            skew_p99_ns: Some((p99_ms * 1e6) as u64),
            unmeasured: None,
        }
    }

    const TEN_MS: u64 = 10_000_000;

    #[test]
    fn the_knee_is_the_first_stage_over_the_threshold() {
        let knee = find(
            &[
                at(5, 0.2),
                at(100, 1.5),
                at(1000, 9.8),
                at(5000, 43.21),
                at(10_000, 9.0),
            ],
            TEN_MS,
        );
        assert_eq!(
            knee.sentence,
            "skew p99 keeps within 10 ms up to 1,000 clients; at 5,000, 43.2 ms"
        );
        assert_eq!(knee.within_up_to.unwrap().clients, 1000);
        assert_eq!(knee.first_over.unwrap().clients, 5000);
    }

    #[test]
    fn every_stage_within_or_the_first_over_is_said_so() {
        let all = find(&[at(5, 0.2), at(100, 4.0)], TEN_MS);
        assert_eq!(
            all.sentence,
            "skew p99 keeps within 10 ms at every stage, up to 100 clients (4 ms there)"
        );
        let none = find(&[at(5, 12.0), at(100, 40.0)], TEN_MS);
        assert_eq!(
            none.sentence,
            "skew p99 exceeds 10 ms from the first stage: at 5 clients, 12 ms"
        );
        assert!(none.within_up_to.is_none());
        // Exactly at the threshold is within it.
        assert!(find(&[at(5, 10.0)], TEN_MS).first_over.is_none());
    }

    #[test]
    fn a_stage_without_a_figure_ends_the_scan_with_its_reason() {
        let gone = KneePoint {
            clients: 5000,
            skew_p99_ns: None,
            unmeasured: Some("the trigger timed out".into()),
        };
        let knee = find(&[at(100, 1.0), gone.clone(), at(10_000, 2.0)], TEN_MS);
        assert_eq!(
            knee.sentence,
            "skew p99 keeps within 10 ms up to 100 clients; at 5,000 it could not be measured: the trigger timed out"
        );
        assert_eq!(
            find(&[gone], TEN_MS).sentence,
            "no stage was measured: at 5,000 clients, the trigger timed out"
        );
        assert_eq!(find(&[], TEN_MS).sentence, "no stage was run");
    }

    #[test]
    fn durations_are_short_and_exact_enough() {
        assert_eq!(short_duration(10_000_000), "10 ms");
        assert_eq!(short_duration(43_210_000), "43.2 ms");
        assert_eq!(short_duration(850_000), "850 µs");
        assert_eq!(short_duration(1_250_000_000), "1.25 s");
        assert_eq!(short_duration(999), "999 ns");
        assert_eq!(short_duration(9_800_000), "9.8 ms");
    }
}
