//! The clock model as properties, on seeded random exchange streams whose
//! truth is known: the truth is always inside the bound, the bound is never
//! wider than the best single exchange's, the drift never leaves the region.

use super::*;
use crate::Stamp;
use crate::clock::WANDER;
use crate::record::TimeSample;

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

/// A device and an agent whose clocks are known exactly. Device monotonic
/// time is the true time; the agent's wall clock is
/// `start + t + offset + drift·t + wander(t)`, plus `step` from `step_at`.
#[derive(Clone, Debug)]
struct Truth {
    offset_ns: f64,
    drift: f64,
    /// Amplitude of the frequency's wander (dimensionless), and its period.
    wander: f64,
    wander_period_ns: f64,
    step: Option<(u64, f64)>,
}

impl Truth {
    /// The agent's clock minus the device's monotonic one at device time `t`.
    fn psi(&self, t: u64) -> f64 {
        let tf = t as f64;
        let omega = std::f64::consts::TAU / self.wander_period_ns;
        // ∫ wander·sin(ω t) dt: the frequency stays within ±wander of drift.
        let wander = self.wander * (1.0 - (omega * tf).cos()) / omega;
        let step = match self.step {
            Some((at, size)) if t >= at => size,
            _ => 0.0,
        };
        1.7e18 + self.offset_ns + self.drift * tf + wander + step
    }

    fn agent(&self, t: u64) -> u64 {
        (t as f64 + self.psi(t)).round() as u64
    }
}

/// How a link delays one packet: a base, a jitter drawn from one of several
/// distributions, and now and then a stall.
#[derive(Clone, Copy, Debug)]
struct Way {
    base_ns: u64,
    jitter_ns: u64,
    kind: u8,
    stall_percent: u32,
}

impl Way {
    fn random(rng: &mut fastrand::Rng) -> Way {
        Way {
            base_ns: rng.u64(20_000..5 * MS),
            jitter_ns: rng.u64(0..6 * MS),
            kind: rng.u8(0..3),
            stall_percent: rng.u32(0..6),
        }
    }

    fn delay(&self, rng: &mut fastrand::Rng) -> u64 {
        let j = self.jitter_ns as f64;
        let jitter = match self.kind {
            // Exponential.
            0 => -j * (1.0 - rng.f64()).ln(),
            // Uniform.
            1 => j * rng.f64(),
            // Heavy-tailed (Pareto, shape 1.5, scaled to the same mean).
            _ => j / 3.0 * ((1.0 - rng.f64()).powf(-1.0 / 1.5) - 1.0),
        };
        let stall = if rng.u32(0..100) < self.stall_percent {
            rng.u64(30 * MS..120 * MS)
        } else {
            0
        };
        self.base_ns + jitter as u64 + stall
    }
}

/// A seeded stream of exchanges through a random link, with their one-way
/// delays, in the order made.
struct Stream {
    truth: Truth,
    samples: Vec<TimeSample>,
    /// (up, down) true one-way delays of each sample.
    delays: Vec<(u64, u64)>,
    end_ns: u64,
}

fn stream(seed: u64) -> Stream {
    let mut rng = fastrand::Rng::with_seed(seed);
    let truth = Truth {
        offset_ns: rng.f64() * 2e10 - 1e10,
        drift: (rng.f64() * 2.0 - 1.0) * 100e-6,
        wander: rng.f64() * 0.9 * WANDER,
        wander_period_ns: rng.f64() * 600e9 + 60e9,
        step: None,
    };
    let (up, down) = (Way::random(&mut rng), Way::random(&mut rng));
    let loss = rng.u32(0..20);
    let mut samples = Vec::new();
    let mut delays = Vec::new();
    let mut t = rng.u64(1..1_000) * S;
    let n = rng.usize(1..400);
    while samples.len() < n {
        // Bursts, a steady rate, and long silences.
        t += match rng.u8(0..10) {
            0..=3 => rng.u64(1..50) * MS,
            4..=8 => rng.u64(500..3_000) * MS,
            _ => rng.u64(10..600) * S,
        };
        if rng.u32(0..100) < loss {
            continue;
        }
        let (d_up, d_down) = (up.delay(&mut rng), down.delay(&mut rng));
        let arrive = t + d_up;
        let turnaround = rng.u64(1_000..200_000);
        let leave = arrive + turnaround;
        let back = leave + d_down;
        let wall = |m: u64| Stamp {
            wall_ns: m + 42,
            mono_ns: m,
        };
        samples.push(TimeSample {
            t1: wall(t),
            t2_wall_ns: truth.agent(arrive),
            t3_wall_ns: truth.agent(leave),
            t4: wall(back),
        });
        delays.push((d_up, d_down));
        t = back;
    }
    Stream {
        truth,
        samples,
        delays,
        end_ns: t + rng.u64(0..100) * S,
    }
}

