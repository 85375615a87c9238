//! `skewscope-bench clock-models`: clock models side by side over emulated
//! links, deterministic and without sockets.
//!
//! For each link profile, seeded runs of a device exchanging with the agent
//! on the probe's own schedule ([`Schedule`]) through the link's model
//! ([`LinkModel`]), whose true one-way delays and clocks are known. Every
//! 250 ms each model is asked for the agent's clock with what it had by
//! then (as the probe asks before it acts), and held against the truth:
//! whether the truth is inside its bound, the bound against the link's
//! physical limit (half the least delay up plus the least down, over the
//! exchanges of the last horizon), and the estimate's error. The models:
//! the region model (the one the probe, the live join and the report use),
//! the one before it, Snapcast's median of 200, NTP's clock filter, and a
//! Kalman filter over offset and drift of the kind Sendspin uses.
//!
//! With `--days N` ([`days`]) the runs last days instead of minutes, and the
//! clocks do what real clocks do over days: a crystal's diurnal wander,
//! chrony's corrections on both hosts, a device's NTP outage ended by a
//! step or a slew, agent restarts, device sleeps and probe restarts.

mod before;
pub mod days;
mod hist;
mod kalman;
mod peers;

use std::collections::VecDeque;

use serde::Serialize;
use skewscope_core::Stamp;
use skewscope_core::clock::schedule::Schedule;
use skewscope_core::clock::{ClockModel, Exchange, HORIZON_NS};
use skewscope_core::record::TimeSample;
use skewscope_linkemu::{Carrier, Direction, Fate, LinkModel, Profile};

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;
/// How often each model is asked.
const QUERY_EVERY_NS: u64 = 250 * MS;
/// How long the probe waits for a reply.
const ANSWER_WAIT_NS: u64 = 300 * MS;
/// Queries this soon after a run's start count as its start-up (a short
/// audit's whole life).
const START_UP_NS: u64 = 10 * S;
/// Queries this long after a run's start count as settled: the drift is
/// pinned by then.
const SETTLED_NS: u64 = 60 * S;

/// The models measured, in the order printed.
const MODELS: [&str; 5] = [
    "region (now)",
    "before",
    "snapcast median",
    "ntp filter",
    "kalman (3σ)",
];

/// The Kalman filter's interval is this many σ.
const KALMAN_K: f64 = 3.0;

/// One model's answer to one query.
#[derive(Clone, Copy, Debug)]
struct Answer {
    /// Agent − device, ns.
    estimate: i64,
    /// The bound (half-width) it claims, ns; `None`: it claims none.
    bound: Option<f64>,
    /// The Kalman filter's σ, ns.
    sigma: Option<f64>,
    /// The region model's drift range, ppm.
    drift_ppm: Option<(f64, f64)>,
}

/// Every model, fed the same exchanges.
#[derive(Default)]
struct Models {
    region: ClockModel,
    before: before::Before,
    median: peers::MedianOf200,
    ntp: peers::NtpFilter,
    kalman: kalman::Kalman,
}

impl Models {
    /// Takes in one answered exchange, as the probe does (keeping the
    /// region model's exchanges within the horizon of its reply).
    fn add(&mut self, sample: &TimeSample) {
        if let Some(e) = Exchange::from_sample(sample) {
            self.region.add(e);
            self.region
                .forget_before(sample.t4.mono_ns.saturating_sub(HORIZON_NS));
        }
        self.before.add(sample);
        self.median.add(sample);
        self.ntp.add(sample);
        self.kalman.add(sample);
    }

    /// Each model's answer at device monotonic time `q`, in [`MODELS`]' order.
    fn answers(&self, q: u64) -> [Option<Answer>; MODELS.len()] {
        let bounded = |(estimate, bound): (i64, u64)| Answer {
            estimate,
            bound: Some(bound as f64),
            sigma: None,
            drift_ppm: None,
        };
        [
            self.region.at(q).map(|e| Answer {
                estimate: e.agent_minus_mono_ns,
                bound: Some(e.bound_ns as f64),
                sigma: None,
                drift_ppm: Some((
                    (e.drift_ppb - e.drift_bound_ppb) / 1e3,
                    (e.drift_ppb + e.drift_bound_ppb) / 1e3,
                )),
            }),
            self.before.at(q).map(bounded),
            self.median.at().map(|estimate| Answer {
                estimate,
                bound: None,
                sigma: None,
                drift_ppm: None,
            }),
            self.ntp.at(q).map(bounded),
            self.kalman.at(q).map(|(estimate, sigma)| Answer {
                estimate,
                bound: Some(KALMAN_K * sigma),
                sigma: Some(sigma),
                drift_ppm: None,
            }),
        ]
    }
}

