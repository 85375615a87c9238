//! The time exchange in JSON text frames, for the agent's `GET /clock`
//! WebSocket: the same four timestamps as the UDP packets, for a browser
//! or any app that cannot send UDP.
//!
//! ```text
//! client:  {"id": 7, "t1": 1764000000123.456}
//! agent:   {"id": 7, "t1": 1764000000123.456,
//!           "t2": 1764000000123.789, "t3": 1764000000123.801,
//!           "t2_ns": 1764000000123789012, "t3_ns": 1764000000123801345}
//! ```
//!
//! `t1` is the client's clock in whatever unit it keeps (echoed exactly as
//! sent, so the client needs no conversion to match it); `id`, a number or
//! a string of at most [`MAX_ID_LEN`] bytes, is echoed too, and is optional.
//! `t2` and `t3` are the agent's wall clock when the request came and when
//! the reply left: as milliseconds (a JavaScript number, exact to about a
//! quarter of a microsecond today) and as integer nanoseconds (for clients
//! whose numbers hold 64 bits). Anything else gets `{"error": "…"}`.

use serde_json::{Map, Number, Value};

/// Largest request accepted, in bytes: a request is a few dozen.
pub const MAX_REQUEST_LEN: usize = 256;
/// Longest string `id` echoed.
pub const MAX_ID_LEN: usize = 64;

/// A valid request: what is echoed back.
#[derive(Clone, Debug, PartialEq)]
pub struct ClockRequest {
    /// The client's id for it, if it sent one.
    pub id: Option<Value>,
    /// The client's clock when it sent it, in its own unit.
    pub t1: Number,
}

/// Why a request is refused (said in the reply's `error`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadRequest {
    /// Over [`MAX_REQUEST_LEN`] bytes.
    TooLong,
    /// Not a JSON object.
    NotAnObject,
    /// No numeric `t1`.
    NoT1,
    /// An `id` that is neither a number nor a short string.
    BadId,
}

impl BadRequest {
    /// What the reply says.
    pub fn message(self) -> &'static str {
        match self {
            BadRequest::TooLong => "request longer than 256 bytes",
            BadRequest::NotAnObject => {
                "a request is a JSON object: {\"id\": 1, \"t1\": <your clock>}"
            }
            BadRequest::NoT1 => "t1 (your clock when you sent the request) must be a number",
            BadRequest::BadId => "id must be a number or a string of at most 64 bytes",
        }
    }
}

/// Reads one request.
pub fn parse_request(text: &str) -> Result<ClockRequest, BadRequest> {
    if text.len() > MAX_REQUEST_LEN {
        return Err(BadRequest::TooLong);
    }
    let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(text) else {
        return Err(BadRequest::NotAnObject);
    };
    let t1 = match fields.remove("t1") {
        Some(Value::Number(n)) => n,
        _ => return Err(BadRequest::NoT1),
    };
    let id = match fields.remove("id") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(Value::Number(n)),
        Some(Value::String(s)) if s.len() <= MAX_ID_LEN => Some(Value::String(s)),
        Some(_) => return Err(BadRequest::BadId),
    };
    Ok(ClockRequest { id, t1 })
}

/// The reply to `request`, stamped `t2` (it came) and `t3` (the reply
/// leaves), nanoseconds of the agent's wall clock.
pub fn encode_reply(request: &ClockRequest, t2_wall_ns: u64, t3_wall_ns: u64) -> String {
    let mut reply = Map::new();
    if let Some(id) = &request.id {
        reply.insert("id".into(), id.clone());
    }
    reply.insert("t1".into(), Value::Number(request.t1.clone()));
    reply.insert("t2".into(), millis(t2_wall_ns));
    reply.insert("t3".into(), millis(t3_wall_ns));
    reply.insert("t2_ns".into(), Value::from(t2_wall_ns));
    reply.insert("t3_ns".into(), Value::from(t3_wall_ns));
    Value::Object(reply).to_string()
}

/// The reply to a request refused for `why`.
pub fn encode_error(why: BadRequest) -> String {
    serde_json::json!({ "error": why.message() }).to_string()
}

/// Nanoseconds as a JSON number of milliseconds, to the microsecond.
fn millis(ns: u64) -> Value {
    let whole = ns / 1_000_000;
    let micros = (ns % 1_000_000) / 1_000;
    // Through the decimal text, so the number is the nearest f64 to it.
    let text = format!("{whole}.{micros:03}");
    Number::from_f64(text.parse().unwrap_or(whole as f64))
        .map_or_else(|| Value::from(whole), Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_echoes_the_request_and_carries_both_units() {
        let request = parse_request(r#"{"id":"a-1","t1":1764000000123.456}"#).unwrap();
        let reply: Value = serde_json::from_str(&encode_reply(
            &request,
            1_764_000_000_123_789_012,
            1_764_000_000_123_801_345,
        ))
        .unwrap();
        assert_eq!(reply["id"], "a-1");
        assert_eq!(reply["t1"].as_f64(), Some(1764000000123.456));
        assert_eq!(reply["t2_ns"].as_u64(), Some(1_764_000_000_123_789_012));
        assert_eq!(reply["t3_ns"].as_u64(), Some(1_764_000_000_123_801_345));
        let t2 = reply["t2"].as_f64().unwrap();
        assert!((t2 - 1764000000123.789).abs() < 0.001, "{t2}");
        // An integer clock is echoed exactly, and no id is fine.
        let plain = parse_request(r#"{"t1":1764000000123456789}"#).unwrap();
        let reply: Value = serde_json::from_str(&encode_reply(&plain, 1, 2)).unwrap();
        assert_eq!(reply["t1"].as_u64(), Some(1_764_000_000_123_456_789));
        assert!(reply.get("id").is_none());
    }

    #[test]
    fn what_is_not_a_request_is_refused_saying_why() {
        for (text, why) in [
            ("hello", BadRequest::NotAnObject),
            ("[1,2]", BadRequest::NotAnObject),
            ("{\"t1\":", BadRequest::NotAnObject),
            ("{}", BadRequest::NoT1),
            (r#"{"t1":"now"}"#, BadRequest::NoT1),
            (r#"{"t1":1,"id":{"a":1}}"#, BadRequest::BadId),
        ] {
            assert_eq!(parse_request(text), Err(why), "{text}");
        }
        let long = format!(r#"{{"t1":1,"id":"{}"}}"#, "x".repeat(MAX_REQUEST_LEN));
        assert_eq!(parse_request(&long), Err(BadRequest::TooLong));
        let err: Value = serde_json::from_str(&encode_error(BadRequest::NoT1)).unwrap();
        assert!(err["error"].as_str().unwrap().contains("t1"));
    }
}
