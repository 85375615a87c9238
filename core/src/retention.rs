//! How many earlier runs' logs a probe keeps in its `--out-dir`, and which
//! it may delete: a probe run as a service in a restart loop must not fill
//! its device's disk, and must never delete the only copy of a record.
//!
//! The rule: a new run needs room for itself, one run more than the
//! earlier ones kept and [`MIN_BUDGET_BYTES`] under the byte limit. To make
//! that room the oldest earlier logs the agent has acknowledged in full are
//! deleted, oldest first, and only as many as needed. When the logs left
//! are all unacknowledged and there is still no room, the disk is the
//! limit: the run does not record (the probe says so) rather than delete a
//! record nobody else has. What the new run may write is the byte limit
//! less what stays.

use crate::convert;

/// Default most run logs kept, the new one included.
pub const DEFAULT_MAX_RUNS: u32 = 20;

/// Default most bytes the logs may take, the new one included.
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// The least a new run must be able to write: a run that could not hold a
/// few minutes of receipts is not worth starting.
pub const MIN_BUDGET_BYTES: u64 = 1024 * 1024;

/// The limits (`--keep-runs`, `--keep-bytes`); 0 is no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Most run logs, the new one included.
    pub max_runs: u32,
    /// Most bytes, the new log included.
    pub max_bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_runs: DEFAULT_MAX_RUNS,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// An earlier run's log, as the plan needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EarlierLog {
    /// Its size on disk.
    pub bytes: u64,
    /// Whether the agent has every record of it (only then may it go).
    pub acked_in_full: bool,
}

/// Why a new run cannot record: every log that would have to go to make
/// room is one the agent does not have in full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskIsTheLimit {
    /// As many earlier runs as the limit allows are kept already.
    Runs {
        /// Earlier runs kept.
        kept: u32,
        /// The limit.
        max: u32,
    },
    /// Less than [`MIN_BUDGET_BYTES`] is left under the byte limit.
    Bytes {
        /// Bytes the earlier runs keep.
        kept: u64,
        /// The limit.
        max: u64,
    },
}

impl std::fmt::Display for DiskIsTheLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DiskIsTheLimit::Runs { kept, max } => write!(
                f,
                "{kept} earlier run log(s) are kept and the limit is {max} runs"
            ),
            DiskIsTheLimit::Bytes { kept, max } => write!(
                f,
                "earlier run logs keep {kept} bytes and the limit is {max} bytes (a run needs {MIN_BUDGET_BYTES} free)"
            ),
        }
    }
}

/// What to delete, and what the new run may write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Indexes into the earlier logs given, to delete.
    pub delete: Vec<usize>,
    /// Bytes those free.
    pub deleted_bytes: u64,
    /// Earlier runs kept after it, and their bytes.
    pub kept_runs: u32,
    /// …
    pub kept_bytes: u64,
    /// The most the new run's log may hold (`None`: no byte limit); an
    /// error when there is no room for it.
    pub budget: Result<Option<u64>, DiskIsTheLimit>,
}

impl Retention {
    /// The plan for a new run beside `earlier` (oldest first).
    pub fn plan(&self, earlier: &[EarlierLog]) -> Plan {
        let mut kept_runs = convert::count(earlier.len());
        let mut kept_bytes = earlier
            .iter()
            .fold(0u64, |sum, l| sum.saturating_add(l.bytes));
        let runs_over = |runs: u32| self.max_runs != 0 && runs + 1 > self.max_runs;
        let bytes_over = |bytes: u64| {
            self.max_bytes != 0 && bytes.saturating_add(MIN_BUDGET_BYTES) > self.max_bytes
        };
        let mut delete = Vec::new();
        let mut deleted_bytes = 0u64;
        for (i, log) in earlier.iter().enumerate() {
            if !runs_over(kept_runs) && !bytes_over(kept_bytes) {
                break;
            }
            if log.acked_in_full {
                delete.push(i);
                deleted_bytes = deleted_bytes.saturating_add(log.bytes);
                kept_runs -= 1;
                kept_bytes = kept_bytes.saturating_sub(log.bytes);
            }
        }
        let budget = if runs_over(kept_runs) {
            Err(DiskIsTheLimit::Runs {
                kept: kept_runs,
                max: self.max_runs,
            })
        } else if bytes_over(kept_bytes) {
            Err(DiskIsTheLimit::Bytes {
                kept: kept_bytes,
                max: self.max_bytes,
            })
        } else if self.max_bytes == 0 {
            Ok(None)
        } else {
            Ok(Some(self.max_bytes - kept_bytes))
        };
        Plan {
            delete,
            deleted_bytes,
            kept_runs,
            kept_bytes,
            budget,
        }
    }

