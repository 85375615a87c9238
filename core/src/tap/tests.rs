//! The tap on hand-made packets: a whole connection, resends, reordering,
//! a capture that starts mid-stream, plain HTTP, TLS, garbage after the
//! upgrade and a reset mid-frame; Socket.IO, STOMP, MQTT and an event
//! stream, each read into the payloads a probe records.

use super::protocol::{TapProtocol, TapReading};
use super::segment::TcpFlags;
use super::segment::build::packet;
use super::*;
use crate::identity::{TestMessage, encode_test_message};
use crate::server_frames::tests::frame;

const SERVER: &str = "127.0.0.1:8000";

fn client(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

const ACK: TcpFlags = TcpFlags {
    syn: false,
    fin: false,
    rst: false,
};
const SYN: TcpFlags = TcpFlags {
    syn: true,
    fin: false,
    rst: false,
};
const RST: TcpFlags = TcpFlags {
    syn: false,
    fin: false,
    rst: true,
};

const UPGRADED: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n";

/// A server side of one connection: sends bytes in order from its ISN.
struct Conn {
    client: SocketAddr,
    next: u32,
}

impl Conn {
    fn open(tap: &mut Tap, port: u16, isn: u32, at: u64, out: &mut Vec<TapEvent>) -> Conn {
        let client = client(port);
        tap.packet(
            at,
            &packet(SERVER.parse().unwrap(), client, isn, SYN, b""),
            out,
        );
        Conn {
            client,
            next: isn.wrapping_add(1),
        }
    }

    /// The packet carrying `bytes` next, without sending it.
    fn next_packet(&mut self, bytes: &[u8]) -> Vec<u8> {
        let p = packet(SERVER.parse().unwrap(), self.client, self.next, ACK, bytes);
        self.next = self.next.wrapping_add(bytes.len() as u32);
        p
    }

    fn send(&mut self, tap: &mut Tap, bytes: &[u8], at: u64, out: &mut Vec<TapEvent>) {
        let p = self.next_packet(bytes);
        tap.packet(at, &p, out);
    }
}

fn messages(out: &[TapEvent]) -> Vec<(SocketAddr, MessageKey, u64, u64)> {
    out.iter()
        .filter_map(|e| match e {
            TapEvent::Message {
                client,
                key,
                first_byte_ns,
                last_byte_ns,
                ..
            } => Some((*client, *key, *first_byte_ns, *last_byte_ns)),
            _ => None,
        })
        .collect()
}

fn test_message(seq: u64) -> Vec<u8> {
    frame(
        true,
        1,
        encode_test_message(TestMessage {
            seq,
            sent_wall_ns: 1,
            at_wall_ns: None,
        })
        .as_bytes(),
    )
}

#[test]
fn a_connection_is_followed_from_its_upgrade_to_its_close() {
    let mut tap = Tap::new(8000, 1 << 20);
    let mut out = Vec::new();
    let mut c = Conn::open(&mut tap, 40000, 1000, 1, &mut out);
    c.send(&mut tap, UPGRADED, 2, &mut out);
    assert_eq!(
        out,
        vec![TapEvent::Opened {
            client: c.client,
            at_ns: 2,
            deflate: false,
            protocol: None,
        }]
    );
    // Two messages in one segment, then one over two segments.
    let mut both = test_message(1);
    both.extend(frame(true, 1, b"hello"));
    c.send(&mut tap, &both, 3, &mut out);
    let third = test_message(2);
    c.send(&mut tap, &third[..10], 4, &mut out);
    c.send(&mut tap, &third[10..], 5, &mut out);
    let got = messages(&out);
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].1, MessageKey::Seq(1));
    assert_eq!(
        out[1],
        TapEvent::Recognised {
            client: c.client,
            protocol: Protocol::WebSocket
        },
        "its first message says it is plain"
    );
    assert!(matches!(got[1].1, MessageKey::Hash { occurrence: 0, .. }));
    assert_eq!((got[2].1, got[2].2, got[2].3), (MessageKey::Seq(2), 4, 5));
    c.send(&mut tap, &frame(true, 8, b""), 6, &mut out);
    assert!(matches!(
        out.last(),
        Some(TapEvent::Closed {
            reason: "close frame",
            ..
        })
    ));
    let n = tap.counters();
    assert_eq!((n.followed, n.messages, n.broken), (1, 3, 0));
}

