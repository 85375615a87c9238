//! Copies of one payload that a tapped server sent to many connections,
//! grouped into broadcasts. With no hub to say "this is broadcast 12", a
//! broadcast is what the server's send loop looks like from the wire: the
//! same payload to each connection at most once, all within a short window.
//! A skewscope test message names its broadcast by sequence number.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;

use crate::convert;
use crate::record::MessageKey;

/// Copies of one payload more than this apart are two broadcasts, unless a
/// test message's sequence number says otherwise. A fan-out to 10,000
/// clients on a slow server takes well under this.
pub const DEFAULT_WINDOW_NS: u64 = 2_000_000_000;

/// One client's copy of a broadcast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TappedCopy {
    /// The client's address and port.
    pub client: SocketAddr,
    /// Capture time of the segment that carried the copy's first byte.
    pub first_byte_ns: u64,
    /// Capture time of the segment that carried its last byte: when the
    /// server's kernel sent the whole copy.
    pub last_byte_ns: u64,
}

/// A broadcast as the tap saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TappedBroadcast {
    /// Numbered in the order broadcasts began, from 1.
    pub id: u64,
    /// The test message's sequence number, when it is one.
    pub seq: Option<u64>,
    /// The payload's hash.
    pub hash: u64,
    /// Payload bytes.
    pub len: u32,
    /// Every copy, in the order the server began sending them.
    pub copies: Vec<TappedCopy>,
}

impl TappedBroadcast {
    /// From the first copy's first byte to the last copy's last byte: the
    /// server's fan-out span as the wire saw it.
    pub fn span_ns(&self) -> u64 {
        let start = self.copies.iter().map(|c| c.first_byte_ns).min();
        let end = self.copies.iter().map(|c| c.last_byte_ns).max();
        match (start, end) {
            (Some(s), Some(e)) => e.saturating_sub(s),
            _ => 0,
        }
    }
}

/// A broadcast being gathered.
#[derive(Debug)]
struct Open {
    broadcast: TappedBroadcast,
    /// The earliest first byte of its copies so far.
    first_ns: u64,
    /// The clients it has reached: a set, so a copy costs the same at
    /// 10,000 clients as at 10.
    clients: HashSet<SocketAddr>,
    /// When its latest copy went out, if by then it had reached every
    /// WebSocket open at the time.
    reached_all_at: Option<u64>,
}

impl Open {
    fn new(id: u64, seq: Option<u64>, hash: u64, len: u32, first_ns: u64) -> Open {
        Open {
            broadcast: TappedBroadcast {
                id,
                seq,
                hash,
                len,
                copies: Vec::new(),
            },
            first_ns,
            clients: HashSet::new(),
            reached_all_at: None,
        }
    }

    fn add(&mut self, copy: TappedCopy, connections: usize) {
        self.first_ns = self.first_ns.min(copy.first_byte_ns);
        self.clients.insert(copy.client);
        self.broadcast.copies.push(copy);
        self.reached_all_at = (self.clients.len() >= connections).then_some(copy.last_byte_ns);
    }

    fn done(&self, horizon_ns: u64, window_ns: u64) -> bool {
        self.first_ns.saturating_add(window_ns) < horizon_ns
            || self
                .reached_all_at
                .is_some_and(|t| t.saturating_add(REACHED_ALL_GRACE_NS) < horizon_ns)
    }
}

/// How long a broadcast that reached every open connection waits for
/// a copy to one that opened meanwhile, before it is done.
pub const REACHED_ALL_GRACE_NS: u64 = 50_000_000;

/// The broadcasts of one payload that are open now, in the order they
/// began, and where each client's copies of it fall among them.
///
/// A server's `send()` returning is not its copy leaving: when a client's
/// TCP window or the server's queue holds a copy back, it can leave after
/// the next broadcast's first copies to other clients. So a client's n-th
/// copy of a payload belongs to the broadcast n places after its first, not
/// to whichever broadcast is open when it is seen.
#[derive(Debug, Default)]
struct Series {
    /// Ordinal (within this payload) of the next broadcast to begin.
    next: u64,
    open: BTreeMap<u64, Open>,
    /// Per client: the ordinal of its copy with occurrence 0.
    base: HashMap<SocketAddr, i64>,
}

