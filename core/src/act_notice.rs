//! What the probe tells the app beside it at each action's moment
//! (`--act-notify`): one JSON datagram per action, so an app written in
//! anything that can read a socket (C++, Qt, Unity, Python) acts when the
//! probe's precise timer fires, without a clock model of its own.
//!
//! The datagram is a flat JSON object, easy to read without a JSON library
//! in a hurry: the message (its payload's `hash`; `seq` for the agent's
//! test message, `occurrence` for any other payload), the time to act in the server's clock,
//! the moment aimed at and the moment the timer fired on both of the
//! device's clocks (`*_mono_ns` is `CLOCK_MONOTONIC`, which the app shares:
//! its own reading on receipt minus `done_mono_ns` is what the datagram
//! cost it), and whether the message came too late to act at its time.

use serde::{Deserialize, Serialize};

use crate::record::{Action, MessageKey};

/// One action, as the datagram carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActNotice {
    /// The probe's connection that received the message (a probe with
    /// several connections sends one datagram for each).
    pub conn: u32,
    /// The agent's test message's sequence number; `null` for any other payload.
    pub seq: Option<u64>,
    /// The payload's 64-bit hash ([`crate::identity::payload_hash`]), 16 hex
    /// digits (a JSON number would lose bits in JavaScript and many JSON
    /// readers): what names any payload.
    pub hash: String,
    /// How many times this connection had seen that payload before (0 the
    /// first time); `null` for a test message.
    pub occurrence: Option<u32>,
    /// The time to act the message named: the server's wall clock, ns.
    pub act_at_ns: u64,
    /// The moment aimed at, on this device's wall clock (ns since the epoch).
    pub target_wall_ns: u64,
    /// The moment aimed at, on this device's `CLOCK_MONOTONIC`.
    pub target_mono_ns: u64,
    /// The moment the timer fired, on this device's wall clock.
    pub done_wall_ns: u64,
    /// The moment the timer fired, on `CLOCK_MONOTONIC`.
    pub done_mono_ns: u64,
    /// Whether the message came after its time to act (then the probe
    /// acted at once, and says so rather than pretending it was on time).
    pub late: bool,
    /// How long after the target the message came; 0 when on time.
    pub late_ns: u64,
    /// The offset the probe mapped the time with (the server's clock minus
    /// this one's); `null` before any time exchange was answered.
    pub offset_ns: Option<i64>,
    /// That offset's error bound: the action is within it (plus the timer's
    /// error) of the server's time to act.
    pub offset_bound_ns: Option<u64>,
}

impl ActNotice {
    /// The notice for an action the probe recorded.
    pub fn of(action: &Action) -> ActNotice {
        let (seq, occurrence) = match action.key {
            MessageKey::Seq(seq) => (Some(seq), None),
            MessageKey::Hash { occurrence, .. } => (None, Some(occurrence)),
        };
        ActNotice {
            conn: action.conn,
            seq,
            hash: format!("{:016x}", action.hash),
            occurrence,
            act_at_ns: action.act_at_ns,
            target_wall_ns: action.target.wall_ns,
            target_mono_ns: action.target.mono_ns,
            done_wall_ns: action.done.wall_ns,
            done_mono_ns: action.done.mono_ns,
            late: action.late_ns > 0,
            late_ns: action.late_ns,
            offset_ns: action.offset_ns,
            offset_bound_ns: action.offset_bound_ns,
        }
    }

    /// The datagram's bytes: one JSON object, no trailing newline.
    pub fn to_datagram(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a struct of numbers and strings always encodes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stamp;

    fn action(key: MessageKey, late_ns: u64) -> Action {
        Action {
            conn: 2,
            key,
            hash: 0xfeed,
            act_at_ns: 1_800_000_000_123_456_789,
            offset_ns: Some(-3_000_000),
            offset_bound_ns: Some(450_000),
            target: Stamp {
                wall_ns: 1_800_000_000_126_456_789,
                mono_ns: 5_000_000,
            },
            done: Stamp {
                wall_ns: 1_800_000_000_126_456_800,
                mono_ns: 5_000_011,
            },
            late_ns,
        }
    }

    #[test]
    fn a_test_message_is_named_by_its_sequence_number() {
        let json: serde_json::Value =
            serde_json::from_slice(&ActNotice::of(&action(MessageKey::Seq(17), 0)).to_datagram())
                .unwrap();
        assert_eq!(json["seq"], 17);
        assert_eq!(json["hash"], "000000000000feed");
        assert!(json["occurrence"].is_null());
        assert_eq!(json["late"], false);
        assert_eq!(json["done_mono_ns"], 5_000_011);
        assert_eq!(json["act_at_ns"], 1_800_000_000_123_456_789u64);
    }

    #[test]
    fn any_payload_is_named_by_its_hash_in_hex_and_occurrence() {
        let key = MessageKey::Hash {
            hash: 0x00ab_cdef_0123_4567,
            occurrence: 3,
        };
        let mut a = action(key, 2_500_000);
        a.hash = 0x00ab_cdef_0123_4567;
        let notice = ActNotice::of(&a);
        let back: ActNotice = serde_json::from_slice(&notice.to_datagram()).unwrap();
        assert_eq!(back, notice);
        assert_eq!(back.hash, "00abcdef01234567");
        assert_eq!(back.occurrence, Some(3));
        assert!(back.late && back.late_ns == 2_500_000);
        assert_eq!(back.seq, None);
    }
}
