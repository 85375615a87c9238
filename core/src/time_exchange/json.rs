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
//!
//! With a token, the agent adds what a client holding it checks before it
//! trusts the reply (as [`super`]'s UDP tag):
//!
//! ```text
//!          "auth": {"t2_ns": "1764000000123789012", "t3_ns": "1764000000123801345",
//!                   "tag": "<32 hex digits>"}
//! ```
//!
//! `tag` is the tag ([`TimeKey::tag`]) of the request's exact text, a line
//! feed, `t2_ns`, a line feed and `t3_ns`: it binds the reply to the very
//! request (its `id` and `t1`) and to both times. The times are strings
//! here because a JavaScript number cannot hold them exactly; a client
//! that checked the tag takes t2 and t3 from them, never from the
//! untagged fields.

use serde_json::{Map, Number, Value};

use super::{Invalid, TAG_LEN, TimeKey};

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

/// The reply to `request` (whose text was `request_text`), stamped `t2`
/// (it came) and `t3` (the reply leaves), nanoseconds of the agent's wall
/// clock; tagged under `key` when there is one.
pub fn encode_reply(
    request_text: &str,
    request: &ClockRequest,
    t2_wall_ns: u64,
    t3_wall_ns: u64,
    key: Option<&TimeKey>,
) -> String {
    let mut reply = Map::new();
    if let Some(id) = &request.id {
        reply.insert("id".into(), id.clone());
    }
    reply.insert("t1".into(), Value::Number(request.t1.clone()));
    reply.insert("t2".into(), millis(t2_wall_ns));
    reply.insert("t3".into(), millis(t3_wall_ns));
    reply.insert("t2_ns".into(), Value::from(t2_wall_ns));
    reply.insert("t3_ns".into(), Value::from(t3_wall_ns));
    if let Some(key) = key {
        let (t2, t3) = (t2_wall_ns.to_string(), t3_wall_ns.to_string());
        let tag = key.tag(tagged_text(request_text, &t2, &t3).as_bytes());
        reply.insert(
            "auth".into(),
            serde_json::json!({ "t2_ns": t2, "t3_ns": t3, "tag": hex(&tag) }),
        );
    }
    Value::Object(reply).to_string()
}

/// What a tag covers: the request's text and both times' digits.
fn tagged_text(request_text: &str, t2_ns: &str, t3_ns: &str) -> String {
    format!("{request_text}\n{t2_ns}\n{t3_ns}")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A client's check of a reply to its request `request_text` under `key`:
/// t2 and t3 (ns) when the tag verifies; [`Invalid::Untagged`] without
/// one, [`Invalid::BadTag`] when it does not verify.
pub fn check_reply(
    key: &TimeKey,
    request_text: &str,
    reply: &Value,
) -> Result<(u64, u64), Invalid> {
    let auth = reply.get("auth").ok_or(Invalid::Untagged)?;
    let field = |name| {
        auth.get(name)
            .and_then(Value::as_str)
            .ok_or(Invalid::BadTag)
    };
    let (t2, t3, tag) = (field("t2_ns")?, field("t3_ns")?, field("tag")?);
    let tag: Vec<u8> = (0..tag.len())
        .step_by(2)
        .map(|i| {
            tag.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<_>>()
        .ok_or(Invalid::BadTag)?;
    if tag.len() != TAG_LEN || !key.verify(tagged_text(request_text, t2, t3).as_bytes(), &tag) {
        return Err(Invalid::BadTag);
    }
    let number = |s: &str| s.parse::<u64>().map_err(|_| Invalid::BadTag);
    Ok((number(t2)?, number(t3)?))
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
        let text = r#"{"id":"a-1","t1":1764000000123.456}"#;
        let request = parse_request(text).unwrap();
        let reply: Value = serde_json::from_str(&encode_reply(
            text,
            &request,
            1_764_000_000_123_789_012,
            1_764_000_000_123_801_345,
            None,
        ))
        .unwrap();
        assert!(reply.get("auth").is_none(), "untagged without a key");
        assert_eq!(reply["id"], "a-1");
        assert_eq!(reply["t1"].as_f64(), Some(1764000000123.456));
        assert_eq!(reply["t2_ns"].as_u64(), Some(1_764_000_000_123_789_012));
        assert_eq!(reply["t3_ns"].as_u64(), Some(1_764_000_000_123_801_345));
        let t2 = reply["t2"].as_f64().unwrap();
        assert!((t2 - 1764000000123.789).abs() < 0.001, "{t2}");
        // An integer clock is echoed exactly, and no id is fine.
        let plain_text = r#"{"t1":1764000000123456789}"#;
        let plain = parse_request(plain_text).unwrap();
        let reply: Value =
            serde_json::from_str(&encode_reply(plain_text, &plain, 1, 2, None)).unwrap();
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

    #[test]
    fn a_tagged_reply_checks_out_only_for_its_request_and_its_times() {
        let key = TimeKey::from_token("s3cret");
        let text = r#"{"id":7,"t1":1764000000123.456}"#;
        let request = parse_request(text).unwrap();
        let (t2, t3) = (1_764_000_000_123_789_012, 1_764_000_000_123_801_345);
        let reply: Value =
            serde_json::from_str(&encode_reply(text, &request, t2, t3, Some(&key))).unwrap();
        assert_eq!(check_reply(&key, text, &reply), Ok((t2, t3)));
        // Another request's text (an old reply replayed), another key.
        let other = r#"{"id":8,"t1":1764000000123.456}"#;
        assert_eq!(check_reply(&key, other, &reply), Err(Invalid::BadTag));
        let wrong = TimeKey::from_token("guess");
        assert_eq!(check_reply(&wrong, text, &reply), Err(Invalid::BadTag));
        // t2 moved by 3 ms in the tagged string, or the tag cut short.
        let mut moved = reply.clone();
        moved["auth"]["t2_ns"] = Value::from((t2 + 3_000_000).to_string());
        assert_eq!(check_reply(&key, text, &moved), Err(Invalid::BadTag));
        let mut short = reply.clone();
        short["auth"]["tag"] = Value::from("abcd");
        assert_eq!(check_reply(&key, text, &short), Err(Invalid::BadTag));
        let mut none = reply.clone();
        none.as_object_mut().unwrap().remove("auth");
        assert_eq!(check_reply(&key, text, &none), Err(Invalid::Untagged));
    }

    #[test]
    fn the_tag_is_the_one_other_implementations_compute() {
        // Python's hmac module and the page module's test (WebCrypto) give
        // this tag for this token, request and times.
        let key = TimeKey::from_token("site-secret");
        let text = tagged_text(
            r#"{"id":1,"t1":1000}"#,
            "1764000000000000001",
            "1764000000000000002",
        );
        assert_eq!(
            hex(&key.tag(text.as_bytes())),
            "2507b9ac663f4096104e8f8263461495"
        );
    }
}
