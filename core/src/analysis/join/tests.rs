//! Joining and skew math on hand-built records.

use super::*;
use crate::Stamp;
use crate::analysis::report::{ClockBasis, ClockNaming, Report};
use crate::record::*;

const T0: u64 = 1_764_000_000_000_000_000;

fn at(offset_ns: u64) -> Stamp {
    Stamp {
        wall_ns: T0 + offset_ns,
        mono_ns: 1_000_000 + offset_ns,
    }
}

struct ProbeLog(Vec<ProbeRecord>);

impl ProbeLog {
    fn new(host: &str, conns: &[(u32, Option<u64>)]) -> Self {
        let mut r = vec![crate::fixtures::probe_started(
            host,
            conns.len() as u32,
            at(0),
        )];
        for &(conn, agent_conn) in conns {
            r.push(crate::fixtures::connection_opened(conn, agent_conn, at(1)));
        }
        ProbeLog(r)
    }

    fn receive(&mut self, conn: u32, key: MessageKey, hash: u64, t: u64) -> &mut Self {
        self.0.push(ProbeRecord::Receipt(crate::fixtures::receipt(
            conn,
            key,
            hash,
            at(t),
        )));
        self
    }

    fn close(&mut self, conn: u32, t: u64) -> &mut Self {
        self.0
            .push(ProbeRecord::ConnectionClosed(ProbeConnectionClosed {
                conn,
                at: at(t),
                reason: "test".into(),
            }));
        self
    }

    fn stop(&mut self, t: u64) -> &mut Self {
        self.0.push(ProbeRecord::Stopped(at(t)));
        self
    }
}

fn agent_started(host: &str) -> AgentRecord {
    AgentRecord::Started(AgentStarted {
        host: host.into(),
        version: "t".into(),
        at: at(0),
        shards: 1,
        order: SendOrder::Fixed,
        per_client_times: true,
    })
}

/// One shard's loop for broadcast `id` starting at `start`: `conns` written
/// `gap_ns` apart, the first `gap_ns` after the start. Shared with the timing tests.
pub(crate) fn shard_sends(id: u64, start: Stamp, gap_ns: u64, conns: &[u64]) -> AgentRecord {
    AgentRecord::ShardSends(ShardSends {
        broadcast: id,
        shard: 0,
        loop_start_mono_ns: start.mono_ns,
        slots: conns
            .iter()
            .enumerate()
            .map(|(i, &conn)| SendSlot {
                conn,
                position: i as u32,
                outcome: SendOutcome::Written,
                mono_ns: start.mono_ns + gap_ns * (i as u64 + 1),
            })
            .collect(),
    })
}

/// A broadcast at `start` written to `conns` 100 ns apart.
fn broadcast(id: u64, seq: Option<u64>, hash: u64, start: u64, conns: &[u64]) -> Vec<AgentRecord> {
    vec![
        AgentRecord::Broadcast(BroadcastStarted {
            id,
            seq,
            hash,
            len: 450,
            text: true,
            at: at(start),
        }),
        shard_sends(id, at(start), 100, conns),
    ]
}

#[test]
fn skew_is_max_minus_min_over_connections_that_received() {
    let mut p = ProbeLog::new("dev", &[(0, None), (1, None), (2, None)]);
    p.receive(0, MessageKey::Seq(1), 9, 1_000)
        .receive(1, MessageKey::Seq(1), 9, 1_700)
        .receive(2, MessageKey::Seq(1), 9, 1_200)
        .stop(10_000);
    let j = join(None, &[&p.0]);
    assert_eq!(j.broadcasts.len(), 1);
    assert_eq!(j.broadcasts[0].skew_ns(), Some(700));
    assert!(j.broadcasts[0].missing.is_empty());
}