impl Stream {
    fn exchanges(&self) -> Vec<Exchange> {
        self.samples
            .iter()
            .filter_map(Exchange::from_sample)
            .collect()
    }
}

/// Whether the truth at `t` lies in `e`'s interval (one ns of rounding in the
/// truth itself allowed).
fn holds(truth: &Truth, t: u64, e: &Estimate) -> bool {
    let err = (e.agent_minus_mono_ns as f64 - truth.psi(t)).abs();
    err <= e.bound_ns as f64 + 1.0
}

#[test]
fn the_truth_is_always_inside_as_exchanges_come_and_with_the_whole_run() {
    for seed in 0..300 {
        let s = stream(seed);
        let exchanges = s.exchanges();
        let whole = ClockModel::from_exchanges(exchanges.clone());
        assert_eq!(
            whole.breaks(),
            0,
            "seed {seed}: an honest stream broke the model"
        );
        let mut rng = fastrand::Rng::with_seed(seed ^ 0xabc);
        let first = exchanges[0].sent_mono_ns;
        let queries: Vec<u64> = (0..60)
            .map(|_| rng.u64(first.saturating_sub(10 * S)..s.end_ns))
            .chain(
                exchanges
                    .iter()
                    .flat_map(|e| [e.sent_mono_ns, e.received_mono_ns]),
            )
            .collect();
        for &t in &queries {
            let e = whole.at(t).unwrap();
            assert!(
                holds(&s.truth, t, &e),
                "seed {seed}, t {t}: {e:?} vs {}",
                s.truth.psi(t)
            );
            assert!(e.drift_ppb.is_finite() && e.drift_bound_ppb >= 0.0);
            let true_drift = s.truth.drift * 1e9;
            assert!(
                (e.drift_ppb - true_drift).abs() <= e.drift_bound_ppb + s.truth.wander * 1e9 + 1e-6,
                "seed {seed}: drift {} ± {} vs {true_drift}",
                e.drift_ppb,
                e.drift_bound_ppb
            );
        }
        assert_eq!(whole.conflicts(), 0, "seed {seed}");
        // As a probe sees it: only the exchanges so far, asked about now and
        // a lead ahead.
        let mut live = ClockModel::new();
        for e in &exchanges {
            live.add(*e);
            live.forget_before(e.received_mono_ns.saturating_sub(HORIZON_NS));
            for ahead in [0, 250 * MS, 5 * S] {
                let t = e.received_mono_ns + ahead;
                let est = live.at(t).unwrap();
                assert!(holds(&s.truth, t, &est), "seed {seed}, live t {t}: {est:?}");
            }
        }
        assert_eq!(live.breaks(), 0, "seed {seed}");
    }
}

#[test]
fn the_bound_is_never_wider_than_the_best_single_exchange_in_its_window() {
    for seed in 1_000..1_150 {
        let s = stream(seed);
        let exchanges = s.exchanges();
        let whole = ClockModel::from_exchanges(exchanges.clone());
        let mut rng = fastrand::Rng::with_seed(seed);
        let first = exchanges[0].sent_mono_ns;
        for _ in 0..20 {
            let t = rng.u64(first..s.end_ns);
            let all = whole.at(t).unwrap();
            for e in exchanges
                .iter()
                .filter(|e| e.sent_mono_ns.abs_diff(t) <= HORIZON_NS)
            {
                let alone = ClockModel::from_exchanges(vec![*e]).at(t).unwrap();
                assert!(
                    all.bound_ns <= alone.bound_ns + 1,
                    "seed {seed}, t {t}: {all:?} wider than {alone:?} alone"
                );
            }
        }
    }
}

#[test]
fn a_live_model_answers_as_the_whole_run_would_with_the_same_exchanges() {
    for seed in 2_000..2_050 {
        let s = stream(seed);
        let exchanges = s.exchanges();
        let mut live = ClockModel::new();
        for (i, e) in exchanges.iter().enumerate() {
            live.add(*e);
            live.forget_before(e.sent_mono_ns.saturating_sub(HORIZON_NS));
            let so_far = ClockModel::from_exchanges(exchanges[..=i].to_vec());
            let t = e.received_mono_ns + 100 * MS;
            assert_eq!(
                live.interval(t),
                so_far.interval(t),
                "seed {seed}, exchange {i}"
            );
        }
    }
}

