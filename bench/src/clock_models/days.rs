//! `clock-models --days N`: the clock models over simulated days, with what
//! real clocks do over days. Deterministic (seeded) and without sockets, like
//! the minutes runs: a device exchanges with the agent on the probe's own
//! schedule through a link profile's model, every model sees the same
//! exchanges, and each is asked (as the probe asks before it acts) about
//! once a second, four times a second in a model's first minute, and held
//! against the truth.
//!
//! The world, in true time (ns from the run's start):
//!
//! - **Crystals.** Each host's oscillator is off by a constant (device
//!   ±30 ppm, agent ±10 ppm) and wanders with the day's temperature: a
//!   sinusoid of 24 h, ±2 ppm on the device, ±0.5 ppm on the agent host (in a
//!   server room), at a random phase.
//! - **chrony on both hosts.** Every 64, 128 or 256 s it measures its wall
//!   clock against true time (its estimate errs by a third of the offset
//!   deviation: 20 µs on the agent host, a fifth of the link's limit on the
//!   device, at least 20 µs), sets a new frequency (the crystal's as it was
//!   three polls ago, give or take 0.01 ppm on the agent and 0.05 ppm on the
//!   device) and slews the offset out as chrony does: over
//!   `1.5 × deviation × poll / |offset|` (at least 1 s, at most 83,333 ppm).
//!   Frequency corrections and slews move a Linux host's `CLOCK_MONOTONIC`
//!   with its wall clock (only `CLOCK_MONOTONIC_RAW` escapes them), so the
//!   device's corrections move the clock the model works on.
//! - **The device's NTP outages.** For hours no update; the clock runs on
//!   the last frequency while the crystal wanders, and an offset of
//!   milliseconds builds up. When NTP comes back, one outage ends in a step of
//!   the wall clock (the monotonic clock does not move) and one in chrony's
//!   slew, which moves both.
//! - **Agent restarts.** For 1-20 s nothing answers; then a new process
//!   answers, on the same clock.
//! - **Device sleeps.** For minutes the device does nothing: no exchange, no
//!   question. During one its monotonic clock stops (Linux's
//!   `CLOCK_MONOTONIC` in suspend: the agent's clock runs on, so ψ jumps by
//!   the sleep), during the other it runs (a page whose `performance.now()`
//!   counts through it).
//! - **Probe restarts**, one a day: every model starts again from nothing.
//!
//! `--device-clock raw` measures a probe that would stamp with
//! `CLOCK_MONOTONIC_RAW` (no chrony in it, stopped in suspend), and
//! `--sleep-seen` one that sees its sleeps (`CLOCK_BOOTTIME` −
//! `CLOCK_MONOTONIC` grew; a page: `Date.now()` − `performance.now()`
//! jumped) and starts its models again at the wake.
//!
//! The physical limit at a moment is half the least true delay up plus the
//! least down over the exchanges answered in the last 300 s since the
//! models started and since the device's clock last stopped (exchanges from
//! before a jump of ψ say nothing of ψ after it).

use std::collections::{BTreeMap, VecDeque};
use std::f64::consts::TAU;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;
use skewscope_core::Stamp;
use skewscope_core::clock::HORIZON_NS;
use skewscope_core::clock::schedule::Schedule;
use skewscope_core::record::TimeSample;
use skewscope_linkemu::{Carrier, Direction, Fate, LinkModel, Profile};

use super::hist::Hist;
use super::{MODELS, Models, share};

const S: f64 = 1e9;
const MINUTE: f64 = 60.0 * S;
const HOUR: f64 = 3_600.0 * S;
const DAY: f64 = 86_400.0 * S;
/// How long the probe waits for a reply.
const ANSWER_WAIT: f64 = 300e6;
/// A model's first seconds: its start-up.
const START_UP: f64 = 10.0 * S;
/// From here on a model counts as settled.
const SETTLED: f64 = 60.0 * S;
/// The agent's wall clock at the run's start is about this (2023).
const AGENT_BASE: u64 = 1_700_000_000_000_000_000;
/// The link model's time at the run's start.
const LINK_BASE: u64 = 1_000_000_000_000;
/// The fastest chrony slews (its default `maxslewrate`, 83,333 ppm).
const MAX_SLEW: f64 = 0.083_333;
/// Misses described one by one, per model and run.
const MISSES_KEPT: usize = 12;

/// Which of the device's clocks the probe stamps exchanges and questions with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceClock {
    /// `CLOCK_MONOTONIC`, as the probe did before 2026-12-07: slewed by
    /// the device's NTP (frequency and offset corrections), stopped in
    /// suspend.
    Monotonic,
    /// `CLOCK_MONOTONIC_RAW`: the crystal alone, stopped in suspend.
    Raw,
}

/// How the days runs are made.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Options {
    /// Days per run.
    pub days: f64,
    /// Runs per profile.
    pub runs: u32,
    /// Seed of every run's chance.
    pub seed: u64,
    /// The probe's steady exchange interval, ns.
    pub interval_ns: u64,
    /// The clock the probe stamps with.
    pub device_clock: DeviceClock,
    /// Whether the probe sees a sleep and starts its models again.
    pub sleep_seen: bool,
    /// Worker threads.
    pub threads: usize,
}

/// A sleep of the device.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Sleep {
    /// Start, true ns.
    pub at: f64,
    /// Length, ns.
    pub len: f64,
    /// Whether the device's clock stops meanwhile.
    pub clock_stops: bool,
}

/// A time something is down: the agent (restarting) or the device's NTP.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Gap {
    /// Start, true ns.
    pub at: f64,
    /// Length, ns.
    pub len: f64,
}

/// The device's NTP lost for a while.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Outage {
    /// When.
    pub gap: Gap,
    /// Whether the device's NTP steps the error it finds when it is back
    /// (else it slews it).
    pub step: bool,
}

/// What happens in a run, decided before it starts.
#[derive(Clone, Debug, Serialize)]
pub struct Scenario {
    /// Length, true ns.
    pub length: f64,
    /// The probe restarts (its models start again).
    pub probe_restarts: Vec<f64>,
    /// The device sleeps.
    pub sleeps: Vec<Sleep>,
    /// The agent restarts.
    pub agent_restarts: Vec<Gap>,
    /// The device's NTP outages.
    pub outages: Vec<Outage>,
    /// Diurnal wander amplitudes, dimensionless: device and agent host.
    pub wander: (f64, f64),
    /// Whether chrony disciplines the hosts (else their crystals run free).
    pub chrony: bool,
}

