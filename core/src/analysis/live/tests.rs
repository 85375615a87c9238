//! The live join against the report's own join on the clock tests' shifted
//! run (probe a 5 ms ahead, probe b 3 ms behind), then finality, missing
//! against unjudged, payload occurrences and the bounds.

use super::*;
use crate::analysis::clock_figures::tests::shifted_run;
use crate::analysis::figures::figures;
use crate::analysis::join::join;
use crate::record::*;

const T0: u64 = 1_764_000_000_000_000_000;

/// The agent saw these connections open with `?probe=`: probes' (the live
/// join follows only those).
fn announce(live: &mut LiveJoin, conns: &[u64]) {
    for &conn in conns {
        live.add_agent_record(&AgentRecord::ConnectionOpened(AgentConnectionOpened {
            conn,
            label: Some("probe".into()),
            peer: "127.0.0.1:1".into(),
            shard: 0,
            at: Stamp {
                wall_ns: T0,
                mono_ns: 0,
            },
        }));
    }
}

fn feed(live: &mut LiveJoin, agent: &[AgentRecord], probes: &[&[ProbeRecord]], now: u64) {
    announce(live, &[10, 11, 20, 21]);
    for r in agent {
        live.add_agent_record(r);
    }
    for (i, records) in probes.iter().enumerate() {
        for r in records.iter() {
            live.add_probe_record(i as u128 + 1, r, now);
        }
    }
}

#[test]
fn live_skews_equal_the_reports_own() {
    let (agent, a, b, truth) = shifted_run();
    let mut live = LiveJoin::new();
    feed(
        &mut live,
        &agent,
        &[&a.records, &b.records],
        T0 + 2_000_000_000,
    );
    // Test messages are matched by their sequence numbers: no copy of them
    // is numbered (that cost a map entry per connection and broadcast).
    assert_eq!(live.copies.len(), 0);
    let judged = live.judge_final(T0 + 2_000_000_000);
    let batch = figures(&join(Some(&agent), &[&a.records, &b.records]));
    assert_eq!(judged.len(), 2);
    for ((j, f), &true_skew) in judged.iter().zip(&batch.broadcasts).zip(&truth) {
        assert_eq!(j.skew_ns, f.skew_ns, "{j:?} {f:?}");
        let hi = f.corrected_ns.unwrap().2 as u64;
        assert_eq!(j.skew_upper_ns, Some(hi), "{j:?} {f:?}");
        assert!(hi >= true_skew, "the bound holds the truth");
        assert_eq!((j.receipts, j.missing, j.unjudged), (4, 0, 0));
    }
    assert_eq!(live.counts(), LiveCounts::default());
    assert_eq!(live.pending_broadcasts(), 0);
    let probes = live.probe_health();
    let names: Vec<&str> = probes.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, vec!["dev-a", "dev-b"]);
    for (p, truth) in probes.iter().zip([5_000_000i64, -3_000_000]) {
        let (offset, bound) = p.offset_ns.unwrap();
        assert!((offset - truth).unsigned_abs() <= bound, "{p:?}");
    }
    assert!(probes.iter().all(|p| p.synced == Some(true)));
}

#[test]
fn a_broadcast_waits_until_nothing_more_can_come_for_it() {
    let (agent, a, b, _) = shifted_run();
    let mut live = LiveJoin::new();
    // dev-b has uploaded everything, dev-a only up to its receipts of
    // broadcast 1: that one has every receipt, broadcast 2 waits for dev-a.
    let a_upto = 1 + a
        .records
        .iter()
        .rposition(|r| matches!(r, ProbeRecord::Receipt(rc) if rc.key == MessageKey::Seq(1)))
        .unwrap();
    feed(&mut live, &agent, &[&a.records[..a_upto], &b.records], T0);
    let first = live.judge_final(T0 + 1_000_000_000);
    assert_eq!(first.iter().map(|j| j.id).collect::<Vec<_>>(), vec![1]);
    assert!(live.judge_final(T0 + 1_000_000_000).is_empty());
    for r in &a.records[a_upto..] {
        live.add_probe_record(1, r, T0 + 2_000_000_000);
    }
    let second = live.judge_final(T0 + 2_000_000_000);
    assert_eq!(second.iter().map(|j| j.id).collect::<Vec<_>>(), vec![2]);
    assert!(
        first
            .iter()
            .chain(&second)
            .all(|j| j.receipts == 4 && j.missing == 0)
    );
}

