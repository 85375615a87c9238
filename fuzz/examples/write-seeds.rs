//! Writes the hand-made seeds of every fuzz target into `fuzz/corpus/`:
//! well-formed inputs built with skewscope's own encoders (and the frozen
//! logs), from which the fuzzer mutates. Deterministic, so rerunning it
//! changes nothing: `cargo run -p skewscope-fuzz --example write-seeds`.

use std::path::Path;

use skewscope_core::ingest::{ToAgent, encode};
use skewscope_core::permessage_deflate::deflate::MessageDeflater;
use skewscope_core::time_exchange::{Reply, Request};
use skewscope_fuzz::{TARGETS, capture};

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let logs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/data");
    let mut seeds: Vec<(&str, String, Vec<u8>)> = Vec::new();

    // The record log: the frozen logs (every record variant), one cut short,
    // one with a flipped byte in its middle.
    for name in [
        "records-2026-12-02.agent.sklog",
        "records-2026-12-02b.probe.sklog",
        "c41f7be/probe.sklog",
    ] {
        let bytes = std::fs::read(logs.join(name))?;
        let stem = name.replace('/', "-");
        let mut torn = bytes.clone();
        torn.truncate(bytes.len() - 5);
        let mut flipped = bytes.clone();
        flipped[bytes.len() / 2] ^= 0x40;
        seeds.push(("log_body", stem.clone(), bytes.clone()));
        seeds.push(("log_body", format!("{stem}-torn"), torn));
        seeds.push(("log_body", format!("{stem}-flipped"), flipped));
        if name.contains("probe") {
            // A batch as a probe uploads it: the body's frames.
            let frames = bytes[skewscope_core::log::HEADER_LEN..].to_vec();
            let records = ToAgent::Records {
                first_seq: 0,
                frames: frames.clone(),
            };
            seeds.push(("ingest", format!("{stem}-records"), encode(&records)));
            seeds.push(("ingest", format!("{stem}-frames"), frames));
        }
    }
    let hello = ToAgent::Hello {
        version: skewscope_core::ingest::INGEST_VERSION,
        run_id: 0x5eed,
    };
    seeds.push(("ingest", "hello".into(), encode(&hello)));

    // A page's uploads (the JSON dialect): a hello, a run's first batch
    // with every kind of event, a resend, and a hub label.
    let run = "00000000000000000000000000005eed";
    seeds.push((
        "page_ingest",
        "hello".into(),
        format!(r#"{{"hello": {{"version": 1, "run_id": "{run}"}}}}"#).into(),
    ));
    let events = [
        r#"{"kind": "started", "name": "lobby-tv", "url": "ws://h:1/ws", "connections": 1, "version": "page 1", "at_ms": 1764000000000.125}"#.to_owned(),
        format!(r#"{{"kind": "identity", "run_id": "{run}", "clock_id": "page-1"}}"#),
        r#"{"kind": "page", "user_agent": "Chromium", "clock_step_ms": 0.005, "isolated": true}"#.into(),
        r#"{"kind": "act_plan", "pointer": "/at", "unit": "s", "at_ms": 1764000000000.5}"#.into(),
        r#"{"kind": "opened", "conn": 0, "at_ms": 1764000000001}"#.into(),
        r#"{"kind": "receipt", "conn": 0, "message": {"text": "{"at": 1764000000.1}", "occurrence": 0}, "at_ms": 1764000000002.25}"#.into(),
        r#"{"kind": "payload", "message": {"hex": "00ff10"}}"#.into(),
        r#"{"kind": "exchange", "t1_ms": 1764000000003, "t2_ms": 1764000000003.4, "t3_ms": 1764000000003.41, "t4_ms": 1764000000003.9}"#.into(),
        r#"{"kind": "action", "conn": 0, "message": {"text": "{"at": 1764000000.1}"}, "act_at_ms": 1764000000100, "offset_ms": 0.25, "bound_ms": 0.4, "target_ms": 1764000000099.75, "done_ms": 1764000000099.8, "late_ms": 0}"#.into(),
        r#"{"kind": "failed", "conn": 1, "at_ms": 1764000000004, "error": "refused"}"#.into(),
        r#"{"kind": "closed", "conn": 0, "at_ms": 1764000000200, "reason": "closed (1000)"}"#.into(),
        r#"{"kind": "stopped", "at_ms": 1764000000300}"#.into(),
    ];
    seeds.push((
        "page_ingest",
        "run".into(),
        format!(
            r#"{{"events": {{"first_seq": 0, "events": [{}]}}}}"#,
            events.join(", ")
        )
        .into(),
    ));
    seeds.push((
        "page_ingest",
        "resend".into(),
        format!(
            r#"{{"events": {{"first_seq": 4, "events": [{}]}}}}"#,
            events[4..6].join(", ")
        )
        .into(),
    ));
    seeds.push((
        "page_ingest",
        "label".into(),
        skewscope_core::page_ingest::page_label(0x5eed, 3).into(),
    ));

    // Client frames (masked) and server frames (not).
    let mut deflater = MessageDeflater::default();
    let text = br#"{"type":"start","at":1764000000123456789,"n":1}"#;
    let compressed = deflater.compress(&text.repeat(4)).expect("compresses");
    let mut client = Vec::new();
    client.extend(frame(0x81, text, true));
    client.extend(frame(0x89, b"ping", true));
    client.extend(frame(0x8a, b"", true));
    client.extend(frame(0x01, b"frag", true));
    client.extend(frame(0x80, b"ment", true));
    client.extend(frame(0x88, &[0x03, 0xe8], true));
    seeds.push(("client_frames", "session".into(), client));
    seeds.push((
        "client_frames",
        "compressed".into(),
        frame(0xc1, &compressed, true),
    ));
    let mut server = Vec::new();
    server.extend(frame(0x81, text, false));
    server.extend(frame(0x82, &[0u8; 300], false));
    server.extend(frame(0x89, b"hi", false));
    server.extend(frame(0x01, b"frag", false));
    server.extend(frame(0x80, b"ment", false));
    server.extend(frame(0x88, &[0x03, 0xe8], false));
    seeds.push(("server_frames", "session".into(), server.clone()));
    seeds.push((
        "server_frames",
        "compressed".into(),
        frame(0xc1, &compressed, false),
    ));
    seeds.push((
        "inflate",
        "no-takeover".into(),
        [&[1u8][..], &compressed].concat(),
    ));
    seeds.push((
        "inflate",
        "takeover".into(),
        [&[0u8][..], &compressed].concat(),
    ));

    // A capture of a tapped connection: handshake, upgrade, frames, close.
    let upgrade = b"GET /ws HTTP/1.1\r\nHost: s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n";
    let switching = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover\r\n\r\n";
    let (c, s) = (
        ([10, 0, 0, 2], 40000),
        ([10, 0, 0, 1], skewscope_fuzz::TAP_PORT),
    );
    let mut capture_packets = vec![
        tcp(c, s, 100, SYN, b""),
        tcp(s, c, 500, SYN, b""),
        tcp(c, s, 101, 0, upgrade),
    ];
    let mut seq = 501;
    for payload in [&switching[..], &server, &frame(0xc1, &compressed, false)] {
        capture_packets.push(tcp(s, c, seq, 0, payload));
        seq += payload.len() as u32;
    }
    capture_packets.push(tcp(s, c, seq, FIN, b""));
    seeds.push((
        "tap",
        "upgrade-frames-fin".into(),
        capture(&capture_packets),
    ));

    // The time exchange, both ways and as JSON.
    let request = Request::new(7, 1_764_000_000_000_000_000);
    let reply = Reply {
        id: 7,
        t1_wall_ns: 1_764_000_000_000_000_000,
        t2_wall_ns: 1_764_000_000_000_100_000,
        t3_wall_ns: 1_764_000_000_000_120_000,
    };
    seeds.push(("time_exchange", "request".into(), request.encode()));
    seeds.push((
        "time_exchange",
        "reply".into(),
        reply.encode(&request, None),
    ));
    let key = skewscope_core::time_exchange::TimeKey::from_token("fuzz");
    seeds.push((
        "time_exchange",
        "reply-tagged".into(),
        reply.encode(&request, Some(&key)),
    ));
    let mut old = request;
    old.version = 1;
    seeds.push(("time_exchange", "request-v1".into(), old.encode()));
    for (name, text) in [
        ("numeric-id", r#"{"id":1,"t1":1764000000123.25}"#),
        ("string-id", r#"{"id":"a-7","t1":17640000001}"#),
        ("no-t1", r#"{"id":2}"#),
    ] {
        seeds.push(("clock_json", name.into(), text.into()));
    }

    // Request heads the agent reads.
    for (name, text) in [
        ("upgrade", &upgrade[..]),
        ("publish", b"POST /publish HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer t0k\r\nContent-Length: 5\r\n\r\nhello"),
        ("start-test", b"GET /start_test?lead=30ms&size=64 HTTP/1.1\r\nHost: s\r\n\r\n"),
        ("metrics", b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n"),
    ] {
        seeds.push(("http_head", name.into(), text.to_vec()));
    }

    // chronyc -c tracking, as chronyd 4 prints it.
    let tracking = "C0A80101,192.168.1.1,3,1764000000.123456789,0.000012345,-0.000003210,0.000021000,-12.345,0.001,0.010,0.000512000,0.000250000,64.2,Normal\n";
    seeds.push(("chrony", "tracking".into(), tracking.into()));

    // Payloads with a time to act.
    for (name, text) in [
        ("ns", r#"{"type":"go","at":1764000000123456789}"#),
        ("seconds-float", r#"{"at":1764000000.123}"#),
        ("string", r#"{"data":{"at":"1764000000123"}}"#),
        ("array", r#"[1764000000123,{"at":1}]"#),
    ] {
        seeds.push(("act_at", name.into(), text.into()));
    }

    // Exchanges for the clock model: an honest jittery link, then the
    // agent's clock stepping 50 ms, with questions and a forgetting.
    let mut exchanges = Vec::new();
    let mut t = 1_000_000_000_000u64;
    let mut x = 7u64;
    for i in 0..40u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let (up, down) = (1_000_000 + (x >> 44), 1_000_000 + ((x >> 20) & 0xf_ffff));
        let step = if i >= 30 { 50_000_000 } else { 0 };
        let agent = |m: u64| m + 500_000_000_000_000 + step;
        let t2 = agent(t + up);
        let fields = [t, t2, t2 + 20_000, t + up + 20_000 + down];
        let mut chunk: Vec<u8> = fields.iter().flat_map(|f| f.to_le_bytes()).collect();
        chunk[0] &= !3;
        exchanges.extend(chunk);
        if i % 10 == 9 {
            let mut ask: Vec<u8> = [t + 250_000_000, 0, 0, 0]
                .iter()
                .flat_map(|f| f.to_le_bytes())
                .collect();
            ask[0] = (ask[0] & !3) | 1;
            exchanges.extend(ask);
        }
        t += 1_000_000_000;
    }
    let mut forget: Vec<u8> = [t - 5_000_000_000, 0, 0, 0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    forget[0] = (forget[0] & !3) | 2;
    exchanges.extend(forget);
    seeds.push(("clock_model", "wifi-then-a-step".into(), exchanges));

    // Socket.IO: a session as python-socketio runs one (open, connect,
    // pings, events with and without ack ids, a namespace, a binary event
    // and its attachment (0xFF marks a binary line), a close).
    let socketio = concat!(
        "0{\"sid\":\"Hs9\",\"upgrades\":[],\"pingInterval\":25000,\"pingTimeout\":20000,\"maxPayload\":1000000}\n",
        "40{\"sid\":\"x1\"}\n",
        "2\n",
        "42[\"show\",{\"n\":0,\"at\":1764000000.25}]\n",
        "42[\"noise\",1,\"two\",[3]]\n",
        "4217[\"show\",{\"n\":1}]\n",
        "42/lobby,[\"show\",{\"n\":2}]\n",
        "451-[\"blob\",{\"_placeholder\":true,\"num\":0}]\n",
        "\u{ff}\u{1}\u{2}\n",
        "6\n",
        "41\n",
    );
    seeds.push(("socketio", "session".into(), socketio.into()));
    seeds.push((
        "socketio",
        "refused".into(),
        b"0{\"pingInterval\":1000,\"pingTimeout\":1000}\n44{\"message\":\"Not authorized\"}\n"
            .to_vec(),
    ));

    // STOMP: a broker's frames to a subscriber (CONNECTED, RECEIPT,
    // heart-beats, messages with and without content-length, CRLF), and
    // an ERROR.
    let stomp = concat!(
        "CONNECTED\nversion:1.2\nheart-beat:1000,1000\nserver:RabbitMQ/3.10.8\n\n\0",
        "RECEIPT\nreceipt-id:skewscope-subscribed\n\n\0\n\n",
        "MESSAGE\nsubscription:skewscope-0\ndestination:/topic/show\nmessage-id:T_1@@session-x@@1\n",
        "content-type:application/json\ncontent-length:23\n\n{\"n\":0,\"at\":1764000000}\0\n",
        "MESSAGE\r\nsubscription:skewscope-0\r\ndestination:/topic/a\\cb\r\n\r\nplain body\0",
    );
    seeds.push(("stomp", "session".into(), stomp.into()));
    seeds.push((
        "stomp",
        "error".into(),
        b"ERROR\nmessage:Access refused\ncontent-length:5\n\nno\0no\0".to_vec(),
    ));

    // MQTT: CONNACK, SUBACK, then PUBLISHes at QoS 0 and 1 (one retained),
    // a PINGRESP; and the MQTT 5 shapes with properties.
    let publish = |first: u8, id: Option<u16>, props: &[u8], payload: &[u8]| {
        let mut body = vec![0, 10];
        body.extend_from_slice(b"show/lobby");
        if let Some(id) = id {
            body.extend_from_slice(&id.to_be_bytes());
        }
        body.extend_from_slice(props);
        body.extend_from_slice(payload);
        let mut packet = vec![first, body.len() as u8];
        packet.extend(body);
        packet
    };
    let mut mqtt = vec![0x20, 2, 0, 0, 0x90, 3, 0, 1, 1];
    mqtt.extend(publish(0x30, None, &[], b"{\"n\":0,\"at\":1764000000}"));
    mqtt.extend(publish(0x32, Some(7), &[], b"qos one"));
    mqtt.extend(publish(0x33, Some(8), &[], b"retained"));
    mqtt.extend([0xD0, 0]);
    seeds.push(("mqtt", "v3".into(), mqtt.clone()));
    let mut mqtt5 = vec![0x20, 9, 0, 0, 6, 0x13, 0, 5, 0x21, 0, 20];
    mqtt5.extend([0x90, 4, 0, 1, 0, 1]);
    mqtt5.extend(publish(0x32, Some(1), &[3, 0x01, 1, 0x23], b"{\"at\":1}"));
    mqtt5.extend([0xE0, 2, 0x8B, 0]);
    seeds.push(("mqtt", "v5".into(), mqtt5));

    // SSE: a response as Starlette streams one (chunked), and a bare body.
    let events = "retry: 300\n\nid: 1\nevent: show\ndata: {\"n\": 0}\n\n: keep-alive\n\nevent: other\r\ndata: a\r\ndata: b\r\n\r\n";
    let mut chunked = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n",
    );
    for part in [&events[..20], &events[20..]] {
        chunked.push_str(&format!("{:x}\r\n{part}\r\n", part.len()));
    }
    chunked.push_str("0\r\n\r\n");
    seeds.push(("sse", "chunked".into(), chunked.clone().into()));
    seeds.push(("sse", "body".into(), format!("\u{feff}{events}").into()));

    // A tapped server's four kinds of connection in one capture: Socket.IO
    // (known by its open packet), STOMP and MQTT (by the subprotocol the
    // 101 selected, their frames cut across WebSocket messages) and an
    // event stream, so `auto` and each named protocol read them.
    let upgraded = |subprotocol: &str| {
        let mut head =
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                .to_owned();
        if !subprotocol.is_empty() {
            head.push_str(&format!("Sec-WebSocket-Protocol: {subprotocol}\r\n"));
        }
        head.push_str("\r\n");
        head.into_bytes()
    };
    let socketio_frames: Vec<u8> = socketio
        .lines()
        .flat_map(|line| match line.strip_prefix('\u{ff}') {
            Some(_) => frame(0x82, &[1, 2], false),
            None => frame(0x81, line.as_bytes(), false),
        })
        .collect();
    let stomp_bytes = stomp.as_bytes();
    let mut stomp_frames = frame(0x81, &stomp_bytes[..100], false);
    stomp_frames.extend(frame(0x81, &stomp_bytes[100..], false));
    let mut mqtt_frames = frame(0x82, &mqtt[..20], false);
    mqtt_frames.extend(frame(0x82, &mqtt[20..], false));
    let server = ([10, 0, 0, 1], skewscope_fuzz::TAP_PORT);
    let mut capture_packets = Vec::new();
    for (i, (head, body)) in [
        (upgraded(""), socketio_frames),
        (upgraded("v12.stomp"), stomp_frames),
        (upgraded("mqtt"), mqtt_frames),
        (Vec::new(), chunked.into_bytes()),
    ]
    .into_iter()
    .enumerate()
    {
        let client = ([10, 0, 0, 2], 41000 + i as u16);
        capture_packets.push(tcp(server, client, 900, SYN, b""));
        let mut seq = 901;
        for part in [&head[..], &body[..body.len() / 2], &body[body.len() / 2..]] {
            capture_packets.push(tcp(server, client, seq, 0, part));
            seq += part.len() as u32;
        }
        capture_packets.push(tcp(server, client, seq, FIN, b""));
    }
    seeds.push(("tap", "protocols".into(), capture(&capture_packets)));

    for (target, name, bytes) in seeds {
        assert!(
            TARGETS.iter().any(|(t, _)| *t == target),
            "no target {target}"
        );
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("seed-{name}")), bytes)?;
    }
    Ok(())
}

/// One WebSocket frame: `first` is FIN/RSV/opcode; masked as a client's.
fn frame(first: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut out = vec![first];
    let mask_bit = if masked { 0x80 } else { 0 };
    match payload.len() {
        n @ 0..=125 => out.push(mask_bit | n as u8),
        n @ 126..=65535 => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if masked {
        let key = [0x37, 0xfa, 0x21, 0x3d];
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    } else {
        out.extend_from_slice(payload);
    }
    out
}

const SYN: u8 = 0x02;
const FIN: u8 = 0x01;

/// An IPv4 TCP packet (no options; checksums zero, which the tap does not
/// check: the kernel already has).
fn tcp(src: ([u8; 4], u16), dst: ([u8; 4], u16), seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let total = (40 + payload.len()) as u16;
    let mut p = vec![0u8; 40];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[8] = 64;
    p[9] = 6;
    p[12..16].copy_from_slice(&src.0);
    p[16..20].copy_from_slice(&dst.0);
    p[20..22].copy_from_slice(&src.1.to_be_bytes());
    p[22..24].copy_from_slice(&dst.1.to_be_bytes());
    p[24..28].copy_from_slice(&seq.to_be_bytes());
    p[32] = 5 << 4;
    p[33] = flags | 0x10;
    p.extend_from_slice(payload);
    p
}
