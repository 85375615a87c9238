//! Why the devices received a broadcast apart, in figures a person can act
//! on: how much of each broadcast's skew the server's fan-out order
//! explains and how much the network (with the clocks' error) does, what
//! the devices' own delivery adds at userspace, and which connections are
//! late every time.
//!
//! For a broadcast, take its earliest and latest receipt by kernel arrival
//! in the agent's timebase (`e`, `l`). Its skew `arrival(l) − arrival(e)`
//! splits exactly into
//! - **fan-out**: `sent(l) − sent(e)`, when the server sent each copy
//!   (the agent's write, its TX stamp, or the tap's capture): its order;
//! - **network**: the rest, `(arrival − sent)(l) − (arrival − sent)(e)`,
//!   which carries the two devices' clock error too.
//!
//! **Delivery** (kernel stamp to the probe's read) is outside the kernel
//! stamps' skew: what it adds is the skew at userspace minus the skew at
//! the kernel. Only broadcasts where both receipts were sent by a recorded
//! writer and both devices' clocks are bounded are split; the others are
//! counted.

use serde::Serialize;

use crate::analysis::join::Joined;
use crate::analysis::placing::PlacedBroadcast;
use crate::analysis::stats::{Summary, SummaryBuilder};
use crate::convert;

/// Connections listed as late at most.
pub const LATE_CONNECTIONS_LISTED: usize = 5;

/// A connection is "late every time" when its mean place among a
/// broadcast's receivers (0 first, 1 last) is at least this.
pub const LATE_EVERY_TIME_PLACE: f64 = 0.9;

/// One broadcast's skew, split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct SkewSplit {
    /// The skew in the agent's timebase: latest − earliest kernel arrival.
    pub skew_ns: i64,
    /// Of it, the server sending the latest copy after the earliest.
    pub fanout_ns: i64,
    /// The rest: network, and the two devices' clock error.
    pub network_ns: i64,
    /// What the devices' delivery adds at userspace (userspace skew −
    /// kernel skew); `None` without kernel stamps.
    pub delivery_ns: Option<i64>,
}

/// One connection that is received late.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct LateConnection {
    /// The probe's `--name` and the connection's index.
    pub connection: String,
    /// The device's address and port, as the server saw it, when recorded.
    pub address: Option<String>,
    /// Its mean place among each broadcast's receivers: 0 first, 1 last.
    pub mean_place: f64,
    /// Broadcasts it was the last to receive.
    pub last: u64,
    /// Broadcasts it received with at least one other connection.
    pub of: u64,
}

/// The "why" of a report.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Diagnosis {
    /// Broadcasts split.
    pub split_broadcasts: u64,
    /// Broadcasts with two receipts or more that could not be split (no
    /// send time, or a device clock without a bound), and why.
    pub unsplit_broadcasts: u64,
    /// Per broadcast split: its skew, its fan-out part, its network part.
    pub skew_ns: Option<Summary>,
    /// The fan-out part, per broadcast.
    pub fanout_ns: Option<Summary>,
    /// The network part, per broadcast.
    pub network_ns: Option<Summary>,
    /// What delivery adds, per broadcast.
    pub delivery_ns: Option<Summary>,
    /// Of all split broadcasts' skew summed, the share the fan-out explains
    /// (can be below 0 or above 1 when the network reorders copies).
    pub fanout_share: Option<f64>,
    /// Connections whose mean place is at least 0.9 (latest first, at most
    /// five), over broadcasts received with another connection.
    pub late_every_time: Vec<LateConnection>,
    /// Connections ranked (received at least two broadcasts with another).
    pub connections_ranked: u64,
}

/// [`Diagnosis`] built one broadcast at a time.
#[derive(Default)]
pub struct DiagnosisBuilder {
    skew: SummaryBuilder,
    fanout: SummaryBuilder,
    network: SummaryBuilder,
    delivery: SummaryBuilder,
    sum_skew: i128,
    sum_fanout: i128,
    split: u64,
    unsplit: u64,
    /// Per connection: (sum of places, broadcasts, times last).
    places: Vec<(f64, u64, u64)>,
    /// Every log names the same clock (boot id): nothing to correct.
    one_clock: bool,
}