/// What was measured for one model on one profile.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Figures {
    /// The model.
    pub model: &'static str,
    /// Queries answered.
    pub queries: u64,
    /// Of those with a bound, the share with the truth inside it.
    pub inside: Option<f64>,
    /// Bound ÷ physical limit, p50 and p99.
    pub bound_ratio_p50: Option<f64>,
    /// …
    pub bound_ratio_p99: Option<f64>,
    /// |estimate − truth|, ns: p50, p99, max.
    pub error_p50_ns: u64,
    /// …
    pub error_p99_ns: u64,
    /// …
    pub error_max_ns: u64,
    /// The same in each run's first ten seconds: p99.
    pub start_error_p99_ns: u64,
    /// Bound ÷ physical limit in each run's first ten seconds: p99.
    pub start_bound_ratio_p99: Option<f64>,
    /// Bound ÷ physical limit after each run's first minute: p99.
    pub settled_bound_ratio_p99: Option<f64>,
    /// The Kalman filter's: the share of its answers with the truth within
    /// 1σ, 2σ and 3σ.
    pub inside_sigmas: Option<[f64; 3]>,
}

/// One profile's run.
#[derive(Clone, Debug, Serialize)]
pub struct ProfileFigures {
    /// The link.
    pub profile: &'static str,
    /// Exchanges made (answered and not).
    pub exchanges: u64,
    /// The physical limit, median over the queries.
    pub limit_p50_ns: u64,
    /// Per model.
    pub models: Vec<Figures>,
}

#[derive(Default)]
struct Samples {
    errors: Vec<u64>,
    start_errors: Vec<u64>,
    ratios: Vec<f64>,
    start_ratios: Vec<f64>,
    settled_ratios: Vec<f64>,
    bounded: u64,
    inside: u64,
    /// Answers with a σ, and those with the truth within 1σ, 2σ, 3σ.
    sigma_answers: u64,
    sigma_inside: [u64; 3],
}

/// Truth of one run: the agent's clock is the device's monotonic clock plus
/// `offset` plus `drift` per ns.
struct Truth {
    offset_ns: f64,
    drift: f64,
}

impl Truth {
    fn psi(&self, t: u64) -> f64 {
        self.offset_ns + self.drift * t as f64
    }
    fn agent(&self, t: u64) -> u64 {
        (t as f64 + self.psi(t)).round() as u64
    }
}

/// Runs every profile in `profiles`: `runs` runs of `seconds` each.
pub fn run(
    profiles: &[Profile],
    runs: u32,
    seconds: u64,
    drift_ppm: f64,
    seed: u64,
    interval_ns: u64,
) -> Vec<ProfileFigures> {
    profiles
        .iter()
        .map(|p| run_profile(*p, runs, seconds, drift_ppm, seed, interval_ns))
        .collect()
}

