//! A probe log's own side of the join, read once before its receipts: its
//! connections (each opening its own), its clock's records, and how it ends.
//! Receipts are only looked at here for the connections they name and the
//! stamps they carry; they are matched in a later pass.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::model::{ClockIdentity, Probe, ProbeConnection, RunEnd};
use super::source::ProbeSource;
use crate::Stamp;
use crate::clock::steps::{STEP_CONFIRMATIONS, STEP_THRESHOLD_NS};
use crate::record::{LogFull, MessageKey, ProbeRecord};

/// Which connection (an index into the join's connections) each of a probe's
/// records is about. Each time a connection index opens is its own
/// connection (a reconnect after the server closed it): its own agent id and
/// its own window, so broadcasts sent while it was down are not missing for
/// it. Fed the same records again, it names the same connections, which is
/// how later passes find a receipt's connection without keeping any.
#[derive(Default)]
pub(super) struct Episodes {
    current: BTreeMap<u32, usize>,
    /// (a connection's episode, the app beside the probe) → the connection
    /// holding that app's actions on what the episode received.
    apps: HashMap<(usize, String), usize>,
    opened: HashSet<usize>,
    /// Connections in the order this probe's records made them.
    made: Vec<usize>,
    /// When replaying: how many of `made` were named again so far.
    replayed: Option<usize>,
}

impl Episodes {
    /// A tracker that replays what an earlier pass made.
    pub(super) fn replay(made: Vec<usize>) -> Episodes {
        Episodes {
            made,
            replayed: Some(0),
            ..Episodes::default()
        }
    }

    /// The connections made, in order.
    pub(super) fn made(self) -> Vec<usize> {
        self.made
    }

    fn make(&mut self, create: &mut dyn FnMut() -> usize) -> usize {
        match &mut self.replayed {
            Some(n) => {
                let i = self.made.get(*n).copied().unwrap_or(usize::MAX);
                *n += 1;
                i
            }
            None => {
                let i = create();
                self.made.push(i);
                i
            }
        }
    }

    /// The connection an opening record starts.
    pub(super) fn opened(&mut self, conn: u32, create: &mut dyn FnMut() -> usize) -> usize {
        let i = match self.current.get(&conn) {
            // Receipts came before its open record: the same one.
            Some(&i) if !self.opened.contains(&i) => i,
            _ => {
                let i = self.make(create);
                self.current.insert(conn, i);
                i
            }
        };
        self.opened.insert(i);
        i
    }

    /// The connection a receipt came on.
    pub(super) fn receipt(&mut self, conn: u32, create: &mut dyn FnMut() -> usize) -> usize {
        match self.current.get(&conn) {
            Some(&i) => i,
            None => {
                let i = self.make(create);
                self.current.insert(conn, i);
                i
            }
        }
    }

    /// The connection a later record (close, addresses) is about, if any.
    pub(super) fn current(&self, conn: u32) -> Option<usize> {
        self.current.get(&conn).copied()
    }

    /// The connections an app's action on a message of probe connection
    /// `conn` is about: (the probe's connection, which names the message;
    /// the app's own, which holds the action). `create` is called with
    /// `None` for the probe's and the app's name for the app's.
    pub(super) fn app_action(
        &mut self,
        conn: u32,
        app: &str,
        create: &mut dyn FnMut(Option<&str>) -> usize,
    ) -> (usize, usize) {
        let of = self.receipt(conn, &mut || create(None));
        if let Some(&i) = self.apps.get(&(of, app.to_owned())) {
            return (of, i);
        }
        let i = self.make(&mut || create(Some(app)));
        self.apps.insert((of, app.to_owned()), i);
        (of, i)
    }

