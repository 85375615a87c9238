//! A tapped server (the agent's `--tap-port`) in the report: each probe
//! receipt gets the server side of its copy, as the hub's own records would
//! give it, and the tap's broadcasts stand on their own for every real
//! client, probe or not: span, send order, which clients went last.

use std::collections::HashMap;

use crate::Stamp;
use crate::analysis::join::{
    AgentSide, AgentSource, BroadcastKey, BroadcastSink, Joined, JoinedAction, JoinedBroadcast,
    JoinedReceipt, ProbeSource, join_sources,
};
use crate::convert;
use crate::record::{AgentRecord, MessageKey, ProbeRecord, TapBroadcast, TapCountersRecord};

pub use crate::analysis::join::{TapSummary, TappedClient};

/// Joins probe logs of a server that is not the agent, with an agent run as
/// the clock reference (the probes' time exchange) and collector: broadcasts
/// are what the probes received, as without an agent; the agent's own
/// broadcasts, if any, are left out (they went to other connections). What
/// the agent's tap of the server recorded regroups the receipts by copy.
pub fn join_with_reference(agent: &[AgentRecord], probes: &[&[ProbeRecord]]) -> Joined {
    let sources: Vec<&dyn ProbeSource> = probes.iter().map(|p| p as &dyn ProbeSource).collect();
    let mut rows: Vec<JoinedBroadcast> = Vec::new();
    let mut joined = join_sources_with_reference(&agent, &sources, &mut rows);
    // By start: the tap's broadcasts by their first byte, the rest by
    // their first receipt.
    rows.sort_by_cached_key(|b| {
        let first = b.receipts.iter().map(|r| r.wall_ns).min();
        let start = b.agent.map(|a| a.start.wall_ns).or(first).unwrap_or(0);
        (start, b.agent.is_some(), first, b.key)
    });
    joined.broadcasts = rows;
    joined
}

/// [`join_with_reference`] over any sources, handing each broadcast to
/// `sink` once final: a tapped broadcast once every probe broadcast holding
/// one of its copies is.
pub fn join_sources_with_reference(
    agent: &dyn AgentSource,
    probes: &[&dyn ProbeSource],
    sink: &mut dyn BroadcastSink,
) -> Joined {
    let mut tapping = Tapping {
        agent,
        tap: None,
        clock: Vec::new(),
        inner: sink,
    };
    let mut joined = join_sources(None, probes, &mut tapping);
    if let Some(Some(tap)) = &tapping.tap {
        // At most both at once.
        joined.most_receipts_held += tap.most_receipts_held();
    }
    let (tap, clock) = tapping.finish(&joined);
    joined.tap = tap;
    joined.agent = join_sources(Some(&clock), &[], &mut Vec::new()).agent;
    joined.agent_runs = 1;
    joined
}

/// Whether the clock reference needs `r`: all of an agent's records but its
/// broadcasts and what the tap saw of them.
fn clock_record(r: &AgentRecord) -> bool {
    !matches!(
        r,
        AgentRecord::Broadcast(_)
            | AgentRecord::ShardSends(_)
            | AgentRecord::SendCompleted(_)
            | AgentRecord::TxStamp(_)
            | AgentRecord::TapBroadcast(_)
    )
}

/// Passes the probes' broadcasts through what the agent's tap saw (if it
/// tapped the server), read when the first one comes.
struct Tapping<'a> {
    agent: &'a dyn AgentSource,
    /// `None` until the agent's log is read; then `Some(None)` if it tapped
    /// no server.
    tap: Option<Option<TapJoin>>,
    /// The agent's records the clock reference needs, kept as that one read
    /// goes by (the log is not read again for them).
    clock: Vec<AgentRecord>,
    inner: &'a mut dyn BroadcastSink,
}

/// The tap's join of `agent`'s log, read into `tap` the first time it is
/// wanted; the records the clock reference needs go to `clock` meanwhile.
fn read_tap<'t>(
    tap: &'t mut Option<Option<TapJoin>>,
    clock: &mut Vec<AgentRecord>,
    agent: &dyn AgentSource,
    run: &Joined,
) -> Option<&'t mut TapJoin> {
    tap.get_or_insert_with(|| {
        let records = agent.records().inspect(|r| {
            if clock_record(r) {
                clock.push(r.clone());
            }
        });
        TapJoin::new(run, records)
    })
    .as_mut()
}

