//! The one stage that places a joined broadcast in the agent's clock: every
//! receipt, action and frame with its device's correction and bound, found
//! once. Every figure drawn across clocks (skew and latency with their
//! intervals, the split into order and network, action and frame skew,
//! latency from triggers, the page's series) reads what this placed;
//! nobody corrects a stamp by hand.

use crate::Stamp;
use crate::analysis::join::{Joined, JoinedBroadcast, JoinedReceipt};
use crate::analysis::timebase::{Placed, place};
use crate::clock::{Correction, DeviceClock};

/// One broadcast, its copies and actions each with its device clock's
/// correction where the clock is bounded there.
pub struct PlacedBroadcast<'a> {
    /// The broadcast.
    pub broadcast: &'a JoinedBroadcast,
    /// Per receipt, in the broadcast's order: its clock's correction at
    /// the receipt's stamp.
    receipts: Vec<Option<Correction>>,
    /// Per action, in order: at the moment it acted.
    actions: Vec<Option<Correction>>,
    /// Per action, in order: at its frame, when it has one.
    frames: Vec<Option<Correction>>,
}

/// The receipt's stamp, on its device's clocks.
fn stamp_of(r: &JoinedReceipt) -> Stamp {
    Stamp {
        wall_ns: r.wall_ns,
        mono_ns: r.mono_ns,
    }
}

/// Places `b` of `joined` with the device clocks `clocks` (one per probe
/// log, in `joined.probes`' order).
pub fn place_broadcast<'a>(
    joined: &Joined,
    b: &'a JoinedBroadcast,
    clocks: &[DeviceClock],
) -> PlacedBroadcast<'a> {
    let clock_of = |connection: usize| &clocks[joined.connections[connection].probe];
    PlacedBroadcast {
        broadcast: b,
        receipts: b
            .receipts
            .iter()
            .map(|r| clock_of(r.connection).at(stamp_of(r)))
            .collect(),
        actions: b
            .actions
            .iter()
            .map(|a| clock_of(a.connection).at(a.done))
            .collect(),
        frames: b
            .actions
            .iter()
            .map(|a| a.frame.and_then(|f| clock_of(a.connection).at(f)))
            .collect(),
    }
}

impl PlacedBroadcast<'_> {
    /// Receipt `i`'s correction, when its clock is bounded.
    pub fn receipt_correction(&self, i: usize) -> Option<Correction> {
        self.receipts[i]
    }

    /// Receipt `i`'s arrival (the kernel's, where it stamped it) in the
    /// agent's clock, with its bound.
    pub fn arrival(&self, i: usize) -> Option<Placed> {
        let r = &self.broadcast.receipts[i];
        Some(place(self.receipts[i]?, r.arrival_wall_ns()))
    }

    /// Receipt `i`'s read (the userspace stamp) in the agent's clock.
    pub fn read(&self, i: usize) -> Option<Placed> {
        let r = &self.broadcast.receipts[i];
        Some(place(self.receipts[i]?, r.wall_ns))
    }

    /// Every receipt's arrival, in order.
    pub fn arrivals(&self) -> impl Iterator<Item = Option<Placed>> + '_ {
        (0..self.receipts.len()).map(|i| self.arrival(i))
    }

    /// Action `i`'s moment in the agent's clock.
    pub fn action(&self, i: usize) -> Option<Placed> {
        let a = &self.broadcast.actions[i];
        Some(place(self.actions[i]?, a.done.wall_ns))
    }

    /// Every action's moment, in order.
    pub fn actions(&self) -> impl Iterator<Item = Option<Placed>> + '_ {
        (0..self.actions.len()).map(|i| self.action(i))
    }

    /// Action `i`'s frame in the agent's clock; `None` without a frame or
    /// a bound there.
    pub fn frame(&self, i: usize) -> Option<Placed> {
        let f = self.broadcast.actions[i].frame?;
        Some(place(self.frames[i]?, f.wall_ns))
    }
}
