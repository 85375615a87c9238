//! The WebSocket time exchange (`/clock`): a page's JSON request.

use skewscope_core::time_exchange::json::{MAX_REQUEST_LEN, parse_request};

/// A text frame from any page: refused with a reason or read, and never
/// read when longer than the limit.
pub fn clock_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = parse_request(text);
    if text.len() > MAX_REQUEST_LEN {
        assert!(parsed.is_err(), "a request over the limit was read");
    }
    if let Err(why) = parsed {
        assert!(!why.message().is_empty());
    }
}