#[test]
fn resends_keep_the_first_time_and_reordering_waits() {
    let mut tap = Tap::new(8000, 1 << 20);
    let mut out = Vec::new();
    let mut c = Conn::open(&mut tap, 40001, u32::MAX - 50, 1, &mut out);
    c.send(&mut tap, UPGRADED, 2, &mut out);
    let m = test_message(7);
    let first = c.next_packet(&m[..20]);
    let second = c.next_packet(&m[20..]);
    // The second half is captured first, then the first half, then the
    // first half again (a resend).
    tap.packet(10, &second, &mut out);
    assert!(messages(&out).is_empty());
    tap.packet(11, &first, &mut out);
    tap.packet(12, &first, &mut out);
    // First byte at 11 (the first capture of the first half); last byte at
    // 10, when the segment carrying it was captured.
    assert_eq!(messages(&out), vec![(c.client, MessageKey::Seq(7), 11, 10)]);
    let n = tap.counters();
    assert_eq!((n.retransmitted, n.reordered), (1, 1));
    // At the tap's end the connection's own counts are said, per client.
    out.clear();
    tap.finish(20, &mut out);
    assert_eq!(
        out,
        vec![TapEvent::Ended {
            client: c.client,
            at_ns: 20,
            segments: 4,
            resent: 1,
            reordered: 1
        }]
    );
    assert_eq!(tap.websockets(), 0);
}

#[test]
fn a_super_packet_over_64_kib_carries_many_frames() {
    let mut tap = Tap::new(8000, 1 << 20);
    let mut out = Vec::new();
    let mut c = Conn::open(&mut tap, 40002, 5, 1, &mut out);
    let mut bytes = UPGRADED.to_vec();
    for seq in 1..=200 {
        bytes.extend(test_message(seq));
    }
    c.send(&mut tap, &bytes, 2, &mut out);
    assert_eq!(messages(&out).len(), 200);
}

#[test]
fn connections_open_before_the_tap_are_counted_and_skipped() {
    let mut tap = Tap::new(8000, 1 << 20);
    let mut out = Vec::new();
    // No SYN-ACK seen: a frame-looking segment of a connection already open.
    let p = packet(
        SERVER.parse().unwrap(),
        client(40003),
        77,
        ACK,
        &test_message(1),
    );
    tap.packet(1, &p, &mut out);
    tap.packet(2, &p, &mut out);
    assert!(out.is_empty());
    assert_eq!(tap.counters().open_before_tap, 1);
}

#[test]
fn plain_http_tls_and_other_ports_are_not_decoded() {
    let mut tap = Tap::new(8000, 1 << 20);
    let mut out = Vec::new();
    let mut http = Conn::open(&mut tap, 40004, 1, 1, &mut out);
    http.send(
        &mut tap,
        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody",
        2,
        &mut out,
    );
    http.send(&mut tap, &test_message(1), 3, &mut out);
    let mut tls = Conn::open(&mut tap, 40005, 1, 1, &mut out);
    tls.send(
        &mut tap,
        &[0x16, 0x03, 0x03, 0x00, 0x10, 1, 2, 3],
        2,
        &mut out,
    );
    let other = packet(
        "127.0.0.1:9999".parse().unwrap(),
        client(40006),
        1,
        SYN,
        b"",
    );
    tap.packet(1, &other, &mut out);
    tap.packet(1, b"\x45 not really a packet", &mut out);
    assert!(out.is_empty(), "{out:?}");
    let n = tap.counters();
    assert_eq!((n.not_websocket, n.tls, n.ignored_packets), (1, 1, 2));
}

#[test]
fn garbage_after_the_upgrade_and_a_reset_mid_frame_end_only_that_connection() {
    let mut tap = Tap::new(8000, 1 << 20);
    let mut out = Vec::new();
    let mut bad = Conn::open(&mut tap, 40007, 1, 1, &mut out);
    bad.send(&mut tap, UPGRADED, 2, &mut out);
    bad.send(&mut tap, &[0x83, 0x00], 3, &mut out); // opcode 3
    let mut cut = Conn::open(&mut tap, 40008, 1, 1, &mut out);
    cut.send(&mut tap, UPGRADED, 2, &mut out);
    let m = test_message(3);
    cut.send(&mut tap, &m[..15], 3, &mut out);
    let reset = packet(SERVER.parse().unwrap(), cut.client, cut.next, RST, b"");
    tap.packet(4, &reset, &mut out);
    let mut good = Conn::open(&mut tap, 40009, 1, 1, &mut out);
    good.send(&mut tap, UPGRADED, 2, &mut out);
    good.send(&mut tap, &test_message(3), 5, &mut out);
    assert_eq!(
        messages(&out),
        vec![(good.client, MessageKey::Seq(3), 5, 5)]
    );
    assert!(out.iter().any(|e| matches!(
        e,
        TapEvent::Closed { client, reason: "reset", .. } if *client == cut.client
    )));
    assert!(out.iter().any(|e| matches!(
        e,
        TapEvent::Ended { client, segments: 3, resent: 0, .. } if *client == cut.client
    )));
    assert_eq!(tap.counters().broken, 1);
    assert_eq!(tap.connections(), 2, "the reset one is gone");
}

