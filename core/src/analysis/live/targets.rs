//! The probe connections one pending broadcast was sent to, and the receipts
//! that have come for them.
//!
//! A broadcast waits here until its probes upload, which can take seconds:
//! with hundreds of probe connections and up to [`super::MAX_PENDING`]
//! broadcasts waiting, what each target costs decides the agent's memory.
//! A target is 8 bytes in a sorted list; a receipt takes room only once it
//! has come. (A map from every target to an optional receipt cost 80 bytes
//! a target, about 160 KB a broadcast at 1,000 probe connections, and the
//! recorder thread faulted those pages in on every broadcast.)

use crate::Stamp;

/// A receipt of a target: which probe run uploaded it, when it came (the
/// device's clock), and how long the kernel held it before the probe read it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Arrival {
    pub(super) run: u128,
    pub(super) at: Stamp,
    pub(super) kernel_delay_ns: u64,
}

/// One broadcast's targets (agent connection ids) and their receipts.
#[derive(Debug, Default)]
pub(super) struct Targets {
    /// Sorted, no duplicates.
    conns: Vec<u64>,
    /// Empty until the first receipt; then one per target, in `conns` order.
    arrivals: Vec<Option<Arrival>>,
}

/// What placing a receipt did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Placed {
    /// It is the target's receipt.
    Taken,
    /// The target already had one: this one is a duplicate.
    Duplicate,
    /// Not a target of this broadcast (yet: its shard's record may lag).
    NotATarget,
}

impl Targets {
    /// Adds the targets one shard sent to (each shard's connections are its
    /// own, so no id comes twice; one that does is kept once).
    pub(super) fn extend(&mut self, conns: impl Iterator<Item = u64>) {
        let before = self.conns.len();
        self.conns.extend(conns);
        let in_order = self.conns[before..].is_sorted_by(|a, b| a < b)
            && self.conns[..before].last() < self.conns.get(before);
        if self.arrivals.is_empty() {
            if !in_order {
                self.conns.sort_unstable();
                self.conns.dedup();
            }
            return;
        }
        // A shard's record after receipts of another shard's targets: keep
        // each receipt with its target.
        let mut pairs: Vec<(u64, Option<Arrival>)> = self
            .conns
            .iter()
            .copied()
            .zip(self.arrivals.drain(..).chain(std::iter::repeat(None)))
            .collect();
        pairs.sort_by_key(|&(conn, arrival)| (conn, arrival.is_none()));
        pairs.dedup_by_key(|&mut (conn, _)| conn);
        (self.conns, self.arrivals) = pairs.into_iter().unzip();
    }

    fn index(&self, conn: u64) -> Option<usize> {
        self.conns.binary_search(&conn).ok()
    }

    /// Whether `conn` was sent this broadcast.
    pub(super) fn contains(&self, conn: u64) -> bool {
        self.index(conn).is_some()
    }

    /// Whether `conn` was sent this broadcast and its receipt has not come.
    #[cfg(test)]
    pub(super) fn awaits(&self, conn: u64) -> bool {
        self.index(conn)
            .is_some_and(|i| self.arrivals.get(i).is_none_or(Option::is_none))
    }

    /// Places `conn`'s receipt.
    pub(super) fn place(&mut self, conn: u64, arrival: Arrival) -> Placed {
        let Some(i) = self.index(conn) else {
            return Placed::NotATarget;
        };
        if self.arrivals.is_empty() {
            self.arrivals = vec![None; self.conns.len()];
        }
        match &mut self.arrivals[i] {
            Some(_) => Placed::Duplicate,
            slot @ None => {
                *slot = Some(arrival);
                Placed::Taken
            }
        }
    }

    /// Every target with its receipt, if one came, in connection order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, Option<&Arrival>)> {
        self.conns
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, self.arrivals.get(i).and_then(Option::as_ref)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stamp;

    fn arrival(wall_ns: u64) -> Arrival {
        Arrival {
            run: 1,
            at: Stamp {
                wall_ns,
                mono_ns: wall_ns,
            },
            kernel_delay_ns: 0,
        }
    }

    #[test]
    fn targets_from_two_shards_are_found_whatever_their_order() {
        let mut t = Targets::default();
        t.extend([9, 3, 7].into_iter());
        t.extend([1, 8].into_iter());
        for conn in [1, 3, 7, 8, 9] {
            assert!(t.contains(conn) && t.awaits(conn), "{conn}");
        }
        for conn in [0, 2, 10] {
            assert!(!t.contains(conn) && !t.awaits(conn), "{conn}");
        }
        let order: Vec<u64> = t.iter().map(|(c, _)| c).collect();
        assert_eq!(order, [1, 3, 7, 8, 9]);
    }

    #[test]
    fn a_receipt_is_taken_once_and_only_for_a_target() {
        let mut t = Targets::default();
        t.extend([4, 5].into_iter());
        assert_eq!(t.place(6, arrival(1)), Placed::NotATarget);
        assert_eq!(t.place(4, arrival(2)), Placed::Taken);
        assert_eq!(t.place(4, arrival(3)), Placed::Duplicate);
        assert!(!t.awaits(4) && t.awaits(5));
        let got: Vec<_> = t
            .iter()
            .map(|(c, a)| (c, a.map(|a| a.at.wall_ns)))
            .collect();
        assert_eq!(got, [(4, Some(2)), (5, None)]);
    }

    #[test]
    fn an_id_given_twice_is_one_target() {
        let mut t = Targets::default();
        t.extend([2, 2, 1].into_iter());
        t.extend([1].into_iter());
        assert_eq!(t.iter().count(), 2);
    }

    #[test]
    fn receipts_stay_with_their_targets_when_a_late_shard_adds_more() {
        let mut t = Targets::default();
        t.extend([10, 30].into_iter());
        assert_eq!(t.place(30, arrival(3)), Placed::Taken);
        t.extend([20, 5, 30].into_iter());
        let got: Vec<_> = t
            .iter()
            .map(|(c, a)| (c, a.map(|a| a.at.wall_ns)))
            .collect();
        assert_eq!(got, [(5, None), (10, None), (20, None), (30, Some(3))]);
        assert_eq!(t.place(30, arrival(4)), Placed::Duplicate);
        assert_eq!(t.place(20, arrival(5)), Placed::Taken);
        assert!(t.awaits(5) && t.awaits(10) && !t.awaits(20));
    }
}