impl Scenario {
    /// `days` of what the field does: a probe restart a day, two sleeps of
    /// 1-10 minutes (the device's clock stopping in the first), three agent
    /// restarts of 1-20 s, two NTP outages of 6-12 hours (a tenth of the run
    /// at most) ended by a step and by a slew; the events spread over the run.
    pub fn field(days: f64, rng: &mut fastrand::Rng) -> Scenario {
        let length = days * DAY;
        let within =
            |rng: &mut fastrand::Rng, from: f64, to: f64| length * (from + (to - from) * rng.f64());
        let whole_days = days.ceil() as u32;
        let probe_restarts = (1..whole_days)
            .map(|d| (f64::from(d) + rng.f64() * 0.9 + 0.05) * DAY)
            .filter(|&t| t < length)
            .collect();
        let sleep = |rng: &mut fastrand::Rng, from: f64, to: f64, clock_stops: bool| Sleep {
            at: within(rng, from, to),
            len: (MINUTE + rng.f64() * 9.0 * MINUTE).min(0.05 * length),
            clock_stops,
        };
        let sleeps = vec![sleep(rng, 0.12, 0.18, true), sleep(rng, 0.52, 0.58, false)];
        let agent_restarts = [(0.30, 0.34), (0.70, 0.74), (0.86, 0.90)]
            .into_iter()
            .map(|(from, to)| Gap {
                at: within(rng, from, to),
                len: S + rng.f64() * 19.0 * S,
            })
            .collect();
        let outage = |rng: &mut fastrand::Rng, from: f64, to: f64, step: bool| Outage {
            gap: Gap {
                at: within(rng, from, to),
                len: (6.0 * HOUR + rng.f64() * 6.0 * HOUR).min(0.1 * length),
            },
            step,
        };
        let outages = vec![
            outage(rng, 0.20, 0.24, true),
            outage(rng, 0.60, 0.64, false),
        ];
        Scenario {
            length,
            probe_restarts,
            sleeps,
            agent_restarts,
            outages,
            wander: (2e-6, 0.5e-6),
            chrony: true,
        }
    }
}

/// A crystal's frequency error: a constant and a diurnal sinusoid.
#[derive(Clone, Copy, Debug)]
struct Crystal {
    offset: f64,
    amplitude: f64,
    phase: f64,
}

impl Crystal {
    fn frequency(&self, t: f64) -> f64 {
        self.offset + self.amplitude * (TAU * t / DAY + self.phase).sin()
    }

    /// What it gains from `a` to `b`, ns.
    fn gain(&self, a: f64, b: f64) -> f64 {
        self.offset * (b - a)
            + self.amplitude * DAY / TAU
                * ((TAU * a / DAY + self.phase).cos() - (TAU * b / DAY + self.phase).cos())
    }
}

/// From one chrony update to the next.
#[derive(Clone, Copy, Debug)]
struct Update {
    at: f64,
    /// The clock's offset from true time then, ns.
    offset: f64,
    /// chrony's frequency correction.
    frequency: f64,
    /// The slew's rate, and when it ends.
    slew: f64,
    slew_end: f64,
}

/// A host's clock: its crystal under chrony's corrections.
#[derive(Clone, Debug)]
struct Disciplined {
    crystal: Crystal,
    updates: Vec<Update>,
}

impl Disciplined {
    /// The clock's offset from true time at `t`.
    fn offset(&self, t: f64) -> f64 {
        let i = self
            .updates
            .partition_point(|u| u.at <= t)
            .saturating_sub(1);
        let u = &self.updates[i];
        u.offset
            + self.crystal.gain(u.at, t)
            + u.frequency * (t - u.at)
            + u.slew * (t.min(u.slew_end) - u.at).max(0.0)
    }
}

/// chrony's settings and noise for one host.
struct Chrony {
    /// Its offset deviation, ns.
    deviation: f64,
    /// Its frequency estimate's error, dimensionless.
    frequency_error: f64,
}

/// Something that happened, for the report and for naming the cause of a miss.
#[derive(Clone, Debug, Serialize)]
pub struct Event {
    /// When, true s from the run's start.
    pub at_s: f64,
    /// What.
    pub kind: &'static str,
    /// Its size.
    pub detail: String,
}

/// Slews faster than this are events: the region model allows its clocks
/// to wander 1 ppm from one drift.
const NOTABLE_SLEW: f64 = 1e-6;

fn normal(rng: &mut fastrand::Rng) -> f64 {
    let u = 1.0 - rng.f64();
    (-2.0 * u.ln()).sqrt() * (TAU * rng.f64()).cos()
}

/// chrony's updates over a run: `outages` hold them off, and when one ends
/// the error found is stepped (on the wall clock: the offsets returned
/// exclude steps, which go to `steps`) or slewed; `asleep` postpones an
/// update to the wake.
#[allow(clippy::too_many_arguments)]
fn discipline(
    rng: &mut fastrand::Rng,
    crystal: Crystal,
    chrony: &Chrony,
    length: f64,
    outages: &[Outage],
    asleep: impl Fn(f64) -> Option<f64>,
    host: &'static str,
    events: &mut Vec<Event>,
) -> Disciplined {
    let mut clock = Disciplined {
        crystal,
        updates: vec![Update {
            at: 0.0,
            offset: normal(rng) * chrony.deviation,
            frequency: -crystal.frequency(0.0) + normal(rng) * chrony.frequency_error,
            slew: 0.0,
            slew_end: 0.0,
        }],
    };
    // The wall clock's steps so far (the device's only).
    let mut stepped = 0.0;
    let mut t = 0.0;
    loop {
        let poll = [64.0, 128.0, 256.0][rng.usize(..3)] * S;
        let mut next = t + poll;
        let mut back_from = None;
        for o in outages {
            if t < o.gap.at + o.gap.len && next > o.gap.at {
                next = next.max(o.gap.at + o.gap.len);
                back_from = Some(o);
            }
        }
        if let Some(wake) = asleep(next) {
            next = wake;
        }
        if next >= length {
            break;
        }
        let offset = clock.offset(next);
        let found = offset + stepped + normal(rng) * chrony.deviation / 3.0;
        let frequency =
            -crystal.frequency(next - 3.0 * poll) + normal(rng) * chrony.frequency_error;
        let (mut slew, mut slew_end) = (0.0, next);
        match back_from {
            Some(o) if o.step => {
                stepped -= found;
                events.push(Event {
                    at_s: next / S,
                    kind: "device NTP back: wall step",
                    detail: format!(
                        "after {:.1} h, wall clock stepped {:+.3} ms (monotonic clock untouched)",
                        o.gap.len / HOUR,
                        -found / 1e6
                    ),
                });
            }
            _ => {
                let mut duration = (1.5 * chrony.deviation * poll / found.abs()).max(S);
                slew = -found / duration;
                if slew.abs() > MAX_SLEW {
                    slew = MAX_SLEW.copysign(slew);
                    duration = found.abs() / MAX_SLEW;
                }
                slew_end = next + duration;
                if let Some(o) = back_from {
                    events.push(Event {
                        at_s: next / S,
                        kind: "device NTP back: slew",
                        detail: format!(
                            "after {:.1} h, {:+.3} ms slewed at {:+.0} ppm over {:.2} s",
                            o.gap.len / HOUR,
                            -found / 1e6,
                            slew * 1e6,
                            duration / S
                        ),
                    });
                } else if slew.abs() > NOTABLE_SLEW {
                    events.push(Event {
                        at_s: next / S,
                        kind: if host == "device" {
                            "device chrony slew over 1 ppm"
                        } else {
                            "agent chrony slew over 1 ppm"
                        },
                        detail: format!(
                            "{:+.1} µs at {:+.2} ppm over {:.0} s",
                            -found / 1e3,
                            slew * 1e6,
                            duration / S
                        ),
                    });
                }
            }
        }
        clock.updates.push(Update {
            at: next,
            offset,
            frequency,
            slew,
            slew_end,
        });
        t = next;
    }
    clock
}

