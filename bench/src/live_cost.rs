//! What the agent's live join (`/metrics` receive skew) costs per receipt:
//! `probes` probes of `connections` connections each, uploading every
//! receipt of `broadcasts` broadcasts with their clock exchanges, fed to a
//! [`LiveJoin`] the way the agent feeds it (the agent's records, then each
//! probe's batch, a judgement after each batch). Beside it, the report's
//! join of the same records, the floor any join of them costs.

use std::time::{Duration, Instant};

use skewscope_core::Stamp;
use skewscope_core::analysis::join::join;
use skewscope_core::analysis::live::LiveJoin;
use skewscope_core::record::{
    AgentConnectionOpened, AgentRecord, BroadcastStarted, MessageKey, ProbeRecord, Receipt,
    SendOutcome, SendSlot, ShardSends, TimeSample,
};

const T0: u64 = 1_764_000_000_000_000_000;

fn at(mono: u64, offset: i64) -> Stamp {
    Stamp {
        wall_ns: (T0 as i64 + mono as i64 + offset) as u64,
        mono_ns: mono,
    }
}

struct Run {
    agent: Vec<AgentRecord>,
    /// Per probe, per broadcast: the batch it uploads after it.
    batches: Vec<Vec<Vec<ProbeRecord>>>,
}

/// Broadcasts a second apart of a 450-byte payload each (distinct hashes,
/// so matched by connection and occurrence, the harder path); every probe
/// connection gets each 100 µs + 1 µs per position after the start.
fn synthetic(probes: usize, connections: usize, broadcasts: u64) -> Run {
    let mut agent = Vec::new();
    let conn_id = |p: usize, c: usize| (p * connections + c) as u64 + 1;
    for p in 0..probes {
        for c in 0..connections {
            agent.push(AgentRecord::ConnectionOpened(AgentConnectionOpened {
                conn: conn_id(p, c),
                label: Some(format!("probe-{p}")),
                peer: "127.0.0.1:1".into(),
                shard: 0,
                at: at(1_000, 0),
            }));
        }
    }
    let mut batches: Vec<Vec<Vec<ProbeRecord>>> = vec![Vec::new(); probes];
    for (p, probe) in batches.iter_mut().enumerate() {
        let offset = (p as i64 - probes as i64 / 2) * 1_000_000;
        let mut first = vec![skewscope_core::fixtures::probe_started_on(
            &format!("probe-{p}"),
            &format!("device-{p}"),
            connections as u32,
            at(2_000, offset),
        )];
        for c in 0..connections {
            first.push(skewscope_core::fixtures::connection_opened(
                c as u32,
                Some(conn_id(p, c)),
                at(2_000, offset),
            ));
        }
        probe.push(first);
    }
    for b in 0..broadcasts {
        let start = 1_000_000_000 * (b + 1);
        agent.push(AgentRecord::Broadcast(BroadcastStarted {
            id: b + 1,
            seq: None,
            hash: 0x9e37_79b9_7f4a_7c15 ^ b,
            len: 450,
            text: true,
            at: at(start, 0),
        }));
        agent.push(AgentRecord::ShardSends(ShardSends {
            broadcast: b + 1,
            shard: 0,
            loop_start_mono_ns: start,
            slots: (0..probes * connections)
                .map(|i| SendSlot {
                    conn: i as u64 + 1,
                    position: i as u32,
                    outcome: SendOutcome::Written,
                    mono_ns: start + 1_000 * i as u64,
                })
                .collect(),
        }));
        for (p, probe) in batches.iter_mut().enumerate() {
            let offset = (p as i64 - probes as i64 / 2) * 1_000_000;
            let mut batch: Vec<ProbeRecord> = (0..connections)
                .map(|c| {
                    let t = start + 100_000 + 1_000 * (p * connections + c) as u64;
                    ProbeRecord::Receipt(Receipt {
                        kernel_delay_ns: Some(20_000),
                        ..skewscope_core::fixtures::receipt(
                            c as u32,
                            MessageKey::Hash {
                                hash: 0x9e37_79b9_7f4a_7c15 ^ b,
                                occurrence: 0,
                            },
                            0x9e37_79b9_7f4a_7c15 ^ b,
                            at(t, offset),
                        )
                    })
                })
                .collect();
            // One time exchange a second, 60 µs round trip.
            batch.push(ProbeRecord::TimeSample(TimeSample {
                t1: at(start + 500_000_000, offset),
                t2_wall_ns: T0 + start + 500_030_000,
                t3_wall_ns: T0 + start + 500_035_000,
                t4: at(start + 500_065_000, offset),
            }));
            probe.push(batch);
        }
    }
    Run { agent, batches }
}