#[test]
fn probes_only_missing_counts_listening_connections_only() {
    let mut p = ProbeLog::new("dev", &[(0, None), (1, None), (2, None)]);
    p.receive(0, MessageKey::Seq(1), 9, 1_000)
        .receive(1, MessageKey::Seq(1), 9, 1_100)
        // conn 2 closed before broadcast 2 was first seen: not missing.
        .close(2, 1_500)
        .receive(0, MessageKey::Seq(2), 9, 2_000)
        .stop(10_000);
    let j = join(None, &[&p.0]);
    let r = Report::build(&j, vec![]);
    assert_eq!(r.broadcasts, 2);
    assert_eq!(r.receipts, 3);
    // conn 2 missed seq 1 (while open); conn 1 missed seq 2.
    assert_eq!(r.missing, 2);
    assert_eq!(j.broadcasts[0].missing, vec![2]);
    assert_eq!(j.broadcasts[1].missing, vec![1]);
}

#[test]
fn duplicates_are_counted_not_joined() {
    let mut p = ProbeLog::new("dev", &[(0, None), (1, None)]);
    p.receive(0, MessageKey::Seq(5), 9, 1_000)
        .receive(0, MessageKey::Seq(5), 9, 9_000)
        .receive(1, MessageKey::Seq(5), 9, 1_050)
        .stop(10_000);
    let j = join(None, &[&p.0]);
    assert_eq!(j.duplicates, 1);
    assert_eq!(j.broadcasts[0].receipts.len(), 2);
    // The duplicate's late time does not widen the skew.
    assert_eq!(j.broadcasts[0].skew_ns(), Some(50));
}

#[test]
fn foreign_payloads_join_by_hash_and_occurrence() {
    let go = |occurrence| MessageKey::Hash {
        hash: 77,
        occurrence,
    };
    let mut a = ProbeLog::new("a", &[(0, None)]);
    a.receive(0, go(0), 77, 1_000)
        .receive(0, go(1), 77, 5_000)
        .stop(10_000);
    let mut b = ProbeLog::new("b", &[(0, None)]);
    b.receive(0, go(0), 77, 1_300)
        .receive(0, go(1), 77, 5_100)
        .stop(10_000);
    let j = join(None, &[&a.0, &b.0]);
    let skews: Vec<_> = j.broadcasts.iter().map(|b| b.skew_ns()).collect();
    assert_eq!(skews, vec![Some(300), Some(100)]);
    let r = Report::build(&j, vec![]);
    assert_eq!(r.clock_basis, ClockBasis::UncorrectedDeviceClocks);
    assert_eq!(r.connections, 2);
}

#[test]
fn agent_join_by_sequence_gives_latency_fanout_and_missing() {
    let mut agent = vec![agent_started("srv")];
    agent.extend(broadcast(1, Some(10), 9, 1_000, &[100, 101, 102]));
    agent.extend(broadcast(2, Some(11), 9, 5_000, &[100, 101, 102]));
    let mut p = ProbeLog::new("srv", &[(0, Some(100)), (1, Some(101)), (2, Some(102))]);
    p.receive(0, MessageKey::Seq(10), 9, 1_400)
        .receive(1, MessageKey::Seq(10), 9, 1_500)
        .receive(2, MessageKey::Seq(10), 9, 1_900)
        .receive(0, MessageKey::Seq(11), 9, 5_300)
        .receive(2, MessageKey::Seq(11), 9, 5_600)
        .stop(10_000);
    let j = join(Some(&agent), &[&p.0]);
    assert_eq!(j.broadcasts.len(), 2);
    assert_eq!(j.broadcasts[1].missing, vec![1]);
    let r = Report::build(&j, vec![]);
    assert_eq!(r.clock_basis, ClockBasis::SingleHost);
    assert_eq!((r.broadcasts, r.receipts, r.missing), (2, 5, 1));
    let skew = r.skew_ns.unwrap();
    assert_eq!((skew.min, skew.max), (300, 500));
    let latency = r.latency_ns.unwrap();
    assert_eq!((latency.min, latency.max), (300, 900));
    // Three writes 100 ns apart: the last completes 300 ns after start.
    let fanout = r.fanout_ns.unwrap();
    assert_eq!((fanout.min, fanout.max), (300, 300));
}

