//! The series a report's plots draw, computed from a [`Joined`] run: skew per
//! broadcast over time with its interval, latency against fan-out position
//! per receipt, lateness per connection × broadcast, and each probe's clock
//! offset beside its claim.
//!
//! Sizes are bounded so that a page stays readable and small however long
//! the run: receipts are sampled evenly past [`MAX_RECEIPT_POINTS`], the
//! heatmap keeps the [`MAX_HEATMAP_ROWS`] latest connections and folds
//! broadcasts into at most [`MAX_HEATMAP_COLUMNS`] columns. Every cut is
//! counted in the figures, so the page can say what it left out.

use crate::analysis::clock_figures::{device_clocks, device_summaries};
use crate::analysis::join::{Joined, JoinedBroadcast};
use crate::analysis::timebase::spread_of_all;
use crate::clock::DeviceClock;
use crate::convert;

/// Most receipts the latency scatter draws (one mark each).
pub const MAX_RECEIPT_POINTS: usize = 4_000;
/// Most broadcasts the time series draws (one mark each); past it, every
/// n-th broadcast and every broadcast among the worst.
pub const MAX_BROADCAST_POINTS: usize = 5_000;
/// Most connections the lateness heatmap shows (the latest on average).
pub const MAX_HEATMAP_ROWS: usize = 64;
/// Most columns of the lateness heatmap: broadcasts are folded into this many.
pub const MAX_HEATMAP_COLUMNS: usize = 120;

/// One broadcast, as the time series draws it.
#[derive(Clone, Debug, PartialEq)]
pub struct BroadcastPoint {
    /// Its name, as the report's tables write it.
    pub label: String,
    /// When: the agent's start, else its first receipt; wall ns.
    pub at_wall_ns: u64,
    /// Raw skew (each device's clock as it is); `None` below two receipts.
    pub skew_ns: Option<u64>,
    /// Skew in the agent's timebase: (estimate, lower, upper bound).
    pub corrected_ns: Option<(i64, i64, i64)>,
    /// Connections that missed it.
    pub missing: u32,
    /// What the probes' actions on it came to, when any acted.
    pub actions: Option<crate::analysis::actions::BroadcastActions>,
}

/// One receipt in the latency scatter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReceiptPoint {
    /// Which probe (index into [`Figures::probes`]): the mark's colour.
    pub probe: usize,
    /// When the agent's write of this copy completed, after the start.
    pub position_ns: i64,
    /// Receipt after the start: corrected to the agent's clock where the
    /// probe's clock is bounded, else raw.
    pub latency_ns: i64,
    /// Whether `latency_ns` is corrected.
    pub corrected: bool,
}

/// One heatmap row: a connection and its lateness per column.
#[derive(Clone, Debug, PartialEq)]
pub struct HeatmapRow {
    /// `probe-name #conn`.
    pub label: String,
    /// Mean lateness over the broadcasts it received, ns.
    pub mean_ns: i64,
    /// Mean lateness per column; `None` where it received nothing.
    pub cells: Vec<Option<i64>>,
    /// Broadcasts it missed.
    pub missed: u32,
}

/// Lateness per connection × broadcast: receipt minus that broadcast's
/// earliest receipt, in the agent's timebase where bounded.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Heatmap {
    /// The rows, in connection order.
    pub rows: Vec<HeatmapRow>,
    /// Broadcasts folded into each column (the last may hold fewer).
    pub broadcasts_per_column: usize,
    /// Columns.
    pub columns: usize,
    /// Connections in the run (rows beyond [`MAX_HEATMAP_ROWS`] left out).
    pub connections_total: usize,
}

/// One probe's clock, as the offset plot draws it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeClockPoint {
    /// Its name.
    pub name: String,
    /// Device minus agent clock, ns, and its error bound.
    pub offset_ns: Option<(i64, u64)>,
    /// What the device clock claims its own error is, ns (`None`: it claims
    /// no synchronisation, or nothing was read).
    pub claim_ns: Option<u64>,
}

/// Everything a report's plots draw.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Figures {
    /// The broadcasts drawn, in time order.
    pub broadcasts: Vec<BroadcastPoint>,
    /// Broadcasts in the run.
    pub broadcasts_total: usize,
    /// The receipts drawn (needs the agent's per-client send times).
    pub receipts: Vec<ReceiptPoint>,
    /// Receipts that had a send time to draw against.
    pub receipts_total: usize,
    /// Lateness per connection × broadcast.
    pub heatmap: Heatmap,
    /// Per probe.
    pub probes: Vec<ProbeClockPoint>,
    /// What the server clock claims its own error is, ns.
    pub agent_claim_ns: Option<u64>,
}

/// One receipt's arrival: raw (device clock) and, where bounded, in the
/// agent's timebase with its bound.
struct Arrival {
    connection: usize,
    corrected: Option<(i64, i64)>,
    raw: i64,
}

