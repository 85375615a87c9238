//! Writes `clients/clock-vectors/vectors.json`: exchange sequences in, the
//! clock model's answers out, as the Rust model gives them. The JavaScript
//! port (and any other) replays them and must give the same bits; the Rust
//! test replays them too, so a change of the model's answers is a change of
//! this file, made on purpose:
//!
//! ```sh
//! cargo run -p skewscope-core --example write-clock-vectors
//! ```
//!
//! Every time is an integer of nanoseconds below 2^53, so a JavaScript
//! number holds it exactly.

use serde_json::{Value, json};
use skewscope_core::clock::{ClockModel, Exchange};

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;
/// The agent's clock is ahead of the device's monotonic one by about this.
const AHEAD: f64 = 5e14;

struct Case {
    name: &'static str,
    model: ClockModel,
    ops: Vec<Value>,
}

impl Case {
    fn new(name: &'static str) -> Case {
        Case {
            name,
            model: ClockModel::new(),
            ops: Vec::new(),
        }
    }

    fn add(&mut self, x: [u64; 4]) {
        let exchange = Exchange::from_times(x[0], x[1], x[2], x[3]);
        if let Some(e) = exchange {
            self.model.add(e);
        }
        self.ops
            .push(json!({"op": "add", "x": x, "valid": exchange.is_some()}));
    }

    fn forget_before(&mut self, t: u64) {
        self.model.forget_before(t);
        self.ops.push(json!({"op": "forget_before", "t": t}));
    }

    fn at(&mut self, t: u64) {
        let interval = self.model.interval(t);
        let answer = interval.map(|i| {
            let e = i.estimate();
            json!({
                "base": i.base_ns,
                "lo": i.extent.lo,
                "hi": i.extent.hi,
                "drift_lo": i.extent.drift_lo,
                "drift_hi": i.extent.drift_hi,
                "agent_minus_mono": e.agent_minus_mono_ns,
                "bound": e.bound_ns,
            })
        });
        self.ops.push(json!({"op": "at", "t": t, "answer": answer}));
    }

    fn done(self) -> Value {
        json!({"name": self.name, "ops": self.ops, "breaks": self.model.breaks()})
    }
}

/// An exchange at device time `t1` through one-way delays `up` and `down`,
/// the agent `psi(t)` ahead of the device's monotonic clock.
fn exchange(t1: u64, up: u64, down: u64, psi: &dyn Fn(u64) -> f64) -> [u64; 4] {
    let read = t1 + up;
    let leave = read + 20_000;
    let back = leave + down;
    let agent = |t: u64| (t as f64 + psi(t)).round() as u64;
    [t1, agent(read), agent(leave), back]
}

fn jitter(rng: &mut fastrand::Rng, mean: u64) -> u64 {
    (-(mean as f64) * (1.0 - rng.f64()).ln()) as u64
}

fn stall(rng: &mut fastrand::Rng) -> u64 {
    if rng.u32(0..100) == 0 {
        rng.u64(30 * MS..60 * MS)
    } else {
        0
    }
}