#[test]
fn a_stopped_probe_misses_and_a_silent_one_is_unjudged() {
    let (agent, a, b, _) = shifted_run();
    // dev-a's connection 1 never got broadcast 2 (dev-a then stopped);
    // dev-b stops uploading before broadcast 2.
    let a_records: Vec<ProbeRecord> = a
        .records
        .iter()
        .filter(|r| {
            !matches!(r, ProbeRecord::Receipt(rc) if rc.conn == 1 && rc.key == MessageKey::Seq(2))
        })
        .cloned()
        .collect();
    let b_upto = 1 + b
        .records
        .iter()
        .rposition(|r| matches!(r, ProbeRecord::Receipt(rc) if rc.key == MessageKey::Seq(1)))
        .unwrap();
    let b_records: Vec<ProbeRecord> = b.records[..b_upto]
        .iter()
        .filter(|r| !matches!(r, ProbeRecord::Receipt(rc) if rc.key == MessageKey::Seq(2)))
        .cloned()
        .collect();
    let mut live = LiveJoin::new();
    feed(&mut live, &agent, &[&a_records, &b_records], T0);
    let first = live.judge_final(T0 + 2_000_000_000);
    assert_eq!(first.len(), 1, "broadcast 1 has every receipt");
    // Broadcast 2 waits for dev-b until it times out.
    assert!(
        live.judge_final(T0 + 599_000_000 + FINAL_TIMEOUT_NS)
            .is_empty()
    );
    let judged = live.judge_final(T0 + 600_000_000 + FINAL_TIMEOUT_NS);
    let second = judged[0].clone();
    assert_eq!(second.id, 2);
    assert_eq!(
        (second.receipts, second.missing, second.unjudged),
        (1, 1, 2)
    );
    assert_eq!(second.skew_ns, None, "one receipt has no skew");
}

fn started(name: &str, at: Stamp) -> ProbeRecord {
    crate::fixtures::probe_started(name, 1, at)
}

fn stamp(ns: u64) -> Stamp {
    Stamp {
        wall_ns: T0 + ns,
        mono_ns: ns,
    }
}

fn published(live: &mut LiveJoin, id: u64, hash: u64, at_ns: u64, conns: &[u64]) {
    announce(live, conns);
    live.add_agent_record(&AgentRecord::Broadcast(BroadcastStarted {
        id,
        seq: None,
        hash,
        len: 3,
        text: true,
        at: stamp(at_ns),
    }));
    live.add_agent_record(&crate::analysis::join::tests::shard_sends(
        id,
        stamp(at_ns),
        1_000,
        conns,
    ));
}

fn receipt(conn: u32, hash: u64, occurrence: u32, at_ns: u64) -> ProbeRecord {
    ProbeRecord::Receipt(Receipt {
        len: 3,
        ..crate::fixtures::receipt(
            conn,
            MessageKey::Hash { hash, occurrence },
            hash,
            stamp(at_ns),
        )
    })
}

fn opened(conn: u32, agent_conn: u64) -> ProbeRecord {
    opened_at(conn, agent_conn, 0)
}

fn opened_at(conn: u32, agent_conn: u64, at_ns: u64) -> ProbeRecord {
    crate::fixtures::connection_opened(conn, Some(agent_conn), stamp(at_ns))
}

