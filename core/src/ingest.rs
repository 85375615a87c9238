//! The upload of a probe's records to the agent (`/ingest`), as bytes and as
//! rules, without I/O.
//!
//! A probe run is named by the random `run_id` of its `Identity` record, and
//! each of its records by its sequence number: its index in the run's record
//! log (0 is `Started`, 1 is `Identity`). The probe's own log is the spool:
//! the uploader sends from the agent's `next_seq`, and the agent acknowledges
//! the highest contiguous sequence it has durably written. A batch that
//! overlaps what the agent has is trimmed (a resend after a lost ack), one
//! that would leave a gap is refused, so every record is stored exactly once
//! across disconnects and restarts of either side.
//!
//! Messages are postcard-encoded [`ToAgent`] and [`ToProbe`] in binary
//! WebSocket messages; a batch carries the records in the log's own framing
//! (length, CRC, postcard), so what is stored is byte for byte what the probe
//! wrote.

use serde::{Deserialize, Serialize};

use crate::log::{FRAME_HEADER_LEN, FrameAt, frame_at};
use crate::record::ProbeRecord;

/// Version of these messages; a probe speaking another is refused.
pub const INGEST_VERSION: u16 = 1;
/// Largest batch a probe sends and the agent accepts, in bytes of frames.
pub const MAX_BATCH_BYTES: usize = 1 << 20;

/// What a probe sends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToAgent {
    /// First message: which run this connection uploads.
    Hello {
        /// [`INGEST_VERSION`].
        version: u16,
        /// The run's id, from its `Identity` record.
        run_id: u128,
    },
    /// Records `first_seq ..`, framed as in the record log.
    Records {
        /// Sequence number of the first frame.
        first_seq: u64,
        /// Whole frames, at most [`MAX_BATCH_BYTES`].
        frames: Vec<u8>,
    },
    /// First message of a probe that owns its run: which run, and the
    /// run's owner secret ([`crate::run_owner`]). The agent binds the run to
    /// the first secret it is given, and then takes it only with it.
    HelloOwned {
        /// [`INGEST_VERSION`].
        version: u16,
        /// The run's id, from its `Identity` record.
        run_id: u128,
        /// The run's owner secret.
        secret: u128,
    },
}

/// What the agent answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToProbe {
    /// Every record below `next_seq` is durably stored: send from there.
    Ack {
        /// The first sequence number the agent does not have.
        next_seq: u64,
    },
    /// Nothing was stored (data budget or disk full); the same batch may be
    /// sent again later. Records stay in the probe's log meanwhile.
    Busy {
        /// What the agent has, as in `Ack`.
        next_seq: u64,
        /// Why, for people.
        reason: String,
    },
}

/// Why an upload was refused; the agent closes that connection.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IngestError {
    /// The message is not one of this protocol.
    #[error("not an ingest message")]
    Malformed,
    /// The probe speaks another version.
    #[error("ingest version {0} is not supported (this agent speaks {INGEST_VERSION})")]
    Version(u16),
    /// A batch larger than [`MAX_BATCH_BYTES`].
    #[error("batch of {0} bytes is over the {MAX_BATCH_BYTES}-byte limit")]
    Oversized(usize),
    /// A frame's length or checksum does not hold, or its record does not decode.
    #[error("corrupt record frame at byte {0} of the batch")]
    CorruptFrame(usize),
    /// The batch starts past what the agent has: records would be missing.
    #[error("batch starts at sequence {first_seq} but the agent has only up to {next_seq}")]
    Gap {
        /// Where the batch starts.
        first_seq: u64,
        /// What the agent has.
        next_seq: u64,
    },
    /// The run's first records are not `Started` then `Identity` with this run id.
    #[error("the run's first records are not Started and Identity of run {0:032x}")]
    WrongRun(u128),
}

impl IngestError {
    /// A short, stable name for counters and `/healthz`.
    pub fn counter(&self) -> &'static str {
        match self {
            IngestError::Malformed => "malformed",
            IngestError::Version(_) => "version",
            IngestError::Oversized(_) => "oversized",
            IngestError::CorruptFrame(_) => "corrupt_frame",
            IngestError::Gap { .. } => "sequence_gap",
            IngestError::WrongRun(_) => "wrong_run",
        }
    }
}

/// Encodes a message (postcard).
pub fn encode<M: Serialize>(message: &M) -> Vec<u8> {
    postcard::to_allocvec(message).expect("postcard into Vec")
}

/// Decodes a probe's message.
pub fn decode_to_agent(bytes: &[u8]) -> Result<ToAgent, IngestError> {
    postcard::from_bytes(bytes).map_err(|_| IngestError::Malformed)
}

/// Decodes the agent's message.
pub fn decode_to_probe(bytes: &[u8]) -> Option<ToProbe> {
    postcard::from_bytes(bytes).ok()
}

/// What to append of a checked batch.
#[derive(Debug, PartialEq)]
pub struct Accepted<'a> {
    /// The frames the agent does not have yet, in order (may be empty).
    pub new_frames: &'a [u8],
    /// How many records `new_frames` holds.
    pub new_records: u64,
    /// Those records, decoded (checking them decoded them anyway): what the
    /// agent's live join takes in once they are stored.
    pub records: Vec<ProbeRecord>,
    /// Records of the batch the agent already had (a resend).
    pub duplicates: u64,
}