    /// Whether `earlier` leaves room for a new run with nothing deleted.
    pub fn fits(&self, earlier: &[EarlierLog]) -> bool {
        let plan = self.plan(earlier);
        plan.delete.is_empty() && plan.budget.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn logs(spec: &[(u64, bool)]) -> Vec<EarlierLog> {
        spec.iter()
            .map(|&(bytes, acked_in_full)| EarlierLog {
                bytes,
                acked_in_full,
            })
            .collect()
    }

    #[test]
    fn room_to_spare_deletes_nothing() {
        let r = Retention::default();
        let plan = r.plan(&logs(&[(MIB, true), (MIB, false)]));
        assert!(plan.delete.is_empty());
        assert_eq!(plan.budget, Ok(Some(62 * MIB)));
        assert!(r.fits(&logs(&[(MIB, true); 19])));
        assert!(!r.fits(&logs(&[(MIB, true); 20])));
    }

    #[test]
    fn the_oldest_acknowledged_go_first_and_only_as_many_as_needed() {
        let r = Retention {
            max_runs: 3,
            max_bytes: 0,
        };
        let plan = r.plan(&logs(&[(10, false), (20, true), (30, true), (40, true)]));
        // Four kept, room for three with the new one: two go, the oldest
        // acknowledged ones; the unacknowledged oldest stays.
        assert_eq!(plan.delete, vec![1, 2]);
        assert_eq!(
            (plan.kept_runs, plan.kept_bytes, plan.deleted_bytes),
            (2, 50, 50)
        );
        assert_eq!(plan.budget, Ok(None));
    }

    #[test]
    fn bytes_make_room_too() {
        let r = Retention {
            max_runs: 0,
            max_bytes: 9 * MIB,
        };
        let plan = r.plan(&logs(&[(4 * MIB, true), (4 * MIB, true), (MIB, false)]));
        assert_eq!(plan.delete, vec![0]);
        assert_eq!(plan.budget, Ok(Some(4 * MIB)));
    }

    #[test]
    fn the_only_copy_is_never_deleted_and_the_disk_is_the_limit() {
        let r = Retention {
            max_runs: 2,
            max_bytes: 0,
        };
        let plan = r.plan(&logs(&[(1, false), (1, true), (1, false)]));
        assert_eq!(plan.delete, vec![1]);
        assert_eq!(plan.budget, Err(DiskIsTheLimit::Runs { kept: 2, max: 2 }));
        let r = Retention {
            max_runs: 0,
            max_bytes: 2 * MIB,
        };
        let plan = r.plan(&logs(&[(2 * MIB, false)]));
        assert!(plan.delete.is_empty());
        assert!(matches!(plan.budget, Err(DiskIsTheLimit::Bytes { .. })));
        assert!(plan.budget.unwrap_err().to_string().contains("bytes"));
    }

    #[test]
    fn no_limits_keep_everything() {
        let r = Retention {
            max_runs: 0,
            max_bytes: 0,
        };
        let plan = r.plan(&logs(&[(u64::MAX / 4, true); 100]));
        assert!(plan.delete.is_empty());
        assert_eq!(plan.budget, Ok(None));
    }
}

#[cfg(test)]
mod properties {
    use super::*;

    /// On random directories: never an unacknowledged log deleted; with
    /// room, the limits hold with the new run and its budget; a plan that
    /// fits as it is deletes nothing; every deletion was needed.
    #[test]
    fn plans_keep_the_only_copies_and_the_limits() {
        for seed in 0..2_000u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let earlier: Vec<EarlierLog> = (0..rng.usize(0..30))
                .map(|_| EarlierLog {
                    bytes: rng.u64(0..8 * 1024 * 1024),
                    acked_in_full: rng.bool(),
                })
                .collect();
            let r = Retention {
                max_runs: rng.u32(0..25),
                max_bytes: if rng.bool() {
                    0
                } else {
                    rng.u64(0..100 * 1024 * 1024)
                },
            };
            let plan = r.plan(&earlier);
            assert!(
                plan.delete.iter().all(|&i| earlier[i].acked_in_full),
                "seed {seed}"
            );
            if let Ok(budget) = plan.budget {
                assert!(
                    r.max_runs == 0 || plan.kept_runs < r.max_runs,
                    "seed {seed}"
                );
                if let Some(b) = budget {
                    assert_eq!(plan.kept_bytes + b, r.max_bytes, "seed {seed}");
                    assert!(b >= MIN_BUDGET_BYTES, "seed {seed}");
                }
            }
            // Minimal: without its newest deletion the plan would not fit.
            if let Some((_, rest)) = plan.delete.split_last() {
                let mut without: Vec<EarlierLog> = earlier.clone();
                for &i in rest.iter().rev() {
                    without.remove(i);
                }
                let kept_runs = without.len() as u32;
                let kept_bytes: u64 = without.iter().map(|l| l.bytes).sum();
                let over = (r.max_runs != 0 && kept_runs + 1 > r.max_runs)
                    || (r.max_bytes != 0 && kept_bytes + MIN_BUDGET_BYTES > r.max_bytes);
                assert!(over, "seed {seed}: a deletion that was not needed");
            }
        }
    }
}