fn run_profile(
    profile: Profile,
    runs: u32,
    seconds: u64,
    drift_ppm: f64,
    seed: u64,
    interval_ns: u64,
) -> ProfileFigures {
    let mut samples: Vec<Samples> = MODELS.iter().map(|_| Samples::default()).collect();
    let mut exchanges = 0u64;
    let mut limits = Vec::new();
    for r in 0..runs {
        let run_seed = seed ^ (u64::from(r) << 16) ^ profile.name.len() as u64;
        let mut rng = fastrand::Rng::with_seed(run_seed);
        let truth = Truth {
            offset_ns: rng.f64() * 2e10 - 1e10 + 1.7e18,
            drift: (rng.f64() * 2.0 - 1.0) * drift_ppm * 1e-6,
        };
        let mut link = LinkModel::new(profile, run_seed);
        let start = 1_000 * S + rng.u64(0..S);
        let end = start + seconds * S;
        let mut schedule = Schedule::new(start, interval_ns);
        let mut models = Models::default();
        // (sent, received, up, down) of answered exchanges, for the limit.
        let mut delays: VecDeque<(u64, u64, u64, u64)> = VecDeque::new();
        let mut next_query = start + QUERY_EVERY_NS;
        loop {
            let t1 = schedule.next_request_at();
            if t1 >= end {
                break;
            }
            exchanges += 1;
            let answer = exchange(&mut link, &truth, t1, &mut rng);
            let done = answer.map_or(t1 + ANSWER_WAIT_NS, |(s, _, _)| s.t4.mono_ns);
            // Queries before the answer is in use what came before.
            while next_query < done.min(end) {
                let q = next_query;
                next_query += QUERY_EVERY_NS;
                let Some(limit) = limit(&delays, q) else {
                    continue;
                };
                limits.push(limit);
                let psi = truth.psi(q);
                for (s, a) in samples.iter_mut().zip(models.answers(q)) {
                    let Some(Answer {
                        estimate,
                        bound,
                        sigma,
                        ..
                    }) = a
                    else {
                        continue;
                    };
                    let error = (estimate as f64 - psi).abs();
                    if let Some(sigma) = sigma {
                        s.sigma_answers += 1;
                        for (k, inside) in s.sigma_inside.iter_mut().enumerate() {
                            *inside += u64::from(error <= (k + 1) as f64 * sigma + 1.0);
                        }
                    }
                    s.errors.push(error as u64);
                    if q < start + START_UP_NS {
                        s.start_errors.push(error as u64);
                    }
                    if let Some(b) = bound {
                        s.bounded += 1;
                        s.inside += u64::from(error <= b + 1.0);
                        s.ratios.push(b / limit as f64);
                        if q < start + START_UP_NS {
                            s.start_ratios.push(b / limit as f64);
                        }
                        if q >= start + SETTLED_NS {
                            s.settled_ratios.push(b / limit as f64);
                        }
                    }
                }
            }
            if let Some((sample, up, down)) = answer {
                models.add(&sample);
                delays.push_back((t1, done, up, down));
                while delays.front().is_some_and(|d| d.0 + HORIZON_NS < done) {
                    delays.pop_front();
                }
            }
            schedule.done(done, models.region.at(done).as_ref());
        }
    }
    let limit_p50_ns = percentile_u64(&mut limits, 0.5);
    ProfileFigures {
        profile: profile.name,
        exchanges,
        limit_p50_ns,
        models: MODELS
            .iter()
            .zip(samples.iter_mut())
            .map(|(&model, s)| Figures {
                model,
                queries: s.errors.len() as u64,
                inside: (s.bounded > 0).then(|| s.inside as f64 / s.bounded as f64),
                bound_ratio_p50: percentile_f64(&mut s.ratios, 0.5),
                bound_ratio_p99: percentile_f64(&mut s.ratios, 0.99),
                error_p50_ns: percentile_u64(&mut s.errors, 0.5),
                error_p99_ns: percentile_u64(&mut s.errors, 0.99),
                error_max_ns: s.errors.iter().copied().max().unwrap_or(0),
                start_error_p99_ns: percentile_u64(&mut s.start_errors, 0.99),
                start_bound_ratio_p99: percentile_f64(&mut s.start_ratios, 0.99),
                settled_bound_ratio_p99: percentile_f64(&mut s.settled_ratios, 0.99),
                inside_sigmas: (s.sigma_answers > 0)
                    .then(|| s.sigma_inside.map(|i| i as f64 / s.sigma_answers as f64)),
            })
            .collect(),
    }
}