#[test]
fn agent_join_by_hash_uses_the_connection_and_occurrence() {
    // The same payload broadcast twice; conn 101 joined only for the second one,
    // so its occurrence 0 is the agent's broadcast 2.
    let mut agent = vec![agent_started("srv")];
    agent.extend(broadcast(1, None, 77, 1_000, &[100]));
    agent.extend(broadcast(2, None, 77, 5_000, &[100, 101]));
    let go = |occurrence| MessageKey::Hash {
        hash: 77,
        occurrence,
    };
    let mut p = ProbeLog::new("srv", &[(0, Some(100)), (1, Some(101))]);
    p.receive(0, go(0), 77, 1_200)
        .receive(0, go(1), 77, 5_200)
        .receive(1, go(0), 77, 5_250)
        .stop(10_000);
    let j = join(Some(&agent), &[&p.0]);
    assert_eq!(j.unmatched, 0);
    assert_eq!(j.broadcasts[0].receipts.len(), 1);
    assert_eq!(j.broadcasts[1].receipts.len(), 2);
    assert_eq!(j.broadcasts[1].skew_ns(), Some(50));
}

#[test]
fn a_reconnection_to_a_restarted_agent_does_not_make_the_first_runs_receipts_missing() {
    // Run 1 gave the probe's connection id 1; the agent restarted, and the
    // reconnection got id 1 again from run 2. Reported with run 1's log
    // alone, run 1's broadcasts went to the first episode.
    let mut agent = vec![agent_started("srv")];
    agent.extend(broadcast(1, Some(10), 9, 1_000, &[1]));
    agent.extend(broadcast(2, Some(11), 9, 2_000, &[1]));
    let mut p = ProbeLog::new("srv", &[(0, Some(1))]);
    p.receive(0, MessageKey::Seq(10), 9, 1_100)
        .receive(0, MessageKey::Seq(11), 9, 2_100)
        .close(0, 3_000);
    p.0.push(crate::fixtures::connection_opened(0, Some(1), at(4_000)));
    p.receive(0, MessageKey::Seq(1), 5, 4_500).stop(10_000);
    let j = join(Some(&agent), &[&p.0]);
    assert_eq!(j.connections.len(), 2, "two episodes of connection 0");
    for b in &j.broadcasts {
        assert_eq!(b.receipts.len(), 1, "{b:?}");
        assert!(b.missing.is_empty(), "{b:?}");
    }
    assert_eq!(j.unmatched, 1, "run 2's broadcast is not run 1's");
}

#[test]
fn receipts_from_another_run_are_unmatched_not_joined() {
    let mut agent = vec![agent_started("srv")];
    agent.extend(broadcast(1, Some(10), 9, 1_000, &[100]));
    let mut p = ProbeLog::new("srv", &[(0, Some(100))]);
    p.receive(0, MessageKey::Seq(10), 9, 1_100)
        // seq 99 was never sent by this agent; seq 10 with another hash is not ours.
        .receive(0, MessageKey::Seq(99), 9, 2_000)
        .receive(0, MessageKey::Seq(10), 8, 2_100)
        .stop(10_000);
    let j = join(Some(&agent), &[&p.0]);
    assert_eq!(j.unmatched, 2);
    assert_eq!(j.duplicates, 0);
}

#[test]
fn agent_targets_after_the_probe_stopped_are_not_missing() {
    let mut agent = vec![agent_started("srv")];
    agent.extend(broadcast(1, Some(1), 9, 1_000, &[100]));
    agent.extend(broadcast(2, Some(2), 9, 50_000, &[100]));
    let mut p = ProbeLog::new("srv", &[(0, Some(100))]);
    p.receive(0, MessageKey::Seq(1), 9, 1_100).stop(2_000);
    let j = join(Some(&agent), &[&p.0]);
    let r = Report::build(&j, vec![]);
    assert_eq!(r.missing, 0);
}

