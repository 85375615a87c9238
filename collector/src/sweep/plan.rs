//! Which stages a sweep runs: the connections asked, cut to what this
//! process may hold open. A load generator that fails at its own file
//! limit measures nothing about the server; one that opens fewer
//! connections than asked without a word misleads. So a stage above the
//! room is cut to it and says so, and a later stage the cut makes equal to
//! one already run is left out, and says so.

/// Descriptors a stage opens besides its sockets: its log and its
/// follower, the connection threads' event loops and wake-ups, the
/// trigger's connection. Kept free on top of the probe's own headroom.
pub const STAGE_OVERHEAD: u64 = 40;

/// One stage as it will run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedStage {
    /// Connections asked.
    pub asked: u32,
    /// Connections it will open: `asked`, or the room when that is less.
    pub connections: u32,
    /// Why it opens fewer than asked, when it does.
    pub cut: Option<String>,
}

/// A stage asked that will not run, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Connections asked.
    pub asked: u32,
    /// Why not.
    pub why: String,
}

/// The stages to run (ascending), cut to `room` sockets under an
/// open-file `limit`, and those left out.
pub fn plan(stages: &[u32], room: u64, limit: u64) -> (Vec<PlannedStage>, Vec<Skipped>) {
    let room = room.saturating_sub(STAGE_OVERHEAD);
    let mut planned: Vec<PlannedStage> = Vec::new();
    let mut skipped = Vec::new();
    let mut sorted = stages.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    for asked in sorted {
        if room == 0 {
            skipped.push(Skipped {
                asked,
                why: format!(
                    "no room for a socket: this process may hold {limit} open files, and they are taken; raise the hard limit (ulimit -Hn, or LimitNOFILE=)"
                ),
            });
            continue;
        }
        let connections = u64::from(asked).min(room) as u32;
        if planned.last().is_some_and(|p| p.connections == connections) {
            skipped.push(Skipped {
                asked,
                why: format!(
                    "cut to {} connections like the stage before it: this process may hold {limit} open files",
                    thousands(u64::from(connections))
                ),
            });
            continue;
        }
        let cut = (connections < asked).then(|| {
            format!(
                "cut to {} connections: this process may hold {} open files (the hard limit; raise it with ulimit -Hn, or LimitNOFILE= in a unit), and needs some for itself",
                thousands(u64::from(connections)),
                thousands(limit)
            )
        });
        planned.push(PlannedStage {
            asked,
            connections,
            cut,
        });
    }
    (planned, skipped)
}

/// `12345` as `12,345`: connection counts read at a glance.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_within_the_room_run_as_asked() {
        let (planned, skipped) = plan(&[100, 5], 20_000, 20_000);
        assert!(skipped.is_empty());
        assert_eq!(
            planned,
            vec![
                PlannedStage {
                    asked: 5,
                    connections: 5,
                    cut: None
                },
                PlannedStage {
                    asked: 100,
                    connections: 100,
                    cut: None
                }
            ]
        );
    }

    #[test]
    fn a_stage_over_the_room_is_cut_and_one_cut_alike_left_out() {
        let room = 20_000 - 70;
        let (planned, skipped) = plan(&[1000, 25_000, 30_000], room, 20_000);
        let big = &planned[1];
        assert_eq!(big.asked, 25_000);
        assert_eq!(u64::from(big.connections), room - STAGE_OVERHEAD);
        let cut = big.cut.as_deref().unwrap();
        assert!(cut.contains("cut to 19,890 connections"), "{cut}");
        assert!(cut.contains("20,000 open files"), "{cut}");
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].asked, 30_000);
        assert!(skipped[0].why.contains("like the stage before"));
    }

    #[test]
    fn no_room_runs_nothing_and_says_why() {
        let (planned, skipped) = plan(&[5], 10, 64);
        assert!(planned.is_empty());
        assert!(skipped[0].why.contains("ulimit -Hn"), "{:?}", skipped[0]);
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(5), "5");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(19_890), "19,890");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
