//! The audit's verdict: a report held against the operator's thresholds, one
//! check per threshold, each with the figure it was judged on.
//!
//! A pass must hold for the truth, not only for the estimate: across device
//! clocks, skew is judged on the *upper* bound of its interval, and a figure
//! that cannot be bounded (a device with no time exchange) cannot pass.

use serde::Serialize;

use crate::analysis::report::{ClockBasis, Report};
use crate::analysis::stats::Summary;
use crate::convert;

/// What the operator requires. `None` leaves a check out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Thresholds {
    /// Median skew per broadcast.
    pub max_skew_p50_ns: Option<u64>,
    /// 99th-percentile skew per broadcast.
    pub max_skew_p99_ns: Option<u64>,
    /// Largest skew of any broadcast.
    pub max_skew_max_ns: Option<u64>,
    /// Receipts missing, over all broadcasts and connections.
    pub max_missing: Option<u64>,
    /// Every probe's clock offset to the agent known to within this.
    pub max_offset_bound_ns: Option<u64>,
    /// Every clock (each probe's and the server's) claims to be synchronised.
    pub require_synced_clocks: bool,
    /// 99th-percentile action skew per broadcast (`--act-at` probes).
    pub max_action_skew_p99_ns: Option<u64>,
    /// Late actions (the message came after its time to act).
    pub max_late: Option<u64>,
}

/// What a check's figures count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Unit {
    /// Nanoseconds.
    Ns,
    /// A count.
    Count,
}

/// One threshold, judged.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Check {
    /// Which threshold: `skew-p50`, `skew-p99`, `skew-max`, `missing`,
    /// `offset-bound`, `synced-clocks`, `action-skew-p99`, `late`.
    pub check: &'static str,
    /// The unit of `limit` and `measured`.
    pub unit: Unit,
    /// The most the check allows.
    pub limit: i64,
    /// The figure judged; `None` when it could not be measured (a fail).
    pub measured: Option<i64>,
    /// Whether `measured` is within `limit`.
    pub pass: bool,
    /// What the figure is, and why it failed when it could not be measured.
    pub basis: String,
}

/// Every check, and whether all passed.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Verdict {
    /// One per threshold given, in a fixed order.
    pub checks: Vec<Check>,
    /// All checks passed.
    pub pass: bool,
}

/// Holds `report` against `thresholds`.
pub fn judge(report: &Report, thresholds: &Thresholds) -> Verdict {
    let mut checks = Vec::new();
    let skew_limits = [
        ("skew-p50", thresholds.max_skew_p50_ns, Percentile::P50),
        ("skew-p99", thresholds.max_skew_p99_ns, Percentile::P99),
        ("skew-max", thresholds.max_skew_max_ns, Percentile::Max),
    ];
    for (check, limit, at) in skew_limits {
        if let Some(limit) = limit {
            checks.push(skew_check(report, check, limit, at));
        }
    }
    if let Some(limit) = thresholds.max_missing {
        checks.push(Check {
            check: "missing",
            unit: Unit::Count,
            limit: convert::signed(limit),
            measured: Some(convert::signed(report.missing)),
            pass: report.missing <= limit,
            basis: format!(
                "receipts missing over {} broadcasts and {} connections",
                report.broadcasts, report.connections
            ),
        });
    }
    if let Some(limit) = thresholds.max_offset_bound_ns {
        checks.push(offset_bound_check(report, limit));
    }
    if thresholds.require_synced_clocks {
        checks.push(synced_clocks_check(report));
    }
    if let Some(limit) = thresholds.max_action_skew_p99_ns {
        checks.push(action_skew_check(report, limit));
    }
    if let Some(limit) = thresholds.max_late {
        checks.push(late_check(report, limit));
    }
    let pass = checks.iter().all(|c| c.pass);
    Verdict { checks, pass }
}

#[derive(Clone, Copy)]
enum Percentile {
    P50,
    P99,
    Max,
}

impl Percentile {
    fn of(self, s: &Summary) -> i64 {
        match self {
            Percentile::P50 => s.p50,
            Percentile::P99 => s.p99,
            Percentile::Max => s.max,
        }
    }
}

fn skew_check(report: &Report, check: &'static str, limit: u64, at: Percentile) -> Check {
    // The k-th smallest upper bound is at least the k-th smallest true skew,
    // so a percentile of the upper bounds bounds that percentile of the truth.
    let (measured, basis) = match report.clock_basis {
        ClockBasis::SingleHost => (
            report.skew_ns.as_ref().map(|s| at.of(s)),
            "one clock: the skew as measured, with no clock error".to_owned(),
        ),
        ClockBasis::CorrectedToAgent => (
            report.skew_corrected_ns.as_ref().map(|s| at.of(&s.hi)),
            "upper bound of the skew corrected to the agent's clock (a pass holds for the truth)"
                .to_owned(),
        ),
        ClockBasis::UncorrectedDeviceClocks => (
            None,
            format!(
                "cannot be shown: {} receipts came from clocks with no time exchange, so their offsets are unbounded",
                report.uncorrected_receipts
            ),
        ),
    };
    let basis = match (measured, report.skew_ns.is_some()) {
        (None, false) => "cannot be measured: no broadcast reached two connections".to_owned(),
        _ => basis,
    };
    Check {
        check,
        unit: Unit::Ns,
        limit: convert::signed(limit),
        measured,
        pass: measured.is_some_and(|m| m <= convert::signed(limit)),
        basis,
    }
}

