//! Records as the tests of every crate build them (feature `test-support`,
//! and the core's own tests): one place to change when a record gains a
//! field, instead of twenty test files. Each builds the plain case; a test
//! that needs more sets the field on the result (`Receipt { kernel_delay_ns:
//! Some(5), ..receipt(…) }`).
//!
//! Not for the formats' own tests: `tests/frozen_format.rs` writes every
//! field out on purpose, so a change to a record shows there.

use crate::record::{MessageKey, ProbeConnectionOpened, ProbeRecord, ProbeStarted, Receipt};
use crate::stamp::Stamp;

/// The length a test message has when it does not matter: the agent's
/// built-in test message's.
pub const TEST_MESSAGE_LEN: u32 = 450;

/// A probe run's first record: `name` on a host of the same name, with
/// `connections` to `ws://x/ws`, started `at`.
pub fn probe_started(name: &str, connections: u32, at: Stamp) -> ProbeRecord {
    probe_started_on(name, name, connections, at)
}

/// [`probe_started`] on a host named apart from the probe.
pub fn probe_started_on(name: &str, host: &str, connections: u32, at: Stamp) -> ProbeRecord {
    ProbeRecord::Started(Box::new(ProbeStarted {
        name: name.into(),
        host: host.into(),
        url: "ws://x/ws".into(),
        connections,
        version: "t".into(),
        at,
    }))
}

/// Connection `conn` opened `at`, as the agent's connection `agent_conn`
/// when the hub told it.
pub fn connection_opened(conn: u32, agent_conn: Option<u64>, at: Stamp) -> ProbeRecord {
    ProbeRecord::ConnectionOpened(ProbeConnectionOpened {
        conn,
        agent_conn,
        at,
    })
}

/// A receipt on connection `conn` of the message `key` (payload hash
/// `hash`, [`TEST_MESSAGE_LEN`] bytes) read `at`, without a kernel stamp.
pub fn receipt(conn: u32, key: MessageKey, hash: u64, at: Stamp) -> Receipt {
    Receipt {
        conn,
        key,
        hash,
        len: TEST_MESSAGE_LEN,
        at,
        kernel_delay_ns: None,
    }
}