/// Computes the plot series of a joined run.
pub fn figures(joined: &Joined) -> Figures {
    let mut builder = FiguresBuilder::new(joined, device_clocks(joined));
    for b in &joined.broadcasts {
        builder.add(joined, b);
    }
    builder.finish(joined)
}

/// The plot series built one broadcast at a time, in memory bounded by the
/// caps above, not by the run.
pub struct FiguresBuilder {
    clocks: Vec<DeviceClock>,
    broadcasts: Sample<BroadcastPoint>,
    receipts: Sample<ReceiptPoint>,
    heatmap: HeatmapBuilder,
}

impl FiguresBuilder {
    /// Figures of `joined`'s logs with the probes' clock models `clocks`
    /// (as [`TimingBuilder::clocks`](crate::analysis::clock_figures::TimingBuilder::clocks) gives them).
    pub fn new(joined: &Joined, clocks: Vec<DeviceClock>) -> FiguresBuilder {
        FiguresBuilder {
            clocks,
            broadcasts: Sample::new(MAX_BROADCAST_POINTS),
            receipts: Sample::new(MAX_RECEIPT_POINTS),
            heatmap: HeatmapBuilder::new(joined.connections.len()),
        }
    }

    /// Adds one broadcast of `joined`, placed with this builder's clocks
    /// ([`crate::analysis::placing`]).
    pub fn add(&mut self, joined: &Joined, b: &JoinedBroadcast) {
        let placed = crate::analysis::placing::place_broadcast(joined, b, &self.clocks);
        let arrivals: Vec<Arrival> = b
            .receipts
            .iter()
            .enumerate()
            .map(|(i, r)| Arrival {
                connection: r.connection,
                corrected: placed.arrival(i),
                raw: convert::signed(r.arrival_wall_ns()),
            })
            .collect();
        let first_wall = b.receipts.iter().map(|r| r.wall_ns).min();
        let at_wall_ns = b.agent.map(|a| a.start.wall_ns).or(first_wall).unwrap_or(0);
        self.broadcasts.offer(BroadcastPoint {
            label: b.key.describe(),
            at_wall_ns,
            skew_ns: b.skew_ns(),
            corrected_ns: spread_of_all(arrivals.iter().map(|a| a.corrected)),
            missing: convert::count(b.missing.len()),
            actions: (!b.actions.is_empty())
                .then(|| crate::analysis::actions::broadcast_actions(&placed)),
        });

        // Lateness in one timebase per broadcast: corrected when every
        // receipt is, else raw (mixing the two would invent lateness).
        let all_corrected = arrivals.iter().all(|a| a.corrected.is_some());
        let at = |a: &Arrival| match a.corrected {
            Some((t, _)) if all_corrected => t,
            _ => a.raw,
        };
        let earliest = arrivals.iter().map(at).min().unwrap_or(0);
        self.heatmap.add(
            arrivals.iter().map(|a| (a.connection, at(a) - earliest)),
            &b.missing,
        );

        if let Some(agent) = b.agent {
            let start = convert::signed(agent.start.wall_ns);
            for (r, a) in b.receipts.iter().zip(&arrivals) {
                let Some(sent) = r.sent_wall_ns else { continue };
                let (latency_ns, corrected) = match a.corrected {
                    Some((t, _)) => (t - start, true),
                    None => (a.raw - start, false),
                };
                self.receipts.offer(ReceiptPoint {
                    probe: joined.connections[r.connection].probe,
                    position_ns: convert::signed(sent) - start,
                    latency_ns,
                    corrected,
                });
            }
        }
    }

    /// The figures, with `joined`'s probes and agent for the clock points.
    pub fn finish(self, joined: &Joined) -> Figures {
        // The offsets from the clock models built above, not a second pass
        // over every receipt.
        let devices = device_summaries(joined, &self.clocks);
        let probes = joined
            .probes
            .iter()
            .zip(&devices)
            .map(|(p, d)| ProbeClockPoint {
                name: p.name.clone(),
                offset_ns: d.offset_ns.zip(d.offset_bound_ns),
                claim_ns: p
                    .clock_states
                    .last()
                    .and_then(crate::record::ClockState::claimed_bound_ns),
            })
            .collect();
        // A streamed join hands broadcasts over as they complete, nearly
        // but not exactly in time order: the series is drawn in time order.
        let (mut broadcasts, broadcasts_total) = self.broadcasts.finish();
        broadcasts.sort_by_key(|b| b.at_wall_ns);
        let (receipts, receipts_total) = self.receipts.finish();
        Figures {
            broadcasts,
            broadcasts_total,
            receipts,
            receipts_total,
            heatmap: self.heatmap.finish(joined),
            probes,
            agent_claim_ns: joined
                .agent
                .as_ref()
                .and_then(|a| a.clock_states.last())
                .and_then(crate::record::ClockState::claimed_bound_ns),
        }
    }
}

/// Items offered one by one, kept evenly (every n-th, n doubling as they
/// come) so that at most `max` + 1 remain, the first and the last among them.
struct Sample<T> {
    kept: Vec<T>,
    last: Option<T>,
    stride: usize,
    offered: usize,
    max: usize,
}