impl BroadcastSink for Tapping<'_> {
    fn broadcast(&mut self, run: &Joined, broadcast: JoinedBroadcast) {
        match read_tap(&mut self.tap, &mut self.clock, self.agent, run) {
            Some(tap) => tap.broadcast(run, broadcast, &mut *self.inner),
            None => self.inner.broadcast(run, broadcast),
        }
    }
}

impl Tapping<'_> {
    /// The tapped broadcasts still held, handed over; the tap's summary, and
    /// the agent's records for its clock reference.
    fn finish(mut self, run: &Joined) -> (Option<TapSummary>, Vec<AgentRecord>) {
        read_tap(&mut self.tap, &mut self.clock, self.agent, run);
        let summary = self.tap.flatten().map(|t| t.finish(run, self.inner));
        (summary, self.clock)
    }
}

/// What the tap recorded, made ready to regroup a streamed join's
/// receipts: each tapped broadcast's server side (from every copy), and the
/// copies to probe connections only, by the key the probe knows each by.
///
/// Receipts regroup by the tapped broadcast their copy belongs to: the tap
/// says exactly which copy each connection got, where grouping by payload
/// and occurrence can pair one run's fifth copy with another's. A tapped
/// broadcast is final once every probe broadcast holding one of its copies
/// is, so it is held only that long.
pub struct TapJoin {
    rows: Vec<TapRow>,
    /// Probe client → key of the message on that connection → (tapped
    /// broadcast, copy). Occurrences of a payload count per client in send
    /// order, as a probe on that connection counts them. Nested so a
    /// receipt is looked up by its connection's address without a copy of it.
    keys: HashMap<String, HashMap<MessageKey, (usize, usize)>>,
    /// Probe broadcast key → the tapped broadcasts with a copy under it.
    waiting: HashMap<MessageKey, Vec<usize>>,
    /// Probe connections by local address.
    by_local: HashMap<String, Vec<usize>>,
    summary: TapSummary,
    /// Receipts held in tapped broadcasts not yet final, and the most at once.
    held: (u64, u64),
}

/// One tapped broadcast on its way to being a row.
struct TapRow {
    key: MessageKey,
    /// The payload hash the tap saw.
    hash: u64,
    agent: Option<AgentSide>,
    /// Its copies to probe connections: (client, last byte's wall time).
    copies: Vec<(String, u64)>,
    /// Probe broadcasts with one of its copies, not yet final.
    waiting_for: usize,
    receipts: Vec<JoinedReceipt>,
    /// The actions on those copies.
    actions: Vec<JoinedAction>,
    /// Handed over.
    done: bool,
}

