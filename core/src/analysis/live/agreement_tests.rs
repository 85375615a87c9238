//! The live join and the report's join on the same random runs: repeated
//! payloads, test messages, probes whose clock is never bounded, receipts
//! the probe's log lost, and connections that close and reopen. Both follow
//! one matching rule and one timebase rule, so every broadcast's figures
//! must be equal: receipts joined, missing, raw skew and the upper bound.

use super::*;
use crate::analysis::figures::figures;
use crate::analysis::join::join;
use crate::record::*;

const T0: u64 = 1_764_000_000_000_000_000;
const MS: u64 = 1_000_000;

/// A stamp on a clock `offset` ns ahead of true time, at true time `t` ns.
fn on(offset: i64, t: u64) -> Stamp {
    Stamp {
        wall_ns: (T0 as i64 + t as i64 + offset) as u64,
        mono_ns: 1_000_000_000 + t,
    }
}

/// One probe connection's life: its agent id, and the broadcasts (by
/// index) it was open for.
struct Episode {
    agent_conn: u64,
    probe_conn: u32,
    from: usize,
    until: usize,
}

struct Run {
    agent: Vec<AgentRecord>,
    probes: Vec<Vec<ProbeRecord>>,
}

fn random_run(rng: &mut fastrand::Rng) -> Run {
    let broadcasts = rng.usize(4..40);
    // Payloads: test messages (keyed by sequence), a few repeated bodies
    // and unique ones.
    let payloads: Vec<(Option<u64>, u64)> = (0..broadcasts)
        .map(|i| match rng.u8(0..4) {
            0 => (Some(i as u64 + 1), 10_000 + i as u64),
            1 | 2 => (None, rng.u64(1..4)),
            _ => (None, 20_000 + i as u64),
        })
        .collect();
    let start_of = |i: usize| 20 * MS * (i as u64 + 1);

    let probe_count = rng.usize(2..4);
    let mut next_agent_conn = 1u64;
    let mut agent_events: Vec<(u64, u8, AgentRecord)> = Vec::new();
    let mut probes = Vec::new();
    for p in 0..probe_count {
        let offset = rng.i64(-5 * MS as i64..5 * MS as i64);
        let bounded = rng.u8(0..3) > 0;
        let mut events: Vec<(u64, ProbeRecord)> = vec![(
            0,
            crate::fixtures::probe_started(&format!("p{p}"), 1, on(offset, 0)),
        )];
        if bounded {
            // An exchange every 100 ms, 20 µs each way (plus jitter).
            for k in 0..10u64 {
                let t = k * 100 * MS;
                let (out, back) = (rng.u64(20_000..60_000), rng.u64(20_000..60_000));
                events.push((
                    t,
                    ProbeRecord::TimeSample(TimeSample {
                        t1: on(offset, t),
                        t2_wall_ns: T0 + t + out,
                        t3_wall_ns: T0 + t + out + 5_000,
                        t4: on(offset, t + out + 5_000 + back),
                    }),
                ));
            }
        }
        // One or two connections, each may close and reopen once.
        let mut episodes = Vec::new();
        let mut probe_conn = 0u32;
        for _ in 0..rng.usize(1..3) {
            let mut from = 0;
            while from < broadcasts {
                let until = if rng.u8(0..3) == 0 {
                    rng.usize(from..=broadcasts)
                } else {
                    broadcasts
                };
                episodes.push(Episode {
                    agent_conn: next_agent_conn,
                    probe_conn,
                    from,
                    until,
                });
                next_agent_conn += 1;
                probe_conn += 1;
                from = until + 1;
            }
        }
        for e in &episodes {
            let opened = start_of(e.from) - 5 * MS;
            agent_events.push((
                opened,
                0,
                AgentRecord::ConnectionOpened(AgentConnectionOpened {
                    conn: e.agent_conn,
                    label: Some(format!("p{p}")),
                    peer: "127.0.0.1:1".into(),
                    shard: 0,
                    at: on(0, opened),
                }),
            ));
            events.push((
                opened + 1_000,
                crate::fixtures::connection_opened(
                    e.probe_conn,
                    Some(e.agent_conn),
                    on(offset, opened + 1_000),
                ),
            ));
            // Copies of each payload on this connection, counted from 0.
            let mut occurrences: HashMap<u64, u32> = HashMap::new();
            for (i, &(seq, hash)) in payloads.iter().enumerate().take(e.until).skip(e.from) {
                let occurrence = occurrences.entry(hash).or_default();
                let key = match seq {
                    Some(seq) => MessageKey::Seq(seq),
                    None => MessageKey::Hash {
                        hash,
                        occurrence: *occurrence,
                    },
                };
                *occurrence += 1;
                // One in ten is lost from the probe's log.
                if rng.u8(0..10) == 0 {
                    continue;
                }
                let kernel = start_of(i) + rng.u64(50_000..3 * MS);
                let read = kernel + rng.u64(5_000..200_000);
                events.push((
                    read,
                    ProbeRecord::Receipt(Receipt {
                        len: 100,
                        kernel_delay_ns: Some(read - kernel),
                        ..crate::fixtures::receipt(e.probe_conn, key, hash, on(offset, read))
                    }),
                ));
            }
            if e.until < broadcasts {
                let closed = start_of(e.until) - 10 * MS;
                events.push((
                    closed,
                    ProbeRecord::ConnectionClosed(ProbeConnectionClosed {
                        conn: e.probe_conn,
                        at: on(offset, closed),
                        reason: "test".into(),
                    }),
                ));
                agent_events.push((
                    closed,
                    1,
                    AgentRecord::ConnectionClosed(AgentConnectionClosed {
                        conn: e.agent_conn,
                        at: on(0, closed),
                        reason: CloseReason::ClientClosed,
                    }),
                ));
            }
        }
        let end = start_of(broadcasts) + 100 * MS;
        events.push((end, ProbeRecord::Stopped(on(offset, end))));
        events.sort_by_key(|(t, _)| *t);
        probes.push((events.into_iter().map(|(_, r)| r).collect(), episodes));
    }

    for (i, &(seq, hash)) in payloads.iter().enumerate() {
        let start = on(0, start_of(i));
        let open: Vec<u64> = probes
            .iter()
            .flat_map(|(_, eps): &(Vec<ProbeRecord>, Vec<Episode>)| eps.iter())
            .filter(|e| (e.from..e.until).contains(&i))
            .map(|e| e.agent_conn)
            .collect();
        agent_events.push((
            start_of(i),
            2,
            AgentRecord::Broadcast(BroadcastStarted {
                id: i as u64 + 1,
                seq,
                hash,
                len: 100,
                text: true,
                at: start,
            }),
        ));
        agent_events.push((
            start_of(i),
            3,
            crate::analysis::join::tests::shard_sends(i as u64 + 1, start, 10_000, &open),
        ));
    }
    agent_events.sort_by_key(|(t, order, _)| (*t, *order));
    let mut agent = vec![AgentRecord::Started(AgentStarted {
        host: "srv".into(),
        version: "t".into(),
        at: on(0, 0),
        shards: 1,
        order: SendOrder::Fixed,
        per_client_times: true,
    })];
    agent.extend(agent_events.into_iter().map(|(_, _, r)| r));
    Run {
        agent,
        probes: probes.into_iter().map(|(r, _)| r).collect(),
    }
}

