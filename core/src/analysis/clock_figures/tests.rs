//! Clock-aware figures on hand-built runs whose truth is known: every host
//! shares one true time line, and each probe's clock is shifted by a known offset.

use super::*;
use crate::Stamp;
use crate::analysis::join::join;
use crate::analysis::report::{ClockBasis, Report};
use crate::record::*;

const T0: u64 = 1_764_000_000_000_000_000;

/// A stamp on a clock `offset` ahead of true time, at true time `t` (ns from T0).
fn on(offset: i64, t: u64) -> Stamp {
    Stamp {
        wall_ns: (T0 as i64 + t as i64 + offset) as u64,
        mono_ns: 1_000_000_000 + t,
    }
}

fn kernel(synchronized: bool, max_error_ns: u64) -> ClockState {
    ClockState {
        at: on(0, 0),
        kernel: Some(KernelClock {
            synchronized,
            status: 0,
            max_error_ns,
            est_error_ns: 0,
            offset_ns: 0,
            freq_ppb: 0,
        }),
        chrony: None,
    }
}

pub(crate) struct Device {
    offset: i64,
    pub(crate) records: Vec<ProbeRecord>,
}

impl Device {
    fn new(name: &'static str, offset: i64, conns: &[u64], claim_ns: u64) -> Device {
        let mut records = vec![crate::fixtures::probe_started(
            name,
            conns.len() as u32,
            on(offset, 0),
        )];
        let mut state = kernel(true, claim_ns);
        state.at = on(offset, 0);
        records.push(ProbeRecord::ClockState(Box::new(state)));
        for (i, &agent_conn) in conns.iter().enumerate() {
            records.push(crate::fixtures::connection_opened(
                i as u32,
                Some(agent_conn),
                on(offset, 1_000),
            ));
        }
        // Exchanges every 100 ms with 20 µs each way and 5 µs turnaround.
        for k in 0..10u64 {
            let t = k * 100_000_000;
            records.push(ProbeRecord::TimeSample(TimeSample {
                t1: on(offset, t),
                t2_wall_ns: T0 + t + 20_000,
                t3_wall_ns: T0 + t + 25_000,
                t4: on(offset, t + 45_000),
            }));
        }
        Device { offset, records }
    }

    /// Connection `conn` got test message `seq`: kernel at true time `t`, userspace 30 µs later.
    fn receive(&mut self, conn: u32, seq: u64, t: u64) {
        self.records.push(ProbeRecord::Receipt(Receipt {
            kernel_delay_ns: Some(30_000),
            ..crate::fixtures::receipt(conn, MessageKey::Seq(seq), 9, on(self.offset, t + 30_000))
        }));
    }

    fn stop(&mut self) {
        self.records
            .push(ProbeRecord::Stopped(on(self.offset, 2_000_000_000)));
    }
}

fn agent(broadcasts: &[(u64, u64)], conns: &[u64]) -> Vec<AgentRecord> {
    let mut records = vec![
        AgentRecord::Started(AgentStarted {
            host: "srv".into(),
            version: "t".into(),
            at: on(0, 0),
            shards: 1,
            order: SendOrder::Fixed,
            per_client_times: true,
        }),
        AgentRecord::ClockState(kernel(true, 100_000)),
    ];
    for &(seq, start) in broadcasts {
        records.push(AgentRecord::Broadcast(BroadcastStarted {
            id: seq,
            seq: Some(seq),
            hash: 9,
            len: 450,
            text: true,
            at: on(0, start),
        }));
        records.push(crate::analysis::join::tests::shard_sends(
            seq,
            on(0, start),
            10_000,
            conns,
        ));
    }
    records
}

/// Probe a is 5 ms ahead, probe b 3 ms behind; true arrivals are known.
pub(crate) fn shifted_run() -> (Vec<AgentRecord>, Device, Device, Vec<u64>) {
    let agent = agent(&[(1, 200_000_000), (2, 600_000_000)], &[10, 11, 20, 21]);
    let mut a = Device::new("dev-a", 5_000_000, &[10, 11], 1_000_000);
    let mut b = Device::new("dev-b", -3_000_000, &[20, 21], 1_000_000);
    // True kernel arrivals (ns after T0) of broadcast 1 and 2 on the four connections.
    let truth1 = [200_150_000, 200_170_000, 200_400_000, 200_180_000];
    let truth2 = [600_100_000, 600_900_000, 600_120_000, 600_110_000];
    for (i, (&t1, &t2)) in truth1.iter().zip(&truth2).enumerate() {
        let (device, conn) = if i < 2 { (&mut a, i) } else { (&mut b, i - 2) };
        device.receive(conn as u32, 1, t1);
        device.receive(conn as u32, 2, t2);
    }
    a.stop();
    b.stop();
    let true_skews = vec![
        truth1.iter().max().unwrap() - truth1.iter().min().unwrap(),
        truth2.iter().max().unwrap() - truth2.iter().min().unwrap(),
    ];
    (agent, a, b, true_skews)
}

