//! The clock-aware figures: each device's offset to the agent and what its
//! clock claims, skew corrected into the agent's timebase with an interval
//! that contains the truth, skew within one device (no clock error), and the
//! split of latency into fan-out position, network and device delivery.

use serde::{Deserialize, Serialize};

use crate::analysis::join::{Joined, JoinedReceipt};
use crate::analysis::placing::PlacedBroadcast;
use crate::analysis::stats::{Summary, SummaryBuilder};
use crate::analysis::timebase::{Placed, spread_of_all};
use crate::clock::{DeviceClock, MAX_DRIFT, find_steps};
use crate::convert;
use crate::record::ClockState;

/// A distribution of estimates with the distributions of their lower and upper
/// bounds. Since every estimate's interval contains its true value, each
/// percentile of `lo` and `hi` brackets that percentile of the truth.
// Read back from JSON too: a saved sweep across machines holds one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BoundedSummary {
    /// The estimates.
    #[serde(flatten)]
    pub estimate: Summary,
    /// Lower bounds.
    pub lo: Summary,
    /// Upper bounds.
    pub hi: Summary,
}

impl BoundedSummary {
    /// Summarises (estimate, lo, hi) triples; `None` when there are none.
    pub fn of(values: &[(i64, i64, i64)]) -> Option<BoundedSummary> {
        let pick = |f: fn(&(i64, i64, i64)) -> i64| values.iter().map(f).collect::<Vec<_>>();
        Some(BoundedSummary {
            estimate: Summary::of(&pick(|v| v.0))?,
            lo: Summary::of(&pick(|v| v.1))?,
            hi: Summary::of(&pick(|v| v.2))?,
        })
    }
}

/// A wall-clock step, as reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct StepSummary {
    /// Wall time just after the step.
    pub at_wall_ns: u64,
    /// Size of the jump (positive: forward).
    pub size_ns: i64,
}

/// How a device's measured offset compares with what the clocks claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimCheck {
    /// Within what both clocks claim.
    Consistent,
    /// Certainly outside what both clocks claim: one of them is wrong about itself.
    Exceeds,
    /// A clock claimed nothing (unsynchronised) or no offset was measured.
    Unknown,
}

/// One device's clock, as reported.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct DeviceClockSummary {
    /// Time exchanges recorded.
    pub time_samples: u64,
    /// Device clock minus agent clock where the run knew it best (at the
    /// least-delayed exchange), from the clock model.
    pub offset_ns: Option<i64>,
    /// Error bound of `offset_ns`: the truth lies within it.
    pub offset_bound_ns: Option<u64>,
    /// Drift of the agent's clock against the device's (ppb): the middle of
    /// the range the exchanges allow, once they pinned it at all.
    pub drift_ppb: Option<f64>,
    /// Half that range: the true drift lies within it of `drift_ppb`.
    pub drift_bound_ppb: Option<f64>,
    /// Times an exchange left no consistent clock (the agent's clock
    /// stepped, or a clock slewed beyond the model's allowance): the model
    /// started again from it.
    pub model_breaks: u64,
    /// The clock's last claim about itself.
    pub claim: Option<ClockState>,
    /// Measured offset against the claims.
    pub offset_vs_claim: ClaimCheck,
    /// Wall-clock steps during the run.
    pub clock_steps: Vec<StepSummary>,
}