/// The action skew's p99, on its upper bound across clocks, as the receive
/// skew is judged.
fn action_skew_check(report: &Report, limit: u64) -> Check {
    let (measured, basis) = match &report.actions {
        None => (
            None,
            "no action was measured: run the probes with --act-at (and broadcasts with a time to act)"
                .to_owned(),
        ),
        Some(a) if a.action_skew_ns.is_none() => (
            None,
            "cannot be measured: no broadcast was acted on by two connections".to_owned(),
        ),
        Some(a) => match report.clock_basis {
            ClockBasis::SingleHost => (
                a.action_skew_ns.as_ref().map(|s| s.p99),
                "one clock: the action skew as measured, with no clock error".to_owned(),
            ),
            _ if a.uncorrected_actions > 0 => (
                None,
                format!(
                    "cannot be shown: {} actions came from clocks with no time exchange",
                    a.uncorrected_actions
                ),
            ),
            _ => (
                a.action_skew_corrected_ns.as_ref().map(|s| s.hi.p99),
                "upper bound of the action skew in the agent's clock (a pass holds for the truth)"
                    .to_owned(),
            ),
        },
    };
    Check {
        check: "action-skew-p99",
        unit: Unit::Ns,
        limit: convert::signed(limit),
        measured,
        pass: measured.is_some_and(|m| m <= convert::signed(limit)),
        basis,
    }
}

/// Actions that came after their time to act.
fn late_check(report: &Report, limit: u64) -> Check {
    let (measured, basis) = match &report.actions {
        None => (
            None,
            "no action was measured: run the probes with --act-at".to_owned(),
        ),
        Some(a) => (
            Some(convert::signed(a.late)),
            format!(
                "actions whose message came after its time to act, of {}",
                a.actions
            ),
        ),
    };
    Check {
        check: "late",
        unit: Unit::Count,
        limit: convert::signed(limit),
        measured,
        pass: measured.is_some_and(|m| m <= convert::signed(limit)),
        basis,
    }
}

fn offset_bound_check(report: &Report, limit: u64) -> Check {
    let unbounded: Vec<&str> = report
        .probes
        .iter()
        .filter(|p| p.clock.offset_bound_ns.is_none())
        .map(|p| p.name.as_str())
        .collect();
    let worst = report
        .probes
        .iter()
        .filter_map(|p| p.clock.offset_bound_ns.map(|b| (b, p.name.as_str())))
        .max();
    let (measured, basis) = match (unbounded.is_empty(), worst) {
        (true, Some((bound, name))) => (
            Some(convert::signed(bound)),
            format!("largest clock offset bound, probe {name}"),
        ),
        (true, None) => (None, "no probe in the report".to_owned()),
        (false, _) => (
            None,
            format!(
                "no time exchange from probe {}: its offset is unbounded",
                unbounded.join(", ")
            ),
        ),
    };
    Check {
        check: "offset-bound",
        unit: Unit::Ns,
        limit: convert::signed(limit),
        measured,
        pass: measured.is_some_and(|m| m <= convert::signed(limit)),
        basis,
    }
}

fn synced_clocks_check(report: &Report) -> Check {
    let mut unsynced = Vec::new();
    for p in &report.probes {
        if !p.clock.claim.as_ref().is_some_and(claims_sync) {
            unsynced.push(format!("probe {}", p.name));
        }
    }
    if let Some(agent) = &report.agent
        && !agent.claim.as_ref().is_some_and(claims_sync)
    {
        unsynced.push(format!("server {}", agent.host));
    }
    let basis = if unsynced.is_empty() {
        "clocks whose last claim is not synchronised (kernel STA_UNSYNC or chrony)".to_owned()
    } else {
        format!("not synchronised or no claim: {}", unsynced.join(", "))
    };
    Check {
        check: "synced-clocks",
        unit: Unit::Count,
        limit: 0,
        measured: Some(convert::signed(unsynced.len() as u64)),
        pass: unsynced.is_empty(),
        basis,
    }
}