#[test]
fn corrected_skew_brackets_the_truth_and_raw_skew_shows_the_offsets() {
    let (agent, a, b, truth) = shifted_run();
    let j = join(Some(&agent), &[&a.records, &b.records]);
    let r = Report::build(&j, vec![]);
    assert_eq!(r.clock_basis, ClockBasis::CorrectedToAgent);
    assert_eq!(r.uncorrected_receipts, 0);

    // Offsets: a +5 ms, b −3 ms, each within its bound: 20 µs here (half
    // the round trip), and the few ns the drift allows over it.
    for (p, truth) in r.probes.iter().zip([5_000_000i64, -3_000_000]) {
        let (offset, bound) = (p.clock.offset_ns.unwrap(), p.clock.offset_bound_ns.unwrap());
        assert!(
            (offset - truth).unsigned_abs() <= bound,
            "{offset} ± {bound}"
        );
        assert!((20_000..20_010).contains(&bound), "{bound}");
    }

    let corrected = r.skew_corrected_ns.unwrap();
    // Per broadcast the interval holds the truth, so the percentiles bracket it.
    let true_max = *truth.iter().max().unwrap() as i64;
    let true_min = *truth.iter().min().unwrap() as i64;
    assert!(
        corrected.lo.max <= true_max && true_max <= corrected.hi.max,
        "{corrected:?}"
    );
    assert!(
        corrected.lo.min <= true_min && true_min <= corrected.hi.min,
        "{corrected:?}"
    );
    assert!(
        (corrected.estimate.max - true_max).abs() <= 40_000,
        "{corrected:?}"
    );

    // Raw skew is off by roughly the 8 ms between the two clocks.
    let raw = r.skew_ns.unwrap();
    assert!(raw.max > 7_000_000, "{raw:?}");

    // Within one device there is no clock error: exact.
    let intra = r.skew_intra_device_ns.unwrap();
    assert_eq!(intra.max, 800_000); // a's two connections on broadcast 2
    assert_eq!(intra.min, 10_000); // b's on broadcast 2

    // Latency split: fan-out position from the agent, delivery from the device.
    assert_eq!(r.delivery_ns.unwrap().max, 30_000);
    let fanout_position = r.fanout_position_ns.unwrap();
    assert_eq!((fanout_position.min, fanout_position.max), (10_000, 40_000));
    // Network: corrected kernel arrival − write done; bounded.
    let network = r.network_ns.unwrap();
    assert!(
        network.lo.min <= 100_000 - 10_000 && network.estimate.min > 0,
        "{network:?}"
    );
    assert_eq!(r.probes[0].clock.offset_vs_claim, ClaimCheck::Exceeds);
}

#[test]
fn offsets_within_the_clocks_claims_are_consistent() {
    let (agent, _, _, _) = shifted_run();
    let mut a = Device::new("dev-a", 500_000, &[10], 1_000_000);
    a.stop();
    let j = join(Some(&agent), &[&a.records]);
    let r = Report::build(&j, vec![]);
    assert_eq!(r.probes[0].clock.offset_vs_claim, ClaimCheck::Consistent);
    // No agent claim: cannot judge.
    let j = join(None, &[&a.records]);
    assert_eq!(
        Report::build(&j, vec![]).probes[0].clock.offset_vs_claim,
        ClaimCheck::Unknown
    );
}

#[test]
fn a_probe_without_time_exchange_leaves_its_broadcasts_without_corrected_skew() {
    let (agent, a, mut b, _) = shifted_run();
    b.records
        .retain(|r| !matches!(r, ProbeRecord::TimeSample(_)));
    let j = join(Some(&agent), &[&a.records, &b.records]);
    let r = Report::build(&j, vec![]);
    assert_eq!(r.clock_basis, ClockBasis::UncorrectedDeviceClocks);
    assert_eq!(r.uncorrected_receipts, 4);
    assert_eq!(r.probes[1].clock.offset_ns, None);
    // A spread over a's receipts alone bounds nothing: b's may be the late
    // one. Every broadcast has one of b's, so none has a corrected skew.
    assert!(r.skew_corrected_ns.is_none(), "{:?}", r.skew_corrected_ns);
}

#[test]
fn a_clock_step_mid_run_is_reported_and_splits_the_estimate() {
    let mut a = Device::new("dev-a", 0, &[10], 1_000_000);
    // From true time 1 s on, a's wall clock is 50 ms ahead: more exchanges and receipts.
    for k in 0..5u64 {
        let t = 1_000_000_000 + k * 100_000_000;
        a.records.push(ProbeRecord::TimeSample(TimeSample {
            t1: on(50_000_000, t),
            t2_wall_ns: T0 + t + 20_000,
            t3_wall_ns: T0 + t + 25_000,
            t4: on(50_000_000, t + 45_000),
        }));
    }
    a.offset = 50_000_000;
    a.receive(0, 1, 1_250_000_000);
    a.stop();
    let j = join(None, &[&a.records]);
    let r = Report::build(&j, vec![]);
    let steps = &r.probes[0].clock.clock_steps;
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert!(
        (steps[0].size_ns - 50_000_000).abs() < 1_000_000,
        "{steps:?}"
    );
    assert_ne!(r.clock_basis, ClockBasis::SingleHost);
}