/// All clock-aware figures of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// Per probe (input order).
    pub devices: Vec<DeviceClockSummary>,
    /// Steps of the agent's clock.
    pub agent_steps: Vec<StepSummary>,
    /// Skew in the agent's timebase, with intervals.
    pub skew_corrected: Option<BoundedSummary>,
    /// Skew among connections of one probe (one clock): no clock error.
    pub skew_intra_device: Option<Summary>,
    /// Latency in the agent's timebase, with intervals.
    pub latency_corrected: Option<BoundedSummary>,
    /// Per receipt: the agent's write of that copy completed, after the start.
    pub fanout_position: Option<Summary>,
    /// Per receipt: kernel arrival (corrected) after the agent's write or TX stamp.
    pub network: Option<BoundedSummary>,
    /// Receipts whose network interval lay wholly below what causality
    /// allows (arrival before sending): the device's offset bound did not
    /// hold for them. Their interval is raised to the causal floor.
    pub network_acausal: u64,
    /// Per receipt: userspace stamp after the kernel's receive stamp.
    pub delivery: Option<Summary>,
    /// Receipts without a correction (their probe, or that stretch of its run
    /// between clock steps, had no time exchange): left out of corrected figures.
    pub uncorrected_receipts: u64,
    /// Receipts without a kernel receive stamp.
    pub receipts_without_kernel_stamp: u64,
    /// The largest clock bound of any receipt in `latency_corrected`: what
    /// a device's idea of the agent's time can be off by.
    pub worst_bound_ns: u64,
    /// Latency to the probe's read of each copy (its userspace stamp, the
    /// moment an app has the message), in the agent's timebase: what a
    /// time to act must leave room for.
    pub read_latency_corrected: Option<BoundedSummary>,
    /// The same on the devices' clocks as they are (one clock: exact).
    pub read_latency_raw: Option<Summary>,
    /// Independent reads in `read_latency_corrected` (a device's copies of
    /// one broadcast count once: they share its radio), the evidence the
    /// lead rule counts.
    pub read_independent_corrected: u64,
    /// The same in `read_latency_raw`.
    pub read_independent_raw: u64,
    /// Whether every probe shares the agent's host and no measurement says
    /// otherwise (no offset excludes zero, no steps).
    pub one_clock: bool,
}

/// Computes every clock-aware figure.
pub fn timing(joined: &Joined) -> Timing {
    let mut builder = TimingBuilder::new(joined);
    for b in &joined.broadcasts {
        let placed = crate::analysis::placing::place_broadcast(joined, b, builder.clocks());
        builder.add(joined, &placed);
    }
    builder.finish(joined)
}

/// [`BoundedSummary`] built one (estimate, lo, hi) at a time.
#[derive(Clone, Debug, Default)]
pub struct BoundedSummaryBuilder {
    estimate: SummaryBuilder,
    lo: SummaryBuilder,
    hi: SummaryBuilder,
}

impl BoundedSummaryBuilder {
    /// Adds one estimate with its bounds.
    pub fn add(&mut self, (estimate, lo, hi): (i64, i64, i64)) {
        self.estimate.add(estimate);
        self.lo.add(lo);
        self.hi.add(hi);
    }

    /// The summary; `None` when nothing was added.
    pub fn finish(&self) -> Option<BoundedSummary> {
        Some(BoundedSummary {
            estimate: self.estimate.finish()?,
            lo: self.lo.finish()?,
            hi: self.hi.finish()?,
        })
    }
}

/// The clock-aware figures built one broadcast at a time, so a long run's
/// receipts are never all held (see [`crate::analysis::join::BroadcastSink`]).
pub struct TimingBuilder {
    clocks: Vec<DeviceClock>,
    skew_corrected: BoundedSummaryBuilder,
    skew_intra: SummaryBuilder,
    latency_corrected: BoundedSummaryBuilder,
    fanout_position: SummaryBuilder,
    network: BoundedSummaryBuilder,
    network_acausal: u64,
    delivery: SummaryBuilder,
    uncorrected: u64,
    no_kernel: u64,
    worst_bound: u64,
    read_latency: BoundedSummaryBuilder,
    read_latency_raw: SummaryBuilder,
    read_independent_corrected: u64,
    read_independent_raw: u64,
}

impl TimingBuilder {
    /// Builds the clock models of `joined`'s probes (their records, not
    /// its broadcasts, which come one by one to [`TimingBuilder::add`]).
    pub fn new(joined: &Joined) -> TimingBuilder {
        TimingBuilder {
            clocks: device_clocks(joined),
            skew_corrected: BoundedSummaryBuilder::default(),
            skew_intra: SummaryBuilder::new(),
            latency_corrected: BoundedSummaryBuilder::default(),
            fanout_position: SummaryBuilder::new(),
            network: BoundedSummaryBuilder::default(),
            network_acausal: 0,
            delivery: SummaryBuilder::new(),
            uncorrected: 0,
            no_kernel: 0,
            worst_bound: 0,
            read_latency: BoundedSummaryBuilder::default(),
            read_latency_raw: SummaryBuilder::new(),
            read_independent_corrected: 0,
            read_independent_raw: 0,
        }
    }