#[test]
fn queued_writes_complete_later_and_dropped_clients_are_counted() {
    let mut agent = vec![agent_started("srv")];
    agent.push(AgentRecord::Broadcast(BroadcastStarted {
        id: 1,
        seq: Some(1),
        hash: 9,
        len: 450,
        text: true,
        at: at(1_000),
    }));
    agent.push(AgentRecord::ShardSends(ShardSends {
        broadcast: 1,
        shard: 0,
        loop_start_mono_ns: at(1_000).mono_ns,
        slots: vec![
            SendSlot {
                conn: 100,
                position: 0,
                outcome: SendOutcome::Queued,
                mono_ns: at(1_100).mono_ns,
            },
            SendSlot {
                conn: 101,
                position: 1,
                outcome: SendOutcome::Dropped,
                mono_ns: at(1_200).mono_ns,
            },
        ],
    }));
    agent.push(AgentRecord::SendCompleted(SendCompleted {
        broadcast: 1,
        conn: 100,
        mono_ns: at(9_000).mono_ns,
    }));
    let j = join(Some(&agent), &[]);
    let side = j.broadcasts[0].agent.unwrap();
    assert_eq!((side.targets, side.queued, side.dropped), (2, 1, 1));
    assert_eq!(side.fanout_span_ns, Some(8_000));
}

fn identity(run_id: u128, boot_id: Option<&str>) -> RunIdentity {
    RunIdentity {
        run_id,
        boot_id: boot_id.map(str::to_owned),
    }
}

#[test]
fn one_host_name_with_two_boot_ids_is_two_clocks() {
    // Two devices made from one OS image: both are called "raspberrypi".
    let go = |occurrence| MessageKey::Hash {
        hash: 77,
        occurrence,
    };
    let mut a = ProbeLog::new("raspberrypi", &[(0, None)]);
    a.0.push(ProbeRecord::Identity(identity(1, Some("boot-a"))));
    a.receive(0, go(0), 77, 1_000).stop(10_000);
    let mut b = ProbeLog::new("raspberrypi", &[(0, None)]);
    b.0.push(ProbeRecord::Identity(identity(2, Some("boot-b"))));
    b.receive(0, go(0), 77, 1_300).stop(10_000);
    let r = Report::build(&join(None, &[&a.0, &b.0]), vec![]);
    assert_ne!(r.clock_basis, ClockBasis::SingleHost);
    assert_eq!(r.clocks_named_by, ClockNaming::BootId);
    assert_eq!(r.probes[0].boot_id.as_deref(), Some("boot-a"));

    // The same boot id on both logs is one clock, whatever the names say.
    let mut c = ProbeLog::new("kiosk-1", &[(0, None)]);
    c.0.push(ProbeRecord::Identity(identity(3, Some("boot-a"))));
    c.receive(0, go(0), 77, 1_200).stop(10_000);
    let r = Report::build(&join(None, &[&a.0, &c.0]), vec![]);
    assert_eq!(r.clock_basis, ClockBasis::SingleHost);

    // Logs without boot ids fall back to the host name, and the report says so.
    let mut d = ProbeLog::new("raspberrypi", &[(0, None)]);
    d.receive(0, go(0), 77, 1_000).stop(10_000);
    let mut e = ProbeLog::new("raspberrypi", &[(0, None)]);
    e.receive(0, go(0), 77, 1_300).stop(10_000);
    let r = Report::build(&join(None, &[&d.0, &e.0]), vec![]);
    assert_eq!(r.clock_basis, ClockBasis::SingleHost);
    assert_eq!(r.clocks_named_by, ClockNaming::HostName);
}

