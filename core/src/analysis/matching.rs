//! Which broadcast a receipt (or an action) is a copy of: the one rule the
//! report's join and the live join both follow.
//!
//! A test message carries its sequence number: it is the broadcast with
//! that number, when the payload's hash agrees. Any other payload is known
//! by its hash and by how many copies of that hash came before it on its
//! connection (the probe counts them from 0): it is that occurrence among
//! the broadcasts of that hash the agent sent to that connection, in
//! broadcast order. A connection is TCP: it loses nothing, so the probe's
//! count and the agent's agree, and a receipt the probe's log lost does not
//! move the ones after it (counting relative to the last match did).
//!
//! The report numbers every copy of a whole log. The live join must keep
//! bounded memory, so [`CopyNumbers`] can forget a broadcast once judged
//! (its number stays taken) and drop the count of a payload its connection
//! has not been sent for longest; a later copy of a dropped payload then
//! matches nothing and is counted unmatched, never matched to the wrong
//! broadcast.

use std::collections::{HashMap, VecDeque};

use crate::record::MessageKey;

/// A receipt's or an action's broadcast under the rule: `by_seq` gives the
/// broadcast numbered `seq` and its payload hash; `copies` numbers the
/// rest. `conn` is the agent's id of the connection it came on.
pub fn copy_of(
    key: MessageKey,
    hash: u64,
    conn: Option<u64>,
    by_seq: impl FnOnce(u64) -> Option<(u64, u64)>,
    copies: &CopyNumbers,
) -> Option<u64> {
    match key {
        MessageKey::Seq(seq) => by_seq(seq)
            .filter(|&(_, sent_hash)| sent_hash == hash)
            .map(|(id, _)| id),
        MessageKey::Hash { hash, occurrence } => copies.find(conn?, hash, occurrence),
    }
}

/// Whether the copies of a broadcast need numbering in [`CopyNumbers`]:
/// only when it carries no sequence number. A test message's receipts name
/// it by its number ([`copy_of`]), and its hash, which holds the number,
/// is no other broadcast's; numbering its copies would cost the live join a
/// map entry per connection and broadcast for nothing (at 1,000 probe
/// connections that was most of the live join's CPU).
pub fn numbered_by_copy(seq: Option<u64>) -> bool {
    seq.is_none()
}

/// (agent connection, payload hash) → the broadcasts of that payload sent
/// to that connection, numbered from 0 in broadcast order.
#[derive(Debug, Default)]
pub struct CopyNumbers {
    by_conn_hash: HashMap<(u64, u64), Copies>,
    /// Counts dropped to stay within a cap ([`CopyNumbers::cap`]).
    dropped: u64,
}

/// One connection's copies of one payload.
#[derive(Debug, Default)]
struct Copies {
    /// The occurrence of `ids[0]`: copies before it were forgotten.
    first: u32,
    /// Broadcast ids by occurrence; `None` once forgotten.
    ids: VecDeque<Option<u64>>,
    /// The latest broadcast of this payload sent to this connection.
    last_id: u64,
}

impl CopyNumbers {
    /// Broadcast `id` of payload `hash` was sent to `conn`. Calls for one
    /// connection come in broadcast order (one shard sends to it); one out
    /// of order is put in its place.
    pub fn sent(&mut self, conn: u64, hash: u64, id: u64) {
        let c = self.by_conn_hash.entry((conn, hash)).or_default();
        if c.ids.is_empty() || id > c.last_id {
            c.ids.push_back(Some(id));
        } else {
            let at = c.ids.iter().position(|x| x.is_some_and(|x| x > id));
            match at {
                Some(at) if !c.ids.iter().any(|x| *x == Some(id)) => c.ids.insert(at, Some(id)),
                _ => return,
            }
        }
        c.last_id = c.last_id.max(id);
    }

    /// The broadcast that was copy number `occurrence` of `hash` on `conn`.
    pub fn find(&self, conn: u64, hash: u64, occurrence: u32) -> Option<u64> {
        let c = self.by_conn_hash.get(&(conn, hash))?;
        let i = occurrence.checked_sub(c.first)?;
        c.ids.get(i as usize).copied().flatten()
    }

    /// Broadcast `id` (of `hash`) needs no more matching on `conns`: its
    /// number stays taken, its memory goes.
    pub fn forget(&mut self, conns: impl Iterator<Item = u64>, hash: u64, id: u64) {
        for conn in conns {
            let Some(c) = self.by_conn_hash.get_mut(&(conn, hash)) else {
                continue;
            };
            if let Some(slot) = c.ids.iter_mut().find(|x| **x == Some(id)) {
                *slot = None;
            }
            while c.ids.front().is_some_and(Option::is_none) {
                c.ids.pop_front();
                c.first += 1;
            }
        }
    }

    /// Keeps the counts of connections `keep` says may still send receipts.
    pub fn retain_conns(&mut self, keep: impl Fn(u64) -> bool) {
        self.by_conn_hash.retain(|&(conn, _), _| keep(conn));
    }