    /// Feeds one record; for one about a message (a receipt, an action, a
    /// frame), returns which connection names its message and which holds
    /// it (`usize::MAX` if a replay meets a connection the first pass did
    /// not make).
    pub(super) fn follow(&mut self, record: &ProbeRecord) -> Option<(usize, usize)> {
        let mut none = || usize::MAX;
        let on = |i: usize| Some((i, i));
        match record {
            ProbeRecord::ConnectionOpened(o) => {
                self.opened(o.conn, &mut none);
                None
            }
            ProbeRecord::Receipt(r) => on(self.receipt(r.conn, &mut none)),
            // An action fires after its receipt, on the connection it came
            // on; its frame is drawn after it.
            ProbeRecord::Action(a) => on(self.receipt(a.conn, &mut none)),
            ProbeRecord::Frame(f) => on(self.receipt(f.conn, &mut none)),
            ProbeRecord::AppAction(a) => {
                Some(self.app_action(a.action.conn, &a.app, &mut |_| usize::MAX))
            }
            _ => None,
        }
    }
}

/// Keeps the stamps that clock-step detection needs out of millions: every
/// stamp whose wall − monotonic level differs from the last kept by a
/// quarter of a step, the stamp just before it and the stamps right after it
/// (which measure it, and confirm or refute it), and one a second otherwise.
/// A step is found where every stamp would find it, at the same size; a day
/// of receipts keeps about 86,400 stamps.
#[derive(Default)]
pub(super) struct StampThinner {
    last: Option<Stamp>,
    /// The latest stamp not kept.
    held: Option<Stamp>,
    confirmations_due: usize,
}

/// The longest run of stamps at one level with none kept.
const KEEP_ONE_EVERY_NS: u64 = 1_000_000_000;

impl StampThinner {
    /// Offers `s`, in log order; what is kept is pushed to `kept`.
    pub(super) fn offer(&mut self, s: Stamp, kept: &mut Vec<Stamp>) {
        let level = |s: &Stamp| s.wall_ns as i128 - s.mono_ns as i128;
        let keep = match &self.last {
            None => true,
            Some(last) => {
                let moved =
                    (level(&s) - level(last)).unsigned_abs() > (STEP_THRESHOLD_NS / 4) as u128;
                if moved {
                    // Measured against its neighbour, not a second-old stamp:
                    // the slew allowed over a second would hide a small step.
                    kept.extend(self.held.take());
                    self.confirmations_due = STEP_CONFIRMATIONS;
                    true
                } else if self.confirmations_due > 0 {
                    self.confirmations_due -= 1;
                    true
                } else {
                    s.mono_ns.abs_diff(last.mono_ns) >= KEEP_ONE_EVERY_NS
                }
            }
        };
        if keep {
            kept.push(s);
            self.last = Some(s);
            self.held = None;
        } else {
            self.held = Some(s);
        }
    }
}

/// What the first pass over the probe logs found.
pub(super) struct ProbeSide {
    /// Every connection, over all probes.
    pub connections: Vec<ProbeConnection>,
    /// Each probe's identity and clock records.
    pub probes: Vec<Probe>,
    /// Per probe, the connections its records made, in order (for replays).
    pub made: Vec<Vec<usize>>,
    /// About how many broadcasts the receipts are of (the most any one
    /// probe's connections each got): what the counts table is sized for.
    pub broadcasts_estimate: usize,
    /// Whether any receipt is known by payload hash (not a test message's
    /// sequence number): only those need the agent's index by hash.
    pub hash_keyed: bool,
}