#[test]
fn how_each_log_ends_is_said() {
    let mut agent = vec![agent_started("srv")];
    agent.extend(broadcast(1, Some(10), 9, 1_000, &[100]));
    let mut stopped = ProbeLog::new("srv", &[(0, Some(100))]);
    stopped
        .receive(0, MessageKey::Seq(10), 9, 1_400)
        .stop(2_000);
    let mut full = ProbeLog::new("srv", &[(0, Some(100))]);
    full.0.push(ProbeRecord::LogFull(crate::record::LogFull {
        at: at(1_200),
        max_bytes: 4096,
    }));
    let killed = ProbeLog::new("srv", &[(0, Some(100))]);
    let r = Report::build(
        &join(Some(&agent), &[&stopped.0, &full.0, &killed.0]),
        vec![],
    );
    let ended: Vec<RunEnd> = r.probes.iter().map(|p| p.ended).collect();
    assert_eq!(
        ended,
        [RunEnd::Stopped, RunEnd::LogFull, RunEnd::NoStopRecord]
    );
    // An agent killed before its stop record: its counters are not totals.
    assert_eq!(r.agent.unwrap().ended, RunEnd::NoStopRecord);
    agent.push(AgentRecord::Stopped(at(3_000)));
    let r = Report::build(&join(Some(&agent), &[&stopped.0]), vec![]);
    assert_eq!(r.agent.unwrap().ended, RunEnd::Stopped);
}

#[test]
fn connections_without_a_certificate_check_are_counted_per_probe() {
    let tls = |conn, verified| {
        ProbeRecord::ConnectionTls(crate::record::ConnectionTls {
            conn,
            version: "TLSv1_3".into(),
            cipher: "TLS13_AES_128_GCM_SHA256".into(),
            verified,
        })
    };
    let mut checked = ProbeLog::new("a", &[(0, None), (1, None)]);
    checked.0.extend([tls(0, true), tls(1, true)]);
    let mut insecure = ProbeLog::new("b", &[(0, None)]);
    insecure.0.push(tls(0, false));
    let plain = ProbeLog::new("c", &[(0, None)]);
    let r = Report::build(&join(None, &[&checked.0, &insecure.0, &plain.0]), vec![]);
    let counts: Vec<(u64, u64)> = r
        .probes
        .iter()
        .map(|p| (p.tls_connections, p.tls_unverified))
        .collect();
    assert_eq!(counts, [(2, 0), (1, 1), (0, 0)]);
}

/// Two devices' logs of `broadcasts` broadcasts to `conns` connections each,
/// 1 ms apart; the second device's clock reads `behind_ns` behind the first's.
fn two_devices(broadcasts: u64, conns: u32, behind_ns: u64) -> (ProbeLog, ProbeLog) {
    let all: Vec<(u32, Option<u64>)> = (0..conns).map(|c| (c, None)).collect();
    let (mut a, mut b) = (ProbeLog::new("a", &all), ProbeLog::new("b", &all));
    for n in 0..broadcasts {
        let t = 1_000_000 + behind_ns + n * 1_000_000;
        for c in 0..conns {
            a.receive(c, MessageKey::Seq(n), n, t + u64::from(c) * 1_000);
            b.receive(
                c,
                MessageKey::Seq(n),
                n,
                t - behind_ns + 500 + u64::from(c) * 1_000,
            );
        }
    }
    a.stop(2_000_000 + behind_ns + broadcasts * 1_000_000);
    b.stop(2_000_000 + broadcasts * 1_000_000);
    (a, b)
}

/// Every broadcast a streamed join hands over, in the order it did.
fn streamed(probes: &[&[ProbeRecord]]) -> (Joined, Vec<JoinedBroadcast>) {
    let sources: Vec<&dyn ProbeSource> = probes.iter().map(|p| p as &dyn ProbeSource).collect();
    let mut rows = Vec::new();
    let joined = join_sources(None, &sources, &mut rows);
    (joined, rows)
}