#[test]
fn compressed_copies_are_inflated_and_identified_alike() {
    use crate::permessage_deflate::inflate::build::Deflater;
    let mut tap = Tap::new(8000, 1 << 20);
    let mut out = Vec::new();
    const DEFLATE: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=15\r\n\r\n";
    // RFC 7692's own example: "Hello" compressed.
    let mut a = Conn::open(&mut tap, 40010, 1, 1, &mut out);
    a.send(&mut tap, DEFLATE, 2, &mut out);
    let mut hello = frame(true, 1, &[0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00]);
    hello[0] |= 0x40;
    a.send(&mut tap, &hello, 3, &mut out);
    assert!(matches!(out[0], TapEvent::Opened { deflate: true, .. }));
    let expected = crate::identity::payload_hash(b"Hello");
    assert!(
        matches!(out[2], TapEvent::Message { compressed: false, hash, .. } if hash == expected)
    );
    // One payload twice to a second connection, the second copy compressed
    // against the first (context takeover): both hash as the plaintext.
    let text = "Lorem ipsum dolor sit amet, ".repeat(16);
    let mut b = Conn::open(&mut tap, 40011, 1, 1, &mut out);
    b.send(&mut tap, DEFLATE, 2, &mut out);
    let mut server = Deflater::new();
    for at in [4, 5] {
        let mut f = frame(true, 1, &server.message(text.as_bytes()));
        f[0] |= 0x40;
        b.send(&mut tap, &f, at, &mut out);
    }
    let hashes: Vec<u64> = out
        .iter()
        .filter_map(|e| match e {
            TapEvent::Message { client, hash, .. } if *client == b.client => Some(*hash),
            _ => None,
        })
        .collect();
    let plain = crate::identity::payload_hash(text.as_bytes());
    assert_eq!(hashes, vec![plain, plain]);
    // A third whose server compresses each message alone: it shares the
    // thread's window, so it holds none of its own.
    const ALONE: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover\r\n\r\n";
    let mut c = Conn::open(&mut tap, 40012, 1, 1, &mut out);
    c.send(&mut tap, ALONE, 2, &mut out);
    c.send(&mut tap, &hello, 3, &mut out);
    let n = tap.counters();
    assert_eq!((n.inflated, n.compressed, n.broken), (4, 0, 0));
    assert_eq!(
        tap.inflater_bytes(),
        2 * crate::permessage_deflate::inflate::INFLATER_BYTES
    );
    // A compressed message that does not inflate ends that connection only.
    let mut bad = frame(true, 1, &[0xff; 16]);
    bad[0] |= 0x40;
    b.send(&mut tap, &bad, 6, &mut out);
    assert_eq!(tap.counters().broken, 1);
    assert_eq!(
        tap.inflater_bytes(),
        crate::permessage_deflate::inflate::INFLATER_BYTES
    );
}

#[test]
fn websockets_are_counted_once_upgraded() {
    let mut tap = Tap::new(8000, 1 << 20);
    let mut out = Vec::new();
    let mut conns: Vec<Conn> = (0..3)
        .map(|i| Conn::open(&mut tap, 41000 + i, 1, 1, &mut out))
        .collect();
    assert_eq!(tap.websockets(), 0);
    for c in &mut conns {
        c.send(&mut tap, UPGRADED, 2, &mut out);
    }
    assert_eq!(tap.websockets(), 3);
    // A message carries how many were open when it was sent; a close
    // takes one away.
    conns[0].send(&mut tap, &test_message(1), 3, &mut out);
    assert!(matches!(
        out.last(),
        Some(TapEvent::Message {
            open_websockets: 3,
            ..
        })
    ));
    conns[1].send(&mut tap, &frame(true, 8, b""), 4, &mut out);
    let fin = packet(
        SERVER.parse().unwrap(),
        conns[1].client,
        conns[1].next,
        TcpFlags {
            fin: true,
            ..TcpFlags::default()
        },
        b"",
    );
    tap.packet(5, &fin, &mut out);
    assert_eq!(tap.websockets(), 2);
    // A bare ACK after the end is not a connection open before the tap.
    tap.packet(
        6,
        &packet(
            SERVER.parse().unwrap(),
            conns[1].client,
            conns[1].next,
            ACK,
            b"",
        ),
        &mut out,
    );
    assert_eq!(tap.counters().open_before_tap, 0);
}