impl<T> Sample<T> {
    fn new(max: usize) -> Sample<T> {
        Sample {
            kept: Vec::new(),
            last: None,
            stride: 1,
            offered: 0,
            max,
        }
    }

    /// Offers the next item.
    fn offer(&mut self, item: T) {
        let i = self.offered;
        self.offered += 1;
        if !i.is_multiple_of(self.stride) {
            self.last = Some(item);
            return;
        }
        self.last = None;
        self.kept.push(item);
        if self.kept.len() == 2 * self.max {
            // Every other one: what a stride twice as long would have kept.
            // The newest is at an odd place: it stays only as the last.
            self.last = self.kept.pop();
            let mut k = 0;
            self.kept.retain(|_| {
                k += 1;
                (k - 1) % 2 == 0
            });
            self.stride *= 2;
        }
    }

    /// What was kept, and how many were offered.
    fn finish(self) -> (Vec<T>, usize) {
        let mut kept = self.kept;
        kept.extend(self.last);
        (thin(kept, self.max), self.offered)
    }
}

/// Every n-th item so that at most `max` remain, first and last kept.
fn thin<T>(items: Vec<T>, max: usize) -> Vec<T> {
    if items.len() <= max {
        return items;
    }
    let stride = items.len().div_ceil(max);
    let last = items.len() - 1;
    items
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % stride == 0 || *i == last)
        .map(|(_, t)| t)
        .collect()
}

/// Lateness per connection × column of broadcasts, folded as broadcasts
/// come: columns of one broadcast each, pairs merged (and the broadcasts per
/// column doubled) whenever they would exceed [`MAX_HEATMAP_COLUMNS`].
struct HeatmapBuilder {
    connections: usize,
    /// (sum, count) per connection × column, row-major with `MAX_HEATMAP_COLUMNS` per row.
    sums: Vec<(i64, u32)>,
    /// (sum, count) per connection over the run.
    totals: Vec<(i64, u32)>,
    missed: Vec<u32>,
    per_column: usize,
    broadcasts: usize,
}

impl HeatmapBuilder {
    fn new(connections: usize) -> HeatmapBuilder {
        HeatmapBuilder {
            connections,
            sums: vec![(0, 0); connections * MAX_HEATMAP_COLUMNS],
            totals: vec![(0, 0); connections],
            missed: vec![0; connections],
            per_column: 1,
            broadcasts: 0,
        }
    }

    fn add(&mut self, lateness: impl Iterator<Item = (usize, i64)>, missing: &[usize]) {
        if self.broadcasts / self.per_column == MAX_HEATMAP_COLUMNS {
            for row in self.sums.chunks_mut(MAX_HEATMAP_COLUMNS) {
                for k in 0..MAX_HEATMAP_COLUMNS / 2 {
                    let (a, b) = (row[2 * k], row[2 * k + 1]);
                    row[k] = (a.0 + b.0, a.1 + b.1);
                }
                row[MAX_HEATMAP_COLUMNS / 2..].fill((0, 0));
            }
            self.per_column *= 2;
        }
        let column = self.broadcasts / self.per_column;
        self.broadcasts += 1;
        for (c, late) in lateness {
            let cell = &mut self.sums[c * MAX_HEATMAP_COLUMNS + column];
            cell.0 += late;
            cell.1 += 1;
            self.totals[c].0 += late;
            self.totals[c].1 += 1;
        }
        for &m in missing {
            self.missed[m] += 1;
        }
    }

    fn finish(self, joined: &Joined) -> Heatmap {
        let connections = self.connections;
        if connections == 0 || self.broadcasts == 0 {
            return Heatmap {
                connections_total: connections,
                ..Heatmap::default()
            };
        }
        let columns = self.broadcasts.div_ceil(self.per_column);
        let mean = |(sum, n): (i64, u32)| (n > 0).then(|| sum / i64::from(n));
        let mut chosen: Vec<usize> = (0..connections).collect();
        if connections > MAX_HEATMAP_ROWS {
            chosen.sort_by_key(|&c| std::cmp::Reverse(mean(self.totals[c]).unwrap_or(i64::MIN)));
            chosen.truncate(MAX_HEATMAP_ROWS);
            chosen.sort_unstable();
        }
        let rows = chosen
            .into_iter()
            .map(|c| {
                let conn = &joined.connections[c];
                let row = &self.sums[c * MAX_HEATMAP_COLUMNS..c * MAX_HEATMAP_COLUMNS + columns];
                HeatmapRow {
                    label: format!("{} #{}", joined.probes[conn.probe].name, conn.conn),
                    mean_ns: mean(self.totals[c]).unwrap_or(0),
                    cells: row.iter().map(|&s| mean(s)).collect(),
                    missed: self.missed[c],
                }
            })
            .collect();
        Heatmap {
            rows,
            broadcasts_per_column: self.per_column,
            columns,
            connections_total: connections,
        }
    }
}

#[cfg(test)]
mod tests;
