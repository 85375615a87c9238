//! `--match`: judge only the broadcasts that matter for sync, by what they
//! said. Either a JSON pointer equal to a value (`/type=start`,
//! `/data/level=3`, `/urgent=true`), or a regular expression on text
//! payloads (`re:^GO\b`).
//!
//! A broadcast's payload is what the probes recorded of it
//! (`MessagePayload`, the first 4 KiB of each message, once per probe run).
//! A broadcast whose payload no probe recorded, or whose JSON was cut at
//! 4 KiB, cannot be judged: it is left out and counted as such, never
//! guessed.

use std::collections::HashMap;
use std::str::FromStr;

use skewscope_core::record::MessagePayload;

/// What `--match` asks.
#[derive(Clone, Debug)]
pub enum Matcher {
    /// The JSON value at `pointer` (RFC 6901) equals `value`.
    Pointer {
        /// Where to look.
        pointer: skewscope_core::json_pointer::JsonPointer,
        /// What it must be: JSON (`3`, `true`, `"a b"`) or else a string.
        value: serde_json::Value,
    },
    /// The text payload matches the expression somewhere.
    Regex(regex_lite::Regex),
}

/// Why a `--match` argument is not one.
#[derive(Debug, thiserror::Error)]
pub enum MatcherError {
    /// Neither form.
    #[error(
        "--match takes /POINTER=VALUE (a JSON pointer equal to a value, like /type=start) or re:EXPRESSION (a regular expression on text payloads)"
    )]
    Form,
    /// A bad regular expression.
    #[error("--match re:…: {0}")]
    Regex(#[from] regex_lite::Error),
    /// A pointer RFC 6901 refuses.
    #[error("--match {0}")]
    Pointer(String),
}

impl FromStr for Matcher {
    type Err = MatcherError;

    fn from_str(s: &str) -> Result<Matcher, MatcherError> {
        if let Some(expression) = s.strip_prefix("re:") {
            return Ok(Matcher::Regex(regex_lite::Regex::new(expression)?));
        }
        let (pointer, raw) = s
            .strip_prefix('/')
            .and_then(|_| s.split_once('='))
            .ok_or(MatcherError::Form)?;
        let value =
            serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_owned()));
        Ok(Matcher::Pointer {
            pointer: pointer.parse().map_err(MatcherError::Pointer)?,
            value,
        })
    }
}

/// What a matcher says of one payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayloadMatch {
    /// It matches: judged.
    Matches,
    /// It does not: left out.
    Differs,
    /// It cannot be told (cut at 4 KiB): left out, counted apart.
    Unknown,
}

impl Matcher {
    /// Judges one recorded payload.
    pub fn judge(&self, payload: &MessagePayload) -> PayloadMatch {
        let whole = payload.excerpt.len() >= payload.len as usize;
        match self {
            Matcher::Pointer { pointer, value } => {
                match serde_json::from_slice::<serde_json::Value>(&payload.excerpt) {
                    Ok(json) => match pointer.get(&json) {
                        Some(found) if found == value => PayloadMatch::Matches,
                        // `/id=5` against `"id": "5"`: the text is the same.
                        Some(serde_json::Value::String(text)) if same_text(text, value) => {
                            PayloadMatch::Matches
                        }
                        _ => PayloadMatch::Differs,
                    },
                    Err(_) if whole => PayloadMatch::Differs,
                    Err(_) => PayloadMatch::Unknown,
                }
            }
            Matcher::Regex(re) => match std::str::from_utf8(&payload.excerpt) {
                Ok(text) if re.is_match(text) => PayloadMatch::Matches,
                // A cut may have split a character: judge what is whole.
                Err(e)
                    if !whole
                        && re.is_match(
                            std::str::from_utf8(&payload.excerpt[..e.valid_up_to()]).unwrap_or(""),
                        ) =>
                {
                    PayloadMatch::Matches
                }
                _ if whole => PayloadMatch::Differs,
                _ => PayloadMatch::Unknown,
            },
        }
    }
}

/// `"5"` in the payload against `5` asked: a non-string value written as
/// the string holds it.
fn same_text(text: &str, value: &serde_json::Value) -> bool {
    let written = value.to_string();
    value.as_str().is_none() && text == written
}

/// Every recorded payload's verdict, by hash (a payload recorded by several
/// probes is judged once).
#[derive(Debug, Default)]
pub struct PayloadVerdicts(HashMap<u64, PayloadMatch>);

impl PayloadVerdicts {
    /// Judges `payload` unless its hash was judged already.
    pub fn add(&mut self, matcher: &Matcher, payload: &MessagePayload) {
        self.0
            .entry(payload.hash)
            .or_insert_with(|| matcher.judge(payload));
    }

    /// The verdict on the payload with `hash`; `None` if no probe recorded it.
    pub fn of(&self, hash: u64) -> Option<PayloadMatch> {
        self.0.get(&hash).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(text: &str) -> MessagePayload {
        MessagePayload {
            hash: 1,
            len: text.len() as u32,
            excerpt: text.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_pointer_matches_equal_json_values_and_their_text() {
        let m: Matcher = "/type=start".parse().unwrap();
        assert_eq!(
            m.judge(&payload(r#"{"type":"start","at":1}"#)),
            PayloadMatch::Matches
        );
        assert_eq!(
            m.judge(&payload(r#"{"type":"stop"}"#)),
            PayloadMatch::Differs
        );
        assert_eq!(m.judge(&payload("Lorem ipsum")), PayloadMatch::Differs);
        let m: Matcher = "/data/level=3".parse().unwrap();
        assert_eq!(
            m.judge(&payload(r#"{"data":{"level":3}}"#)),
            PayloadMatch::Matches
        );
        assert_eq!(
            m.judge(&payload(r#"{"data":{"level":"3"}}"#)),
            PayloadMatch::Matches
        );
        assert_eq!(
            m.judge(&payload(r#"{"data":{"level":4}}"#)),
            PayloadMatch::Differs
        );
        let m: Matcher = "/urgent=true".parse().unwrap();
        assert_eq!(
            m.judge(&payload(r#"{"urgent":true}"#)),
            PayloadMatch::Matches
        );
    }

    #[test]
    fn json_cut_at_the_excerpt_is_unknown_not_a_mismatch() {
        let m: Matcher = "/type=start".parse().unwrap();
        let cut = MessagePayload {
            hash: 1,
            len: 100_000,
            excerpt: br#"{"type":"start","pad":"xxxx"#.to_vec(),
        };
        assert_eq!(m.judge(&cut), PayloadMatch::Unknown);
    }

    #[test]
    fn a_regex_matches_text_payloads() {
        let m: Matcher = r"re:^GO\b".parse().unwrap();
        assert_eq!(m.judge(&payload("GO now")), PayloadMatch::Matches);
        assert_eq!(m.judge(&payload("GOAL")), PayloadMatch::Differs);
        let binary = MessagePayload {
            hash: 1,
            len: 2,
            excerpt: vec![0xff, 0xfe],
        };
        assert_eq!(m.judge(&binary), PayloadMatch::Differs);
    }

    #[test]
    fn malformed_arguments_say_what_is_expected() {
        for bad in ["type=start", "/type", "", "re:("] {
            let e = bad.parse::<Matcher>().unwrap_err().to_string();
            assert!(e.contains("--match"), "{bad}: {e}");
        }
    }
}