/// Reads each probe log once for everything but matching its receipts.
pub(super) fn collect_probes(probes: &[&dyn ProbeSource]) -> ProbeSide {
    let mut connections: Vec<ProbeConnection> = Vec::new();
    let mut infos = Vec::new();
    let mut made = Vec::new();
    let mut broadcasts_estimate = 0usize;
    let mut hash_keyed = false;
    for (p, source) in probes.iter().enumerate() {
        let mut receipts = 0usize;
        let mut episodes = Episodes::default();
        let mut info = Probe::default();
        let mut thinner = StampThinner::default();
        let mut last_wall = 0u64;
        let mut closed: HashMap<usize, u64> = HashMap::new();
        let first_connection = connections.len();
        let new_episode =
            |conn: u32, app: Option<&str>, connections: &mut Vec<ProbeConnection>| -> usize {
                connections.push(ProbeConnection {
                    probe: p,
                    conn,
                    agent_conn: None,
                    opened_wall_ns: None,
                    until_wall_ns: 0,
                    addresses: None,
                    app: app.map(str::to_owned),
                });
                connections.len() - 1
            };
        for record in source.records() {
            if let Some(at) = record.stamp() {
                thinner.offer(at, &mut info.stamps);
                // Clock records say nothing of when connections listened.
                if !matches!(
                    record,
                    ProbeRecord::ClockState(_) | ProbeRecord::TimeSample(_)
                ) {
                    last_wall = last_wall.max(at.wall_ns);
                }
            }
            match record {
                ProbeRecord::Started(s) => {
                    info.name = s.name.clone();
                    info.host = s.host.clone();
                }
                ProbeRecord::ConnectionOpened(o) => {
                    let i = episodes
                        .opened(o.conn, &mut || new_episode(o.conn, None, &mut connections));
                    connections[i].agent_conn = o.agent_conn;
                    connections[i].opened_wall_ns = Some(o.at.wall_ns);
                }
                ProbeRecord::ConnectionFailed(_) => {}
                ProbeRecord::ConnectionClosed(c) => {
                    if let Some(i) = episodes.current(c.conn) {
                        closed.insert(i, c.at.wall_ns);
                    }
                }
                ProbeRecord::Receipt(r) => {
                    receipts += 1;
                    hash_keyed |= matches!(r.key, MessageKey::Hash { .. });
                    episodes.receipt(r.conn, &mut || new_episode(r.conn, None, &mut connections));
                }
                // Recording ended there: later broadcasts are not missing.
                ProbeRecord::Stopped(_) => info.ended = RunEnd::Stopped,
                ProbeRecord::LogFull(LogFull { .. }) => info.ended = RunEnd::LogFull,
                ProbeRecord::ClockState(c) => info.clock_states.push(*c),
                ProbeRecord::TimeSample(t) => info.samples.push(t),
                ProbeRecord::Identity(i) => {
                    info.identity.get_or_insert(i);
                }
                ProbeRecord::ConnectionTls(t) => {
                    info.tls_connections += 1;
                    info.tls_unverified += u64::from(!t.verified);
                }
                ProbeRecord::ConnectionDeflate(_) => info.deflate_connections += 1,
                ProbeRecord::ConnectionAddresses(a) => {
                    if let Some(i) = episodes.current(a.conn) {
                        connections[i].addresses = Some((a.local, a.remote));
                    }
                }
                ProbeRecord::ActPlan(plan) => info.act_plan = Some(plan),
                ProbeRecord::Action(a) => {
                    episodes.receipt(a.conn, &mut || new_episode(a.conn, None, &mut connections));
                }
                ProbeRecord::Frame(f) => {
                    episodes.receipt(f.conn, &mut || new_episode(f.conn, None, &mut connections));
                }
                ProbeRecord::AppAction(a) => {
                    let conn = a.action.conn;
                    episodes.app_action(conn, &a.app, &mut |app| {
                        new_episode(conn, app, &mut connections)
                    });
                }
                ProbeRecord::Payload(_) => {}
                ProbeRecord::Page(page) => info.page = Some(page),
                ProbeRecord::LogsPruned(p) => info.logs_pruned = Some(p),
                ProbeRecord::ClockTags(t) => info.clock_tags = Some(t),
                ProbeRecord::App(app) => info.app = Some(app),
                ProbeRecord::NoticeTotals(t) => {
                    info.notices.retain(|n| n.app != t.app);
                    info.notices.push(t);
                }
            }
        }
        info.clock = ClockIdentity::of(&info.host, info.identity.as_ref());
        for (i, c) in connections.iter_mut().enumerate().skip(first_connection) {
            c.until_wall_ns = closed.get(&i).copied().unwrap_or(last_wall);
        }
        let distinct: HashSet<u32> = connections[first_connection..]
            .iter()
            .map(|c| c.conn)
            .collect();
        broadcasts_estimate = broadcasts_estimate.max(receipts / distinct.len().max(1));
        infos.push(info);
        made.push(episodes.made());
    }
    ProbeSide {
        connections,
        probes: infos,
        made,
        broadcasts_estimate,
        hash_keyed,
    }
}