impl TapJoin {
    /// Reads the tap's records of `agent`, for the probe connections of
    /// `run`; `None` when the agent did not tap a server.
    pub fn new(run: &Joined, agent: impl Iterator<Item = AgentRecord>) -> Option<TapJoin> {
        let mut by_local: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, c) in run.connections.iter().enumerate() {
            if let Some((local, _)) = &c.addresses {
                by_local.entry(local.clone()).or_default().push(i);
            }
        }
        let mut port = None;
        let mut rows = Vec::new();
        let mut keys: HashMap<String, HashMap<MessageKey, (usize, usize)>> = HashMap::new();
        let mut occurrences: HashMap<(String, u64), u32> = HashMap::new();
        let mut clients = ClientPlaces::default();
        let (mut totals, mut counters) = (Vec::new(), None);
        for record in agent {
            match record {
                AgentRecord::TapStarted(t) => {
                    port.get_or_insert(t.port);
                }
                AgentRecord::TapBroadcast(b) => {
                    let t = rows.len();
                    clients.add(&b);
                    let mut copies = Vec::new();
                    for copy in &b.copies {
                        if !by_local.contains_key(&copy.client) {
                            continue;
                        }
                        let key = match b.seq {
                            Some(seq) => MessageKey::Seq(seq),
                            None => {
                                let seen = occurrences
                                    .entry((copy.client.clone(), b.hash))
                                    .or_insert(0);
                                let occurrence = *seen;
                                *seen += 1;
                                MessageKey::Hash {
                                    hash: b.hash,
                                    occurrence,
                                }
                            }
                        };
                        let place = (t, copies.len());
                        match keys.get_mut(copy.client.as_str()) {
                            Some(by_key) => {
                                by_key.insert(key, place);
                            }
                            None => {
                                keys.insert(copy.client.clone(), HashMap::from([(key, place)]));
                            }
                        }
                        copies.push((copy.client.clone(), copy.last_byte_wall_ns));
                    }
                    rows.push(TapRow {
                        key: row_key(t, &b),
                        hash: b.hash,
                        agent: agent_side(&b),
                        copies,
                        waiting_for: 0,
                        receipts: Vec::new(),
                        actions: Vec::new(),
                        done: false,
                    });
                }
                AgentRecord::TapConnectionTotals(t) => totals.push(t),
                AgentRecord::TapCounters(c) => counters = Some(c),
                _ => {}
            }
        }
        let port = port?;
        let mut waiting: HashMap<MessageKey, Vec<usize>> = HashMap::new();
        for (&key, &(t, _)) in keys.values().flat_map(|by_key| by_key.iter()) {
            let list = waiting.entry(key).or_default();
            if !list.contains(&t) {
                list.push(t);
                rows[t].waiting_for += 1;
            }
        }
        let summary = clients.summary(port, rows.len() as u64, &totals, counters);
        Some(TapJoin {
            rows,
            keys,
            waiting,
            by_local,
            summary,
            held: (0, 0),
        })
    }

    /// The most receipts held at once in tapped broadcasts not yet final.
    pub fn most_receipts_held(&self) -> u64 {
        self.held.1
    }

    /// Takes one final broadcast of the probes: its receipts of a tapped copy
    /// go to that tapped broadcast (handed to `out` once final); what the tap
    /// did not see stays as the probes grouped it.
    pub fn broadcast(&mut self, run: &Joined, mut b: JoinedBroadcast, out: &mut dyn BroadcastSink) {
        let BroadcastKey::Message(key) = b.key else {
            out.broadcast(run, b);
            return;
        };
        let copy_of = |connection: usize| {
            run.connections[connection]
                .addresses
                .as_ref()
                .and_then(|(local, _)| self.keys.get(local.as_str())?.get(&key).copied())
        };
        let mut left_actions = Vec::new();
        for a in std::mem::take(&mut b.actions) {
            match copy_of(a.connection) {
                Some((t, _)) => self.rows[t].actions.push(a),
                None => left_actions.push(a),
            }
        }
        let mut left = Vec::new();
        for mut r in std::mem::take(&mut b.receipts) {
            let Some((t, c)) = copy_of(r.connection) else {
                left.push(r);
                continue;
            };
            let sent = self.rows[t].copies[c].1;
            r.sent_wall_ns = Some(sent);
            r.tx_wall_ns = Some(sent);
            self.rows[t].receipts.push(r);
            self.held.0 += 1;
            self.held.1 = self.held.1.max(self.held.0);
        }
        if !left.is_empty() || !left_actions.is_empty() {
            b.receipts = left;
            b.actions = left_actions;
            out.broadcast(run, b);
        }
        for t in self.waiting.remove(&key).unwrap_or_default() {
            self.rows[t].waiting_for -= 1;
            if self.rows[t].waiting_for == 0 {
                self.hand_over(run, t, out);
            }
        }
    }

    /// Hands over every tapped broadcast not yet final (its probe copies
    /// never arrived, or it had none), in send order, and returns the summary.
    pub fn finish(mut self, run: &Joined, out: &mut dyn BroadcastSink) -> TapSummary {
        for t in 0..self.rows.len() {
            self.hand_over(run, t, out);
        }
        self.summary
    }

    /// Tapped broadcast `t` as a row: a probe connection the server sent a
    /// copy to and that has no receipt of it is missing, as the hub's target
    /// list would say.
    fn hand_over(&mut self, run: &Joined, t: usize, out: &mut dyn BroadcastSink) {
        let row = &mut self.rows[t];
        if row.done {
            return;
        }
        row.done = true;
        let mut receipts = std::mem::take(&mut row.receipts);
        let mut actions = std::mem::take(&mut row.actions);
        self.held.0 -= receipts.len() as u64;
        receipts.sort_by_key(|r| r.connection);
        actions.sort_by_key(|a| a.connection);
        let start = row.agent.map_or(0, |a| a.start.wall_ns);
        let mut missing = Vec::new();
        for (client, _) in std::mem::take(&mut row.copies) {
            for &i in self.by_local.get(&client).into_iter().flatten() {
                let c = &run.connections[i];
                let open = c.opened_wall_ns.is_some_and(|o| o <= start) && start <= c.until_wall_ns;
                if open && !receipts.iter().any(|r| r.connection == i) {
                    missing.push(i);
                }
            }
        }
        out.broadcast(
            run,
            JoinedBroadcast {
                key: BroadcastKey::Message(row.key),
                hash: Some(row.hash),
                agent: row.agent,
                receipts,
                missing,
                actions,
                auto_left_out: Vec::new(),
            },
        );
    }
}

