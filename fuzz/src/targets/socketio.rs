//! What a Socket.IO server sends a client, as the probe's `--protocol
//! socketio` reads it.

use skewscope_core::protocol_layer::{Frame, Layer};
use skewscope_core::socketio::{SocketIo, SocketIoOptions};

/// Each line of the input is one WebSocket message (a leading 0xFF makes
/// it binary), read 100 ms apart, with the deadline run when it is due:
/// never a panic; every payload handed on is JSON (an event's arguments);
/// everything the client sends is a text Engine.IO packet (a pong `3`, or a
/// message `4`); after the open packet a silent server has a deadline.
pub fn socketio(data: &[u8]) {
    for events in [Vec::new(), vec!["show".to_owned()]] {
        let mut session = SocketIo::new(SocketIoOptions {
            namespace: "/".to_owned(),
            events,
        });
        let mut out = Vec::new();
        let mut payloads = Vec::new();
        let mut now = 0u64;
        for line in data.split(|&b| b == b'\n') {
            now += 100_000_000;
            if let Some(due) = session.deadline()
                && due <= now
                && session.on_deadline(now, &mut out).is_err()
            {
                break;
            }
            let (text, message) = match line.split_first() {
                Some((0xFF, rest)) => (false, rest),
                _ => (true, line),
            };
            let read = session.on_message(message, text, now, &mut out, &mut |p| {
                payloads.push(p.to_vec())
            });
            if read.is_err() {
                break;
            }
        }
        for p in &payloads {
            assert!(
                serde_json::from_slice::<serde::de::IgnoredAny>(p).is_ok(),
                "a payload that is not JSON: {p:?}"
            );
        }
        for frame in &out {
            match frame {
                Frame::Text(t) => assert!(matches!(t.first(), Some(b'3' | b'4')), "sent {t:?}"),
                Frame::Binary(b) => panic!("sent binary {b:?}"),
            }
        }
    }
}