/// Whether a clock's claim says a time daemon keeps it synchronised: it
/// claims an error bound (chrony not "Not synchronised", else the kernel's
/// STA_UNSYNC clear).
fn claims_sync(claim: &crate::record::ClockState) -> bool {
    claim.claimed_bound_ns().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stamp;
    use crate::analysis::clock_figures::{BoundedSummary, ClaimCheck, DeviceClockSummary};
    use crate::analysis::join::join;
    use crate::analysis::report::ProbeSummary;
    use crate::record::{ClockState, KernelClock};

    fn summary(p50: i64, p99: i64, max: i64) -> Summary {
        Summary {
            count: 10,
            min: 0,
            p50,
            p90: p99,
            p99,
            p999: max,
            max,
        }
    }

    fn report() -> Report {
        Report::build(&join(None, &[]), Vec::new())
    }

    fn probe(name: &str, bound: Option<u64>, synced: Option<bool>) -> ProbeSummary {
        ProbeSummary {
            name: name.into(),
            host: name.into(),
            boot_id: None,
            connections: 1,
            reconnects: 0,
            receipts: 10,
            missing: 0,
            ended: crate::analysis::join::RunEnd::Stopped,
            tls_connections: 0,
            tls_unverified: 0,
            deflate_connections: 0,
            page: None,
            app: None,
            logs_pruned: None,
            clock_tags: None,
            clock: DeviceClockSummary {
                time_samples: 5,
                offset_ns: bound.map(|_| 0),
                offset_bound_ns: bound,
                drift_ppb: None,
                drift_bound_ppb: None,
                model_breaks: 0,
                claim: synced.map(|synchronized| ClockState {
                    at: Stamp {
                        wall_ns: 1,
                        mono_ns: 1,
                    },
                    kernel: Some(KernelClock {
                        synchronized,
                        status: 0,
                        max_error_ns: 1_000_000,
                        est_error_ns: 0,
                        offset_ns: 0,
                        freq_ppb: 0,
                    }),
                    chrony: None,
                }),
                offset_vs_claim: ClaimCheck::Unknown,
                clock_steps: Vec::new(),
            },
        }
    }

    fn skew_limits(p99: u64) -> Thresholds {
        Thresholds {
            max_skew_p99_ns: Some(p99),
            ..Thresholds::default()
        }
    }

    #[test]
    fn across_clocks_skew_is_judged_on_its_upper_bound() {
        let mut r = report();
        r.clock_basis = ClockBasis::CorrectedToAgent;
        r.skew_ns = Some(summary(1_000, 2_000, 3_000));
        r.skew_corrected_ns = Some(BoundedSummary {
            estimate: summary(1_000, 2_000, 3_000),
            lo: summary(0, 500, 800),
            hi: summary(4_000, 9_000, 9_500),
        });
        // The estimate (2 µs) is under 5 µs, the bound (9 µs) is not.
        let v = judge(&r, &skew_limits(5_000));
        assert!(!v.pass);
        assert_eq!(v.checks[0].measured, Some(9_000));
        assert!(v.checks[0].basis.contains("upper bound"));
        assert!(judge(&r, &skew_limits(9_000)).pass);
    }

    #[test]
    fn on_one_clock_the_measured_skew_is_judged() {
        let mut r = report();
        r.clock_basis = ClockBasis::SingleHost;
        r.skew_ns = Some(summary(1_000, 2_000, 3_000));
        let v = judge(&r, &skew_limits(2_000));
        assert!(v.pass);
        assert_eq!(v.checks[0].measured, Some(2_000));
    }

    #[test]
    fn unbounded_clocks_or_no_skew_cannot_pass() {
        let mut r = report();
        r.clock_basis = ClockBasis::UncorrectedDeviceClocks;
        r.uncorrected_receipts = 7;
        r.skew_ns = Some(summary(1, 1, 1));
        let v = judge(&r, &skew_limits(1_000_000_000));
        assert!(!v.pass);
        assert_eq!(v.checks[0].measured, None);
        assert!(
            v.checks[0].basis.contains("7 receipts"),
            "{}",
            v.checks[0].basis
        );

        let mut r = report();
        r.clock_basis = ClockBasis::SingleHost;
        let v = judge(&r, &skew_limits(1_000_000_000));
        assert!(!v.pass);
        assert!(v.checks[0].basis.contains("two connections"));
    }

    #[test]
    fn missing_offset_bounds_and_clock_claims_are_checked_per_probe() {
        let mut r = report();
        r.missing = 2;
        r.probes = vec![
            probe("a", Some(40_000), Some(true)),
            probe("b", Some(90_000), Some(false)),
        ];
        let v = judge(
            &r,
            &Thresholds {
                max_missing: Some(2),
                max_offset_bound_ns: Some(100_000),
                require_synced_clocks: true,
                ..Thresholds::default()
            },
        );
        let by = |name| v.checks.iter().find(|c| c.check == name).unwrap();
        assert!(by("missing").pass);
        assert!(by("offset-bound").pass);
        assert_eq!(by("offset-bound").measured, Some(90_000));
        assert!(!by("synced-clocks").pass);
        assert!(by("synced-clocks").basis.contains("probe b"));
        assert!(!v.pass);

        r.probes.push(probe("c", None, Some(true)));
        r.missing = 3;
        let v = judge(
            &r,
            &Thresholds {
                max_missing: Some(2),
                max_offset_bound_ns: Some(100_000),
                ..Thresholds::default()
            },
        );
        assert!(v.checks.iter().all(|c| !c.pass));
        assert!(v.checks[1].basis.contains("probe c"));
    }
}