    /// The device clocks built from the probes' records.
    pub fn clocks(&self) -> &[DeviceClock] {
        &self.clocks
    }

    /// Adds one broadcast of `joined`, as [`crate::analysis::placing`]
    /// placed it.
    ///
    /// The network interval is intersected with causality: a copy cannot
    /// reach the device before it was sent. See `causal_send`.
    pub fn add(&mut self, joined: &Joined, placed: &PlacedBroadcast) {
        let b = placed.broadcast;
        // Every receipt's arrival in the agent's clock, where its clock says.
        let mut corrected: Vec<Option<Placed>> = Vec::with_capacity(b.receipts.len());
        let device =
            |r: &crate::analysis::join::JoinedReceipt| joined.connections[r.connection].probe;
        if let Some(a) = b.agent {
            let mut devices = std::collections::HashSet::new();
            for r in &b.receipts {
                self.read_latency_raw
                    .add(convert::signed(r.wall_ns) - convert::signed(a.start.wall_ns));
                devices.insert(device(r));
            }
            self.read_independent_raw += devices.len() as u64;
        }
        let mut devices_read = std::collections::HashSet::new();
        for (i, r) in b.receipts.iter().enumerate() {
            match r.kernel_delay_ns {
                Some(d) => self.delivery.add(convert::signed(d)),
                None => self.no_kernel += 1,
            }
            let (Some((at, e)), Some((read, _)), Some(c)) = (
                placed.arrival(i),
                placed.read(i),
                placed.receipt_correction(i),
            ) else {
                self.uncorrected += 1;
                corrected.push(None);
                continue;
            };
            corrected.push(Some((at, e)));
            if let Some(a) = b.agent {
                let start = convert::signed(a.start.wall_ns);
                self.latency_corrected
                    .add((at - start, at - e - start, at + e - start));
                self.worst_bound = self.worst_bound.max(c.bound_ns);
                let read = read - start;
                self.read_latency.add((read, read - e, read + e));
                devices_read.insert(device(r));
                if let Some((sent, floor)) = causal_send(r, start) {
                    let (lo, hi) = (at - e - sent, at + e - sent);
                    if hi < floor {
                        self.network_acausal += 1;
                    }
                    let (lo, hi) = (lo.max(floor), hi.max(floor));
                    self.network.add(((at - sent).clamp(lo, hi), lo, hi));
                }
            }
        }
        self.read_independent_corrected += devices_read.len() as u64;
        if let Some(a) = b.agent {
            for t in b.receipts.iter().filter_map(|r| r.sent_wall_ns) {
                self.fanout_position
                    .add(convert::signed(t) - convert::signed(a.start.wall_ns));
            }
        }
        if let Some(spread) = spread_of_all(corrected) {
            self.skew_corrected.add(spread);
        }
        // Per probe: (min, max, count) of its arrivals.
        let mut per_probe: Vec<(u64, u64, u32)> = vec![(u64::MAX, 0, 0); joined.probes.len()];
        for r in &b.receipts {
            let p = &mut per_probe[joined.connections[r.connection].probe];
            let t = r.arrival_wall_ns();
            *p = (p.0.min(t), p.1.max(t), p.2 + 1);
        }
        for (min, max, n) in per_probe {
            if n >= 2 {
                self.skew_intra.add(convert::signed(max - min));
            }
        }
    }

    /// The figures, with `joined`'s probes and agent for the clock summaries.
    pub fn finish(&self, joined: &Joined) -> Timing {
        let devices = device_summaries(joined, &self.clocks);
        let agent_steps = joined
            .agent
            .as_ref()
            .map(|a| summarise_steps(&find_steps(&a.stamps)))
            .unwrap_or_default();
        // One clock only when every log names the same one: the boot id where
        // recorded (host names repeat across devices of one image).
        let one_host = joined
            .clocks()
            .collect::<std::collections::HashSet<_>>()
            .len()
            <= 1;
        let no_contradiction = devices.iter().all(|d| {
            d.clock_steps.is_empty()
                && match (d.offset_ns, d.offset_bound_ns) {
                    (Some(o), Some(b)) => o.unsigned_abs() <= b,
                    _ => true,
                }
        });
        Timing {
            devices,
            one_clock: one_host && no_contradiction && agent_steps.is_empty(),
            agent_steps,
            skew_corrected: self.skew_corrected.finish(),
            skew_intra_device: self.skew_intra.finish(),
            latency_corrected: self.latency_corrected.finish(),
            fanout_position: self.fanout_position.finish(),
            network: self.network.finish(),
            network_acausal: self.network_acausal,
            delivery: self.delivery.finish(),
            uncorrected_receipts: self.uncorrected,
            receipts_without_kernel_stamp: self.no_kernel,
            worst_bound_ns: self.worst_bound,
            read_latency_corrected: self.read_latency.finish(),
            read_latency_raw: self.read_latency_raw.finish(),
            read_independent_corrected: self.read_independent_corrected,
            read_independent_raw: self.read_independent_raw,
        }
    }
}