/// The live join of the whole run, as the agent feeds it: returns the time
/// taken and the broadcasts judged.
fn live(run: &Run, probes: usize) -> (Duration, usize) {
    let started = Instant::now();
    let mut live = LiveJoin::since(T0, 1);
    let opens = probes * run.batches[0][0].len().saturating_sub(1);
    let (opened, rest) = run.agent.split_at(opens);
    for r in opened {
        live.add_agent_record(r);
    }
    let mut judged = 0;
    let mut agent = rest.chunks(2);
    for round in 0..run.batches[0].len() {
        if round > 0
            && let Some(records) = agent.next()
        {
            for r in records {
                live.add_agent_record(r);
            }
        }
        for (p, probe) in run.batches.iter().enumerate() {
            let now = T0 + 1_000_000_000 * round as u64 + 600_000_000;
            for r in &probe[round] {
                live.add_probe_record(p as u128 + 1, r, now);
            }
            judged += live.judge_final(now).len();
        }
    }
    judged += live.judge_final(u64::MAX).len();
    (started.elapsed(), judged)
}

/// The agent's side alone, as when probes have not uploaded yet: every
/// broadcast's records fed and a judgement after each, so each stays
/// pending (up to `MAX_PENDING`). Returns the time taken.
fn waiting(run: &Run) -> Duration {
    let started = Instant::now();
    let mut live = LiveJoin::since(T0, 1);
    for r in &run.agent {
        live.add_agent_record(r);
        if let AgentRecord::Broadcast(_) = r {
            // Judged at the first broadcast's moment: none has timed out,
            // as when broadcasts come faster than probes upload.
            std::hint::black_box(live.judge_final(T0 + 1_000_000_000));
        }
    }
    let took = started.elapsed();
    std::hint::black_box(&live);
    took
}

/// The report's join and report of the same records.
fn batch(run: &Run) -> Duration {
    let probe_logs: Vec<Vec<ProbeRecord>> = run.batches.iter().map(|b| b.concat()).collect();
    let logs: Vec<&[ProbeRecord]> = probe_logs.iter().map(Vec::as_slice).collect();
    let started = Instant::now();
    let joined = join(Some(&run.agent), &logs);
    let report = skewscope_core::analysis::report::Report::build(&joined, vec![]);
    std::hint::black_box(report);
    started.elapsed()
}

/// Runs it `runs` times and prints the medians side by side.
pub fn run(probes: usize, connections: usize, broadcasts: u64, runs: usize) -> anyhow::Result<()> {
    let data = synthetic(probes, connections, broadcasts);
    let receipts = (probes * connections) as f64 * broadcasts as f64;
    let mut live_times = Vec::new();
    let mut batch_times = Vec::new();
    let mut waiting_times = Vec::new();
    for _ in 0..runs.max(1) {
        waiting_times.push(waiting(&data));
        let (t, judged) = live(&data, probes);
        anyhow::ensure!(
            judged as u64 == broadcasts,
            "judged {judged} of {broadcasts} broadcasts"
        );
        live_times.push(t);
        batch_times.push(batch(&data));
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (l, b) = (median(&mut live_times), median(&mut batch_times));
    let w = median(&mut waiting_times);
    let per = |d: Duration| d.as_nanos() as f64 / receipts;
    println!(
        "live-join cost: {probes} probes × {connections} connections, {broadcasts} broadcasts ({receipts} receipts), median of {runs}\n"
    );
    println!("| join | total | per receipt | ÷ the report's join |");
    println!("|---|---:|---:|---:|");
    println!(
        "| live (as the agent feeds it, judged per batch) | {:.1} ms | {:.0} ns | {:.2} |",
        l.as_secs_f64() * 1e3,
        per(l),
        per(l) / per(b)
    );
    println!(
        "| the report's join + report of the same records | {:.1} ms | {:.0} ns | 1.00 |",
        b.as_secs_f64() * 1e3,
        per(b)
    );
    println!(
        "\nBefore any upload (the agent's records only, each broadcast pending): {:.1} µs per broadcast \
         of {} probe connections.",
        w.as_secs_f64() * 1e6 / broadcasts as f64,
        probes * connections,
    );
    Ok(())
}