/// Broadcasts being gathered, and the next id.
#[derive(Debug)]
pub struct Grouper {
    window_ns: u64,
    /// Broadcasts of skewscope test messages, by sequence number.
    by_seq: HashMap<u64, Open>,
    /// Broadcasts of any other payload, by its hash.
    series: HashMap<u64, Series>,
    /// When each connection followed now became a WebSocket: it cannot
    /// have a copy of a broadcast that began before.
    opened_at: HashMap<SocketAddr, u64>,
    next_id: u64,
}

impl Grouper {
    /// A grouper that splits copies of one payload more than `window_ns` apart.
    pub fn new(window_ns: u64) -> Grouper {
        Grouper {
            window_ns,
            by_seq: HashMap::new(),
            series: HashMap::new(),
            opened_at: HashMap::new(),
            next_id: 1,
        }
    }

    /// `client`'s connection became a WebSocket at `at_ns`.
    pub fn opened(&mut self, client: SocketAddr, at_ns: u64) {
        self.opened_at.insert(client, at_ns);
    }

    /// `client`'s connection ended: what was kept for it goes.
    pub fn closed(&mut self, client: SocketAddr) {
        self.opened_at.remove(&client);
        for s in self.series.values_mut() {
            s.base.remove(&client);
        }
    }

    /// Takes one copy, `key` as the tap identified it on its connection;
    /// returns broadcasts this copy shows are complete (one it would join
    /// began more than the window before it). One that has reached all
    /// `connections` open now is done [`REACHED_ALL_GRACE_NS`] after its
    /// latest copy, see [`Grouper::due`].
    pub fn copy(
        &mut self,
        key: MessageKey,
        hash: u64,
        len: u32,
        copy: TappedCopy,
        connections: usize,
    ) -> Vec<TappedBroadcast> {
        match key {
            MessageKey::Seq(seq) => self.test_message(seq, hash, len, copy, connections),
            MessageKey::Hash { occurrence, .. } => {
                self.payload(hash, occurrence, len, copy, connections)
            }
        }
    }

    /// A test message names its broadcast; the same one to a client that
    /// already had it begins another.
    fn test_message(
        &mut self,
        seq: u64,
        hash: u64,
        len: u32,
        copy: TappedCopy,
        connections: usize,
    ) -> Vec<TappedBroadcast> {
        let mut closed = Vec::new();
        if self
            .by_seq
            .get(&seq)
            .is_some_and(|o| o.clients.contains(&copy.client))
        {
            closed.extend(self.by_seq.remove(&seq).map(|o| sorted(o.broadcast)));
        }
        let next_id = &mut self.next_id;
        self.by_seq
            .entry(seq)
            .or_insert_with(|| {
                *next_id += 1;
                Open::new(*next_id - 1, Some(seq), hash, len, copy.first_byte_ns)
            })
            .add(copy, connections);
        closed
    }

    fn payload(
        &mut self,
        hash: u64,
        occurrence: u32,
        len: u32,
        copy: TappedCopy,
        connections: usize,
    ) -> Vec<TappedBroadcast> {
        let window = self.window_ns;
        let opened = self.opened_at.get(&copy.client).copied().unwrap_or(0);
        let s = self.series.entry(hash).or_default();
        let mut closed = Vec::new();
        // Its place among this payload's broadcasts, when an earlier copy
        // to it fixed that; else the earliest open one it can be in.
        let placed = s.base.get(&copy.client).map(|b| b + i64::from(occurrence));
        let mut target = match placed {
            Some(o) => u64::try_from(o).ok().filter(|o| {
                s.open
                    .get(o)
                    .is_some_and(|b| !b.clients.contains(&copy.client))
            }),
            None => s
                .open
                .iter()
                .find(|(_, b)| !b.clients.contains(&copy.client) && b.first_ns >= opened)
                .map(|(o, _)| *o),
        };
        // One that began more than the window before this copy is done.
        if let Some(o) = target
            && s.open[&o].first_ns.saturating_add(window) < copy.first_byte_ns
        {
            closed.extend(s.open.remove(&o).map(|b| sorted(b.broadcast)));
            target = None;
        }
        let ordinal = target.unwrap_or_else(|| {
            let o = s.next;
            s.next += 1;
            let id = self.next_id;
            self.next_id += 1;
            s.open
                .insert(o, Open::new(id, None, hash, len, copy.first_byte_ns));
            o
        });
        s.base.insert(
            copy.client,
            convert::signed(ordinal) - i64::from(occurrence),
        );
        if let Some(b) = s.open.get_mut(&ordinal) {
            b.add(copy, connections);
        }
        closed
    }