#[test]
fn a_repeated_payload_is_matched_by_its_occurrence_on_each_connection() {
    let mut live = LiveJoin::new();
    let now = T0 + 10_000_000_000;
    // The same payload three times; connection 8 joins after the first.
    published(&mut live, 1, 77, 1_000_000, &[7]);
    published(&mut live, 2, 77, 2_000_000, &[7, 8]);
    published(&mut live, 3, 77, 3_000_000, &[7, 8]);
    // Published payloads carry no number: their copies are numbered, one
    // count per connection and payload.
    assert_eq!(live.copies.len(), 2);
    live.add_probe_record(1, &started("p", stamp(0)), now);
    live.add_probe_record(1, &opened(0, 7), now);
    live.add_probe_record(1, &opened(1, 8), now);
    // Connection 7 got all three; connection 8 got its occurrences 0 and 1,
    // i.e. broadcasts 2 and 3, 40 µs after connection 7.
    for (occurrence, t) in [(0, 1_100_000), (1, 2_100_000), (2, 3_100_000)] {
        live.add_probe_record(1, &receipt(0, 77, occurrence, t), now);
    }
    for (occurrence, t) in [(0, 2_140_000), (1, 3_140_000)] {
        live.add_probe_record(1, &receipt(1, 77, occurrence, t), now);
    }
    live.add_probe_record(1, &ProbeRecord::Stopped(stamp(5_000_000_000)), now);
    let judged = live.judge_final(now);
    let got: Vec<(u64, u32, Option<u64>)> = judged
        .iter()
        .map(|j| (j.id, j.receipts, j.skew_ns))
        .collect();
    assert_eq!(
        got,
        vec![(1, 1, None), (2, 2, Some(40_000)), (3, 2, Some(40_000))]
    );
    assert!(judged.iter().all(|j| j.missing == 0));
    assert_eq!(live.counts().unmatched, 0);
    // No clock exchange: nothing to bound the skew with.
    assert!(judged.iter().all(|j| j.skew_upper_ns.is_none()));
}

#[test]
fn late_duplicate_and_previous_run_receipts_are_counted_unmatched() {
    const S: u64 = 1_000_000_000;
    let mut live = LiveJoin::since(T0 + 100 * S, 1);
    published(&mut live, 1, 5, 101 * S, &[3]);
    let now = T0 + 101 * S;
    live.add_probe_record(1, &started("p", stamp(100 * S)), now);
    live.add_probe_record(1, &opened_at(0, 3, 100 * S), now);
    // An earlier agent run's connection 3, from an old log being uploaded.
    live.add_probe_record(2, &started("p", stamp(S)), now);
    live.add_probe_record(2, &opened_at(0, 3, S), now);
    live.add_probe_record(2, &receipt(0, 5, 0, 2 * S), now);
    live.add_probe_record(1, &receipt(0, 5, 0, 101 * S + 100_000), now);
    live.add_probe_record(1, &receipt(0, 5, 0, 101 * S + 200_000), now); // a duplicate
    live.add_probe_record(1, &receipt(0, 6, 0, 101 * S + 300_000), now); // never sent
    // The old run's and the duplicate (its copy number is taken) at once;
    // the one never sent waits (the agent's records could be late) until
    // it is stale.
    assert_eq!(live.counts().unmatched, 2);
    let judged = live.judge_final(T0 + 102 * S + FINAL_TIMEOUT_NS);
    assert_eq!(judged[0].receipts, 1);
    assert_eq!(live.counts().unmatched, 3);
    // After it is judged, its receipts have nothing to match.
    live.add_probe_record(1, &receipt(0, 5, 0, 101 * S + 100_000), now);
    live.judge_final(T0 + 103 * S + FINAL_TIMEOUT_NS);
    assert_eq!(live.counts().unmatched, 4);
}

#[test]
fn receipts_uploaded_before_the_agents_records_are_joined_when_they_come() {
    let (agent, a, b, _) = shifted_run();
    let mut live = LiveJoin::new();
    let now = T0 + 2_000_000_000;
    for (run, records) in [(1, &a.records), (2, &b.records)] {
        for r in records.iter() {
            live.add_probe_record(run, r, now);
        }
    }
    assert!(live.judge_final(now).is_empty());
    announce(&mut live, &[10, 11, 20, 21]);
    for r in &agent {
        live.add_agent_record(r);
    }
    let judged = live.judge_final(now);
    assert_eq!(judged.len(), 2);
    assert!(
        judged
            .iter()
            .all(|j| j.receipts == 4 && j.skew_upper_ns.is_some())
    );
    assert_eq!(live.counts().unmatched, 0);
}

