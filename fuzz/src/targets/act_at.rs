//! The time to act in a foreign server's payload (`--act-at`).

use skewscope_core::act_at::{ActAt, ActUnit};

/// A payload from any server, read at a few pointers in every unit: a time
/// is found or refused with a reason, never a panic on a huge, negative or
/// non-finite number.
pub fn act_at(data: &[u8]) {
    for unit in [
        ActUnit::Auto,
        ActUnit::S,
        ActUnit::Ms,
        ActUnit::Us,
        ActUnit::Ns,
    ] {
        for pointer in ["/at", "/0", "/data/at"] {
            let act = ActAt::new(pointer, unit).expect("valid pointer");
            let _ = act.find(data);
        }
    }
}
