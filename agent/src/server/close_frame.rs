//! A WebSocket close frame whose reason fits in one: RFC 6455 gives a close
//! frame's payload at most 125 bytes, two of them the code, so a longer
//! reason makes the frame invalid and the peer sees a protocol error
//! ("Control frame too big") instead of why it was closed. Seen on a fresh
//! machine: the ingest's "run … is being uploaded by another connection …"
//! is 127 bytes.

use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// The most bytes of reason a close frame carries.
pub const MAX_REASON_BYTES: usize = 123;

/// A close frame with `code` and `reason`, the reason cut at a character
/// boundary to [`MAX_REASON_BYTES`] (ending in "…" when cut).
pub fn close_frame(code: CloseCode, reason: &str) -> CloseFrame {
    CloseFrame {
        code,
        reason: fitted(reason).into(),
    }
}

fn fitted(reason: &str) -> String {
    if reason.len() <= MAX_REASON_BYTES {
        return reason.to_owned();
    }
    const ELLIPSIS: &str = "…";
    let mut end = MAX_REASON_BYTES - ELLIPSIS.len();
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ELLIPSIS}", &reason[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_fits_in_a_control_frame() {
        assert_eq!(fitted("short"), "short");
        let exact = "x".repeat(MAX_REASON_BYTES);
        assert_eq!(fitted(&exact), exact);
        let long = format!(
            "run {} is being uploaded by another connection, and this one gave no owner secret to take it over",
            "0".repeat(32)
        );
        let cut = fitted(&long);
        assert!(cut.len() <= MAX_REASON_BYTES && cut.ends_with('…'), "{cut}");
        assert!(long.starts_with(cut.trim_end_matches('…')));
        // Never inside a character.
        let wide = "é".repeat(100);
        let cut = fitted(&wide);
        assert!(cut.len() <= MAX_REASON_BYTES, "{}", cut.len());
        assert!(cut.trim_end_matches('…').chars().all(|c| c == 'é'));
    }
}
