//! Which messages' payloads this probe run has recorded, so each is recorded
//! once (on whichever connection got it first) and a report can judge
//! broadcasts by what they said (`skewscope report --match`): one record per
//! message, not one per connection.
//!
//! Only the latest [`REMEMBERED`] hashes are kept: a message seen again after
//! thousands of others is recorded again, which costs one record and loses
//! nothing.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

/// Hashes remembered.
pub const REMEMBERED: usize = 4096;

/// The hashes of payloads recorded, shared by the run's connections.
#[derive(Debug, Default)]
pub struct PayloadsSeen(Mutex<Seen>);

#[derive(Debug, Default)]
struct Seen {
    set: HashSet<u64>,
    order: VecDeque<u64>,
}

impl PayloadsSeen {
    /// Whether `hash` is new (and now remembered).
    pub fn first_time(&self, hash: u64) -> bool {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !seen.set.insert(hash) {
            return false;
        }
        seen.order.push_back(hash);
        if seen.order.len() > REMEMBERED
            && let Some(oldest) = seen.order.pop_front()
        {
            seen.set.remove(&oldest);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_payload_is_new_once_while_it_is_remembered() {
        let seen = PayloadsSeen::default();
        assert!(seen.first_time(1));
        assert!(!seen.first_time(1));
        for h in 2..=REMEMBERED as u64 + 1 {
            assert!(seen.first_time(h));
        }
        // 1 was the oldest and is forgotten; the latest are not.
        assert!(seen.first_time(1));
        assert!(!seen.first_time(REMEMBERED as u64 + 1));
    }
}