/// A tapped broadcast's row key, chosen so it never collides with a
/// probes-only row.
fn row_key(t: usize, b: &TapBroadcast) -> MessageKey {
    match b.seq {
        Some(seq) => MessageKey::Seq(seq),
        None => MessageKey::Hash {
            hash: b.hash,
            occurrence: convert::count(t),
        },
    }
}

/// The server's side of a tapped broadcast: it started with its first byte
/// on the wire and ended with the last copy's last byte. (The tap has no
/// monotonic clock of the server's; only wall times are used.)
fn agent_side(b: &TapBroadcast) -> Option<AgentSide> {
    let first = b.copies.iter().map(|c| c.first_byte_wall_ns).min()?;
    let last = b.copies.iter().map(|c| c.last_byte_wall_ns).max()?;
    Some(AgentSide {
        start: Stamp {
            wall_ns: first,
            mono_ns: 0,
        },
        targets: convert::count(b.copies.len()),
        queued: 0,
        dropped: 0,
        fanout_span_ns: Some(last.saturating_sub(first)),
        lead: None,
        auto_terms: None,
    })
}

/// Where the server put each client, over every tapped broadcast.
#[derive(Default)]
struct ClientPlaces {
    by_client: HashMap<String, Place>,
}

/// One client's copies so far, and the sum of its positions (0 first, 1
/// last) over the broadcasts with two copies or more, for its mean.
struct Place {
    client: TappedClient,
    position_sum: f64,
    positioned: u64,
}

impl ClientPlaces {
    fn add(&mut self, b: &TapBroadcast) {
        let n = b.copies.len();
        for (i, copy) in b.copies.iter().enumerate() {
            if !self.by_client.contains_key(copy.client.as_str()) {
                let client = TappedClient {
                    client: copy.client.clone(),
                    copies: 0,
                    mean_position: None,
                    last: 0,
                    segments: 0,
                    resent: 0,
                };
                self.by_client.insert(
                    copy.client.clone(),
                    Place {
                        client,
                        position_sum: 0.0,
                        positioned: 0,
                    },
                );
            }
            let p = self
                .by_client
                .get_mut(copy.client.as_str())
                .expect("inserted above");
            p.client.copies += 1;
            if n >= 2 {
                p.client.last += u64::from(i == n - 1);
                p.position_sum += i as f64 / (n - 1) as f64;
                p.positioned += 1;
            }
        }
    }