fn main() {
    let mut cases = Vec::new();
    let still = |_: u64| AHEAD;

    let mut c = Case::new("one exchange, asked before, during and after it");
    let x = exchange(1_000 * S, 300_000, 500_000, &still);
    c.add(x);
    for t in [
        x[0] - S,
        x[0],
        x[0] + 400_000,
        x[3],
        x[3] + 250 * MS,
        x[3] + 400 * S,
    ] {
        c.at(t);
    }
    cases.push(c.done());

    let mut c =
        Case::new("good Wi-Fi: 1 ms each way, 2 ms exponential jitter, stalls, a pair a second");
    let mut rng = fastrand::Rng::with_seed(1);
    let mut t = 1_000 * S;
    for i in 0..300 {
        let up = MS + jitter(&mut rng, 2 * MS) + stall(&mut rng);
        let down = MS + jitter(&mut rng, 2 * MS) + stall(&mut rng);
        let x = exchange(t, up, down, &still);
        c.add(x);
        if i % 10 == 9 {
            c.at(x[3]);
            c.at(x[3] + 250 * MS);
            c.at(x[0] - 3 * S);
        }
        t = x[3] + if i % 2 == 0 { 0 } else { 1_000 * MS };
    }
    cases.push(c.done());

    let mut c = Case::new("wired, the agent drifting 80 ppm");
    let mut rng = fastrand::Rng::with_seed(2);
    let drift = |t: u64| AHEAD + 80e-6 * t as f64;
    let mut t = 1_000 * S;
    for i in 0..200 {
        let up = 60_000 + jitter(&mut rng, 20_000);
        let down = 60_000 + jitter(&mut rng, 20_000);
        let x = exchange(t, up, down, &drift);
        c.add(x);
        if i % 20 == 19 {
            c.at(x[3] + 100 * MS);
            c.at(x[0] - 10 * S);
        }
        t = x[3] + 500 * MS;
    }
    cases.push(c.done());

    let mut c =
        Case::new("the agent's clock steps 50 ms: the model breaks, the gap gets both sides");
    let mut rng = fastrand::Rng::with_seed(3);
    let step_at = 1_100 * S;
    let stepped = |t: u64| AHEAD + if t >= step_at { 50e6 } else { 0.0 };
    let mut t = 1_000 * S;
    let mut last_before = 0;
    while t < 1_200 * S {
        let up = 500_000 + jitter(&mut rng, MS);
        let down = 500_000 + jitter(&mut rng, MS);
        let x = exchange(t, up, down, &stepped);
        if !(x[0]..=x[3]).contains(&step_at) {
            c.add(x);
            if x[3] < step_at {
                last_before = x[3];
            }
        }
        t = x[3] + rng.u64(700..1_300) * MS;
    }
    for t in [
        last_before - S,
        last_before + 1,
        step_at,
        step_at + 2 * S,
        1_150 * S,
    ] {
        c.at(t);
    }
    cases.push(c.done());

    let mut c = Case::new("exchanges out of order, refused ones, and forgetting");
    let mut rng = fastrand::Rng::with_seed(4);
    let xs: Vec<[u64; 4]> = (0..40u64)
        .map(|i| {
            let up = 200_000 + jitter(&mut rng, 300_000);
            let down = 200_000 + jitter(&mut rng, 300_000);
            exchange(1_000 * S + i * 2 * S, up, down, &still)
        })
        .collect();
    for (i, x) in xs.iter().enumerate() {
        if i % 7 != 3 {
            c.add(*x);
        }
    }
    c.add(xs[3]);
    c.add(xs[10]);
    c.add([xs[5][0], xs[5][1], xs[5][1] - 1, xs[5][3]]);
    c.add([xs[6][0], xs[6][1], xs[6][2], xs[6][0] - 1]);
    c.at(xs[20][3]);
    c.at(xs[39][3] + S);
    c.forget_before(xs[30][0]);
    c.at(xs[39][3] + S);
    c.at(xs[31][0]);
    cases.push(c.done());

    let mut c =
        Case::new("sparse exchanges over 30 minutes: the horizon, and the nearest beyond it");
    let mut rng = fastrand::Rng::with_seed(5);
    let slow = |t: u64| AHEAD - 30e-6 * t as f64;
    let mut t = 1_000 * S;
    for _ in 0..25 {
        let up = 800_000 + jitter(&mut rng, 400_000);
        let down = 800_000 + jitter(&mut rng, 400_000);
        let x = exchange(t, up, down, &slow);
        c.add(x);
        c.at(x[3] + 30 * S);
        t = x[3] + rng.u64(20..200) * S;
    }
    c.at(t + 1_000 * S);
    cases.push(c.done());

    let mut c = Case::new("asymmetric: down five times up");
    let mut rng = fastrand::Rng::with_seed(6);
    let mut t = 1_000 * S;
    for i in 0..100 {
        let up = 400_000 + jitter(&mut rng, 100_000);
        let down = 2 * MS + jitter(&mut rng, 500_000);
        let x = exchange(t, up, down, &still);
        c.add(x);
        if i % 10 == 0 {
            c.at(x[3] + 50 * MS);
        }
        t = x[3] + 300 * MS;
    }
    cases.push(c.done());

    let out = json!({
        "about": "skewscope's clock model: exchange sequences in, answers out. Each case's ops run in order on a new model: add an exchange [t1, t2, t3, t4] (t1, t4 on the device's monotonic clock, t2, t3 on the agent's wall clock, ns; valid: whether the model took it), forget_before t, or ask at t: the raw extent (base, lo, hi, drift_lo, drift_hi, as the Rust model computes them in f64) and the estimate (agent_minus_mono, bound, ns), or null. Written by `cargo run -p skewscope-core --example write-clock-vectors`; replayed by core/tests/clock_vectors.rs and clients/js/test/vectors.test.mjs.",
        "cases": cases,
    });
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../clients/clock-vectors/vectors.json"
    );
    std::fs::write(
        path,
        serde_json::to_string_pretty(&out).expect("json") + "\n",
    )
    .expect("write the vectors");
    println!("wrote {path}");
}
