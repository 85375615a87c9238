//! What an MQTT broker sends a subscriber over a WebSocket, as the probe's
//! `--protocol mqtt` reads it (3.1.1 and 5).

use skewscope_core::mqtt::{Mqtt, MqttOptions, MqttVersion};
use skewscope_core::protocol_layer::{Frame, Layer};

use crate::chunks::pieces;

/// Largest packet the fuzzed session takes: small, so the limit is reached.
const MAX_PACKET: usize = 4096;

/// The input as one WebSocket message or cut into several, for each
/// version: the same payloads, the same packets sent and the same verdict
/// (packets may span messages); every packet sent is binary and each
/// acknowledgement a 4-byte PUBACK.
pub fn mqtt(data: &[u8]) {
    for version in [MqttVersion::V311, MqttVersion::V5] {
        let whole = read(version, &[data]);
        let split = read(version, &pieces(data));
        assert_eq!(whole, split, "{version:?}: pieces change what is read");
        for frame in &whole.1 {
            let Frame::Binary(packet) = frame else {
                panic!("{version:?}: a text frame sent");
            };
            if packet[0] == 0x40 {
                assert_eq!(packet.len(), 4, "{version:?}: a PUBACK of {packet:?}");
            }
        }
    }
}

type Read = (Vec<Vec<u8>>, Vec<Frame>, bool);

fn read(version: MqttVersion, input: &[&[u8]]) -> Read {
    let mut session = Mqtt::new(MqttOptions {
        version,
        client_id: "skewscopefuzz".to_owned(),
        username: None,
        password: None,
        topics: vec!["show/#".to_owned()],
        qos: 1,
        keep_alive_s: 1,
        max_packet: MAX_PACKET,
    });
    let mut out = Vec::new();
    session.start(0, &mut out);
    let mut payloads = Vec::new();
    for piece in input {
        let read = session.on_message(piece, false, 0, &mut out, &mut |p| {
            payloads.push(p.to_vec())
        });
        if read.is_err() {
            return (payloads, out, true);
        }
    }
    (payloads, out, false)
}
