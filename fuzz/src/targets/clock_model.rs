//! The clock model fed exchanges as a peer could make them: the agent's
//! t2 and t3 come off the network, so every value is possible (a broken or
//! hostile time server, a corrupt log).

use skewscope_core::Stamp;
use skewscope_core::clock::{ClockModel, Exchange, MAX_DRIFT};
use skewscope_core::record::TimeSample;

fn u64_at(data: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    for (i, x) in data.iter().skip(at).take(8).enumerate() {
        b[i] = *x;
    }
    u64::from_le_bytes(b)
}

/// Bytes as exchanges (32 bytes each: t1, t2, t3, t4; a first byte with its
/// low bit set asks at t1 + t4 / 2^40 instead, and one with its second bit
/// forgets before t1), through the model: no panic, and every answer is a
/// real interval (its ends in order, finite, its drift within the model's
/// range) whatever the exchanges said.
pub fn clock_model(data: &[u8]) {
    let mut model = ClockModel::new();
    for chunk in data.chunks(32) {
        let (t1, t2, t3, t4) = (
            u64_at(chunk, 0),
            u64_at(chunk, 8),
            u64_at(chunk, 16),
            u64_at(chunk, 24),
        );
        match chunk.first().copied().unwrap_or(0) & 3 {
            1 => {
                check(&model, t1.wrapping_add(t4 >> 40));
                continue;
            }
            2 => {
                model.forget_before(t1);
                continue;
            }
            _ => {}
        }
        let sample = TimeSample {
            t1: Stamp {
                wall_ns: t1,
                mono_ns: t1,
            },
            t2_wall_ns: t2,
            t3_wall_ns: t3,
            t4: Stamp {
                wall_ns: t4,
                mono_ns: t4,
            },
        };
        if let Some(e) = Exchange::from_sample(&sample) {
            assert!(e.delay_ns() < u64::MAX);
            model.add(e);
            check(&model, e.sent_mono_ns);
            check(&model, e.received_mono_ns);
        }
    }
}

fn check(model: &ClockModel, at: u64) {
    let Some(i) = model.interval(at) else {
        assert!(
            model.is_empty(),
            "an answer for every model with an exchange"
        );
        return;
    };
    let x = i.extent;
    assert!(x.lo.is_finite() && x.hi.is_finite(), "{x:?}");
    assert!(x.lo <= x.hi, "{x:?}");
    assert!(x.drift_lo <= x.drift_hi, "{x:?}");
    assert!(-MAX_DRIFT <= x.drift_lo && x.drift_hi <= MAX_DRIFT, "{x:?}");
    let e = i.estimate();
    assert!(e.drift_bound_ppb >= 0.0 && e.drift_ppb.is_finite());
}