/// A stretch where the device's clock stood still.
#[derive(Clone, Copy, Debug)]
struct Stop {
    at: f64,
    end: f64,
    /// What its clock would have counted meanwhile.
    missed: f64,
}

/// A run's clocks and what happens to them, as functions of true time.
pub struct World {
    scenario: Scenario,
    device_clock: DeviceClock,
    device: Disciplined,
    agent: Disciplined,
    stops: Vec<Stop>,
    /// The device's monotonic clock at true time 0 (ns).
    mono_base: u64,
    events: Vec<Event>,
}

impl World {
    /// The world of `scenario`, its clocks drawn from `rng`; `limit_ns` is the
    /// link's physical limit (the device's NTP measures over that link).
    pub fn new(
        scenario: Scenario,
        device_clock: DeviceClock,
        limit_ns: f64,
        rng: &mut fastrand::Rng,
    ) -> World {
        let device_crystal = Crystal {
            offset: (rng.f64() * 2.0 - 1.0) * 30e-6,
            amplitude: scenario.wander.0,
            phase: rng.f64() * TAU,
        };
        let agent_crystal = Crystal {
            offset: (rng.f64() * 2.0 - 1.0) * 10e-6,
            amplitude: scenario.wander.1,
            phase: rng.f64() * TAU,
        };
        let mut events = Vec::new();
        let sleeps = scenario.sleeps.clone();
        let asleep = |t: f64| {
            sleeps
                .iter()
                .find(|s| s.at <= t && t < s.at + s.len)
                .map(|s| s.at + s.len)
        };
        let free = |crystal: Crystal| Disciplined {
            crystal,
            updates: vec![Update {
                at: 0.0,
                offset: 0.0,
                frequency: 0.0,
                slew: 0.0,
                slew_end: 0.0,
            }],
        };
        let (device, agent) = if scenario.chrony {
            let device = discipline(
                rng,
                device_crystal,
                &Chrony {
                    deviation: (limit_ns / 5.0).max(20e3),
                    frequency_error: 0.05e-6,
                },
                scenario.length,
                &scenario.outages,
                asleep,
                "device",
                &mut events,
            );
            let agent = discipline(
                rng,
                agent_crystal,
                &Chrony {
                    deviation: 20e3,
                    frequency_error: 0.01e-6,
                },
                scenario.length,
                &[],
                |_| None,
                "agent",
                &mut events,
            );
            (device, agent)
        } else {
            (free(device_crystal), free(agent_crystal))
        };
        for (i, &at) in scenario.probe_restarts.iter().enumerate() {
            events.push(Event {
                at_s: at / S,
                kind: "probe restart",
                detail: format!("restart {}", i + 1),
            });
        }
        for s in &scenario.sleeps {
            events.push(Event {
                at_s: s.at / S,
                kind: if s.clock_stops {
                    "sleep, clock stopped"
                } else {
                    "sleep, clock ran"
                },
                detail: format!("asleep {:.1} min", s.len / MINUTE),
            });
            events.push(Event {
                at_s: (s.at + s.len) / S,
                kind: if s.clock_stops {
                    "wake, clock had stopped"
                } else {
                    "wake, clock had run"
                },
                detail: format!("after {:.1} min", s.len / MINUTE),
            });
        }
        for g in &scenario.agent_restarts {
            events.push(Event {
                at_s: (g.at + g.len) / S,
                kind: "agent back",
                detail: format!("after {:.1} s down", g.len / S),
            });
        }
        for o in &scenario.outages {
            events.push(Event {
                at_s: o.gap.at / S,
                kind: "device NTP lost",
                detail: format!("for {:.1} h", o.gap.len / HOUR),
            });
        }
        events.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        let mut world = World {
            scenario,
            device_clock,
            device,
            agent,
            stops: Vec::new(),
            mono_base: 1_000_000_000_000 + rng.u64(0..1_000_000_000_000),
            events,
        };
        let mut stops: Vec<Stop> = world
            .scenario
            .sleeps
            .iter()
            .filter(|s| s.clock_stops)
            .map(|s| Stop {
                at: s.at,
                end: s.at + s.len,
                missed: world.free_clock(s.at + s.len) - world.free_clock(s.at),
            })
            .collect();
        stops.sort_by(|a, b| a.at.total_cmp(&b.at));
        world.stops = stops;
        world
    }

    /// The device's clock as if it never stopped, ns from its base.
    fn free_clock(&self, t: f64) -> f64 {
        match self.device_clock {
            DeviceClock::Monotonic => t + self.device.offset(t),
            DeviceClock::Raw => t + self.device.crystal.gain(0.0, t),
        }
    }

    /// The device's clock (the one the probe stamps with) at true time `t`,
    /// ns from its base.
    pub fn device(&self, t: f64) -> f64 {
        let free = self.free_clock(t);
        let mut stopped = 0.0;
        for s in &self.stops {
            if s.at >= t {
                break;
            }
            stopped += if t >= s.end {
                s.missed
            } else {
                free - self.free_clock(s.at)
            };
        }
        free - stopped
    }

    /// The device's clock as the probe reads it at `t`.
    pub fn device_ns(&self, t: f64) -> u64 {
        self.mono_base + self.device(t).round() as u64
    }