#[test]
fn a_broadcast_waits_for_every_shards_record() {
    let mut live = LiveJoin::since(T0, 2);
    // Its one probe has stopped: only the shards' records are awaited.
    live.add_probe_record(1, &started("probe", stamp(0)), T0);
    live.add_probe_record(1, &ProbeRecord::Stopped(stamp(1_000)), T0);
    published(&mut live, 1, 5, 1_000_000, &[1]);
    assert!(
        live.judge_final(T0 + 2_000_000).is_empty(),
        "one of two shards"
    );
    live.add_agent_record(&crate::analysis::join::tests::shard_sends(
        1,
        stamp(1_000_000),
        1_000,
        &[2],
    ));
    assert_eq!(live.judge_final(T0 + 2_000_000).len(), 1);
}

#[test]
fn a_connection_closed_before_a_broadcast_does_not_miss_it() {
    let mut live = LiveJoin::new();
    let now = T0 + 10_000_000_000;
    live.add_probe_record(1, &started("p", stamp(0)), now);
    live.add_probe_record(1, &opened(0, 3), now);
    live.add_probe_record(
        1,
        &ProbeRecord::ConnectionClosed(ProbeConnectionClosed {
            conn: 0,
            at: stamp(1_000_000),
            reason: "count reached".into(),
        }),
        now,
    );
    // The agent had not yet seen it go.
    published(&mut live, 1, 5, 2_000_000, &[3]);
    live.add_probe_record(1, &ProbeRecord::Stopped(stamp(5_000_000_000)), now);
    let judged = live.judge_final(now);
    assert_eq!((judged[0].missing, judged[0].unjudged), (0, 0));
}

#[test]
fn memory_is_bounded_by_pending_broadcasts_and_runs() {
    let mut live = LiveJoin::new();
    // A probe holds connection 1 and never uploads past the broadcasts.
    live.add_probe_record(0, &started("p", stamp(0)), T0);
    live.add_probe_record(0, &opened(0, 1), T0);
    for id in 0..(MAX_PENDING as u64 + 10) {
        published(&mut live, id, id, id * 1_000, &[1]);
    }
    let judged = live.judge_final(T0);
    assert_eq!(judged.len(), 10);
    assert_eq!(live.counts().judged_early, 10);
    assert_eq!(live.pending_broadcasts(), MAX_PENDING);
    for run in 1..(MAX_RUNS as u128 + 3) {
        live.add_probe_record(run, &started("p", stamp(0)), T0);
    }
    assert_eq!(live.counts().runs_refused, 3);
    // Runs silent for ten minutes are forgotten.
    live.judge_final(T0 + RUN_FORGOTTEN_AFTER_NS + 1);
    assert!(live.probe_health().is_empty());
}