/// When a record about a connection happened; `None` for the run's own
/// records (identity, clock, time exchange), which every agent run keeps.
pub(super) fn connection_time(record: &ProbeRecord) -> Option<u64> {
    match record {
        ProbeRecord::ConnectionOpened(o) => Some(o.at.wall_ns),
        ProbeRecord::ConnectionFailed(f) => Some(f.at.wall_ns),
        ProbeRecord::ConnectionClosed(c) => Some(c.at.wall_ns),
        ProbeRecord::Receipt(r) => Some(r.at.wall_ns),
        ProbeRecord::Action(a) => Some(a.done.wall_ns),
        ProbeRecord::Frame(f) => Some(f.at.wall_ns),
        ProbeRecord::AppAction(a) => Some(a.action.done.wall_ns),
        ProbeRecord::Started(_)
        | ProbeRecord::ActPlan(_)
        | ProbeRecord::Stopped(_)
        | ProbeRecord::ClockState(_)
        | ProbeRecord::TimeSample(_)
        | ProbeRecord::Identity(_)
        | ProbeRecord::ConnectionAddresses(_)
        | ProbeRecord::ConnectionTls(_)
        | ProbeRecord::ConnectionDeflate(_)
        | ProbeRecord::Payload(_)
        | ProbeRecord::Page(_)
        | ProbeRecord::LogsPruned(_)
        | ProbeRecord::ClockTags(_)
        | ProbeRecord::App(_)
        | ProbeRecord::NoticeTotals(_)
        | ProbeRecord::LogFull(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::find_steps;

    fn stamp(mono: u64, level: i64) -> Stamp {
        Stamp {
            wall_ns: (1_700_000_000_000_000_000i64 + mono as i64 + level) as u64,
            mono_ns: mono,
        }
    }

    fn thinned(stamps: &[Stamp]) -> Vec<Stamp> {
        let mut thinner = StampThinner::default();
        let mut kept = Vec::new();
        for &s in stamps {
            thinner.offer(s, &mut kept);
        }
        kept
    }

    #[test]
    fn thinned_stamps_find_the_steps_every_stamp_finds() {
        // 10 s of stamps every 100 µs: a 5 ms step at 4 s, a torn stamp at 6 s,
        // a 2 ms step back 300 µs before the end (three stamps).
        let mut stamps = Vec::new();
        for i in 0..100_000u64 {
            let mono = i * 100_000;
            let mut level = if mono >= 4_000_000_000 { 5_000_000 } else { 0 };
            if mono >= 9_999_700_000 {
                level -= 2_000_000;
            }
            if i == 60_000 {
                level += 3_000_000;
            }
            stamps.push(stamp(mono, level));
        }
        let kept = thinned(&stamps);
        assert!(kept.len() < 40, "kept {}", kept.len());
        let all = find_steps(&stamps);
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(find_steps(&kept), all);
    }

    #[test]
    fn a_step_just_over_the_threshold_is_not_lost_to_the_slew_allowance() {
        // Every 10 ms, then +1.2 ms at 4.9 s: over a second of allowed slew
        // (0.5 ms) it would pass for discipline; against its neighbour it is a step.
        let stamps: Vec<Stamp> = (0..1_000u64)
            .map(|i| {
                let mono = i * 10_000_000;
                stamp(mono, if mono >= 4_900_000_000 { 1_200_000 } else { 0 })
            })
            .collect();
        let all = find_steps(&stamps);
        assert_eq!(all.len(), 1);
        assert_eq!(find_steps(&thinned(&stamps)), all);
    }
}