    /// The agent's wall clock at `t`, ns from its base.
    pub fn agent(&self, t: f64) -> f64 {
        t + self.agent.offset(t)
    }

    /// The agent's wall clock as it reads it at `t`.
    pub fn agent_ns(&self, t: f64) -> u64 {
        (AGENT_BASE as i128 + self.agent(t).round() as i128) as u64
    }

    /// The truth at device clock reading `m` (read at `t`): the agent's wall
    /// clock minus it, ns relative to `AGENT_BASE − mono_base`.
    pub fn psi(&self, t: f64, m: u64) -> f64 {
        self.agent(t) - (m - self.mono_base) as f64
    }

    /// ψ's base: `AGENT_BASE − mono_base`.
    pub fn psi_base(&self) -> i128 {
        AGENT_BASE as i128 - self.mono_base as i128
    }

    /// When the device sleeps at `t`, its wake.
    pub fn asleep(&self, t: f64) -> Option<f64> {
        self.scenario
            .sleeps
            .iter()
            .find(|s| s.at <= t && t < s.at + s.len)
            .map(|s| s.at + s.len)
    }

    /// Whether the device slept at any time in `[a, b]`.
    fn slept_between(&self, a: f64, b: f64) -> bool {
        self.scenario
            .sleeps
            .iter()
            .any(|s| s.at <= b && a < s.at + s.len)
    }

    /// Whether the agent is down (restarting) at `t`.
    fn agent_down(&self, t: f64) -> bool {
        self.scenario
            .agent_restarts
            .iter()
            .any(|g| g.at <= t && t < g.at + g.len)
    }

    /// The first true time from `from` on when the device's clock reads
    /// `m` (ns from its base) or more, moved to the wake when the device
    /// sleeps then: when a timer for `m` fires.
    pub fn when_device_reads(&self, m: f64, from: f64) -> f64 {
        let (mut lo, mut at_lo) = (from, self.device(from));
        if at_lo >= m {
            return self.asleep(from).unwrap_or(from);
        }
        // A time the clock reads m or more: it runs within 10 % of true
        // time, but stands still through a stop.
        let mut hi = lo;
        let mut at_hi = at_lo;
        while at_hi < m {
            (lo, at_lo) = (hi, at_hi);
            hi = match self.stops.iter().find(|s| s.at <= hi && hi < s.end) {
                Some(s) => s.end,
                None => hi + (m - at_hi) * 1.2 + 1.0,
            };
            at_hi = self.device(hi);
        }
        // Then narrow [lo, hi) down to a nanosecond.
        for i in 0..200 {
            if hi - lo <= 1.0 {
                break;
            }
            let mid = if i % 3 == 2 || at_hi <= at_lo {
                (lo + hi) / 2.0
            } else {
                (lo + (m - at_lo) / (at_hi - at_lo) * (hi - lo)).clamp(lo + 0.25, hi - 0.25)
            };
            let at_mid = self.device(mid);
            if at_mid >= m {
                (hi, at_hi) = (mid, at_mid);
            } else {
                (lo, at_lo) = (mid, at_mid);
            }
        }
        self.asleep(hi).unwrap_or(hi)
    }

    /// Everything that happened, in order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }
}

/// The least of a sliding window, for the physical limit.
#[derive(Default)]
struct MinWindow {
    /// (sent, value), values increasing.
    items: VecDeque<(f64, f64)>,
}

impl MinWindow {
    fn push(&mut self, at: f64, value: f64) {
        while self.items.back().is_some_and(|&(_, v)| v >= value) {
            self.items.pop_back();
        }
        self.items.push_back((at, value));
    }

    fn forget_before(&mut self, at: f64) {
        while self.items.front().is_some_and(|&(t, _)| t < at) {
            self.items.pop_front();
        }
    }

    fn least(&self) -> Option<f64> {
        self.items.front().map(|&(_, v)| v)
    }

    fn clear(&mut self) {
        self.items.clear();
    }
}

/// A miss: a query whose truth was outside the bound claimed.
#[derive(Clone, Debug, Serialize)]
pub struct Miss {
    /// The run's seed.
    pub seed: u64,
    /// When, true s from the run's start.
    pub at_s: f64,
    /// |estimate − truth|, ns.
    pub error_ns: f64,
    /// The bound claimed, ns.
    pub bound_ns: f64,
    /// The latest event before it.
    pub cause: String,
    /// How long before the miss that event was, s.
    pub since_s: Option<f64>,
    /// The drift range the region model allowed then, ppm.
    pub drift_ppm: Option<(f64, f64)>,
}

/// What is gathered for one model.
#[derive(Clone, Debug, Default)]
struct Samples {
    errors: Hist,
    start_errors: Hist,
    day_errors: Vec<Hist>,
    ratios: Hist,
    start_ratios: Hist,
    settled_ratios: Hist,
    day_ratios: Vec<Hist>,
    bounded: u64,
    inside: u64,
    sigma_answers: u64,
    sigma_inside: [u64; 3],
    causes: BTreeMap<String, u64>,
    misses: Vec<Miss>,
}

impl Samples {
    fn merge(&mut self, other: &Samples) {
        self.errors.merge(&other.errors);
        self.start_errors.merge(&other.start_errors);
        self.ratios.merge(&other.ratios);
        self.start_ratios.merge(&other.start_ratios);
        self.settled_ratios.merge(&other.settled_ratios);
        for (mine, theirs) in [
            (&mut self.day_errors, &other.day_errors),
            (&mut self.day_ratios, &other.day_ratios),
        ] {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), Hist::default());
            }
            for (a, b) in mine.iter_mut().zip(theirs) {
                a.merge(b);
            }
        }
        self.bounded += other.bounded;
        self.inside += other.inside;
        self.sigma_answers += other.sigma_answers;
        for (a, b) in self.sigma_inside.iter_mut().zip(other.sigma_inside) {
            *a += b;
        }
        for (cause, n) in &other.causes {
            *self.causes.entry(cause.clone()).or_default() += n;
        }
        self.misses.extend(other.misses.iter().cloned());
    }
}

/// One run's result.
#[derive(Default)]
struct RunResult {
    exchanges: u64,
    answered: u64,
    queries: u64,
    limits: Hist,
    models: Vec<Samples>,
    events: Vec<Event>,
}

/// One run of one profile: the device, the link, the agent, the models.
struct Run<'w> {
    world: &'w World,
    seed: u64,
    options: Options,
    link: LinkModel,
    rng: fastrand::Rng,
    models: Models,
    schedule: Schedule,
    /// When the models last started.
    started: f64,
    next_query: f64,
    ups: MinWindow,
    downs: MinWindow,
    /// Index of the next event not yet passed.
    next_event: usize,
    result: RunResult,
}