#[test]
fn a_probe_connection_not_yet_uploaded_is_waited_for() {
    let mut live = LiveJoin::new();
    // The agent saw connection 4 arrive with ?probe=p and sent it a
    // broadcast before the probe uploaded anything.
    live.add_agent_record(&AgentRecord::ConnectionOpened(AgentConnectionOpened {
        conn: 4,
        label: Some("p".into()),
        peer: "127.0.0.1:5000".into(),
        shard: 0,
        at: stamp(0),
    }));
    published(&mut live, 1, 5, 1_000_000, &[4]);
    assert!(
        live.judge_final(T0 + 2_000_000).is_empty(),
        "connection 4 is a probe's"
    );
    // The probe stops and the agent sees its connection go; its upload
    // comes after.
    live.add_agent_record(&AgentRecord::ConnectionClosed(AgentConnectionClosed {
        conn: 4,
        at: stamp(1_500_000),
        reason: CloseReason::ClientClosed,
    }));
    assert!(
        live.judge_final(T0 + 2_000_000).is_empty(),
        "its upload may lag"
    );
    let now = T0 + 3_000_000;
    live.add_probe_record(1, &started("p", stamp(0)), now);
    live.add_probe_record(1, &opened(0, 4), now);
    live.add_probe_record(1, &receipt(0, 5, 0, 1_100_000), now);
    let judged = live.judge_final(now);
    assert_eq!((judged[0].receipts, judged[0].unjudged), (1, 0));
    // A probe connection that never uploads is unjudged at the timeout.
    live.add_agent_record(&AgentRecord::ConnectionOpened(AgentConnectionOpened {
        conn: 5,
        label: Some("q".into()),
        peer: "127.0.0.1:5001".into(),
        shard: 0,
        at: stamp(0),
    }));
    published(&mut live, 2, 6, 2_000_000, &[5]);
    assert!(live.judge_final(T0 + 3_000_000).is_empty());
    let judged = live.judge_final(T0 + 2_000_000 + FINAL_TIMEOUT_NS);
    assert_eq!((judged[0].receipts, judged[0].unjudged), (0, 1));
}

#[test]
fn receipts_that_can_never_match_are_counted_at_once_not_held() {
    let mut live = LiveJoin::new();
    // The agent opened connection 2 without ?probe= (an ordinary client).
    live.add_agent_record(&AgentRecord::ConnectionOpened(AgentConnectionOpened {
        conn: 2,
        label: None,
        peer: "127.0.0.1:1".into(),
        shard: 0,
        at: stamp(0),
    }));
    let now = T0 + 1_000;
    live.add_probe_record(1, &started("p", stamp(0)), now);
    // A connection to another server (no agent id) and one the agent
    // knows is not a probe's.
    live.add_probe_record(
        1,
        &crate::fixtures::connection_opened(0, None, stamp(0)),
        now,
    );
    live.add_probe_record(1, &opened(1, 2), now);
    for _ in 0..3 {
        live.add_probe_record(1, &receipt(0, 5, 0, 1_000), now);
        live.add_probe_record(1, &receipt(1, 5, 0, 1_000), now);
    }
    assert_eq!(live.counts().unmatched, 6);
    assert!(live.early.is_empty());
}

/// The shifted run's probes acting: an `ActPlan`, and after each receipt
/// its action, `lead_ns` later on the device's clocks (in time).
fn acting(records: &[ProbeRecord], lead_ns: u64) -> Vec<ProbeRecord> {
    let mut out = Vec::new();
    for r in records {
        out.push(r.clone());
        match r {
            ProbeRecord::Started(_) => out.push(ProbeRecord::ActPlan(ActPlan {
                pointer: "/at_ns".into(),
                unit: "auto".into(),
                at: Stamp {
                    wall_ns: T0,
                    mono_ns: 0,
                },
            })),
            ProbeRecord::Receipt(rc) => {
                let at = |s: Stamp| Stamp {
                    wall_ns: s.wall_ns + lead_ns,
                    mono_ns: s.mono_ns + lead_ns,
                };
                out.push(ProbeRecord::Action(Action {
                    conn: rc.conn,
                    key: rc.key,
                    hash: rc.hash,
                    act_at_ns: rc.at.wall_ns + lead_ns,
                    offset_ns: None,
                    offset_bound_ns: None,
                    target: at(rc.at),
                    done: at(rc.at),
                    late_ns: 0,
                }));
            }
            _ => {}
        }
    }
    out
}