#[test]
fn one_host_on_a_jittery_link_measures_no_drift_it_cannot_defend() {
    // Same clock on both ends: ψ is constant. The link: 1 ms each way, an
    // exponential jitter of 3 ms, 1 % stalls. A least-squares fit through
    // such exchanges once read 322 ppm; the region cannot.
    let mut rng = fastrand::Rng::with_seed(7);
    let mut model = ClockModel::new();
    let mut t = 10 * S;
    let way = Way {
        base_ns: MS,
        jitter_ns: 3 * MS,
        kind: 0,
        stall_percent: 1,
    };
    for _ in 0..600 {
        let (up, down) = (way.delay(&mut rng), way.delay(&mut rng));
        let sample = TimeSample {
            t1: Stamp {
                wall_ns: t,
                mono_ns: t,
            },
            t2_wall_ns: t + up,
            t3_wall_ns: t + up + 20_000,
            t4: Stamp {
                wall_ns: t + up + 20_000 + down,
                mono_ns: t + up + 20_000 + down,
            },
        };
        model.add(Exchange::from_sample(&sample).unwrap());
        t += S / 2;
    }
    let e = model.at(t).unwrap();
    assert!(e.drift_ppb.abs() <= e.drift_bound_ppb, "{e:?}");
    assert!(e.drift_bound_ppb < 20_000.0, "{e:?}");
    assert!(e.agent_minus_mono_ns.unsigned_abs() <= e.bound_ns, "{e:?}");
    // Near the physical limit: half of 1 ms up plus 1 ms down, and a little.
    assert!(e.bound_ns < 1_300_000, "{e:?}");
}

#[test]
fn a_step_of_the_agents_clock_breaks_the_model_and_the_truth_stays_inside() {
    for seed in 3_000..3_100 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let step_at = 200 * S;
        let truth = Truth {
            offset_ns: 0.0,
            drift: (rng.f64() * 2.0 - 1.0) * 50e-6,
            wander: 0.0,
            wander_period_ns: 1e12,
            step: Some((step_at, if rng.bool() { 50e6 } else { -50e6 })),
        };
        let way = Way::random(&mut rng);
        let way = Way {
            stall_percent: 0,
            base_ns: way.base_ns.min(2 * MS),
            jitter_ns: way.jitter_ns.min(2 * MS),
            ..way
        };
        let mut exchanges = Vec::new();
        let mut t = 100 * S;
        while t < 300 * S {
            let (up, down) = (way.delay(&mut rng), way.delay(&mut rng));
            let sample = TimeSample {
                t1: Stamp {
                    wall_ns: t,
                    mono_ns: t,
                },
                t2_wall_ns: truth.agent(t + up),
                t3_wall_ns: truth.agent(t + up + 10_000),
                t4: Stamp {
                    wall_ns: t + up + 10_000 + down,
                    mono_ns: t + up + 10_000 + down,
                },
            };
            // An exchange straddling the step proves nothing consistent.
            if !(t..t + up + 10_000 + down).contains(&step_at) {
                exchanges.push(Exchange::from_sample(&sample).unwrap());
            }
            t += rng.u64(500..1_500) * MS;
        }
        let model = ClockModel::from_exchanges(exchanges);
        assert_eq!(model.breaks(), 1, "seed {seed}");
        for q in (100..300).map(|s| s * S + 123_456) {
            let e = model.at(q).unwrap();
            assert!(
                holds(&truth, q, &e),
                "seed {seed}, t {q}: {e:?} vs {}",
                truth.psi(q)
            );
            // Away from the step the bound stays as narrow as the link allows.
            if q.abs_diff(step_at) > 5 * S {
                assert!(e.bound_ns < 10 * MS, "seed {seed}, t {q}: {e:?}");
            }
        }
    }
}

#[test]
fn the_agent_time_of_a_moment_maps_back_to_it() {
    let s = stream(99);
    let model = ClockModel::from_exchanges(s.exchanges());
    let t = s.exchanges()[0].received_mono_ns + 3 * S;
    let e = model.at(t).unwrap();
    let agent = e.agent_time_ns(t) as u64;
    let (mono, at) = model.mono_of_agent_time(agent, t - 100 * MS).unwrap();
    assert!(mono.abs_diff(t) <= 1, "{mono} vs {t}");
    assert_eq!(at.bound_ns, e.bound_ns);
}

#[test]
fn delays_are_what_the_physical_limit_is_made_of() {
    // Half of the least delay up plus the least down: no two-way bound can
    // be narrower; ours stays near it on a link with plenty of exchanges.
    let s = stream(5);
    let min_up = s.delays.iter().map(|d| d.0).min().unwrap();
    let min_down = s.delays.iter().map(|d| d.1).min().unwrap();
    let limit = (min_up + min_down) / 2;
    let model = ClockModel::from_exchanges(s.exchanges());
    for e in s.exchanges() {
        let est = model.at(e.mid_mono_ns()).unwrap();
        // The limit in the agent's clock: each delay as long as the drift
        // (at most 100 ppm here) makes it on the other side.
        let slack = (limit as f64 * 100e-6) as u64 + 2;
        assert!(est.bound_ns + slack >= limit, "{est:?} vs {limit}");
    }
}
