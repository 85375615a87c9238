//! Probe uploads: the ingest messages and the batches of record frames.

use skewscope_core::ingest::{ToAgent, accept_batch, decode_to_agent, decode_to_probe};

/// A probe's message (and the agent's, as a probe reads it); a batch is
/// checked against every position the agent might be at. What is accepted
/// is a suffix of the batch, holds as many records as it says, and a batch
/// is never accepted from past the agent's sequence (a gap).
pub fn ingest(data: &[u8]) {
    let _ = decode_to_probe(data);
    match decode_to_agent(data) {
        Ok(ToAgent::Records { first_seq, frames }) => batch(first_seq, &frames),
        Ok(ToAgent::Hello { .. } | ToAgent::HelloOwned { .. }) | Err(_) => {}
    }
    // The raw bytes as a batch too, so the fuzzer reaches the frame checks
    // without first finding postcard's envelope.
    batch(0, data);
}

fn batch(first_seq: u64, frames: &[u8]) {
    const RUN: u128 = 0x5eed;
    for next_seq in [0, 1, 2, first_seq, first_seq.saturating_add(3)] {
        let Ok(accepted) = accept_batch(RUN, next_seq, first_seq, frames) else {
            continue;
        };
        assert!(first_seq <= next_seq, "accepted across a gap");
        assert!(frames.ends_with(accepted.new_frames));
        assert_eq!(accepted.records.len() as u64, accepted.new_records);
    }
}