#[test]
fn a_streamed_join_holds_only_the_broadcasts_still_arriving() {
    let (a, b) = two_devices(2_000, 10, 0);
    let (joined, rows) = streamed(&[&a.0, &b.0]);
    assert_eq!(rows.len(), 2_000);
    assert!(
        rows.iter()
            .all(|r| r.receipts.len() == 20 && r.missing.is_empty())
    );
    // 40,000 receipts; at most a broadcast or two of them at once.
    assert!(
        joined.most_receipts_held <= 40,
        "held {}",
        joined.most_receipts_held
    );
    assert_each_broadcast_once(&rows, 2_000, joined.connections.len());
}

/// Every seq `0..n` handed over exactly once, each with a receipt on every
/// one of the run's `connections` (both devices') and on no other.
fn assert_each_broadcast_once(rows: &[JoinedBroadcast], n: u64, connections: usize) {
    let mut seqs: Vec<u64> = rows
        .iter()
        .map(|r| match r.key {
            BroadcastKey::Message(MessageKey::Seq(s)) => s,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..n).collect::<Vec<_>>());
    for r in rows {
        let mut got: Vec<usize> = r.receipts.iter().map(|x| x.connection).collect();
        got.sort_unstable();
        assert_eq!(
            got,
            (0..connections).collect::<Vec<_>>(),
            "broadcast {:?}",
            r.key
        );
    }
}

#[test]
fn clocks_far_apart_cost_memory_not_correctness() {
    // The second device reads 2 s behind: merged by wall time, its receipts
    // of a broadcast come 2,000 broadcasts before the first device's.
    let (a, b) = two_devices(3_000, 2, 2_000_000_000);
    let (joined, rows) = streamed(&[&a.0, &b.0]);
    assert_eq!(rows.len(), 3_000);
    assert!(
        rows.iter()
            .all(|r| r.receipts.len() == 4 && r.missing.is_empty())
    );
    assert!(
        (4_000..=4_100).contains(&joined.most_receipts_held),
        "held {}",
        joined.most_receipts_held
    );
    assert_each_broadcast_once(&rows, 3_000, joined.connections.len());
}

#[test]
fn a_streamed_agent_join_hands_over_unreceived_broadcasts_too() {
    let mut agent = vec![agent_started("srv")];
    for id in 0..50u64 {
        agent.extend(broadcast(id, Some(id), id, 1_000 + id * 10_000, &[1, 2]));
    }
    let mut p = ProbeLog::new("dev", &[(0, Some(1)), (1, Some(2))]);
    // Only the even broadcasts arrive, and on connection 0 only.
    for id in (0..50u64).step_by(2) {
        p.receive(0, MessageKey::Seq(id), id, 2_000 + id * 10_000);
    }
    p.stop(1_000_000);
    let sources: Vec<&dyn ProbeSource> = vec![&p.0];
    let mut rows = Vec::new();
    let joined = join_sources(Some(&agent), &sources, &mut rows);
    assert_eq!(rows.len(), 50);
    let received: usize = rows.iter().map(|r| r.receipts.len()).sum();
    let missing: usize = rows.iter().map(|r| r.missing.len()).sum();
    assert_eq!((received, missing), (25, 75));
    assert_eq!(joined.most_receipts_held, 1);
    // Handed over in start order: the unreceived ones as the stream passes them.
    let ids: Vec<u64> = rows
        .iter()
        .map(|r| match r.key {
            BroadcastKey::Agent { id, .. } => id,
            BroadcastKey::Message(_) => unreachable!(),
        })
        .collect();
    assert_eq!(ids, (0..50).collect::<Vec<_>>());
}