#[test]
fn the_live_join_and_the_report_agree_on_random_runs() {
    // (broadcasts with a bound, with two receipts but no bound, with a
    // receipt missing): each kind must come up, or the test proves little.
    let (mut bounded, mut unbounded, mut missing) = (0, 0, 0);
    for seed in 0..300u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let run = random_run(&mut rng);
        let logs: Vec<&[ProbeRecord]> = run.probes.iter().map(Vec::as_slice).collect();

        let joined = join(Some(&run.agent), &logs);
        let points = figures(&joined).broadcasts;
        assert_eq!(points.len(), joined.broadcasts.len(), "seed {seed}");

        let mut live = LiveJoin::since(T0, 1);
        for r in &run.agent {
            live.add_agent_record(r);
        }
        let now = T0 + 10_000 * MS;
        for (i, log) in logs.iter().enumerate() {
            for r in log.iter() {
                live.add_probe_record(i as u128 + 1, r, now);
            }
        }
        let judged = live.judge_final(now);
        assert_eq!(judged.len(), joined.broadcasts.len(), "seed {seed}");
        assert_eq!(live.counts().unmatched, 0, "seed {seed}");
        for ((j, b), point) in judged.iter().zip(&joined.broadcasts).zip(&points) {
            let context = format!("seed {seed}, broadcast {}: {j:?} {point:?}", j.id);
            assert_eq!(j.receipts as usize, b.receipts.len(), "{context}");
            assert_eq!(j.missing as usize, b.missing.len(), "{context}");
            assert_eq!(j.unjudged, 0, "{context}");
            assert_eq!(j.skew_ns, b.skew_ns(), "{context}");
            let upper = point.corrected_ns.map(|(_, _, hi)| hi.max(0) as u64);
            assert_eq!(j.skew_upper_ns, upper, "{context}");
            bounded += usize::from(upper.is_some());
            unbounded += usize::from(upper.is_none() && j.skew_ns.is_some());
            missing += usize::from(j.missing > 0);
        }
    }
    assert!(
        bounded > 100 && unbounded > 100 && missing > 100,
        "{bounded} {unbounded} {missing}"
    );
}
