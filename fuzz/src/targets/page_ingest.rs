//! The browser probe page's uploads: the JSON dialect of `/ingest`.

use skewscope_core::ingest::{ToAgent, accept_batch};
use skewscope_core::log::decode_records;
use skewscope_core::page_ingest::{decode, page_label, parse_page_label};
use skewscope_core::record::ProbeRecord;

/// A page's message: whatever decodes becomes whole record frames, one per
/// event, each of which reads back as a record (what the agent stores is
/// always a valid log), and the batch rules hold for them as for a native
/// probe's. A hub label parses to what it names.
pub fn page_ingest(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some((run, conn)) = parse_page_label(text) {
        assert_eq!(parse_page_label(&page_label(run, conn)), Some((run, conn)));
    }
    let Ok(ToAgent::Records { first_seq, frames }) = decode(text) else {
        return;
    };
    let decoded = decode_records::<ProbeRecord>(&frames);
    assert_eq!(
        decoded.skipped_bytes, 0,
        "a decoded batch has a broken frame"
    );
    assert!(!decoded.torn_tail, "a decoded batch ends in a torn frame");
    let run_id = decoded
        .records
        .iter()
        .find_map(|r| match r {
            ProbeRecord::Identity(i) => Some(i.run_id),
            _ => None,
        })
        .unwrap_or(0);
    for next_seq in [0, first_seq, first_seq.saturating_add(1)] {
        if let Ok(accepted) = accept_batch(run_id, next_seq, first_seq, &frames) {
            assert!(first_seq <= next_seq, "accepted across a gap");
            assert!(frames.ends_with(accepted.new_frames));
        }
    }
}