/// Checks a batch against what the agent has for run `run_id` (`next_seq`
/// records) and returns the part to append. Every frame must be intact and
/// decode as a probe record, and a run must begin with its `Started` and its
/// `Identity`; anything else refuses the whole batch, so nothing half-valid
/// is ever stored.
pub fn accept_batch<'a>(
    run_id: u128,
    next_seq: u64,
    first_seq: u64,
    frames: &'a [u8],
) -> Result<Accepted<'a>, IngestError> {
    if frames.len() > MAX_BATCH_BYTES {
        return Err(IngestError::Oversized(frames.len()));
    }
    if first_seq > next_seq {
        return Err(IngestError::Gap {
            first_seq,
            next_seq,
        });
    }
    let mut pos = 0;
    let mut seq = first_seq;
    let mut new_start = None;
    let mut records = Vec::new();
    while pos < frames.len() {
        let FrameAt::Intact(payload) = frame_at(frames, pos) else {
            return Err(IngestError::CorruptFrame(pos));
        };
        let record: ProbeRecord =
            postcard::from_bytes(payload).map_err(|_| IngestError::CorruptFrame(pos))?;
        let in_place = match seq {
            0 => matches!(record, ProbeRecord::Started(_)),
            1 => matches!(&record, ProbeRecord::Identity(i) if i.run_id == run_id),
            _ => true,
        };
        if !in_place {
            return Err(IngestError::WrongRun(run_id));
        }
        if seq == next_seq {
            new_start = Some(pos);
        }
        if seq >= next_seq {
            records.push(record);
        }
        pos += FRAME_HEADER_LEN + payload.len();
        seq += 1;
    }
    let new_records = seq.saturating_sub(next_seq);
    Ok(Accepted {
        new_frames: new_start.map_or(&frames[frames.len()..], |at| &frames[at..]),
        new_records,
        records,
        duplicates: (seq - first_seq) - new_records,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stamp;
    use crate::log::encode_record;
    use crate::record::RunIdentity;

    const RUN: u128 = 0xfeed;

    fn frames(records: &[ProbeRecord]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in records {
            encode_record(r, &mut out);
        }
        out
    }

    fn run(n: usize) -> Vec<ProbeRecord> {
        let mut records = vec![
            crate::fixtures::probe_started_on("p", "h", 1, Stamp::default()),
            ProbeRecord::Identity(RunIdentity {
                run_id: RUN,
                boot_id: None,
            }),
        ];
        records.extend((0..n).map(|i| {
            ProbeRecord::Stopped(Stamp {
                wall_ns: i as u64,
                mono_ns: 0,
            })
        }));
        records
    }

    #[test]
    fn a_fresh_run_is_taken_whole() {
        let f = frames(&run(3));
        let a = accept_batch(RUN, 0, 0, &f).unwrap();
        assert_eq!((a.new_records, a.duplicates), (5, 0));
        assert_eq!(a.new_frames, &f[..]);
    }

    #[test]
    fn a_resend_is_trimmed_to_what_is_new() {
        let records = run(3);
        let f = frames(&records[2..]);
        let tail = frames(&records[4..]);
        let a = accept_batch(RUN, 4, 2, &f).unwrap();
        assert_eq!((a.new_records, a.duplicates), (1, 2));
        assert_eq!(a.new_frames, &tail[..]);
        // All of it already stored: nothing to append.
        let a = accept_batch(RUN, 9, 2, &f).unwrap();
        assert_eq!((a.new_records, a.duplicates), (0, 3));
        assert!(a.new_frames.is_empty());
    }

    #[test]
    fn gaps_corruption_and_foreign_runs_are_refused() {
        let records = run(3);
        let f = frames(&records[3..]);
        assert_eq!(
            accept_batch(RUN, 2, 3, &f),
            Err(IngestError::Gap {
                first_seq: 3,
                next_seq: 2
            })
        );
        let mut bad = frames(&records);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(matches!(
            accept_batch(RUN, 0, 0, &bad),
            Err(IngestError::CorruptFrame(_))
        ));
        // A torn frame at the end is corrupt too: batches carry whole frames.
        let whole = frames(&records);
        assert!(accept_batch(RUN, 0, 0, &whole[..whole.len() - 2]).is_err());
        // Another run's identity.
        assert_eq!(
            accept_batch(RUN + 1, 0, 0, &whole),
            Err(IngestError::WrongRun(RUN + 1))
        );
        assert!(matches!(
            accept_batch(RUN, 0, 0, &vec![0; MAX_BATCH_BYTES + 1]),
            Err(IngestError::Oversized(_))
        ));
    }

    #[test]
    fn messages_round_trip_and_garbage_is_malformed() {
        let hello = ToAgent::Hello {
            version: INGEST_VERSION,
            run_id: RUN,
        };
        assert_eq!(decode_to_agent(&encode(&hello)), Ok(hello));
        let ack = ToProbe::Ack { next_seq: 7 };
        assert_eq!(decode_to_probe(&encode(&ack)), Some(ack));
        assert_eq!(decode_to_agent(&[0xff, 0xff]), Err(IngestError::Malformed));
    }
}