impl<'w> Run<'w> {
    fn new(world: &'w World, profile: Profile, options: Options, seed: u64) -> Run<'w> {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x9e37_79b9_7f4a_7c15);
        let first_query = 250e6 * (0.5 + rng.f64());
        let days = (world.scenario.length / DAY).ceil().max(1.0) as usize;
        let samples = Samples {
            day_errors: vec![Hist::default(); days],
            day_ratios: vec![Hist::default(); days],
            ..Samples::default()
        };
        Run {
            world,
            seed,
            options,
            link: LinkModel::new(profile, seed),
            rng,
            models: Models::default(),
            schedule: Schedule::new(world.device_ns(0.0), options.interval_ns),
            started: 0.0,
            next_query: first_query,
            ups: MinWindow::default(),
            downs: MinWindow::default(),
            next_event: 0,
            result: RunResult {
                models: vec![samples; MODELS.len()],
                ..RunResult::default()
            },
        }
    }

    /// The moments the models start again after the start: probe restarts,
    /// and (when the probe sees them) wakes.
    fn restarts(&self) -> Vec<f64> {
        let w = self.world;
        let mut at: Vec<f64> = w
            .scenario
            .probe_restarts
            .iter()
            .map(|&t| w.asleep(t).unwrap_or(t))
            .collect();
        if self.options.sleep_seen {
            at.extend(w.scenario.sleeps.iter().map(|s| s.at + s.len));
        }
        at.sort_by(f64::total_cmp);
        at
    }

    /// The moments the physical limit forgets the exchanges before:
    /// restarts, and wakes after the device's clock stopped.
    fn limit_resets(&self, restarts: &[f64]) -> Vec<f64> {
        let mut at: Vec<f64> = restarts.to_vec();
        at.extend(self.world.stops.iter().map(|s| s.end));
        at.sort_by(f64::total_cmp);
        at
    }

    fn go(mut self) -> RunResult {
        let end = self.world.scenario.length;
        let restarts = self.restarts();
        let mut limit_resets = self.limit_resets(&restarts).into_iter().peekable();
        let mut restarts = restarts.into_iter().peekable();
        let mut now = 0.0;
        loop {
            let due = self.schedule.next_request_at();
            let t1 = self
                .world
                .when_device_reads((due - self.world.mono_base) as f64, now);
            if let Some(&r) = restarts.peek()
                && r <= t1.min(end)
            {
                restarts.next();
                self.restart(r, &mut limit_resets);
                now = r;
                continue;
            }
            if t1 >= end {
                self.queries_until(end, &mut limit_resets);
                break;
            }
            self.result.exchanges += 1;
            let answer = self.exchange(t1);
            let done = match &answer {
                Some((_, t4, ..)) => *t4,
                None => self
                    .world
                    .when_device_reads(self.world.device(t1).round() + ANSWER_WAIT, t1),
            };
            // The probe restarted (or woke, seeing it) with this exchange out:
            // it went with the models it was for.
            if let Some(&r) = restarts.peek()
                && r <= done
            {
                restarts.next();
                self.restart(r, &mut limit_resets);
                now = r;
                continue;
            }
            self.queries_until(done, &mut limit_resets);
            if let Some((sample, _, up, down)) = answer {
                self.result.answered += 1;
                self.models.add(&sample);
                self.ups.push(t1, up);
                self.downs.push(t1, down);
            }
            let done_ns = self.world.device_ns(done);
            self.schedule
                .done(done_ns, self.models.region.at(done_ns).as_ref());
            now = done;
        }
        self.result.events = self
            .world
            .events()
            .iter()
            .filter(|e| !e.kind.contains("chrony"))
            .cloned()
            .collect();
        self.result
    }

    /// The models and the schedule start again at `r`.
    fn restart(&mut self, r: f64, limit_resets: &mut std::iter::Peekable<std::vec::IntoIter<f64>>) {
        self.queries_until(r, limit_resets);
        self.models = Models::default();
        self.schedule = Schedule::new(self.world.device_ns(r), self.options.interval_ns);
        self.started = r;
    }

    /// One exchange sent at `t1`: the sample, when its reply came, and its
    /// true one-way delays; `None` when no reply came in time.
    fn exchange(&mut self, t1: f64) -> Option<(TimeSample, f64, f64, f64)> {
        let w = self.world;
        let link_time = |t: f64| LINK_BASE + t.round() as u64;
        let Fate::Deliver { at_ns } =
            self.link
                .fate(Direction::Up, Carrier::Udp, link_time(t1), 48)
        else {
            return None;
        };
        let arrived = (at_ns - LINK_BASE) as f64;
        if w.agent_down(arrived) {
            return None;
        }
        let read = arrived + self.rng.u64(5_000..30_000) as f64;
        let leave = read + self.rng.u64(5_000..20_000) as f64;
        let Fate::Deliver { at_ns } =
            self.link
                .fate(Direction::Down, Carrier::Udp, link_time(leave), 48)
        else {
            return None;
        };
        let back = (at_ns - LINK_BASE) as f64;
        if w.slept_between(t1, back) {
            return None;
        }
        let (m1, m4) = (w.device_ns(t1), w.device_ns(back));
        if (m4 - m1) as f64 > ANSWER_WAIT {
            return None;
        }
        // The models that read walls see the device clock as its wall: every
        // model works on the same times.
        let stamp = |m: u64| Stamp {
            wall_ns: m,
            mono_ns: m,
        };
        Some((
            TimeSample {
                t1: stamp(m1),
                t2_wall_ns: w.agent_ns(read),
                t3_wall_ns: w.agent_ns(leave),
                t4: stamp(m4),
            },
            back,
            read - t1,
            back - leave,
        ))
    }

