//! The clock model's shared vectors (`clients/clock-vectors/vectors.json`),
//! replayed: the Rust model still gives, bit for bit, the answers the
//! JavaScript port is held to. A change of the model that changes an
//! answer fails here until the vectors are written again on purpose
//! (`cargo run -p skewscope-core --example write-clock-vectors`), and then
//! the port must follow.

use serde_json::Value;
use skewscope_core::clock::{ClockModel, Exchange};

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../clients/clock-vectors/vectors.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("the vectors")).expect("json")
}

fn n(v: &Value) -> u64 {
    v.as_u64().expect("an integer")
}

#[test]
fn every_case_gives_the_same_bits() {
    let all = vectors();
    let cases = all["cases"].as_array().expect("cases");
    assert!(cases.len() >= 7);
    let mut asked = 0;
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let mut model = ClockModel::new();
        for op in case["ops"].as_array().expect("ops") {
            match op["op"].as_str().expect("op") {
                "add" => {
                    let x: Vec<u64> = op["x"].as_array().expect("x").iter().map(n).collect();
                    let exchange = Exchange::from_times(x[0], x[1], x[2], x[3]);
                    assert_eq!(exchange.is_some(), op["valid"].as_bool().unwrap(), "{name}");
                    if let Some(e) = exchange {
                        model.add(e);
                    }
                }
                "forget_before" => model.forget_before(n(&op["t"])),
                "at" => {
                    asked += 1;
                    let got = model.interval(n(&op["t"]));
                    let want = &op["answer"];
                    let Some(i) = got else {
                        assert!(want.is_null(), "{name}: no answer at {}", op["t"]);
                        continue;
                    };
                    let e = i.estimate();
                    let bits = |v: &Value| v.as_f64().expect("a number").to_bits();
                    assert_eq!(i.base_ns, want["base"].as_i64().unwrap(), "{name} {op}");
                    assert_eq!(i.extent.lo.to_bits(), bits(&want["lo"]), "{name} {op}");
                    assert_eq!(i.extent.hi.to_bits(), bits(&want["hi"]), "{name} {op}");
                    assert_eq!(
                        i.extent.drift_lo.to_bits(),
                        bits(&want["drift_lo"]),
                        "{name} {op}"
                    );
                    assert_eq!(
                        i.extent.drift_hi.to_bits(),
                        bits(&want["drift_hi"]),
                        "{name} {op}"
                    );
                    assert_eq!(
                        e.agent_minus_mono_ns,
                        want["agent_minus_mono"].as_i64().unwrap()
                    );
                    assert_eq!(e.bound_ns, n(&want["bound"]), "{name} {op}");
                }
                other => panic!("{name}: unknown op {other}"),
            }
        }
        assert_eq!(model.breaks(), n(&case["breaks"]), "{name}");
    }
    assert!(asked > 100);
}