/// One exchange through the link: the sample and its true one-way delays.
fn exchange(
    link: &mut LinkModel,
    truth: &Truth,
    t1: u64,
    rng: &mut fastrand::Rng,
) -> Option<(TimeSample, u64, u64)> {
    let Fate::Deliver { at_ns: arrive } = link.fate(Direction::Up, Carrier::Udp, t1, 48) else {
        return None;
    };
    // The agent reads the request a little after it arrived, and answers.
    let read = arrive + rng.u64(5_000..30_000);
    let leave = read + rng.u64(5_000..20_000);
    let Fate::Deliver { at_ns: back } = link.fate(Direction::Down, Carrier::Udp, leave, 48) else {
        return None;
    };
    if back > t1 + ANSWER_WAIT_NS {
        return None;
    }
    // The device's wall clock is its monotonic clock here: the models that
    // read walls see the same times.
    let stamp = |m: u64| Stamp {
        wall_ns: m,
        mono_ns: m,
    };
    // The one-way delays between the stamps: what any bound from them
    // can know (the agent's read is part of the way up).
    Some((
        TimeSample {
            t1: stamp(t1),
            t2_wall_ns: truth.agent(read),
            t3_wall_ns: truth.agent(leave),
            t4: stamp(back),
        },
        read - t1,
        back - leave,
    ))
}

/// The physical limit at `q`: half the least delay up plus the least down
/// among the exchanges answered by then within the horizon.
fn limit(delays: &VecDeque<(u64, u64, u64, u64)>, q: u64) -> Option<u64> {
    let seen = delays.iter().filter(|d| d.1 <= q && d.0 + HORIZON_NS >= q);
    let (up, down) = seen.fold((u64::MAX, u64::MAX), |(u, d), x| (u.min(x.2), d.min(x.3)));
    (up != u64::MAX).then(|| (up + down) / 2)
}

fn percentile_u64(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn percentile_f64(v: &mut [f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[((v.len() - 1) as f64 * p).round() as usize])
}

/// The figures as the docs quote them.
pub fn print(figures: &[ProfileFigures], runs: u32, seconds: u64, drift_ppm: f64) {
    println!(
        "clock models, {runs} runs × {seconds} s per profile, drift within ±{drift_ppm} ppm; every 250 ms each model is asked with the exchanges it had (the probe's view)"
    );
    println!(
        "{:<11} {:>9} {:>9}  {:<16} {:>9} {:>12} {:>12} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12}",
        "profile",
        "exchanges",
        "limit",
        "model",
        "inside",
        "bound/limit",
        "bound/limit",
        "error",
        "error",
        "error",
        "first 10 s",
        "first 10 s",
        "after 1 min"
    );
    println!(
        "{:<11} {:>9} {:>9}  {:<16} {:>9} {:>12} {:>12} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12}",
        "",
        "",
        "p50",
        "",
        "",
        "p50",
        "p99",
        "p50",
        "p99",
        "max",
        "bound p99",
        "error p99",
        "bound p99"
    );
    for p in figures {
        for (i, m) in p.models.iter().enumerate() {
            let (name, ex, lim) = if i == 0 {
                (
                    p.profile.to_owned(),
                    p.exchanges.to_string(),
                    us(p.limit_p50_ns),
                )
            } else {
                (String::new(), String::new(), String::new())
            };
            println!(
                "{:<11} {:>9} {:>9}  {:<16} {:>9} {:>12} {:>12} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12}",
                name,
                ex,
                lim,
                m.model,
                m.inside.map_or("no bound".into(), share),
                m.bound_ratio_p50.map_or("-".into(), |x| format!("{x:.2}")),
                m.bound_ratio_p99.map_or("-".into(), |x| format!("{x:.2}")),
                us(m.error_p50_ns),
                us(m.error_p99_ns),
                us(m.error_max_ns),
                m.start_bound_ratio_p99
                    .map_or("-".into(), |x| format!("{x:.2}")),
                us(m.start_error_p99_ns),
                m.settled_bound_ratio_p99
                    .map_or("-".into(), |x| format!("{x:.2}")),
            );
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
}

/// A share as a percentage, never rounded up to 100 % (a share under it
/// shows as many digits as it takes to see that).
fn share(x: f64) -> String {
    if x >= 1.0 {
        return "100%".into();
    }
    let percent = x * 100.0;
    let mut digits = 3;
    loop {
        let scale = 10f64.powi(digits);
        let shown = (percent * scale).floor() / scale;
        if digits >= 8 || shown < 100.0 - 1.5 / scale {
            return format!("{shown:.*}%", digits as usize);
        }
        digits += 1;
    }
}

fn us(ns: u64) -> String {
    if ns >= 10 * MS {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.0} µs", ns as f64 / 1e3)
    }
}