    /// Asks every model at the query moments before `until`.
    fn queries_until(
        &mut self,
        until: f64,
        limit_resets: &mut std::iter::Peekable<std::vec::IntoIter<f64>>,
    ) {
        let w = self.world;
        while self.next_query < until {
            let t = self.next_query;
            let since_start = t - self.started;
            self.next_query += if since_start < SETTLED {
                250e6 * (0.5 + self.rng.f64())
            } else {
                S * (0.5 + self.rng.f64())
            };
            if let Some(wake) = w.asleep(t) {
                self.next_query = self.next_query.max(wake);
                continue;
            }
            while limit_resets.peek().is_some_and(|&r| r <= t) {
                limit_resets.next();
                self.ups.clear();
                self.downs.clear();
            }
            let horizon = t - HORIZON_NS as f64;
            self.ups.forget_before(horizon);
            self.downs.forget_before(horizon);
            // No limit before the first reply since the models started or
            // the clock stopped: answers count, but no ratio.
            let limit = match (self.ups.least(), self.downs.least()) {
                (Some(up), Some(down)) => Some((up + down) / 2.0),
                _ => None,
            };
            self.result.queries += 1;
            if let Some(limit) = limit {
                self.result.limits.add(limit);
            }
            let q = w.device_ns(t);
            let psi = w.psi(t, q);
            let base = w.psi_base();
            let day = ((t / DAY) as usize).min(self.result.models[0].day_errors.len() - 1);
            while self.next_event < w.events.len() && w.events[self.next_event].at_s * S <= t {
                self.next_event += 1;
            }
            for (i, answer) in self.models.answers(q).into_iter().enumerate() {
                let Some(a) = answer else { continue };
                let error = ((i128::from(a.estimate) - base) as f64 - psi).abs();
                let s = &mut self.result.models[i];
                s.errors.add(error);
                s.day_errors[day].add(error);
                if since_start < START_UP {
                    s.start_errors.add(error);
                }
                if let Some(sigma) = a.sigma {
                    s.sigma_answers += 1;
                    for (k, inside) in s.sigma_inside.iter_mut().enumerate() {
                        *inside += u64::from(error <= (k + 1) as f64 * sigma + 1.0);
                    }
                }
                let Some(bound) = a.bound else { continue };
                s.bounded += 1;
                if let Some(limit) = limit {
                    let ratio = bound / limit;
                    s.ratios.add(ratio);
                    if since_start < START_UP {
                        s.start_ratios.add(ratio);
                    }
                    if since_start >= SETTLED {
                        s.settled_ratios.add(ratio);
                        s.day_ratios[day].add(ratio);
                    }
                }
                if error <= bound + 1.0 {
                    s.inside += 1;
                    continue;
                }
                // A miss: name the latest event before it.
                let latest = self.next_event.checked_sub(1).map(|i| &w.events[i]);
                let since_s = latest.map(|e| t / S - e.at_s);
                let cause = latest.map_or("none", |e| e.kind).to_owned();
                let key = match since_s {
                    None => cause.clone(),
                    Some(x) if x <= 10.0 => format!("{cause} (≤ 10 s before)"),
                    Some(x) if x <= 120.0 => format!("{cause} (10 s-2 min before)"),
                    Some(_) => format!("{cause} (over 2 min before)"),
                };
                *s.causes.entry(key).or_default() += 1;
                if s.misses.len() < MISSES_KEPT {
                    let detail = latest.map_or(String::new(), |e| format!(": {}", e.detail));
                    s.misses.push(Miss {
                        seed: self.seed,
                        at_s: t / S,
                        error_ns: error,
                        bound_ns: bound,
                        cause: cause + &detail,
                        since_s,
                        drift_ppm: a.drift_ppm,
                    });
                }
            }
        }
    }
}

/// One model's figures over a profile's runs.
#[derive(Clone, Debug, Serialize)]
pub struct ModelFigures {
    /// The model.
    pub model: &'static str,
    /// Queries it answered.
    pub answered: u64,
    /// Of those, with a bound.
    pub bounded: u64,
    /// Of those, the truth outside the bound.
    pub outside: u64,
    /// The share inside.
    pub inside: Option<f64>,
    /// The Kalman filter's: the share within 1σ, 2σ, 3σ.
    pub inside_sigmas: Option<[f64; 3]>,
    /// Bound ÷ physical limit: p50, p99.
    pub bound_ratio_p50: Option<f64>,
    /// …
    pub bound_ratio_p99: Option<f64>,
    /// In a model's first 10 s: p99, and over how many answers.
    pub start_bound_ratio_p99: Option<f64>,
    /// …
    pub start_answers: u64,
    /// After its first minute: p99.
    pub settled_bound_ratio_p99: Option<f64>,
    /// |estimate − truth|, ns: p50, p99, max.
    pub error_p50_ns: Option<f64>,
    /// …
    pub error_p99_ns: Option<f64>,
    /// …
    pub error_max_ns: f64,
    /// In a model's first 10 s: p99.
    pub start_error_p99_ns: Option<f64>,
    /// p99 of |error| on each day.
    pub day_error_p99_ns: Vec<Option<f64>>,
    /// p99 of bound ÷ limit after the first minute, each day.
    pub day_settled_bound_ratio_p99: Vec<Option<f64>>,
    /// Misses by the latest event before them.
    pub misses_by_cause: BTreeMap<String, u64>,
    /// The first misses of each run, described.
    pub misses: Vec<Miss>,
}

/// One profile's figures.
#[derive(Clone, Debug, Serialize)]
pub struct ProfileFigures {
    /// The link.
    pub profile: &'static str,
    /// Runs.
    pub runs: u32,
    /// Exchanges sent, and answered in time.
    pub exchanges: u64,
    /// …
    pub answered: u64,
    /// Queries asked (the device awake).
    pub queries: u64,
    /// The physical limit, median over the queries, ns.
    pub limit_p50_ns: Option<f64>,
    /// Per model.
    pub models: Vec<ModelFigures>,
    /// What happened in each run (chrony's routine slews left out).
    pub events: Vec<RunEvents>,
}

/// One run's events.
#[derive(Clone, Debug, Serialize)]
pub struct RunEvents {
    /// Its seed.
    pub seed: u64,
    /// In order.
    pub events: Vec<Event>,
}

/// The seed of run `run` of `profile`.
pub fn run_seed(seed: u64, profile: &Profile, run: u32) -> u64 {
    let name = profile.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ name ^ (u64::from(run) << 32)
}

/// The world and scenario of one run.
pub fn world(profile: &Profile, options: &Options, seed: u64) -> World {
    let mut rng = fastrand::Rng::with_seed(seed);
    let scenario = Scenario::field(options.days, &mut rng);
    World::new(
        scenario,
        options.device_clock,
        profile.physical_limit_ns() as f64,
        &mut rng,
    )
}

/// Runs `world` over `profile`'s link.
fn run_world(world: &World, profile: Profile, options: Options, seed: u64) -> RunResult {
    Run::new(world, profile, options, seed).go()
}