/// Every probe's clock as reported, from its model in `clocks`.
pub(crate) fn device_summaries(joined: &Joined, clocks: &[DeviceClock]) -> Vec<DeviceClockSummary> {
    let agent_claim = joined
        .agent
        .as_ref()
        .and_then(|a| a.clock_states.last())
        .and_then(ClockState::claimed_bound_ns);
    joined
        .probes
        .iter()
        .zip(clocks)
        .map(|(p, clock)| {
            device_summary(p.samples.len(), p.clock_states.last(), clock, agent_claim)
        })
        .collect()
}

/// Every probe's clock model, in input order.
pub(crate) fn device_clocks(joined: &Joined) -> Vec<DeviceClock> {
    joined
        .probes
        .iter()
        .map(|p| DeviceClock::build(&p.stamps, &p.samples))
        .collect()
}

/// When a receipt's copy was sent, and the least network time causality
/// allows for it: with a kernel TX stamp or a capture of the copy on its way
/// out (the tap), the copy was on its way before it arrived, so 0; with only
/// the time the agent's `write` returned, the write began after the
/// broadcast's start, so `start − sent` (a receiver can have the bytes
/// before `write` returns).
fn causal_send(r: &JoinedReceipt, start_wall_ns: i64) -> Option<(i64, i64)> {
    match (r.tx_wall_ns, r.sent_wall_ns) {
        (Some(tx), _) => Some((convert::signed(tx), 0)),
        (None, Some(done)) => Some((convert::signed(done), start_wall_ns - convert::signed(done))),
        (None, None) => None,
    }
}

fn summarise_steps(steps: &[crate::clock::ClockStep]) -> Vec<StepSummary> {
    steps
        .iter()
        .map(|s| StepSummary {
            at_wall_ns: s.at_wall_ns,
            size_ns: s.size_ns,
        })
        .collect()
}

fn device_summary(
    samples: usize,
    claim: Option<&ClockState>,
    clock: &DeviceClock,
    agent_claim: Option<u64>,
) -> DeviceClockSummary {
    let best = clock
        .best()
        .map(|(at, estimate)| (estimate.correction(at), estimate));
    let offset_ns = best.map(|(c, _)| -c.theta_ns);
    let offset_bound_ns = best.map(|(c, _)| c.bound_ns);
    let device_claim = claim.and_then(ClockState::claimed_bound_ns);
    let offset_vs_claim = match (offset_ns, offset_bound_ns, device_claim, agent_claim) {
        (Some(o), Some(b), Some(dc), Some(ac)) => {
            if o.unsigned_abs().saturating_sub(b) > dc + ac {
                ClaimCheck::Exceeds
            } else {
                ClaimCheck::Consistent
            }
        }
        _ => ClaimCheck::Unknown,
    };
    // A drift is reported once the exchanges pinned it to less than the
    // widest the model allows.
    let drift = best
        .map(|(_, e)| e)
        .filter(|e| e.drift_bound_ppb < MAX_DRIFT * 1e9 * 0.99);
    DeviceClockSummary {
        time_samples: samples as u64,
        offset_ns,
        offset_bound_ns,
        drift_ppb: drift.map(|e| e.drift_ppb),
        drift_bound_ppb: drift.map(|e| e.drift_bound_ppb),
        model_breaks: clock.model.breaks(),
        claim: claim.cloned(),
        offset_vs_claim,
        clock_steps: summarise_steps(&clock.steps),
    }
}

#[cfg(test)]
pub(crate) mod tests;
