//! Message identity: which broadcast a received payload belongs to.
//!
//! A skewscope test message carries its sequence number. Any other payload is
//! identified by a 64-bit hash of its bytes plus how many times the same
//! connection had already received that hash, so a probe works unchanged against
//! servers that know nothing of skewscope.

use std::collections::HashMap;

use crate::record::MessageKey;

/// Size of the built-in test message: a typical small broadcast payload.
pub const TEST_MESSAGE_LEN: usize = 450;

const PREFIX: &str = r#"{"skewscope":"test","seq":"#;
const SENT: &str = r#","sent_ns":"#;
const PAD: &str = r#","pad":""#;
const AT: &str = r#"","at_ns":"#;
const FILLER: &str = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod \
tempor incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud \
exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat. Duis aute irure dolor in \
reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla pariatur. Excepteur sint \
occaecat cupidatat non proident, sunt in culpa qui officia deserunt mollit anim id est laborum. ";

/// What a test message says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestMessage {
    /// The agent's test sequence number.
    pub seq: u64,
    /// The agent's wall clock when it built the message.
    pub sent_wall_ns: u64,
    /// When its clients are to act, in the agent's wall clock
    /// (`/start_test?lead=`), as the `at_ns` field after the padding.
    pub at_wall_ns: Option<u64>,
}

/// Builds the built-in test message: a JSON text of exactly [`TEST_MESSAGE_LEN`]
/// bytes, readable by any client, that carries its sequence number and send
/// time, and its time to act when it has one
/// (`{"skewscope":"test","seq":1,"sent_ns":…,"pad":"…","at_ns":…}`; the
/// field comes last so readers of messages without it read these too).
pub fn encode_test_message(msg: TestMessage) -> String {
    let mut s = format!("{PREFIX}{}{SENT}{}{PAD}", msg.seq, msg.sent_wall_ns);
    let tail = match msg.at_wall_ns {
        Some(at) => format!("{AT}{at}}}"),
        None => "\"}".to_owned(),
    };
    let room = TEST_MESSAGE_LEN.saturating_sub(s.len() + tail.len());
    s.extend(FILLER.chars().cycle().take(room));
    s.push_str(&tail);
    s
}

/// Recognises a test message by its fixed prefix; anything else is `None`.
pub fn parse_test_message(payload: &[u8]) -> Option<TestMessage> {
    let rest = payload.strip_prefix(PREFIX.as_bytes())?;
    let (seq, rest) = leading_u64(rest)?;
    let rest = rest.strip_prefix(SENT.as_bytes())?;
    let (sent_wall_ns, rest) = leading_u64(rest)?;
    let pad = rest.strip_prefix(PAD.as_bytes())?;
    // The filler holds no quote: the first one ends it.
    let at_wall_ns = pad
        .iter()
        .position(|&b| b == b'"')
        .and_then(|end| pad[end..].strip_prefix(AT.as_bytes()))
        .and_then(|at| leading_u64(at))
        .map(|(at, _)| at);
    Some(TestMessage {
        seq,
        sent_wall_ns,
        at_wall_ns,
    })
}

fn leading_u64(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 20 {
        return None;
    }
    let value = std::str::from_utf8(&bytes[..digits]).ok()?.parse().ok()?;
    Some((value, &bytes[digits..]))
}

/// The 64-bit payload hash (XXH3) used to identify foreign messages and to check
/// that a receipt matches what the agent sent.
pub fn payload_hash(payload: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(payload)
}

/// Per-connection state for identifying payloads: counts repeats of each hash.
#[derive(Debug, Default)]
pub struct Identifier {
    seen: HashMap<u64, u32>,
}

impl Identifier {
    /// Identifies the next payload received on this connection; returns its key and hash.
    pub fn identify(&mut self, payload: &[u8]) -> (MessageKey, u64) {
        let hash = payload_hash(payload);
        if let Some(test) = parse_test_message(payload) {
            return (MessageKey::Seq(test.seq), hash);
        }
        let seen = self.seen.entry(hash).or_insert(0);
        let occurrence = *seen;
        *seen += 1;
        (MessageKey::Hash { hash, occurrence }, hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_message_has_the_fixed_size_and_round_trips() {
        for seq in [0, 7, u64::MAX] {
            let msg = TestMessage {
                seq,
                sent_wall_ns: 1_764_000_000_123_456_789,
                at_wall_ns: None,
            };
            let text = encode_test_message(msg);
            assert_eq!(text.len(), TEST_MESSAGE_LEN);
            assert_eq!(parse_test_message(text.as_bytes()), Some(msg));
        }
    }

    #[test]
    fn a_time_to_act_rides_after_the_padding_at_the_same_size() {
        let msg = TestMessage {
            seq: 12,
            sent_wall_ns: 1_764_000_000_123_456_789,
            at_wall_ns: Some(1_764_000_000_153_456_789),
        };
        let text = encode_test_message(msg);
        assert_eq!(text.len(), TEST_MESSAGE_LEN);
        assert_eq!(parse_test_message(text.as_bytes()), Some(msg));
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["at_ns"].as_u64(), Some(1_764_000_000_153_456_789));
        assert_eq!(json["seq"].as_u64(), Some(12));
        // What --act-at /at_ns finds in it.
        let at = crate::act_at::ActAt::new("/at_ns", crate::act_at::ActUnit::Auto).unwrap();
        assert_eq!(at.find(text.as_bytes()), Ok(1_764_000_000_153_456_789));
    }

    #[test]
    fn test_message_is_valid_json_text() {
        let text = encode_test_message(TestMessage {
            seq: 3,
            sent_wall_ns: 9,
            at_wall_ns: None,
        });
        assert!(text.starts_with('{') && text.ends_with("\"}"));
        assert_eq!(text.matches('"').count(), 12);
    }

    #[test]
    fn foreign_payloads_are_not_test_messages() {
        assert_eq!(parse_test_message(b"hello"), None);
        assert_eq!(parse_test_message(br#"{"skewscope":"test","seq":x"#), None);
        assert_eq!(
            parse_test_message(br#"{"skewscope":"test","seq":1,"sent_ns":2"#),
            None
        );
    }

    #[test]
    fn repeats_of_a_foreign_payload_get_increasing_occurrences() {
        let mut id = Identifier::default();
        let (a, ha) = id.identify(b"go");
        let (b, hb) = id.identify(b"go");
        let (c, _) = id.identify(b"stop");
        assert_eq!(ha, hb);
        assert_eq!(
            a,
            MessageKey::Hash {
                hash: ha,
                occurrence: 0
            }
        );
        assert_eq!(
            b,
            MessageKey::Hash {
                hash: ha,
                occurrence: 1
            }
        );
        assert!(matches!(c, MessageKey::Hash { occurrence: 0, .. }));
    }

    #[test]
    fn test_messages_are_keyed_by_sequence_not_occurrence() {
        let mut id = Identifier::default();
        let text = encode_test_message(TestMessage {
            seq: 41,
            sent_wall_ns: 1,
            at_wall_ns: None,
        });
        assert_eq!(id.identify(text.as_bytes()).0, MessageKey::Seq(41));
        assert_eq!(id.identify(text.as_bytes()).0, MessageKey::Seq(41));
    }
}
