//! A tapped server (the agent's `--tap-port`) in the report: each probe
//! receipt gets the server side of its copy, as the hub's own records would
//! give it, and the tap's broadcasts stand on their own for every real
//! client, probe or not: span, send order, which clients went last.

use std::collections::HashMap;

use serde::Serialize;

use crate::Stamp;
use crate::analysis::join::{AgentSide, BroadcastKey, Joined, JoinedBroadcast};
use crate::record::{AgentRecord, MessageKey, TapBroadcast, TapCountersRecord};

/// What the tap saw, for the report.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TapSummary {
    /// The server's tapped port.
    pub port: u16,
    /// Broadcasts the tap recorded.
    pub broadcasts: u64,
    /// Distinct clients it saw copies go to.
    pub clients: u64,
    /// Its last counters (connections skipped, resends, ring drops).
    pub counters: Option<TapCountersRecord>,
    /// Every client the server sent a copy to, sent to latest on average
    /// first: where the server put each device, for every real client, not
    /// only the probes.
    pub per_client: Vec<TappedClient>,
}

/// Where in the server's send order one client's copies went, and how
/// often the server had to resend to it.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TappedClient {
    /// The client's `ADDR:PORT`.
    pub client: String,
    /// Broadcasts it got a copy of.
    pub copies: u64,
    /// Its mean position over broadcasts of two copies or more, 0 (always
    /// first) to 1 (always last); `None` when it never shared one.
    pub mean_position: Option<f64>,
    /// Broadcasts of two copies or more where it was sent to last.
    pub last: u64,
    /// Segments the server sent it, once its connection ended or the tap
    /// stopped (0 before).
    pub segments: u64,
    /// Of those, resends: a client whose copies keep being resent has a
    /// lossy link.
    pub resent: u64,
}

/// Adds what the tap in `agent` recorded to `joined`: each probe receipt's
/// copy (by the probe connection's local address and the message's key on
/// that connection), broadcasts only the tap saw, and the tap's summary.
pub fn add_tap(joined: &mut Joined, agent: &[AgentRecord]) {
    let Some(port) = agent.iter().find_map(|r| match r {
        AgentRecord::TapStarted(t) => Some(t.port),
        _ => None,
    }) else {
        return;
    };
    let tapped: Vec<&TapBroadcast> = agent
        .iter()
        .filter_map(|r| match r {
            AgentRecord::TapBroadcast(b) => Some(b),
            _ => None,
        })
        .collect();
    let keys = keys_per_copy(&tapped);
    // Receipts regroup by the tapped broadcast their copy belongs to: the
    // tap says exactly which copy each connection got, where grouping by
    // payload and occurrence can pair one run's fifth copy with another's.
    let mut rows: Vec<Option<JoinedBroadcast>> = vec![None; tapped.len()];
    let mut rest = Vec::new();
    for mut b in std::mem::take(&mut joined.broadcasts) {
        let BroadcastKey::Message(key) = b.key else {
            rest.push(b);
            continue;
        };
        let had = b.receipts.len();
        let mut left = Vec::new();
        for mut r in std::mem::take(&mut b.receipts) {
            let found = joined.connections[r.connection]
                .addresses
                .as_ref()
                .and_then(|(local, _)| keys.get(&(local.as_str(), key)).copied());
            let Some((t, c)) = found else {
                left.push(r);
                continue;
            };
            let sent = tapped[t].copies[c].last_byte_wall_ns;
            r.sent_wall_ns = Some(sent);
            r.tx_wall_ns = Some(sent);
            rows[t]
                .get_or_insert_with(|| tapped_row(t, tapped[t]))
                .receipts
                .push(r);
        }
        // What the tap did not see stays as the probes grouped it.
        if !left.is_empty() || had == 0 {
            b.receipts = left;
            rest.push(b);
        }
    }
    // Every tapped broadcast is a row, with or without probe receipts; a
    // probe connection the server sent a copy to and that has no receipt
    // of it is missing, as the hub's target list would say.
    let by_local: HashMap<&str, Vec<usize>> = joined
        .connections
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.addresses.as_ref().map(|(l, _)| (l.as_str(), i)))
        .fold(HashMap::new(), |mut m, (l, i)| {
            m.entry(l).or_insert_with(Vec::new).push(i);
            m
        });
    for (t, row) in rows.iter_mut().enumerate() {
        let row = row.get_or_insert_with(|| tapped_row(t, tapped[t]));
        row.receipts.sort_by_key(|r| r.connection);
        let start = row.agent.map_or(0, |a| a.start.wall_ns);
        for copy in &tapped[t].copies {
            for &i in by_local.get(copy.client.as_str()).into_iter().flatten() {
                let c = &joined.connections[i];
                let open = c.opened_wall_ns.is_some_and(|o| o <= start) && start <= c.until_wall_ns;
                if open && !row.receipts.iter().any(|r| r.connection == i) {
                    row.missing.push(i);
                }
            }
        }
    }
    joined.broadcasts = rest.into_iter().chain(rows.into_iter().flatten()).collect();
    joined.broadcasts.sort_by_key(|b| {
        b.agent
            .map(|a| a.start.wall_ns)
            .or_else(|| b.receipts.iter().map(|r| r.wall_ns).min())
            .unwrap_or(0)
    });
    joined.tap = Some(summary(port, &tapped, agent));
}

