//! What a broadcast protocol riding on a WebSocket (Socket.IO, STOMP, MQTT)
//! looks like to the probe: a state machine handed each WebSocket message
//! the server sent and the time, that hands back the payloads it carried
//! and the messages the client owes the server (a subscription, a pong, a
//! heart-beat, an acknowledgement). It does no I/O and reads no clock, so
//! each protocol is tested with bytes and times made by hand, and fuzzed.
//!
//! The probe stamps a WebSocket message when its last frame is read, before
//! the layer sees it: every payload a message carries has that message's
//! stamp, so a layer changes what is recorded, never when.
//!
//! The tap reads a server's side of other clients' sessions with the same
//! layers, built as observers (`SocketIo::observer`, `Stomp::observer`,
//! `Mqtt::observer`), so its messages are the payloads the probes record.

/// A WebSocket message the client sends (the probe masks and frames it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A text message (Socket.IO, STOMP).
    Text(Vec<u8>),
    /// A binary message (MQTT).
    Binary(Vec<u8>),
}

/// Why a layer ended its connection.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayerError {
    /// The server broke the protocol: what it sent.
    #[error("{0}")]
    Protocol(String),
    /// The server refused the session or the subscription: what it said.
    #[error("{0}")]
    Refused(String),
    /// The server ended the session, or went silent past its keep-alive.
    #[error("{0}")]
    Gone(String),
}

impl LayerError {
    /// The WebSocket close code to send for it (RFC 6455 §7.4.1): 1002 for a
    /// protocol error, else 1000.
    pub fn close_code(&self) -> u16 {
        match self {
            LayerError::Protocol(_) => 1002,
            LayerError::Refused(_) | LayerError::Gone(_) => 1000,
        }
    }
}

/// A protocol over a WebSocket, as the client's side runs it.
pub trait Layer: Send + std::fmt::Debug {
    /// The protocol's name, for messages (`"STOMP"`).
    fn name(&self) -> &'static str;

    /// The connection is upgraded at `now_ns` (monotonic): what to send
    /// first (a CONNECT), if anything.
    fn start(&mut self, now_ns: u64, out: &mut Vec<Frame>);

    /// A whole WebSocket message from the server, read at `now_ns`: each
    /// payload it carries goes to `deliver`, in order; what the client owes
    /// in answer goes to `out`.
    fn on_message(
        &mut self,
        message: &[u8],
        text: bool,
        now_ns: u64,
        out: &mut Vec<Frame>,
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), LayerError>;

    /// When [`Layer::on_deadline`] is next due (monotonic ns): a heart-beat
    /// to send, or a server silent for too long.
    fn deadline(&self) -> Option<u64>;

    /// The deadline came (`now_ns` at or after it).
    fn on_deadline(&mut self, now_ns: u64, out: &mut Vec<Frame>) -> Result<(), LayerError>;

    /// Whether the session is open and subscribed: broadcasts sent from now
    /// on reach this connection.
    fn ready(&self) -> bool;

    /// Whether it holds part of a payload not yet whole: a frame cut across
    /// WebSocket messages, a binary event's attachments still due. The tap
    /// dates such a payload from the message its first byte came in, not
    /// the one that completed it.
    fn holds_partial(&self) -> bool {
        false
    }

    /// The probe is closing: what a client says before it goes
    /// (DISCONNECT), if anything.
    fn goodbye(&mut self, out: &mut Vec<Frame>);
}

/// Nanoseconds in a millisecond.
pub(crate) const MS: u64 = 1_000_000;

/// At most `max` bytes of `bytes`, as text a person can read in an error.
pub(crate) fn excerpt(bytes: &[u8], max: usize) -> String {
    let cut = &bytes[..bytes.len().min(max)];
    let text = String::from_utf8_lossy(cut);
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if bytes.len() > max {
        format!("{}…", text.trim_end())
    } else {
        text.trim_end().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_short_and_printable() {
        assert_eq!(excerpt(b"bad\nframe", 100), "bad frame");
        assert_eq!(excerpt(b"abcdef", 3), "abc…");
        assert_eq!(
            LayerError::Protocol("x".into()).close_code(),
            1002,
            "a protocol error is 1002"
        );
        assert_eq!(LayerError::Gone("x".into()).close_code(), 1000);
    }
}