/// Runs every profile: `options.runs` runs of `options.days` each, spread
/// over `options.threads` threads (each run is seeded alone, so the figures
/// do not depend on the threads).
pub fn run(profiles: &[Profile], options: Options) -> Vec<ProfileFigures> {
    let jobs: Vec<(usize, u32)> = (0..profiles.len())
        .flat_map(|p| (0..options.runs).map(move |r| (p, r)))
        .collect();
    let results: Mutex<Vec<Option<(u64, RunResult)>>> =
        Mutex::new((0..jobs.len()).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..options.threads.max(1) {
            scope.spawn(|| {
                loop {
                    let j = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(p, r)) = jobs.get(j) else { break };
                    let profile = profiles[p];
                    let seed = run_seed(options.seed, &profile, r);
                    let world = world(&profile, &options, seed);
                    let result = run_world(&world, profile, options, seed);
                    results.lock().unwrap_or_else(|e| e.into_inner())[j] = Some((seed, result));
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut by_profile: Vec<Vec<(u64, RunResult)>> = profiles.iter().map(|_| Vec::new()).collect();
    for (&(p, _), r) in jobs.iter().zip(results) {
        by_profile[p].push(r.expect("every job ran"));
    }
    profiles
        .iter()
        .zip(by_profile)
        .map(|(profile, runs)| figures(profile, options.runs, runs))
        .collect()
}

fn figures(profile: &Profile, runs: u32, results: Vec<(u64, RunResult)>) -> ProfileFigures {
    let mut all = RunResult {
        models: vec![Samples::default(); MODELS.len()],
        ..RunResult::default()
    };
    let mut events = Vec::new();
    for (seed, r) in results {
        all.exchanges += r.exchanges;
        all.answered += r.answered;
        all.queries += r.queries;
        all.limits.merge(&r.limits);
        for (a, b) in all.models.iter_mut().zip(&r.models) {
            a.merge(b);
        }
        events.push(RunEvents {
            seed,
            events: r.events,
        });
    }
    ProfileFigures {
        profile: profile.name,
        runs,
        exchanges: all.exchanges,
        answered: all.answered,
        queries: all.queries,
        limit_p50_ns: all.limits.quantile(0.5),
        models: MODELS
            .iter()
            .zip(all.models)
            .map(|(&model, s)| ModelFigures {
                model,
                answered: s.errors.len(),
                bounded: s.bounded,
                outside: s.bounded - s.inside,
                inside: (s.bounded > 0).then(|| s.inside as f64 / s.bounded as f64),
                inside_sigmas: (s.sigma_answers > 0)
                    .then(|| s.sigma_inside.map(|i| i as f64 / s.sigma_answers as f64)),
                bound_ratio_p50: s.ratios.quantile(0.5),
                bound_ratio_p99: s.ratios.quantile(0.99),
                start_bound_ratio_p99: s.start_ratios.quantile(0.99),
                start_answers: s.start_ratios.len(),
                settled_bound_ratio_p99: s.settled_ratios.quantile(0.99),
                error_p50_ns: s.errors.quantile(0.5),
                error_p99_ns: s.errors.quantile(0.99),
                error_max_ns: s.errors.max(),
                start_error_p99_ns: s.start_errors.quantile(0.99),
                day_error_p99_ns: s.day_errors.iter().map(|h| h.quantile(0.99)).collect(),
                day_settled_bound_ratio_p99: s
                    .day_ratios
                    .iter()
                    .map(|h| h.quantile(0.99))
                    .collect(),
                misses_by_cause: s.causes,
                misses: s.misses,
            })
            .collect(),
        events,
    }
}

fn us(ns: Option<f64>) -> String {
    match ns {
        None => "-".into(),
        Some(ns) if ns >= 10e6 => format!("{:.1} ms", ns / 1e6),
        Some(ns) => format!("{:.0} µs", ns / 1e3),
    }
}

fn ratio(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.2}"))
}

/// When, as day, hours, minutes and seconds from the run's start.
fn when(at_s: f64) -> String {
    let day = (at_s / 86_400.0).floor();
    let rest = at_s - day * 86_400.0;
    format!(
        "d{} {:02}:{:02}:{:06.3}",
        day as u64 + 1,
        (rest / 3_600.0).floor() as u64,
        ((rest % 3_600.0) / 60.0).floor() as u64,
        rest % 60.0
    )
}

/// The figures as the docs quote them.
pub fn print(figures: &[ProfileFigures], options: &Options, seconds_taken: f64) {
    let answered: u64 = figures.iter().map(|p| p.models[0].answered).sum();
    println!(
        "clock models over days: {} runs × {} days per profile, device clock {:?}{}, a pair every {} ms; {} questions answered by the region model in all; {:.0} s",
        options.runs,
        options.days,
        options.device_clock,
        if options.sleep_seen {
            ", sleeps seen"
        } else {
            ""
        },
        options.interval_ns / 1_000_000,
        answered,
        seconds_taken,
    );
    println!(
        "{:<10} {:>9} {:<16} {:>10} {:>8} {:>12} {:>7} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9}   p99 |error| by day",
        "profile",
        "limit p50",
        "model",
        "answered",
        "outside",
        "inside",
        "b/l p50",
        "10s p99",
        "1m+ p99",
        "err p50",
        "err p99",
        "err max",
        "10s err"
    );
    for p in figures {
        for (i, m) in p.models.iter().enumerate() {
            let by_day: Vec<String> = m.day_error_p99_ns.iter().map(|&d| us(d)).collect();
            println!(
                "{:<10} {:>9} {:<16} {:>10} {:>8} {:>12} {:>7} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9}   {}",
                if i == 0 { p.profile } else { "" },
                if i == 0 {
                    us(p.limit_p50_ns)
                } else {
                    String::new()
                },
                m.model,
                m.answered,
                if m.inside.is_some() {
                    m.outside.to_string()
                } else {
                    "-".into()
                },
                m.inside.map_or("no bound".into(), share),
                ratio(m.bound_ratio_p50),
                ratio(m.start_bound_ratio_p99),
                ratio(m.settled_bound_ratio_p99),
                us(m.error_p50_ns),
                us(m.error_p99_ns),
                us(Some(m.error_max_ns)),
                us(m.start_error_p99_ns),
                by_day.join(" "),
            );
        }
    }
    // What the schedule cost: the link and the agent carry each of these.
    for p in figures {
        let hours = f64::from(p.runs) * options.days * 24.0;
        println!(
            "{}: {} exchanges sent ({:.0} a device-hour), {} answered in time",
            p.profile,
            p.exchanges,
            p.exchanges as f64 / hours.max(1.0),
            p.answered
        );
    }
    println!("bound ÷ limit p99 after the first minute, by day:");
    for p in figures {
        for m in p.models.iter().filter(|m| m.inside.is_some()) {
            let by_day: Vec<String> = m
                .day_settled_bound_ratio_p99
                .iter()
                .map(|&d| ratio(d))
                .collect();
            println!("  {:<10} {:<16} {}", p.profile, m.model, by_day.join(" "));
        }
    }
    for p in figures {
        for m in &p.models {
            if let Some([one, two, three]) = m.inside_sigmas {
                println!(
                    "{}: {} truth within 1σ {}, 2σ {}, 3σ {}",
                    p.profile,
                    m.model,
                    share(one),
                    share(two),
                    share(three)
                );
            }
        }
    }
    println!("misses, by the latest event before them:");
    for p in figures {
        for m in p.models.iter().filter(|m| m.outside > 0) {
            let causes: Vec<String> = m
                .misses_by_cause
                .iter()
                .map(|(c, n)| format!("{c}: {n}"))
                .collect();
            println!("  {:<10} {:<16} {}", p.profile, m.model, causes.join("; "));
        }
    }
    for p in figures {
        let m = &p.models[0];
        for miss in &m.misses {
            println!(
                "  {} {} seed {:#018x} {}: off by {} with a bound of {}, {}{}{}",
                p.profile,
                m.model,
                miss.seed,
                when(miss.at_s),
                us(Some(miss.error_ns)),
                us(Some(miss.bound_ns)),
                miss.cause,
                miss.since_s
                    .map_or(String::new(), |s| format!(" ({s:.3} s before)")),
                miss.drift_ppm.map_or(String::new(), |(lo, hi)| format!(
                    "; drift allowed {lo:+.1} to {hi:+.1} ppm"
                )),
            );
        }
    }
    println!("events of each run:");
    for p in figures {
        for run in &p.events {
            let listed: Vec<String> = run
                .events
                .iter()
                .filter(|e| e.kind != "probe restart" && !e.kind.starts_with("sleep"))
                .map(|e| format!("{} {}: {}", when(e.at_s), e.kind, e.detail))
                .collect();
            println!(
                "  {:<10} seed {:#018x}: {}",
                p.profile,
                run.seed,
                listed.join("; ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(sleep_seen: bool) -> Options {
        Options {
            days: 0.0,
            runs: 1,
            seed: 1,
            interval_ns: 1_000_000_000,
            device_clock: DeviceClock::Monotonic,
            sleep_seen,
            threads: 1,
        }
    }

    /// 20 minutes: an agent restart, a sleep of two minutes (the device's
    /// clock stopping or not), a probe restart.
    fn short(clock_stops: bool) -> Scenario {
        Scenario {
            length: 20.0 * MINUTE,
            probe_restarts: vec![15.0 * MINUTE],
            sleeps: vec![Sleep {
                at: 7.0 * MINUTE,
                len: 2.0 * MINUTE,
                clock_stops,
            }],
            agent_restarts: vec![Gap {
                at: 3.0 * MINUTE,
                len: 12.0 * S,
            }],
            outages: vec![],
            wander: (2e-6, 0.5e-6),
            chrony: true,
        }
    }

    fn run_short(profile: Profile, scenario: Scenario, sleep_seen: bool, seed: u64) -> RunResult {
        let mut rng = fastrand::Rng::with_seed(seed);
        let world = World::new(
            scenario,
            DeviceClock::Monotonic,
            profile.physical_limit_ns() as f64,
            &mut rng,
        );
        run_world(&world, profile, options(sleep_seen), seed)
    }

    #[test]
    fn the_truth_stays_inside_through_a_sleep_and_an_agent_restart() {
        for (profile, seed) in [(Profile::GOOD_WIFI, 1), (Profile::WIRED, 2)] {
            // The clock runs through the sleep; and it stops, the probe seeing it.
            for (clock_stops, seen) in [(false, false), (true, true)] {
                let r = run_short(profile, short(clock_stops), seen, seed);
                let region = &r.models[0];
                assert!(region.bounded > 1_000, "{}", region.bounded);
                assert_eq!(
                    region.inside, region.bounded,
                    "{} stops {clock_stops}: {:?}",
                    profile.name, region.misses
                );
                // Nothing was answered while the agent was down or the device asleep.
                assert!(r.answered < r.exchanges);
            }
        }
    }

    #[test]
    fn an_unseen_stopped_clock_misleads_only_until_the_first_reply_after_the_wake() {
        let r = run_short(Profile::GOOD_WIFI, short(true), false, 1);
        let region = &r.models[0];
        assert!(region.bounded > region.inside, "the jump of ψ goes unseen");
        let wake = 9.0 * 60.0;
        for m in &region.misses {
            assert!(
                m.at_s >= wake && m.at_s < wake + 2.0,
                "a miss at {} s",
                m.at_s
            );
            assert!(m.error_ns > 60e9, "off by the sleep: {}", m.error_ns);
        }
    }

    #[test]
    fn a_wall_step_leaves_the_monotonic_clock_and_a_slew_moves_it() {
        let scenario = |step| Scenario {
            length: 12.0 * HOUR,
            probe_restarts: vec![],
            sleeps: vec![],
            agent_restarts: vec![],
            outages: vec![Outage {
                gap: Gap {
                    at: HOUR,
                    len: 8.0 * HOUR,
                },
                step,
            }],
            wander: (2e-6, 0.0),
            chrony: true,
        };
        for step in [true, false] {
            let mut rng = fastrand::Rng::with_seed(5);
            let w = World::new(scenario(step), DeviceClock::Monotonic, 1e6, &mut rng);
            let back = w
                .events()
                .iter()
                .find(|e| e.kind.starts_with("device NTP back"))
                .expect("NTP came back")
                .at_s
                * S;
            // Across the recovery, the device clock's rate against true time.
            let moved = (w.device(back + 2.0 * S) - w.device(back)) - 2.0 * S;
            if step {
                assert!(moved.abs() < 1e3, "{moved}");
            } else {
                assert!(moved.abs() > 1e5, "{moved}");
            }
        }
    }

    #[test]
    fn the_clock_stops_in_a_sleep_and_timers_fire_at_the_wake() {
        let mut rng = fastrand::Rng::with_seed(9);
        let w = World::new(short(true), DeviceClock::Monotonic, 1e6, &mut rng);
        let (at, end) = (7.0 * MINUTE, 9.0 * MINUTE);
        assert!((w.device(end) - w.device(at)).abs() < 1.0);
        let m = w.device(at) + 0.5 * S;
        let t = w.when_device_reads(m, at - S);
        assert!(t > end && t < end + 0.6 * S, "{t}");
        assert!((w.device(t) - m).abs() < 1.0);
        // The agent's clock ran on.
        assert!(w.agent(end) - w.agent(at) > 119.0 * S);
    }
}
