//! The time exchange under attack: a relay between the probes and the
//! agent's time port moves t2 and t3 of every other reply 3 ms ahead, as an
//! attacker on a shared Wi-Fi (or behind an ARP spoof) can.
//!
//! A probe holding the agent's token refuses every altered reply (counted
//! in its log and said in the report) and its clock estimate stays where
//! the truth is. A probe without it takes them: its recorded exchanges say
//! the agent is 3 ms ahead, and the report names its clock unauthenticated.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{Reaped, count_of, json_report, probe_records, signal, start_agent_with, wait_until};
use nix::sys::signal::Signal;
use skewscope_core::record::{ClockTags, ProbeRecord, TimeSample};

/// How far the relay moves the agent's times.
const SHIFT_NS: u64 = 3_000_000;

/// A UDP relay to `agent` that moves t2 and t3 of every other reply by
/// [`SHIFT_NS`]; returns its address, its stop flag and its count of
/// replies altered.
fn tampering_relay(agent: SocketAddr) -> (SocketAddr, Arc<AtomicBool>, Arc<AtomicU64>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let addr = socket.local_addr().unwrap();
    let (stop, altered) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let (s, a) = (stop.clone(), altered.clone());
    std::thread::spawn(move || {
        // The probe that asked each request id.
        let mut asked: std::collections::HashMap<[u8; 8], SocketAddr> = Default::default();
        let mut replies = 0u64;
        let mut buf = [0u8; 2048];
        while !s.load(Ordering::Relaxed) {
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                continue;
            };
            let packet = &mut buf[..n];
            if n < 40 {
                continue;
            }
            let id: [u8; 8] = packet[8..16].try_into().unwrap();
            if from != agent {
                asked.insert(id, from);
                let _ = socket.send_to(packet, agent);
                continue;
            }
            let Some(&probe) = asked.get(&id) else {
                continue;
            };
            replies += 1;
            if replies.is_multiple_of(2) {
                for at in [24, 32] {
                    let t = u64::from_le_bytes(packet[at..at + 8].try_into().unwrap());
                    packet[at..at + 8].copy_from_slice(&(t + SHIFT_NS).to_le_bytes());
                }
                a.fetch_add(1, Ordering::Relaxed);
            }
            let _ = socket.send_to(packet, probe);
        }
    });
    (addr, stop, altered)
}

/// Agent minus probe clock as one exchange says it (same host: truth 0).
fn offset_of(s: &TimeSample) -> i64 {
    ((s.t2_wall_ns as i64 - s.t1.wall_ns as i64) + (s.t3_wall_ns as i64 - s.t4.wall_ns as i64)) / 2
}

fn last_tags(records: &[ProbeRecord]) -> ClockTags {
    records
        .iter()
        .rev()
        .find_map(|r| match r {
            ProbeRecord::ClockTags(t) => Some(*t),
            _ => None,
        })
        .expect("a ClockTags record")
}

#[test]
fn a_keyed_probe_refuses_altered_time_replies_and_an_unkeyed_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "site-secret\n").unwrap();
    let (mut agent, addr, agent_log) = start_agent_with(
        dir.path(),
        "127.0.0.1:0",
        &["--token-file", token.to_str().unwrap()],
    );
    let (relay, stop_relay, altered) = tampering_relay(addr.parse().unwrap());

    let probe = |name: &str, token: Option<&std::path::Path>| {
        let log = dir.path().join(format!("{name}.sklog"));
        let mut command = Command::new(common::sibling_binary("skewscope-probe"));
        command
            .args(["--url", &format!("ws://{addr}/ws"), "--name", name])
            .args(["--connections", "1", "--duration", "120s"])
            .args([
                "--time-interval",
                "100ms",
                "--time-server",
                &relay.to_string(),
            ])
            .args(["--out", log.to_str().unwrap()])
            .stderr(Stdio::null());
        if let Some(token) = token {
            command.args(["--token-file", token.to_str().unwrap()]);
        }
        (Reaped(command.spawn().unwrap()), log)
    };
    let (mut keyed, keyed_log) = probe("keyed", Some(&token));
    let (mut unkeyed, unkeyed_log) = probe("unkeyed", None);
    // Each probe has taken at least eight answers and been sent at least
    // three altered ones.
    let samples =
        |log: &std::path::Path| count_of(log, |r| matches!(r, ProbeRecord::TimeSample(_)));
    wait_until("exchanges through the relay", || {
        samples(&keyed_log) >= 8
            && samples(&unkeyed_log) >= 8
            && altered.load(Ordering::Relaxed) >= 6
    });
    wait_until("the keyed probe's refusals in its log", || {
        last_tags(&probe_records(&keyed_log)).refused >= 3
    });
    for p in [&mut keyed, &mut unkeyed] {
        signal(&p.0, Signal::SIGTERM);
        assert!(p.0.wait().unwrap().success());
    }
    stop_relay.store(true, Ordering::Relaxed);
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());

    // The keyed probe used no altered reply: every exchange it recorded
    // says the agent's clock is where it is (same host), nowhere near 3 ms.
    let records = probe_records(&keyed_log);
    let tags = last_tags(&records);
    assert!(tags.keyed && tags.refused >= 3, "{tags:?}");
    for r in &records {
        if let ProbeRecord::TimeSample(s) = r {
            let rtt = (s.t4.wall_ns - s.t1.wall_ns) as i64;
            assert!(
                offset_of(s).abs() <= rtt,
                "an altered reply was used: {s:?}"
            );
        }
    }
    // The unkeyed one took them: some exchange says 3 ms.
    let records = probe_records(&unkeyed_log);
    let tags = last_tags(&records);
    assert!(!tags.keyed && tags.refused == 0, "{tags:?}");
    assert!(records.iter().any(|r| matches!(
        r,
        ProbeRecord::TimeSample(s) if offset_of(s) > (SHIFT_NS / 2) as i64
    )));

    let (text, json) = json_report(&[&agent_log, &keyed_log, &unkeyed_log]);
    assert_eq!(
        json["clocks_unauthenticated"],
        serde_json::json!(["unkeyed"]),
        "{text}"
    );
    assert!(text.contains("UNAUTHENTICATED CLOCK on unkeyed"), "{text}");
    assert!(text.contains("whose tag did not verify"), "{text}");
    let keyed_summary = json["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "keyed")
        .unwrap();
    // Its estimate holds the truth (0: one host) within its bound.
    let (offset, bound) = (
        keyed_summary["offset_ns"].as_i64().unwrap(),
        keyed_summary["offset_bound_ns"].as_u64().unwrap(),
    );
    assert!(offset.unsigned_abs() <= bound, "{offset} ± {bound}");
    assert!(keyed_summary["clock_tags"]["refused"].as_u64().unwrap() >= 3);
}