    /// Keeps at most `max` counts: past it, drops those with no broadcast
    /// left to match whose payload was sent longest ago, down to 3/4 of it
    /// (so a flood of unique payloads costs one pass per quarter).
    pub fn cap(&mut self, max: usize) {
        if self.by_conn_hash.len() <= max {
            return;
        }
        let mut idle: Vec<u64> = self
            .by_conn_hash
            .values()
            .filter(|c| c.ids.is_empty())
            .map(|c| c.last_id)
            .collect();
        let excess = self.by_conn_hash.len() - max * 3 / 4;
        if idle.is_empty() {
            return;
        }
        let cut = excess.min(idle.len()) - 1;
        let (_, &mut newest_dropped, _) = idle.select_nth_unstable(cut);
        let before = self.by_conn_hash.len();
        self.by_conn_hash
            .retain(|_, c| !c.ids.is_empty() || c.last_id > newest_dropped);
        self.dropped += (before - self.by_conn_hash.len()) as u64;
    }

    /// Counts held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_conn_hash.len()
    }

    /// Counts dropped by [`CopyNumbers::cap`] so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(sends: &[(u64, u64, u64)]) -> CopyNumbers {
        let mut n = CopyNumbers::default();
        for &(conn, hash, id) in sends {
            n.sent(conn, hash, id);
        }
        n
    }

    #[test]
    fn a_payload_is_numbered_per_connection_in_broadcast_order() {
        // Connection 2 joined after broadcast 1: its first copy is 3.
        let n = numbers(&[(1, 7, 1), (1, 7, 3), (2, 7, 3), (1, 8, 4), (2, 7, 5)]);
        assert_eq!(n.find(1, 7, 0), Some(1));
        assert_eq!(n.find(1, 7, 1), Some(3));
        assert_eq!(n.find(2, 7, 0), Some(3));
        assert_eq!(n.find(2, 7, 1), Some(5));
        assert_eq!(n.find(1, 8, 0), Some(4));
        assert_eq!(n.find(1, 7, 2), None);
        // One shard's record behind another's: put in its place.
        let late = numbers(&[(1, 7, 5), (1, 7, 3), (1, 7, 3)]);
        assert_eq!((late.find(1, 7, 0), late.find(1, 7, 1)), (Some(3), Some(5)));
        assert_eq!(late.find(1, 7, 2), None);
    }

    #[test]
    fn only_broadcasts_without_a_number_have_their_copies_numbered() {
        assert!(numbered_by_copy(None));
        assert!(!numbered_by_copy(Some(7)));
    }

    #[test]
    fn a_test_message_is_its_sequence_number_when_the_hash_agrees() {
        let n = CopyNumbers::default();
        let seq = |s: u64| (s == 4).then_some((40, 9));
        assert_eq!(copy_of(MessageKey::Seq(4), 9, None, seq, &n), Some(40));
        assert_eq!(copy_of(MessageKey::Seq(4), 8, None, seq, &n), None);
        assert_eq!(copy_of(MessageKey::Seq(5), 9, None, seq, &n), None);
    }

    #[test]
    fn a_lost_receipt_does_not_move_the_ones_after_it() {
        let n = numbers(&[(1, 7, 1), (1, 7, 2), (1, 7, 3)]);
        let key = |occurrence| MessageKey::Hash {
            hash: 7,
            occurrence,
        };
        // The receipt of copy 0 never came; copy 1 is still broadcast 2.
        assert_eq!(copy_of(key(1), 7, Some(1), |_| None, &n), Some(2));
        assert_eq!(copy_of(key(1), 7, None, |_| None, &n), None);
    }

    #[test]
    fn forgetting_keeps_the_numbers_of_the_rest() {
        let mut n = numbers(&[(1, 7, 1), (1, 7, 2), (1, 7, 3)]);
        n.forget([1].into_iter(), 7, 2);
        assert_eq!((n.find(1, 7, 0), n.find(1, 7, 1)), (Some(1), None));
        n.forget([1].into_iter(), 7, 1);
        assert_eq!((n.find(1, 7, 0), n.find(1, 7, 2)), (None, Some(3)));
        n.sent(1, 7, 9);
        assert_eq!(n.find(1, 7, 3), Some(9));
    }

    #[test]
    fn the_cap_drops_the_payloads_sent_longest_ago_and_counts_them() {
        let mut n = CopyNumbers::default();
        // A repeated payload (hash 1) among 100 unique ones, each judged.
        for id in 0..100u64 {
            let hash = if id % 10 == 0 { 1 } else { 1_000 + id };
            n.sent(5, hash, id);
            n.forget([5].into_iter(), hash, id);
            n.cap(40);
            assert!(n.len() <= 40, "{}", n.len());
        }
        assert!(n.dropped() > 0);
        // The repeated payload was sent recently enough to keep its count.
        n.sent(5, 1, 100);
        assert_eq!(n.find(5, 1, 10), Some(100));
        // A payload not sent for longest numbers afresh: its later copy,
        // the probe's occurrence 1, finds nothing rather than a wrong one.
        n.sent(5, 1_001, 101);
        assert_eq!(n.find(5, 1_001, 1), None);
    }
}
