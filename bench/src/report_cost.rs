//! What a report costs on a long run: one probe log with 10^6 receipts and
//! 10^5 time exchanges (a day of exchanges at one a second is 86,400),
//! decoded, joined and reported in memory, phase by phase.

use std::time::{Duration, Instant};

use skewscope_core::Stamp;
use skewscope_core::analysis::join::join;
use skewscope_core::analysis::report::Report;
use skewscope_core::log::{Decoded, HEADER_LEN, LogKind, LogWriter, decode_records};
use skewscope_core::record::{
    MessageKey, ProbeConnectionOpened, ProbeRecord, ProbeStarted, Receipt, TimeSample,
};

/// Wall-clock origin of the synthetic run.
const T0: u64 = 1_764_000_000_000_000_000;

/// One probe's log: `connections` × `broadcasts` receipts (a broadcast every
/// `span / broadcasts`) and `exchanges` time samples spread over the same span,
/// with a clock 3 ms ahead of the agent's and 40–440 µs round trips.
fn synthetic_log(connections: u32, broadcasts: u64, exchanges: u64) -> Vec<u8> {
    let span_ns = exchanges * 1_000_000_000;
    let at = |mono: u64| Stamp {
        wall_ns: T0 + mono + 3_000_000,
        mono_ns: mono,
    };
    let mut log = LogWriter::new(Vec::new(), LogKind::Probe).expect("Vec never fails");
    let mut put = |r: ProbeRecord| log.append(&r).expect("Vec never fails");
    put(ProbeRecord::Started(Box::new(ProbeStarted {
        name: "long-run".into(),
        host: "bench".into(),
        url: "ws://bench/ws".into(),
        connections,
        version: "bench".into(),
        at: at(0),
    })));
    for conn in 0..connections {
        put(ProbeRecord::ConnectionOpened(ProbeConnectionOpened {
            conn,
            agent_conn: None,
            at: at(1),
        }));
    }
    let mut rng = fastrand::Rng::with_seed(7);
    let (mut next_exchange, mut next_broadcast) = (0u64, 0u64);
    while next_exchange < exchanges || next_broadcast < broadcasts {
        let exchange_at = next_exchange * 1_000_000_000 + 500_000;
        let broadcast_at = next_broadcast * (span_ns / broadcasts) + 2_000_000;
        if next_exchange < exchanges
            && (exchange_at <= broadcast_at || next_broadcast == broadcasts)
        {
            let rtt = 40_000 + rng.u64(0..400_000);
            put(ProbeRecord::TimeSample(TimeSample {
                t1: at(exchange_at),
                t2_wall_ns: T0 + exchange_at + rtt / 2,
                t3_wall_ns: T0 + exchange_at + rtt / 2 + 5_000,
                t4: at(exchange_at + rtt + 5_000),
            }));
            next_exchange += 1;
        } else {
            for conn in 0..connections {
                put(ProbeRecord::Receipt(Receipt {
                    conn,
                    key: MessageKey::Seq(next_broadcast),
                    hash: next_broadcast,
                    len: 450,
                    at: at(broadcast_at + u64::from(conn) * 1_000),
                    kernel_delay_ns: Some(20_000),
                }));
            }
            next_broadcast += 1;
        }
    }
    log.into_inner()
}

/// Builds the log once, then times decoding, joining and the report `runs`
/// times; prints the median of each phase.
/// Writes the synthetic log to `path`.
pub fn write(
    path: &std::path::Path,
    connections: u32,
    broadcasts: u64,
    exchanges: u64,
) -> anyhow::Result<()> {
    let bytes = synthetic_log(connections, broadcasts, exchanges);
    std::fs::write(path, &bytes)?;
    println!("{}: {} bytes", path.display(), bytes.len());
    Ok(())
}

pub fn run(connections: u32, broadcasts: u64, exchanges: u64, runs: usize) -> anyhow::Result<()> {
    let bytes = synthetic_log(connections, broadcasts, exchanges);
    println!(
        "report cost: 1 probe log, {} receipts, {} time exchanges, {:.0} MB; median of {runs} runs",
        u64::from(connections) * broadcasts,
        exchanges,
        bytes.len() as f64 / 1e6
    );
    let (mut decode, mut joining, mut report) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        let decoded: Decoded<ProbeRecord> = decode_records(&bytes[HEADER_LEN..]);
        decode.push(t.elapsed());
        let t = Instant::now();
        let joined = join(None, &[&decoded.records]);
        joining.push(t.elapsed());
        let t = Instant::now();
        let r = Report::build(&joined, Vec::new());
        report.push(t.elapsed());
        anyhow::ensure!(
            r.receipts == u64::from(connections) * broadcasts
                && r.probes[0].clock.time_samples == exchanges,
            "the synthetic run was not read back whole"
        );
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (d, j, r) = (
        median(&mut decode),
        median(&mut joining),
        median(&mut report),
    );
    println!("  decode  {:>8.2} s", d.as_secs_f64());
    println!("  join    {:>8.2} s", j.as_secs_f64());
    println!(
        "  report  {:>8.2} s   (clock model and figures)",
        r.as_secs_f64()
    );
    println!("  total   {:>8.2} s", (d + j + r).as_secs_f64());
    Ok(())
}