/// A row for tapped broadcast `t`, keyed so it never collides with a
/// probes-only row.
fn tapped_row(t: usize, b: &TapBroadcast) -> JoinedBroadcast {
    let key = match b.seq {
        Some(seq) => MessageKey::Seq(seq),
        None => MessageKey::Hash {
            hash: b.hash,
            occurrence: t as u32,
        },
    };
    JoinedBroadcast {
        key: BroadcastKey::Message(key),
        agent: agent_side(b),
        receipts: Vec::new(),
        missing: Vec::new(),
    }
}

/// (client, key of the message on that client's connection) → (tapped
/// broadcast, copy). Occurrences of a payload count per client in send
/// order, as a probe on that connection counts them.
fn keys_per_copy<'a>(
    tapped: &[&'a TapBroadcast],
) -> HashMap<(&'a str, MessageKey), (usize, usize)> {
    let mut keys = HashMap::new();
    let mut occurrences: HashMap<(&str, u64), u32> = HashMap::new();
    for (t, b) in tapped.iter().enumerate() {
        for (c, copy) in b.copies.iter().enumerate() {
            let key = match b.seq {
                Some(seq) => MessageKey::Seq(seq),
                None => {
                    let seen = occurrences.entry((&copy.client, b.hash)).or_insert(0);
                    let occurrence = *seen;
                    *seen += 1;
                    MessageKey::Hash {
                        hash: b.hash,
                        occurrence,
                    }
                }
            };
            keys.insert((copy.client.as_str(), key), (t, c));
        }
    }
    keys
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
        targets: b.copies.len() as u32,
        queued: 0,
        dropped: 0,
        fanout_span_ns: Some(last.saturating_sub(first)),
    })
}

fn summary(port: u16, tapped: &[&TapBroadcast], agent: &[AgentRecord]) -> TapSummary {
    let mut by_client: HashMap<&str, TappedClient> = HashMap::new();
    let mut sums: HashMap<&str, (f64, u64)> = HashMap::new();
    let empty = |client: &str| TappedClient {
        client: client.to_owned(),
        copies: 0,
        mean_position: None,
        last: 0,
        segments: 0,
        resent: 0,
    };
    for b in tapped {
        let n = b.copies.len();
        for (i, copy) in b.copies.iter().enumerate() {
            let c = by_client
                .entry(&copy.client)
                .or_insert_with(|| empty(&copy.client));
            c.copies += 1;
            if n >= 2 {
                c.last += u64::from(i == n - 1);
                let s = sums.entry(&copy.client).or_default();
                s.0 += i as f64 / (n - 1) as f64;
                s.1 += 1;
            }
        }
    }
    for r in agent {
        if let AgentRecord::TapConnectionTotals(t) = r {
            // A client the server never sent a copy to has no position to
            // show; its resends are still in the tap's counters.
            if let Some(c) = by_client.get_mut(t.client.as_str()) {
                c.segments += t.segments;
                c.resent += t.resent;
            }
        }
    }
    let mut per_client: Vec<TappedClient> = by_client
        .into_iter()
        .map(|(client, mut c)| {
            c.mean_position = sums.get(client).map(|(sum, n)| sum / *n as f64);
            c
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
        broadcasts: tapped.len() as u64,
        clients: per_client.len() as u64,
        counters: agent.iter().rev().find_map(|r| match r {
            AgentRecord::TapCounters(c) => Some(c.clone()),
            _ => None,
        }),
        per_client,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::join::join_with_reference;
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
}