/// Each payload the tap took from `client`'s connection, as text, with its
/// first and last byte's capture times.
fn payloads_to(out: &[TapEvent], client: SocketAddr) -> Vec<(String, u64, u64)> {
    let texts: std::collections::HashMap<u64, String> =
        [r#"{"n":0,"at":1.5}"#, r#"{"n":1,"at":2.5}"#, "noise"]
            .iter()
            .map(|t| (crate::identity::payload_hash(t.as_bytes()), (*t).to_owned()))
            .collect();
    out.iter()
        .filter_map(|e| match e {
            TapEvent::Message {
                client: c,
                hash,
                first_byte_ns,
                last_byte_ns,
                ..
            } if *c == client => Some((
                texts
                    .get(hash)
                    .cloned()
                    .unwrap_or_else(|| format!("{hash:x}")),
                *first_byte_ns,
                *last_byte_ns,
            )),
            _ => None,
        })
        .collect()
}

const SHOW_0: &str = r#"{"n":0,"at":1.5}"#;
const SHOW_1: &str = r#"{"n":1,"at":2.5}"#;

#[test]
fn socketio_events_are_their_arguments_and_pings_are_no_messages() {
    let mut tap = Tap::new(8000, 1 << 20).reading(TapReading {
        protocol: TapProtocol::Auto,
        events: vec!["show".into()],
    });
    let mut out = Vec::new();
    let mut clients = Vec::new();
    for port in [42000, 42001] {
        let mut c = Conn::open(&mut tap, port, 7, 1, &mut out);
        c.send(&mut tap, UPGRADED, 2, &mut out);
        let open = br#"0{"sid":"s","upgrades":[],"pingInterval":1000,"pingTimeout":1000,"maxPayload":1000000}"#;
        c.send(&mut tap, &frame(true, 1, open), 3, &mut out);
        c.send(&mut tap, &frame(true, 1, br#"40{"sid":"t"}"#), 4, &mut out);
        clients.push(c);
    }
    for (at, n) in [(10, SHOW_0), (20, SHOW_1)] {
        for c in &mut clients {
            c.send(&mut tap, &frame(true, 1, b"2"), at, &mut out);
            let noise = format!(r#"42["noise",{n}]"#);
            c.send(
                &mut tap,
                &frame(true, 1, noise.as_bytes()),
                at + 1,
                &mut out,
            );
            let show = format!(r#"42["show",{n}]"#);
            c.send(&mut tap, &frame(true, 1, show.as_bytes()), at + 2, &mut out);
        }
    }
    for c in &clients {
        assert!(out.contains(&TapEvent::Recognised {
            client: c.client,
            protocol: Protocol::SocketIo
        }));
        assert_eq!(
            payloads_to(&out, c.client),
            vec![(SHOW_0.into(), 12, 12), (SHOW_1.into(), 22, 22)],
            "the shows' arguments, as a probe with --event show records them"
        );
    }
    assert_eq!(tap.counters().messages, 4);
}

#[test]
fn stomp_and_mqtt_are_known_by_their_subprotocol() {
    let mut tap = Tap::new(8000, 1 << 20);
    let mut out = Vec::new();
    let mut stomp = Conn::open(&mut tap, 42010, 1, 1, &mut out);
    stomp.send(
        &mut tap,
        b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Protocol: v12.stomp\r\n\r\n",
        2,
        &mut out,
    );
    assert_eq!(
        out.last(),
        Some(&TapEvent::Opened {
            client: stomp.client,
            at_ns: 2,
            deflate: false,
            protocol: Some(Protocol::Stomp)
        })
    );
    for (at, text) in [
        (
            3,
            "CONNECTED\nversion:1.2\nheart-beat:1000,1000\n\n\0".to_owned(),
        ),
        (4, "RECEIPT\nreceipt-id:r\n\n\0".to_owned()),
        (5, "\n".to_owned()),
        (
            6,
            format!(
                "MESSAGE\nsubscription:s\nmessage-id:1\ncontent-length:{}\n\n{SHOW_0}\0",
                SHOW_0.len()
            ),
        ),
    ] {
        stomp.send(&mut tap, &frame(true, 1, text.as_bytes()), at, &mut out);
    }
    // A MESSAGE cut across two WebSocket messages is one payload, dated
    // from the first.
    let cut = format!("MESSAGE\nsubscription:s\nmessage-id:2\n\n{SHOW_1}\0");
    stomp.send(
        &mut tap,
        &frame(true, 1, &cut.as_bytes()[..20]),
        7,
        &mut out,
    );
    stomp.send(
        &mut tap,
        &frame(true, 1, &cut.as_bytes()[20..]),
        8,
        &mut out,
    );
    assert_eq!(
        payloads_to(&out, stomp.client),
        vec![(SHOW_0.into(), 6, 6), (SHOW_1.into(), 7, 8)]
    );

    let mut mqtt = Conn::open(&mut tap, 42011, 1, 1, &mut out);
    mqtt.send(
        &mut tap,
        b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n",
        2,
        &mut out,
    );
    let publish = |retain: bool, payload: &str| {
        let mut body = vec![0, 6];
        body.extend_from_slice(b"show/a");
        body.extend_from_slice(payload.as_bytes());
        let mut p = vec![0x30 | u8::from(retain), body.len() as u8];
        p.extend(body);
        frame(true, 2, &p)
    };
    mqtt.send(&mut tap, &frame(true, 2, &[0x20, 2, 0, 0]), 3, &mut out);
    mqtt.send(&mut tap, &frame(true, 2, &[0x90, 3, 0, 1, 0]), 4, &mut out);
    mqtt.send(&mut tap, &publish(true, "noise"), 5, &mut out);
    mqtt.send(&mut tap, &publish(false, SHOW_0), 6, &mut out);
    mqtt.send(&mut tap, &frame(true, 2, &[0xD0, 0]), 7, &mut out);
    assert_eq!(
        payloads_to(&out, mqtt.client),
        vec![(SHOW_0.into(), 6, 6)],
        "a retained message and the acknowledgements are not broadcasts"
    );
    // A broker's DISCONNECT ends the session, said.
    mqtt.send(&mut tap, &frame(true, 2, &[0xE0, 0]), 8, &mut out);
    assert!(out.contains(&TapEvent::Closed {
        client: mqtt.client,
        at_ns: 8,
        reason: "the protocol's session ended"
    }));
    assert_eq!(tap.websockets(), 1);
    // Garbage in STOMP breaks only that connection.
    stomp.send(&mut tap, &frame(true, 1, b"nonsense\0"), 9, &mut out);
    let n = tap.counters();
    assert_eq!((n.broken, n.messages), (1, 3));
    assert_eq!(tap.websockets(), 0);
}

#[test]
fn an_event_streams_events_are_its_messages() {
    let mut tap = Tap::new(8000, 1 << 20).reading(TapReading {
        protocol: TapProtocol::Auto,
        events: vec!["show".into()],
    });
    let mut out = Vec::new();
    let mut c = Conn::open(&mut tap, 42020, 1, 1, &mut out);
    c.send(
        &mut tap,
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n",
        2,
        &mut out,
    );
    assert_eq!(tap.websockets(), 1);
    let chunk = |text: String| format!("{:x}\r\n{text}\r\n", text.len()).into_bytes();
    c.send(&mut tap, &chunk("retry: 300\n\n".into()), 3, &mut out);
    c.send(&mut tap, &chunk(": keep-alive\n\n".into()), 4, &mut out);
    c.send(
        &mut tap,
        &chunk("id: 1\nevent: other\ndata: noise\n\n".into()),
        5,
        &mut out,
    );
    c.send(
        &mut tap,
        &chunk(format!("id: 2\nevent: show\ndata: {SHOW_0}\n\n")),
        6,
        &mut out,
    );
    c.send(&mut tap, b"0\r\n\r\n", 7, &mut out);
    assert_eq!(
        out.first(),
        Some(&TapEvent::Opened {
            client: c.client,
            at_ns: 2,
            deflate: false,
            protocol: Some(Protocol::EventStream)
        })
    );
    assert_eq!(payloads_to(&out, c.client), vec![(SHOW_0.into(), 6, 6)]);
    assert!(out.contains(&TapEvent::Closed {
        client: c.client,
        at_ns: 7,
        reason: "event stream ended"
    }));
    assert_eq!(tap.websockets(), 0);
    let n = tap.counters();
    assert_eq!((n.not_websocket, n.messages, n.broken), (0, 1, 0));
    // Its end is reported as a WebSocket's is.
    out.clear();
    tap.finish(8, &mut out);
    assert!(
        matches!(out[..], [TapEvent::Ended { segments: 6, .. }]),
        "{out:?}"
    );
}
