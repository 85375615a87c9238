//! permessage-deflate on the hub (on unless `--no-deflate`), against real clients on
//! 127.0.0.1:0: the probes (one offering it as browsers do, one not) and
//! Python `websockets` clients, which compress what they send too.
//! Every client must get every broadcast's exact payload, compressed or
//! not, and the report must join them all.

mod common;

use common::wait_for_clients;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use agent::http_client::{request, start_test};
use agent::{AgentConfig, RunningAgent};
use probe::{ProbeConfig, RunningProbe};
use skewscope_core::log::AnyLog;
use skewscope_core::record::{AgentRecord, ProbeRecord};
use skewscope_os::log_files::read_file;

const LIMIT: Duration = Duration::from_secs(30);

/// A 4 KB JSON state message, as a show controller sends one.
fn state_message() -> String {
    let cues: Vec<String> = (0..60)
        .map(|n| format!(r#"{{"light":{n},"level":{},"fade_ms":250}}"#, (n * 7) % 100))
        .collect();
    format!(r#"{{"scene":"lobby","cues":[{}]}}"#, cues.join(","))
}

/// A state message of about 300 KB: past the size the agent makes ready to
/// send on its request thread, so it is encoded and compressed on a
/// blocking thread.
fn large_state_message() -> String {
    let cues: Vec<String> = (0..8_000)
        .map(|n| format!(r#"{{"light":{n},"level":{},"fade_ms":250}}"#, (n * 7) % 100))
        .collect();
    format!(r#"{{"scene":"atrium","cues":[{}]}}"#, cues.join(","))
}

/// Random bytes: they do not shrink, so everyone gets the plain frame.
fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn probe_records(path: &std::path::Path) -> Vec<ProbeRecord> {
    match read_file(path).unwrap() {
        AnyLog::Probe(d) => d.records,
        AnyLog::Agent(_) => panic!("a probe wrote an agent log"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_and_plain_probes_get_the_same_broadcasts_and_join() {
    let dir = tempfile::tempdir().unwrap();
    // permessage-deflate is on by default.
    let config = AgentConfig::local(dir.path().join("agent"));
    let agent = RunningAgent::start(config).await.unwrap();
    let mut probes = Vec::new();
    for (name, deflate) in [("offers", true), ("declines", false)] {
        let mut config = ProbeConfig::new(
            format!("ws://{}/ws", agent.addr),
            dir.path().join(format!("{name}.sklog")),
        );
        config.name = name.into();
        config.connections = 2;
        config.count = Some(4);
        config.deflate = deflate;
        config.time_exchange = false;
        let probe = RunningProbe::start(config).await.unwrap();
        assert_eq!(probe.connected().await.opened, 2);
        probes.push(probe);
    }
    // And one raw client offering it, to see the frame itself on the wire.
    let mut raw = std::net::TcpStream::connect(agent.addr).unwrap();
    raw.set_read_timeout(Some(LIMIT)).unwrap();
    raw.write_all(
        b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
          Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n",
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        raw.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(
        head.contains("Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover"),
        "{head}"
    );
    wait_for_clients(&agent, 5).await;
    // Two offering probe connections and the raw client; the declining two are plain.
    let health = request(agent.addr, "GET", "/healthz", b"", None)
        .await
        .unwrap();
    assert!(
        health.body.contains("\"clients\":5,\"deflate_clients\":3"),
        "{}",
        health.body
    );
    assert_eq!(start_test(agent.addr, None).await.unwrap().status, 200);
    assert!(large_state_message().len() > 256 * 1024);
    for body in [
        state_message().into_bytes(),
        noise(2000),
        large_state_message().into_bytes(),
    ] {
        let r = request(agent.addr, "POST", "/publish", &body, None)
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // The raw client's three frames: the JSON ones compressed (RSV1, and
    // shorter than the payload), the noise plain.
    let state_len = state_message().len();
    let mut frames = Vec::new();
    for _ in 0..3 {
        let mut h = [0u8; 2];
        raw.read_exact(&mut h).unwrap();
        let len = match h[1] & 0x7f {
            126 => {
                let mut l = [0u8; 2];
                raw.read_exact(&mut l).unwrap();
                usize::from(u16::from_be_bytes(l))
            }
            n => usize::from(n),
        };
        let mut payload = vec![0u8; len];
        raw.read_exact(&mut payload).unwrap();
        frames.push((h[0] & 0x40 != 0, len));
    }
    assert!(frames[0].0 && frames[1].0 && !frames[2].0, "{frames:?}");
    assert!(
        frames[1].1 < state_len / 2,
        "{frames:?} for {state_len} bytes"
    );
    assert_eq!(frames[2].1, 2000, "noise goes plain");
    drop(raw);
    for probe in probes {
        let summary = tokio::time::timeout(LIMIT, probe.finish())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(summary.receipts, 8, "every broadcast on both connections");
    }
    let log = agent.log_path.clone();
    agent.shutdown().await.unwrap();

    let agent_records = match read_file(&log).unwrap() {
        AnyLog::Agent(d) => d.records,
        AnyLog::Probe(_) => panic!("the agent wrote a probe log"),
    };
    assert!(matches!(
        agent_records.first(),
        Some(AgentRecord::Started(_))
    ));
    let offers = probe_records(&dir.path().join("offers.sklog"));
    let declines = probe_records(&dir.path().join("declines.sklog"));
    let deflated = |records: &[ProbeRecord]| {
        records
            .iter()
            .filter(|r| matches!(r, ProbeRecord::ConnectionDeflate(_)))
            .count()
    };
    assert_eq!((deflated(&offers), deflated(&declines)), (2, 0));
    // The inflated copies hash as the agent's payloads do: every receipt
    // joins its broadcast, and nobody missed one.
    let joined = skewscope_core::analysis::join::join(Some(&agent_records), &[&offers, &declines]);
    assert_eq!(joined.unmatched, 0);
    assert_eq!(joined.broadcasts.len(), 4);
    for b in &joined.broadcasts {
        assert_eq!(b.receipts.len(), 4, "{b:?}");
        assert!(b.missing.is_empty(), "{b:?}");
    }
}

/// Python websockets clients: one negotiates permessage-deflate (its
/// default) and, after the broadcasts, sends a message compressed as it
/// compresses everything, then a compression bomb; one does not negotiate.
/// Each prints what it negotiated, every message it received, and the
/// close code it got.
const CLIENTS: &str = r#"
import asyncio, json, sys
from websockets.asyncio.client import connect

URL, EXPECT = sys.argv[1], int(sys.argv[2])

async def one(name, compression):
    async with connect(URL, compression=compression, max_size=None) as ws:
        names = [e.name for e in ws.protocol.extensions]
        print(json.dumps({"client": name, "ready": True}), flush=True)
        got = []
        for _ in range(EXPECT):
            m = await ws.recv()
            got.append(m if isinstance(m, str) else "hex:" + m.hex())
        code = None
        if compression:
            await ws.send("all good here " * 200)
            await ws.send(b"\0" * (2 << 20))
            try:
                await ws.recv()
            except Exception:
                pass
            code = ws.protocol.close_rcvd.code if ws.protocol.close_rcvd else None
        print(json.dumps({"client": name, "extensions": names, "got": got, "close": code}), flush=True)

async def main():
    await asyncio.gather(one("deflate", "deflate"), one("plain", None))

asyncio.run(main())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_clients_get_exact_payloads_and_a_compressed_bomb_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = AgentConfig::local(dir.path().join("agent"));
    config.max_frame = 64 * 1024;
    let agent = RunningAgent::start(config).await.unwrap();
    let script = dir.path().join("clients.py");
    std::fs::write(&script, CLIENTS).unwrap();
    let mut child = Command::new("python3")
        .arg(&script)
        .arg(format!("ws://{}/ws", agent.addr))
        .arg("2")
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (./test installs websockets)");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..2 {
        let line = lines.next().unwrap().unwrap();
        assert!(line.contains("\"ready\""), "{line}");
    }
    wait_for_clients(&agent, 2).await;
    let state = state_message();
    let bytes = noise(1500);
    for body in [state.as_bytes(), &bytes[..]] {
        let r = request(agent.addr, "POST", "/publish", body, None)
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let want = vec![
        serde_json::Value::from(state.clone()),
        serde_json::Value::from(format!(
            "hex:{}",
            bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
        )),
    ];
    let reports: Vec<serde_json::Value> = tokio::task::spawn_blocking(move || {
        let reports = lines
            .take(2)
            .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
            .collect();
        let _ = child.wait();
        reports
    })
    .await
    .unwrap();
    assert_eq!(reports.len(), 2);
    for r in &reports {
        assert_eq!(r["got"], serde_json::Value::from(want.clone()), "{r}");
        match r["client"].as_str() {
            Some("deflate") => {
                assert_eq!(r["extensions"][0], "permessage-deflate", "{r}");
                // Its compressed chatter was taken; its bomb was not.
                assert_eq!(r["close"], 1009, "{r}");
            }
            _ => assert_eq!(r["extensions"], serde_json::json!([]), "{r}"),
        }
    }
    agent.shutdown().await.unwrap();
}