    fn summary(
        mut self,
        port: u16,
        broadcasts: u64,
        totals: &[crate::record::TapConnectionTotals],
        counters: Option<TapCountersRecord>,
    ) -> TapSummary {
        for t in totals {
            // A client the server never sent a copy to has no position to
            // show; its resends are still in the tap's counters.
            if let Some(p) = self.by_client.get_mut(t.client.as_str()) {
                p.client.segments += t.segments;
                p.client.resent += t.resent;
            }
        }
        let mut per_client: Vec<TappedClient> = self
            .by_client
            .into_values()
            .map(|mut p| {
                p.client.mean_position =
                    (p.positioned > 0).then(|| p.position_sum / p.positioned as f64);
                p.client
            })
            .collect();
        per_client.sort_by(|a, b| {
            let key = |c: &TappedClient| c.mean_position.unwrap_or(-1.0);
            key(b)
                .total_cmp(&key(a))
                .then_with(|| a.client.cmp(&b.client))
        });
        TapSummary {
            port,
            broadcasts,
            clients: per_client.len() as u64,
            counters,
            per_client,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{TapConnectionTotals, TapCopy, TapStarted};

    fn copy(client: &str, first: u64, last: u64) -> TapCopy {
        TapCopy {
            client: client.into(),
            first_byte_wall_ns: first,
            last_byte_wall_ns: last,
        }
    }

    #[test]
    fn without_probes_the_tap_alone_gives_span_order_and_every_clients_place() {
        let tap = |id, start: u64, order: &[&str]| {
            AgentRecord::TapBroadcast(TapBroadcast {
                id,
                seq: None,
                hash: 7,
                len: 10,
                copies: order
                    .iter()
                    .enumerate()
                    .map(|(i, c)| copy(c, start + i as u64 * 10, start + i as u64 * 10 + 5))
                    .collect(),
            })
        };
        let agent = vec![
            AgentRecord::TapStarted(TapStarted {
                port: 8000,
                interface: None,
                at: Stamp {
                    wall_ns: 1,
                    mono_ns: 1,
                },
            }),
            tap(1, 1_000, &["a:1", "b:1", "c:1"]),
            tap(2, 2_000, &["b:1", "a:1", "c:1"]),
            AgentRecord::TapConnectionTotals(TapConnectionTotals {
                client: "c:1".into(),
                at_wall_ns: 3_000,
                segments: 4,
                resent: 1,
                reordered: 0,
            }),
        ];
        let joined = join_with_reference(&agent, &[]);
        assert_eq!(joined.broadcasts.len(), 2);
        let spans: Vec<_> = joined
            .broadcasts
            .iter()
            .map(|b| b.agent.unwrap().fanout_span_ns)
            .collect();
        assert_eq!(spans, vec![Some(25), Some(25)]);
        let tap = joined.tap.unwrap();
        assert_eq!((tap.port, tap.broadcasts, tap.clients), (8000, 2, 3));
        let first = &tap.per_client[0];
        assert_eq!((first.client.as_str(), first.last), ("c:1", 2));
        assert_eq!(first.mean_position, Some(1.0));
        assert_eq!(tap.per_client[1].mean_position, Some(0.25));
        assert_eq!(tap.per_client.len(), 3, "every client, not only the latest");
        assert_eq!((first.copies, first.resent), (2, 1));
        assert_eq!(tap.per_client[1].resent, 0);
    }
    #[test]
    fn tapped_broadcasts_are_handed_over_as_their_probe_copies_arrive() {
        use crate::analysis::join::ProbeSource;
        use crate::record::{ConnectionAddresses, ProbeRecord, Receipt};
        const T0: u64 = 1_764_000_000_000_000_000;
        let at = |ns: u64| Stamp {
            wall_ns: T0 + ns,
            mono_ns: ns,
        };
        // 2,000 broadcasts to three clients; two of them are the probe's.
        let mut agent = vec![AgentRecord::TapStarted(TapStarted {
            port: 8000,
            interface: None,
            at: at(0),
        })];
        let mut probe = vec![crate::fixtures::probe_started("dev", 2, at(0))];
        for conn in 0..2u32 {
            probe.push(crate::fixtures::connection_opened(conn, None, at(1)));
            probe.push(ProbeRecord::ConnectionAddresses(ConnectionAddresses {
                conn,
                local: format!("p:{conn}"),
                remote: "srv:8000".into(),
            }));
        }
        for n in 0..2_000u64 {
            let t = 1_000_000 + n * 1_000_000;
            agent.push(AgentRecord::TapBroadcast(TapBroadcast {
                id: n,
                seq: None,
                hash: 40 + n % 3,
                len: 10,
                copies: ["other:1", "p:0", "p:1"]
                    .iter()
                    .enumerate()
                    .map(|(i, c)| copy(c, T0 + t + i as u64 * 10, T0 + t + i as u64 * 10 + 5))
                    .collect(),
            }));
            for conn in 0..2u32 {
                probe.push(ProbeRecord::Receipt(Receipt {
                    len: 10,
                    ..crate::fixtures::receipt(
                        conn,
                        MessageKey::Hash {
                            hash: 40 + n % 3,
                            occurrence: (n / 3) as u32,
                        },
                        40 + n % 3,
                        at(t + 50_000 + u64::from(conn) * 1_000),
                    )
                }));
            }
        }
        let sources: Vec<&dyn ProbeSource> = vec![&probe];
        let mut rows = Vec::new();
        let joined = join_sources_with_reference(&agent, &sources, &mut rows);
        assert_eq!(rows.len(), 2_000);
        for b in &rows {
            let side = b.agent.expect("a tapped broadcast");
            assert_eq!((side.targets, side.fanout_span_ns), (3, Some(25)));
            assert_eq!(b.receipts.len(), 2);
            assert!(b.missing.is_empty());
            // Each receipt carries its own copy's last byte.
            let sent: Vec<u64> = b
                .receipts
                .iter()
                .map(|r| r.sent_wall_ns.unwrap() - side.start.wall_ns)
                .collect();
            assert_eq!(sent, vec![15, 25]);
        }
        // 4,000 receipts, a broadcast's worth held at a time.
        assert!(
            joined.most_receipts_held <= 8,
            "held {}",
            joined.most_receipts_held
        );
        let tap = joined.tap.unwrap();
        assert_eq!((tap.broadcasts, tap.clients), (2_000, 3));
    }
}