#[test]
fn live_action_skews_equal_the_reports_and_a_receipt_waits_for_its_action() {
    let (agent, a, b, _) = shifted_run();
    let (a, b) = (
        acting(&a.records, 30_000_000),
        acting(&b.records, 30_000_000),
    );
    // Receipts alone: a probe that acts is not done with a broadcast until
    // its action is in (or it has uploaded past it).
    let receipts_only: Vec<ProbeRecord> = a
        .iter()
        .filter(|r| !matches!(r, ProbeRecord::Action(_)))
        .cloned()
        .collect();
    let mut live = LiveJoin::new();
    announce(&mut live, &[10, 11, 20, 21]);
    for r in &agent {
        live.add_agent_record(r);
    }
    let through = receipts_only
        .iter()
        .rposition(|r| matches!(r, ProbeRecord::Receipt(rc) if rc.key == MessageKey::Seq(1)))
        .unwrap();
    for r in &receipts_only[..=through] {
        live.add_probe_record(1, r, T0);
    }
    for r in &b {
        live.add_probe_record(2, r, T0);
    }
    let early = live.judge_final(T0);
    assert!(early.is_empty(), "waits for dev-a's actions: {early:?}");

    let mut live = LiveJoin::new();
    feed(&mut live, &agent, &[&a, &b], T0 + 2_000_000_000);
    let judged = live.judge_final(T0 + 2_000_000_000);
    let joined = join(Some(&agent), &[&a, &b]);
    let clocks = crate::analysis::clock_figures::device_clocks(&joined);
    assert_eq!(judged.len(), joined.broadcasts.len());
    for (j, b) in judged.iter().zip(&joined.broadcasts) {
        let placed = crate::analysis::placing::place_broadcast(&joined, b, &clocks);
        let report = crate::analysis::actions::broadcast_actions(&placed);
        assert_eq!(j.actions, report.actions, "{j:?}");
        assert_eq!(j.actions, 4);
        assert_eq!(j.late, 0);
        assert_eq!(
            j.action_skew_upper_ns,
            report.corrected_ns.map(|c| c.2 as u64),
            "{j:?} {report:?}"
        );
    }
    assert_eq!(live.counts().unmatched_actions, 0);
}

#[test]
fn a_pages_connection_is_found_by_its_label() {
    // A browser probe cannot name the hub's connection: its ConnectionOpened
    // says none, and the hub saw connection 9 labelled page.RUN.0.
    let mut live = LiveJoin::new();
    let now = T0 + 10_000_000_000;
    let run = 0xfeed_u128;
    live.add_agent_record(&AgentRecord::ConnectionOpened(AgentConnectionOpened {
        conn: 9,
        label: Some(crate::page_ingest::page_label(run, 0)),
        peer: "127.0.0.1:1".into(),
        shard: 0,
        at: stamp(0),
    }));
    live.add_agent_record(&AgentRecord::Broadcast(BroadcastStarted {
        id: 1,
        seq: None,
        hash: 77,
        len: 3,
        text: true,
        at: stamp(1_000_000),
    }));
    live.add_agent_record(&crate::analysis::join::tests::shard_sends(
        1,
        stamp(1_000_000),
        1_000,
        &[9],
    ));
    live.add_probe_record(run, &started("lobby-tv", stamp(0)), now);
    live.add_probe_record(
        run,
        &crate::fixtures::connection_opened(0, None, stamp(0)),
        now,
    );
    live.add_probe_record(run, &receipt(0, 77, 0, 1_200_000), now);
    live.add_probe_record(run, &ProbeRecord::Stopped(stamp(5_000_000_000)), now);
    let judged = live.judge_final(now);
    assert_eq!(judged.len(), 1);
    assert_eq!((judged[0].receipts, judged[0].missing), (1, 0));
    assert_eq!(live.counts().unmatched, 0);
}