    /// Closes every broadcast whose first copy is more than the window
    /// before `horizon_ns` (no copy of it can still come), and every one that
    /// reached all open connections more than [`REACHED_ALL_GRACE_NS`]
    /// before it. The horizon is capture time: every packet stamped before
    /// it has been read (not the wall clock now, which runs ahead of a tap
    /// that is kept off the CPU).
    pub fn due(&mut self, horizon_ns: u64) -> Vec<TappedBroadcast> {
        let window = self.window_ns;
        let mut out = Vec::new();
        let seqs: Vec<u64> = self
            .by_seq
            .iter()
            .filter(|(_, o)| o.done(horizon_ns, window))
            .map(|(seq, _)| *seq)
            .collect();
        out.extend(seqs.iter().filter_map(|seq| self.by_seq.remove(seq)));
        for s in self.series.values_mut() {
            let done: Vec<u64> = s
                .open
                .iter()
                .filter(|(_, o)| o.done(horizon_ns, window))
                .map(|(o, _)| *o)
                .collect();
            out.extend(done.iter().filter_map(|o| s.open.remove(o)));
        }
        // A payload with nothing open starts afresh: where its clients
        // fall is fixed again by its next broadcast.
        self.series.retain(|_, s| !s.open.is_empty());
        let mut out: Vec<TappedBroadcast> = out.into_iter().map(|o| sorted(o.broadcast)).collect();
        out.sort_by_key(|b| b.id);
        out
    }

    /// Closes everything still open (the tap is stopping).
    pub fn finish(&mut self) -> Vec<TappedBroadcast> {
        self.due(u64::MAX)
    }
}

