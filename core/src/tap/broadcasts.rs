//! Copies of one payload that a tapped server sent to many connections,
//! grouped into broadcasts. With no hub to say "this is broadcast 12", a
//! broadcast is what the server's send loop looks like from the wire: the
//! same payload to each connection at most once, all within a short window.
//! A skewscope test message names its broadcast by sequence number.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

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
    /// The clients it has reached: a set, so a copy costs the same at
    /// 10,000 clients as at 10.
    clients: HashSet<SocketAddr>,
    /// When its latest copy went out, if by then it had reached every
    /// WebSocket open at the time.
    reached_all_at: Option<u64>,
}

/// How long a broadcast that reached every open connection waits for
/// a copy to one that opened meanwhile, before it is done.
pub const REACHED_ALL_GRACE_NS: u64 = 50_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Group {
    Seq(u64),
    Payload(u64),
}

/// Broadcasts being gathered, and the next id.
#[derive(Debug)]
pub struct Grouper {
    window_ns: u64,
    /// Each open broadcast and the clients it has reached (a set, so a copy
    /// costs the same at 10,000 clients as at 10).
    open: HashMap<Group, Open>,
    next_id: u64,
}

impl Grouper {
    /// A grouper that splits copies of one payload more than `window_ns` apart.
    pub fn new(window_ns: u64) -> Grouper {
        Grouper {
            window_ns,
            open: HashMap::new(),
            next_id: 1,
        }
    }

    /// Takes one copy; returns a broadcast this copy shows is complete (the
    /// same payload again to a client that already had it starts a new
    /// one). One that has reached all `connections` open now is done
    /// [`REACHED_ALL_GRACE_NS`] after its latest copy, see [`Grouper::due`].
    pub fn copy(
        &mut self,
        key: MessageKey,
        hash: u64,
        len: u32,
        copy: TappedCopy,
        connections: usize,
    ) -> Vec<TappedBroadcast> {
        let (group, seq) = match key {
            MessageKey::Seq(seq) => (Group::Seq(seq), Some(seq)),
            MessageKey::Hash { hash, .. } => (Group::Payload(hash), None),
        };
        let mut closed = Vec::new();
        if let Some(o) = self.open.get(&group) {
            let again = o.clients.contains(&copy.client);
            let late = seq.is_none()
                && copy.first_byte_ns > o.broadcast.copies[0].first_byte_ns + self.window_ns;
            if again || late {
                closed.extend(self.open.remove(&group).map(|o| sorted(o.broadcast)));
            }
        }
        let next_id = &mut self.next_id;
        let o = self.open.entry(group).or_insert_with(|| {
            let id = *next_id;
            *next_id += 1;
            let b = TappedBroadcast {
                id,
                seq,
                hash,
                len,
                copies: Vec::new(),
            };
            Open {
                broadcast: b,
                clients: HashSet::new(),
                reached_all_at: None,
            }
        });
        o.clients.insert(copy.client);
        o.broadcast.copies.push(copy);
        o.reached_all_at = (o.clients.len() >= connections).then_some(copy.last_byte_ns);
        closed
    }

    /// Closes every broadcast whose first copy is more than the window
    /// before `now_ns` (no copy of it can still come), and every one that
    /// reached all open connections more than [`REACHED_ALL_GRACE_NS`] ago.
    pub fn due(&mut self, now_ns: u64) -> Vec<TappedBroadcast> {
        let window = self.window_ns;
        let due: Vec<Group> = self
            .open
            .iter()
            .filter(|(_, o)| {
                o.broadcast.copies[0].first_byte_ns + window < now_ns
                    || o.reached_all_at
                        .is_some_and(|t| t.saturating_add(REACHED_ALL_GRACE_NS) < now_ns)
            })
            .map(|(g, _)| *g)
            .collect();
        let mut out: Vec<TappedBroadcast> = due
            .into_iter()
            .filter_map(|g| self.open.remove(&g))
            .map(|o| sorted(o.broadcast))
            .collect();
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
        // Client 1 gets it again: the first broadcast is complete.
        let first = g
            .copy(hashed(9, 1), 9, 10, copy(1, 500, 500), usize::MAX)
            .remove(0);
        assert_eq!(first.copies.len(), 2);
        g.copy(hashed(9, 1), 9, 10, copy(2, 501, 501), usize::MAX);
        // Past the window, a copy starts another broadcast too.
        let second = g
            .copy(hashed(9, 9), 9, 10, copy(3, 5_000, 5_000), usize::MAX)
            .remove(0);
        assert_eq!((second.id, second.copies.len()), (2, 2));
        assert_eq!(g.finish().len(), 1);
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