#[test]
fn a_pages_opening_uploaded_before_the_hub_records_its_label_is_bound_when_it_does() {
    // The page uploads its opening as soon as its socket opens; the hub's
    // record of the connection (and its label) can reach the join after.
    let mut live = LiveJoin::new();
    let now = T0 + 10_000_000_000;
    let run = 0xfeed_u128;
    live.add_probe_record(run, &started("lobby-tv", stamp(0)), now);
    live.add_probe_record(
        run,
        &crate::fixtures::connection_opened(0, None, stamp(0)),
        now,
    );
    live.add_agent_record(&AgentRecord::ConnectionOpened(AgentConnectionOpened {
        conn: 9,
        label: Some(crate::page_ingest::page_label(run, 0)),
        peer: "127.0.0.1:1".into(),
        shard: 0,
        at: stamp(0),
    }));
    live.add_agent_record(&AgentRecord::Broadcast(BroadcastStarted {
        id: 1,
        seq: None,
        hash: 77,
        len: 3,
        text: true,
        at: stamp(1_000_000),
    }));
    live.add_agent_record(&crate::analysis::join::tests::shard_sends(
        1,
        stamp(1_000_000),
        1_000,
        &[9],
    ));
    live.add_probe_record(run, &receipt(0, 77, 0, 1_200_000), now);
    live.add_probe_record(run, &ProbeRecord::Stopped(stamp(5_000_000_000)), now);
    let judged = live.judge_final(now);
    assert_eq!(judged.len(), 1);
    assert_eq!((judged[0].receipts, judged[0].missing), (1, 0));
    assert_eq!(live.counts().unmatched, 0);
}

/// A probe record's moment on its device's wall clock (0 for those that
/// name none), to feed records in the order a probe writes them.
fn wall_of(r: &ProbeRecord) -> u64 {
    match r {
        ProbeRecord::Receipt(r) => r.at.wall_ns,
        ProbeRecord::Action(a) => a.done.wall_ns,
        ProbeRecord::TimeSample(t) => t.t4.wall_ns,
        ProbeRecord::ClockState(c) => c.at.wall_ns,
        ProbeRecord::ConnectionOpened(o) => o.at.wall_ns,
        ProbeRecord::Stopped(at) => at.wall_ns,
        _ => 0,
    }
}

#[test]
fn an_action_a_second_and_a_half_after_its_receipt_is_judged_with_its_broadcast() {
    // The live join once called a broadcast final once a probe's records
    // were 1 s past its start, while the audit waited for the largest lead
    // plus 2 s: an action 1.5 s after its receipt came after its broadcast
    // was judged, unmatched on /metrics. One rule now
    // (analysis::settled), and the wait grows with the lead seen.
    let (agent, a, b, _) = shifted_run();
    let lead = 1_500_000_000;
    let mut live = LiveJoin::new();
    announce(&mut live, &[10, 11, 20, 21]);
    for r in &agent {
        live.add_agent_record(r);
    }
    // Each probe's records in the order it writes them: receipts, then a
    // clock claim 1.4 s in (past the old margin, before the actions), then
    // the actions; no stop record (that would settle everything at once).
    let mut records: Vec<(u64, u128, ProbeRecord)> = Vec::new();
    for (run, device) in [(1u128, &a.records), (2, &b.records)] {
        let mut acted = acting(device, lead);
        acted.retain(|r| !matches!(r, ProbeRecord::Stopped(_)));
        let level = device
            .iter()
            .find_map(|r| match r {
                ProbeRecord::Started(s) => {
                    Some(s.at.wall_ns as i64 - s.at.mono_ns as i64 - T0 as i64)
                }
                _ => None,
            })
            .unwrap_or(0);
        acted.push(ProbeRecord::ClockState(Box::new(ClockState {
            at: Stamp {
                wall_ns: (T0 as i64 + level + 1_400_000_000) as u64,
                mono_ns: 1_400_000_000,
            },
            kernel: None,
            chrony: None,
        })));
        records.extend(acted.into_iter().map(|r| (wall_of(&r), run, r)));
    }
    records.sort_by_key(|(wall, run, _)| (*wall, *run));
    let mut judged = Vec::new();
    for (wall, run, r) in &records {
        live.add_probe_record(*run, r, (*wall).max(T0));
        judged.extend(live.judge_final((*wall).max(T0)));
    }
    judged.extend(live.judge_final(T0 + 60_000_000_000));
    assert_eq!(judged.len(), 2, "{judged:?}");
    assert!(judged.iter().all(|j| j.actions == 4), "{judged:?}");
    assert_eq!(live.counts().unmatched_actions, 0);
}