fn sorted(mut b: TappedBroadcast) -> TappedBroadcast {
    b.copies.sort_by_key(|c| (c.first_byte_ns, c.last_byte_ns));
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(port: u16, first: u64, last: u64) -> TappedCopy {
        TappedCopy {
            client: SocketAddr::from(([10, 0, 0, 2], port)),
            first_byte_ns: first,
            last_byte_ns: last,
        }
    }

    fn hashed(hash: u64, occurrence: u32) -> MessageKey {
        MessageKey::Hash { hash, occurrence }
    }

    #[test]
    fn copies_of_one_payload_to_many_clients_are_one_broadcast() {
        let mut g = Grouper::new(1_000);
        // Occurrences differ (a client that joined late counts from 0):
        // grouping goes by payload and time, not occurrence.
        assert_eq!(
            g.copy(hashed(9, 4), 9, 10, copy(1, 100, 110), usize::MAX),
            vec![]
        );
        assert_eq!(
            g.copy(hashed(9, 0), 9, 10, copy(2, 90, 130), usize::MAX),
            vec![]
        );
        assert_eq!(
            g.copy(hashed(9, 4), 9, 10, copy(3, 120, 125), usize::MAX),
            vec![]
        );
        let done = g.due(2_000);
        assert_eq!(done.len(), 1);
        let b = &done[0];
        assert_eq!((b.id, b.seq, b.copies.len()), (1, None, 3));
        // In send order, and the span from the first byte to the last.
        let ports: Vec<u16> = b.copies.iter().map(|c| c.client.port()).collect();
        assert_eq!(ports, vec![2, 1, 3]);
        assert_eq!(b.span_ns(), 40);
    }

    #[test]
    fn the_same_payload_again_is_the_next_broadcast() {
        let mut g = Grouper::new(1_000);
        g.copy(hashed(9, 0), 9, 10, copy(1, 100, 100), usize::MAX);
        g.copy(hashed(9, 0), 9, 10, copy(2, 101, 101), usize::MAX);
        // Client 1 gets it again: the next broadcast.
        g.copy(hashed(9, 1), 9, 10, copy(1, 500, 500), usize::MAX);
        g.copy(hashed(9, 1), 9, 10, copy(2, 501, 501), usize::MAX);
        g.copy(hashed(9, 2), 9, 10, copy(1, 5_000, 5_000), usize::MAX);
        // A window after their first copies, the first two are done.
        let shape = |v: Vec<TappedBroadcast>| -> Vec<(u64, usize)> {
            v.iter().map(|b| (b.id, b.copies.len())).collect()
        };
        assert_eq!(shape(g.due(5_000)), vec![(1, 2), (2, 2)]);
        assert_eq!(shape(g.finish()), vec![(3, 1)]);
        // A copy to a broadcast that began more than the window before it
        // closes that one and begins another.
        g.copy(hashed(7, 0), 7, 10, copy(1, 100, 100), usize::MAX);
        let old = g.copy(hashed(7, 0), 7, 10, copy(2, 5_000, 5_000), usize::MAX);
        assert_eq!(shape(old), vec![(4, 1)]);
        assert_eq!(shape(g.finish()), vec![(5, 1)]);
    }

    #[test]
    fn a_copy_that_leaves_after_the_next_broadcast_began_is_still_its_own() {
        // Client 2's first copy is held back (its TCP window, say) until
        // after client 1 got the second broadcast: it is still the first's.
        let mut g = Grouper::new(1_000_000);
        g.copy(hashed(9, 0), 9, 10, copy(1, 100, 100), usize::MAX);
        g.copy(hashed(9, 0), 9, 10, copy(2, 101, 101), usize::MAX);
        g.copy(hashed(9, 1), 9, 10, copy(1, 200, 200), usize::MAX);
        g.copy(hashed(9, 1), 9, 10, copy(2, 210, 215), usize::MAX);
        g.copy(hashed(9, 2), 9, 10, copy(1, 300, 300), usize::MAX);
        g.copy(hashed(9, 2), 9, 10, copy(2, 290, 305), usize::MAX);
        let all = g.finish();
        assert_eq!(all.len(), 3);
        for (b, first) in all.iter().zip([100, 200, 290]) {
            assert_eq!(b.copies.len(), 2, "{b:?}");
            assert_eq!(b.copies[0].first_byte_ns, first);
        }
    }

    #[test]
    fn a_client_that_opened_after_a_broadcast_began_is_in_the_next() {
        let mut g = Grouper::new(1_000_000);
        g.opened(copy(1, 0, 0).client, 10);
        g.copy(hashed(9, 0), 9, 10, copy(1, 100, 100), usize::MAX);
        // Client 2 opens while the first broadcast still waits for others;
        // its first copy is of the second broadcast.
        g.opened(copy(2, 0, 0).client, 150);
        g.copy(hashed(9, 1), 9, 10, copy(1, 200, 200), usize::MAX);
        g.copy(hashed(9, 0), 9, 10, copy(2, 201, 201), usize::MAX);
        let all = g.finish();
        let clients: Vec<Vec<u16>> = all
            .iter()
            .map(|b| b.copies.iter().map(|c| c.client.port()).collect())
            .collect();
        assert_eq!(clients, vec![vec![1], vec![1, 2]]);
        // What was kept for a client goes with it.
        g.closed(copy(2, 0, 0).client);
        assert!(!g.opened_at.contains_key(&copy(2, 0, 0).client));
    }

    #[test]
    fn a_tap_that_reads_late_still_groups_by_capture_time() {
        // The tap is kept off the CPU: it reads the first half of a
        // broadcast seconds after it was sent. Capture time says the
        // broadcast is still open.
        let mut g = Grouper::new(2_000);
        g.copy(hashed(9, 0), 9, 10, copy(1, 100, 100), 2);
        assert!(g.due(101).is_empty());
        g.copy(hashed(9, 0), 9, 10, copy(2, 150, 150), 2);
        assert_eq!(g.finish()[0].copies.len(), 2);
    }

    #[test]
    fn a_broadcast_that_reached_every_open_connection_is_done_soon() {
        let grace = REACHED_ALL_GRACE_NS;
        let mut g = Grouper::new(100 * grace);
        assert!(g.copy(hashed(9, 0), 9, 10, copy(1, 100, 100), 2).is_empty());
        assert!(g.copy(hashed(9, 0), 9, 10, copy(2, 101, 101), 2).is_empty());
        // A client that opened during the fan-out still gets in.
        assert!(g.copy(hashed(9, 0), 9, 10, copy(3, 105, 105), 3).is_empty());
        assert!(g.due(105 + grace).is_empty(), "not before the grace");
        let done = g.due(106 + grace);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].copies.len(), 3);
        assert!(g.finish().is_empty());
    }

    #[test]
    fn test_messages_group_by_sequence_number_whatever_the_time() {
        let mut g = Grouper::new(1_000);
        g.copy(MessageKey::Seq(5), 1, 450, copy(1, 100, 100), usize::MAX);
        g.copy(MessageKey::Seq(6), 2, 450, copy(1, 200, 200), usize::MAX);
        g.copy(
            MessageKey::Seq(5),
            1,
            450,
            copy(2, 9_000, 9_000),
            usize::MAX,
        );
        let all = g.finish();
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].seq, all[0].copies.len()), (Some(5), 2));
        assert_eq!((all[1].seq, all[1].copies.len()), (Some(6), 1));
    }
}