/// The split of one broadcast, when it can be made. On `one_clock` (every
/// log from one boot of one host) no correction is needed or applied.
pub fn split_broadcast(placed: &PlacedBroadcast, one_clock: bool) -> Option<SkewSplit> {
    let b = placed.broadcast;
    let mut rows = Vec::with_capacity(b.receipts.len());
    for (i, r) in b.receipts.iter().enumerate() {
        let sent = convert::signed(r.tx_wall_ns.or(r.sent_wall_ns)?);
        let (arrival, read) = if one_clock {
            (
                convert::signed(r.arrival_wall_ns()),
                convert::signed(r.wall_ns),
            )
        } else {
            (placed.arrival(i)?.0, placed.read(i)?.0)
        };
        rows.push((arrival, sent, read));
    }
    if rows.len() < 2 {
        return None;
    }
    let first = rows.iter().min_by_key(|r| r.0)?;
    let last = rows.iter().max_by_key(|r| r.0)?;
    let skew_ns = last.0 - first.0;
    let fanout_ns = last.1 - first.1;
    let kernel_stamped = b.receipts.iter().all(|r| r.kernel_delay_ns.is_some());
    let userspace = rows.iter().map(|r| r.2).max()? - rows.iter().map(|r| r.2).min()?;
    Some(SkewSplit {
        skew_ns,
        fanout_ns,
        network_ns: skew_ns - fanout_ns,
        delivery_ns: kernel_stamped.then_some(userspace - skew_ns),
    })
}

impl DiagnosisBuilder {
    /// Nothing yet.
    pub fn new(joined: &Joined) -> DiagnosisBuilder {
        DiagnosisBuilder {
            places: vec![(0.0, 0, 0); joined.connections.len()],
            one_clock: joined
                .clocks()
                .collect::<std::collections::HashSet<_>>()
                .len()
                <= 1,
            ..DiagnosisBuilder::default()
        }
    }

    /// Adds one broadcast as placed; its split, when it could be made.
    pub fn add(&mut self, placed: &PlacedBroadcast) -> Option<SkewSplit> {
        let b = placed.broadcast;
        if b.receipts.len() < 2 {
            return None;
        }
        let split = split_broadcast(placed, self.one_clock);
        match split {
            Some(s) => {
                self.split += 1;
                self.skew.add(s.skew_ns);
                self.fanout.add(s.fanout_ns);
                self.network.add(s.network_ns);
                if let Some(d) = s.delivery_ns {
                    self.delivery.add(d);
                }
                self.sum_skew += i128::from(s.skew_ns);
                self.sum_fanout += i128::from(s.fanout_ns);
            }
            None => self.unsplit += 1,
        }
        // Places by kernel arrival, in the agent's timebase when every
        // receipt's clock is bounded, else on the clocks as they are.
        let corrected: Option<Vec<i64>> = (!self.one_clock)
            .then(|| placed.arrivals().map(|p| p.map(|(at, _)| at)).collect())
            .flatten();
        let arrival = corrected.unwrap_or_else(|| {
            b.receipts
                .iter()
                .map(|r| convert::signed(r.arrival_wall_ns()))
                .collect()
        });
        let mut order: Vec<usize> = (0..b.receipts.len()).collect();
        order.sort_by_key(|&i| arrival[i]);
        let n = order.len();
        for (place, &i) in order.iter().enumerate() {
            let p = &mut self.places[b.receipts[i].connection];
            p.0 += place as f64 / (n - 1) as f64;
            p.1 += 1;
            p.2 += u64::from(place == n - 1);
        }
        split
    }

    /// The diagnosis; `None` when no broadcast reached two connections.
    pub fn finish(&self, joined: &Joined) -> Option<Diagnosis> {
        if self.split + self.unsplit == 0 {
            return None;
        }
        let ranked: Vec<(usize, f64)> = self
            .places
            .iter()
            .enumerate()
            .filter(|(_, p)| p.1 >= 2)
            .map(|(c, p)| (c, p.0 / p.1 as f64))
            .collect();
        let mut late: Vec<LateConnection> = ranked
            .iter()
            .filter(|&&(_, place)| place >= LATE_EVERY_TIME_PLACE)
            .map(|&(c, mean_place)| {
                let conn = &joined.connections[c];
                LateConnection {
                    connection: format!("{} #{}", joined.probes[conn.probe].name, conn.conn),
                    address: conn.addresses.as_ref().map(|a| a.0.clone()),
                    mean_place,
                    last: self.places[c].2,
                    of: self.places[c].1,
                }
            })
            .collect();
        late.sort_by(|a, b| {
            b.mean_place
                .total_cmp(&a.mean_place)
                .then(a.connection.cmp(&b.connection))
        });
        late.truncate(LATE_CONNECTIONS_LISTED);
        Some(Diagnosis {
            split_broadcasts: self.split,
            unsplit_broadcasts: self.unsplit,
            skew_ns: self.skew.finish(),
            fanout_ns: self.fanout.finish(),
            network_ns: self.network.finish(),
            delivery_ns: self.delivery.finish(),
            fanout_share: (self.sum_skew > 0)
                .then(|| self.sum_fanout as f64 / self.sum_skew as f64),
            late_every_time: late,
            connections_ranked: ranked.len() as u64,
        })
    }
}