#[test]
fn a_hubs_other_clients_count_in_its_figures_though_their_copies_are_not_kept() {
    // Five clients; the probe is two of them (agent ids 2 and 4). The
    // others' copies are counted, and the last write is another client's.
    let mut agent = vec![agent_started("srv")];
    for id in 0..3u64 {
        let start = 1_000 + id * 100_000;
        let mut records = broadcast(id, Some(id), id, start, &[1, 2, 3, 4, 5]);
        // Client 5's copy queued behind a full send buffer, written 50 µs later.
        if let AgentRecord::ShardSends(s) = &mut records[1] {
            s.slots[4].outcome = SendOutcome::Queued;
        }
        agent.extend(records);
        agent.push(AgentRecord::SendCompleted(SendCompleted {
            broadcast: id,
            conn: 5,
            mono_ns: at(start + 50_000).mono_ns,
        }));
    }
    let mut p = ProbeLog::new("dev", &[(0, Some(2)), (1, Some(4))]);
    for id in 0..3u64 {
        p.receive(0, MessageKey::Seq(id), id, 2_000 + id * 100_000);
        if id != 1 {
            p.receive(1, MessageKey::Seq(id), id, 2_100 + id * 100_000);
        }
    }
    p.stop(1_000_000);
    let j = join(Some(&agent), &[&p.0]);
    assert_eq!(j.broadcasts.len(), 3);
    for (id, b) in j.broadcasts.iter().enumerate() {
        let side = b.agent.unwrap();
        assert_eq!(side.targets, 5);
        assert_eq!(side.fanout_span_ns, Some(50_000));
        // The probe's copies keep their write times: 200 and 400 ns in.
        let start = at(1_000 + id as u64 * 100_000).wall_ns;
        let sent: Vec<u64> = b
            .receipts
            .iter()
            .map(|r| r.sent_wall_ns.unwrap() - start)
            .collect();
        assert_eq!(sent, if id == 1 { vec![200] } else { vec![200, 400] });
        // Only a probe's connection can be missing.
        assert_eq!(b.missing, if id == 1 { vec![1] } else { vec![] });
    }
}

#[test]
fn the_why_splits_each_skew_into_the_order_sent_and_the_network() {
    // Copies written 100, 200 and 300 ns after each start; the network takes
    // 1,000 ns to connections 0 and 1, and 1,500 ns to connection 2.
    let mut agent = vec![agent_started("srv")];
    agent.extend(broadcast(1, Some(10), 9, 1_000, &[100, 101, 102]));
    agent.extend(broadcast(2, Some(11), 9, 5_000, &[100, 101, 102]));
    let mut p = ProbeLog::new("srv", &[(0, Some(100)), (1, Some(101)), (2, Some(102))]);
    for (seq, start) in [(10, 1_000), (11, 5_000)] {
        p.receive(0, MessageKey::Seq(seq), 9, start + 100 + 1_000)
            .receive(1, MessageKey::Seq(seq), 9, start + 200 + 1_000)
            .receive(2, MessageKey::Seq(seq), 9, start + 300 + 1_500);
    }
    p.stop(10_000);
    let j = join(Some(&agent), &[&p.0]);
    let r = Report::build(&j, vec![]);
    let why = r.why.expect("a diagnosis");
    assert_eq!((why.split_broadcasts, why.unsplit_broadcasts), (2, 0));
    // Skew 700 ns = 200 ns sent later + 500 ns more network.
    assert_eq!(why.skew_ns.unwrap().max, 700);
    assert_eq!(why.fanout_ns.unwrap().max, 200);
    assert_eq!(why.network_ns.unwrap().max, 500);
    assert_eq!(why.delivery_ns, None, "no kernel stamps");
    let share = why.fanout_share.unwrap();
    assert!((share - 200.0 / 700.0).abs() < 1e-9, "{share}");
    assert_eq!(
        r.worst_broadcasts[0].split,
        Some(crate::analysis::diagnosis::SkewSplit {
            skew_ns: 700,
            fanout_ns: 200,
            network_ns: 500,
            delivery_ns: None,
        })
    );
    // Connection 2 is last every time; the others are not listed.
    assert_eq!(why.connections_ranked, 3);
    assert_eq!(why.late_every_time.len(), 1);
    let late = &why.late_every_time[0];
    assert_eq!(
        (
            late.connection.as_str(),
            late.mean_place,
            late.last,
            late.of
        ),
        ("srv #2", 1.0, 2, 2)
    );
}
