//! What a sweep and its workers say to each other on the agent's board
//! (`/sweep`): the sweep pins a [`Plan`] (which stage, how many connections
//! each worker opens, and how to connect), each worker posts its
//! [`WorkerStatus`] and reads the plan back. The agent keeps both as
//! opaque JSON; this file is their one definition, shared by both ends.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Longest worker name: its runs are named after it, and a probe's name
/// is kept to 64 characters.
pub const MAX_WORKER_NAME: usize = 32;

/// The sweep's instruction to its workers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// This sweep's id (random): a worker's run names carry it, so runs of
    /// another sweep are never taken for this one's.
    pub sweep: String,
    /// Raised at every new instruction; a worker acts once per value.
    pub seq: u64,
    /// What to do now.
    pub step: Step,
    /// The stage: its connections on every machine together.
    pub stage: u32,
    /// Connections each worker opens in this stage, by worker name (a
    /// worker not named opens none).
    pub shares: BTreeMap<String, u32>,
    /// How to connect: the sweep's own connection flags.
    pub connect: Connect,
}

/// A plan's step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Open this stage's share and keep it open.
    Open,
    /// Close the share, finish the upload, and wait.
    Close,
}

/// How each connection is made: what `skewscope sweep` was given, so a
/// worker connects exactly as the sweep's own machine does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Connect {
    /// The server's URL.
    pub url: String,
    /// `--protocol` and its flags (with their secrets: the board is
    /// behind the agent's token).
    pub protocol: probe::protocol_args::ProtocolArgs,
    /// `--header` lines, `Name: value`, values read.
    pub headers: Vec<String>,
    /// `--subprotocol`s.
    pub subprotocols: Vec<String>,
    /// Whether permessage-deflate is offered.
    pub deflate: bool,
    /// `--connect-timeout`, ms.
    pub connect_timeout_ms: u64,
    /// `--insecure`.
    pub insecure: bool,
}

/// What a worker says of itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// Its name (`--name`, its host name by default).
    pub name: String,
    /// Its host name.
    pub host: String,
    /// Connections it can hold (its open-file limit, less what it needs
    /// besides).
    pub room: u32,
    /// The sweep and plan it last acted on (`None` before any).
    pub acted_on: Option<(String, u64)>,
    /// Where it is.
    pub state: WorkerState,
}

/// A worker's state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum WorkerState {
    /// Nothing open; waiting for a plan.
    Idle,
    /// Opening its share.
    Opening,
    /// Its share's attempts are all done.
    Open {
        /// Connections open.
        opened: u32,
        /// Attempts that failed (their reasons are in its log).
        failed: u32,
    },
    /// Closing its share and finishing its upload.
    Closing,
    /// Its share is closed and uploaded.
    Closed {
        /// Receipts its connections recorded.
        receipts: u64,
        /// Whether the agent acknowledged every record.
        uploaded: bool,
    },
    /// It could not do what the plan asked.
    Failed {
        /// Why.
        why: String,
    },
}

impl std::fmt::Display for WorkerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerState::Idle => f.write_str("idle"),
            WorkerState::Opening => f.write_str("opening"),
            WorkerState::Open { opened, failed } => write!(f, "{opened} open, {failed} failed"),
            WorkerState::Closing => f.write_str("closing"),
            WorkerState::Closed { receipts, uploaded } => write!(
                f,
                "closed, {receipts} receipt(s), {}",
                if *uploaded {
                    "all uploaded"
                } else {
                    "upload INCOMPLETE (the rest is in its log)"
                }
            ),
            WorkerState::Failed { why } => write!(f, "failed: {why}"),
        }
    }
}

/// The name a worker's probe run of a stage has (and its upload on the
/// agent), from which the sweep finds it.
pub fn run_name(sweep: &str, stage: u32, worker: &str) -> String {
    format!("sw-{sweep}-{stage}-{worker}")
}

/// `connections` shared between this machine (first) and the workers
/// (after, in `rooms`' order), each given at most its room: as even as
/// the rooms allow, the remainder to the first. Fewer than asked when all
/// the rooms together are smaller.
pub fn share(connections: u32, rooms: &[u32]) -> Vec<u32> {
    let mut shares = vec![0u32; rooms.len()];
    let mut left = connections;
    // Hand out a round at a time to those with room left; a full machine
    // drops out, its part going to the others.
    loop {
        let open: Vec<usize> = (0..rooms.len()).filter(|&i| shares[i] < rooms[i]).collect();
        if left == 0 || open.is_empty() {
            return shares;
        }
        let each = (left / open.len() as u32).max(1);
        for i in open {
            let give = each.min(rooms[i] - shares[i]).min(left);
            shares[i] += give;
            left -= give;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_shared_evenly_within_each_machines_room() {
        assert_eq!(share(10, &[100, 100]), vec![5, 5]);
        assert_eq!(share(5, &[100, 100, 100]), vec![2, 2, 1]);
        assert_eq!(share(1, &[100, 100]), vec![1, 0]);
        // A small machine holds what it can; the others take the rest.
        assert_eq!(
            share(10_000, &[2_000, 20_000, 20_000]),
            vec![2_000, 4_000, 4_000]
        );
        // Not room enough anywhere: all that fits.
        assert_eq!(share(50, &[10, 20]), vec![10, 20]);
        assert_eq!(share(0, &[10]), vec![0]);
    }

    #[test]
    fn a_plan_and_a_status_read_back_as_written() {
        let plan = Plan {
            sweep: "ab12".into(),
            seq: 3,
            step: Step::Open,
            stage: 100,
            shares: [("rack-2".to_owned(), 50)].into(),
            connect: Connect {
                url: "ws://server/ws".into(),
                protocol: probe::protocol_args::ProtocolArgs::default(),
                headers: vec!["X-Site: 7".into()],
                subprotocols: Vec::new(),
                deflate: true,
                connect_timeout_ms: 10_000,
                insecure: false,
            },
        };
        let text = serde_json::to_string(&plan).unwrap();
        assert_eq!(serde_json::from_str::<Plan>(&text).unwrap(), plan);
        let status = WorkerStatus {
            name: "rack-2".into(),
            host: "rack-2.lan".into(),
            room: 19_000,
            acted_on: Some(("ab12".into(), 3)),
            state: WorkerState::Open {
                opened: 50,
                failed: 0,
            },
        };
        let text = serde_json::to_string(&status).unwrap();
        assert!(text.contains(r#""state":"open""#), "{text}");
        assert_eq!(serde_json::from_str::<WorkerStatus>(&text).unwrap(), status);
    }
}
