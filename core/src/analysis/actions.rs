//! Acting together: what the probes' actions (`--act-at`) came to, and the
//! lead a server should give its broadcasts.
//!
//! A broadcast that carries a time to act in the server's clock spreads its
//! clients' *actions* only by their clock error and timer precision,
//! whatever its fan-out. Per broadcast:
//! - **action skew** = last − first action, on the devices' clocks as they
//!   are (raw) and in the agent's timebase with the interval that contains
//!   the truth (each action's clock bound, as for receive skew); an action's
//!   moment is read right after its timer fired, so the timer's own error is
//!   in it;
//! - **late**: the message came after its time, so the action happened at
//!   once on receipt; counted and listed, never hidden in the skew;
//! - the **receive skew** of the same broadcast beside it, so a report shows
//!   what scheduling bought;
//! - the **timer error** (actual − target, on the device's monotonic clock)
//!   of every action in time.
//!
//! The **lead** is how long after its start a broadcast's time to act should
//! be: [`LeadAdvice`] from the latencies a report measured.

use serde::Serialize;

use std::collections::BTreeMap;

use crate::analysis::clock_figures::{BoundedSummary, BoundedSummaryBuilder};
use crate::analysis::join::{ActorKind, Joined};
use crate::analysis::lead_rule::{self, Evidence};
use crate::analysis::placing::PlacedBroadcast;
use crate::analysis::stats::{Summary, SummaryBuilder};
use crate::analysis::timebase::{raw_spread, spread_of_all};
use crate::convert;

/// Late actions listed at most (the worst).
pub const LATE_LISTED: usize = 20;

/// One late action, as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct LateAction {
    /// The broadcast, as the report names it.
    pub broadcast: String,
    /// The probe's `--name` and the connection's index.
    pub connection: String,
    /// How long after its target the message came.
    pub late_ns: u64,
}

/// What the probes' actions came to.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ActionFigures {
    /// Actions joined to a broadcast.
    pub actions: u64,
    /// Of those, late: the message came after its time to act.
    pub late: u64,
    /// The latest of them, worst first (at most 20).
    pub late_listed: Vec<LateAction>,
    /// Per broadcast acted on by two connections or more: last − first
    /// action, each device's clock as it is.
    pub action_skew_ns: Option<Summary>,
    /// The same in the agent's timebase, with intervals that contain the
    /// truth (broadcasts where every action's clock is bounded).
    pub action_skew_corrected_ns: Option<BoundedSummary>,
    /// The receive skew (kernel stamps, raw) of the same broadcasts.
    pub receive_skew_ns: Option<Summary>,
    /// Per action in time: actual − target on the device's monotonic clock.
    pub timer_error_ns: Option<Summary>,
    /// Per action: its time to act minus the broadcast's start (the lead it
    /// was given), when the agent recorded the start.
    pub lead_given_ns: Option<Summary>,
    /// Per action: its target minus its message's read, both on the
    /// device's monotonic clock: the time it had to spare (negative: late
    /// by that much). Its minimum is how much shorter the lead could have
    /// been, whatever the server and however its broadcasts were
    /// triggered; the lead's start does not enter it.
    pub spare_ns: Option<Summary>,
    /// Actions left out of corrected figures (their clock was not bounded).
    pub uncorrected_actions: u64,
    /// Actions in time that the device took on a clock bound wider than
    /// the time its message left it (or before it had any estimate): it
    /// could not tell whether it acted in time. Each is still judged on the report's own
    /// bound; this says the device acted half blind.
    #[serde(default)]
    pub on_wide_bound: u64,
    /// Receipts, on connections of probes that act, with no action (the
    /// message carried no time to act where the probe looked).
    pub receipts_without_action: u64,
    /// Actions that matched no broadcast.
    pub unmatched_actions: u64,
    /// Broadcasts whose lead `lead=auto` chose (the agent recorded it), and
    /// the leads chosen; `None` when none was.
    #[serde(default)]
    pub auto_lead: Option<AutoLeadFigures>,
    /// Who acted, one row each: the probes, their pages, the apps that
    /// report their own actions and the apps beside probes: whose actions
    /// were whose.
    #[serde(default)]
    pub by_actor: Vec<ActorFigures>,
    /// Actions whose frame a page reported (the next animation frame after
    /// its callback).
    #[serde(default)]
    pub frames: u64,
    /// Per broadcast drawn by two pages or more: last − first frame, each
    /// device's clock as it is. What people see spreads by this, not by the
    /// action skew: a display shows an action at its next refresh, and two
    /// displays' refreshes are not aligned.
    #[serde(default)]
    pub frame_skew_ns: Option<Summary>,
    /// The same in the agent's timebase, with intervals that contain the
    /// truth.
    #[serde(default)]
    pub frame_skew_corrected_ns: Option<BoundedSummary>,
}

/// One actor's actions: what it did, and how well.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ActorFigures {
    /// Its name: the run's (`--name`, the app's `name`), `PROBE/APP` for an
    /// app beside a probe.
    pub name: String,
    /// What it is.
    pub kind: ActorKind,
    /// Its actions joined to a broadcast.
    pub actions: u64,
    /// Of those, late.
    pub late: u64,
    /// Actual − target on its monotonic clock, actions in time. For an app
    /// beside a probe: the moment it says it acted against the probe's
    /// target, so the notice's trip and the app's wake-up are in it.
    pub timer_error_ns: Option<Summary>,
    /// Target minus its message's read: the time it had to spare.
    pub spare_ns: Option<Summary>,
    /// Of its actions, those with the frame they were drawn in.
    pub frames: u64,
    /// Its readiness: the p99 of its late actions' reaction, read to acted
    /// ([`crate::analysis::lead_rule`]), what the lead must leave it; 0
    /// with no late action.
    pub readiness_ns: u64,
    /// For an app beside a probe (`--act-notify`): the notices it was sent
    /// and what came back.
    pub notices: Option<crate::record::NoticeTotals>,
    /// For an app's own run: its module and what it runs in.
    pub app: Option<crate::record::AppRun>,
}

/// What `lead=auto` chose for the broadcasts acted on.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AutoLeadFigures {
    /// Broadcasts given a lead by `lead=auto`.
    pub broadcasts: u64,
    /// The leads chosen.
    pub lead_ns: Summary,
    /// Of those broadcasts, how many rested on probes' measured reads (the
    /// rest on the fan-out span and a network allowance).
    pub on_probe_reads: u64,
    /// Actions on them, and how many were late.
    pub actions: u64,
    /// Of those, late.
    pub late: u64,
    /// Broadcasts whose reads asked for more than the ceiling
    /// (`--max-lead`): they were given the ceiling.
    #[serde(default)]
    pub capped: u64,
    /// The ceiling, and the most any broadcast's reads asked for, when
    /// the agent recorded them.
    #[serde(default)]
    pub ceiling_ns: Option<u64>,
    /// See `ceiling_ns`.
    #[serde(default)]
    pub wanted_max_ns: Option<u64>,
    /// Broadcasts whose lead rested on a tail model (fewer reads than the
    /// quantile needs).
    #[serde(default)]
    pub on_tail_model: u64,
    /// Devices left out of the lead (implausible reads), by name.
    #[serde(default)]
    pub left_out: Vec<String>,
}

/// [`ActionFigures`] built one broadcast at a time.
#[derive(Default)]
pub struct ActionsBuilder {
    actions: u64,
    late: u64,
    late_listed: Vec<LateAction>,
    skew: SummaryBuilder,
    skew_corrected: BoundedSummaryBuilder,
    receive_skew: SummaryBuilder,
    timer_error: SummaryBuilder,
    lead_given: SummaryBuilder,
    spare: SummaryBuilder,
    uncorrected: u64,
    on_wide_bound: u64,
    receipts_without_action: u64,
    auto_broadcasts: u64,
    auto_leads: SummaryBuilder,
    auto_on_probes: u64,
    auto_actions: u64,
    auto_late: u64,
    auto_capped: u64,
    auto_ceiling: Option<u64>,
    auto_wanted_max: Option<u64>,
    auto_tail_model: u64,
    auto_left_out: std::collections::BTreeSet<String>,
    actors: BTreeMap<(usize, Option<String>), ActorBuilder>,
    frames: u64,
    frame_skew: SummaryBuilder,
    frame_skew_corrected: BoundedSummaryBuilder,
}

/// One actor's figures, built one action at a time.
#[derive(Default)]
struct ActorBuilder {
    /// A connection of it, for its name and kind.
    connection: usize,
    actions: u64,
    late: u64,
    timer_error: SummaryBuilder,
    spare: SummaryBuilder,
    reactions: SummaryBuilder,
    frames: u64,
}

/// One broadcast's action skew: raw, and corrected with its interval when
/// every action's clock is bounded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BroadcastActions {
    /// Actions on it.
    pub actions: u32,
    /// Of those, late.
    pub late: u32,
    /// Last − first action, devices' clocks as they are.
    pub skew_ns: Option<u64>,
    /// In the agent's timebase: (estimate, lower, upper bound).
    pub corrected_ns: Option<(i64, i64, i64)>,
}

/// One broadcast's actions, in the agent's timebase where the clocks say.
pub fn broadcast_actions(placed: &PlacedBroadcast) -> BroadcastActions {
    let b = placed.broadcast;
    let skew_ns = raw_spread(b.actions.iter().map(|a| a.done.wall_ns));
    BroadcastActions {
        actions: convert::count(b.actions.len()),
        late: convert::count(b.actions.iter().filter(|a| a.late_ns > 0).count()),
        skew_ns,
        corrected_ns: spread_of_all(placed.actions()),
    }
}

impl ActionsBuilder {
    /// Nothing yet.
    pub fn new() -> ActionsBuilder {
        ActionsBuilder::default()
    }

    /// Adds one broadcast of `joined`, as placed.
    pub fn add(&mut self, joined: &Joined, placed: &PlacedBroadcast) {
        let b = placed.broadcast;
        let acting = |connection: usize| {
            joined.probes[joined.connections[connection].probe]
                .act_plan
                .is_some()
        };
        self.receipts_without_action += b
            .receipts
            .iter()
            .filter(|r| {
                acting(r.connection) && !b.actions.iter().any(|a| a.connection == r.connection)
            })
            .count() as u64;
        if b.actions.is_empty() {
            return;
        }
        let here = broadcast_actions(placed);
        self.actions += u64::from(here.actions);
        self.late += u64::from(here.late);
        if let Some(lead) = b.agent.and_then(|a| a.lead).filter(|l| l.auto) {
            self.auto_broadcasts += 1;
            self.auto_leads.add(convert::signed(lead.lead_ns));
            self.auto_on_probes += u64::from(lead.basis_copies > 0);
            self.auto_actions += u64::from(here.actions);
            self.auto_late += u64::from(here.late);
            if let Some(t) = b.agent.and_then(|a| a.auto_terms) {
                self.auto_capped += u64::from(t.wanted_ns > t.ceiling_ns);
                self.auto_ceiling = Some(t.ceiling_ns);
                self.auto_wanted_max = Some(self.auto_wanted_max.unwrap_or(0).max(t.wanted_ns));
                self.auto_tail_model += u64::from(t.tail_model);
            }
            self.auto_left_out.extend(b.auto_left_out.iter().cloned());
        }
        let framed: Vec<usize> = (0..b.actions.len())
            .filter(|&i| b.actions[i].frame.is_some())
            .collect();
        self.frames += framed.len() as u64;
        if let Some(spread) = raw_spread(
            framed
                .iter()
                .filter_map(|&i| b.actions[i].frame.map(|f| f.wall_ns)),
        ) {
            self.frame_skew.add(convert::signed(spread));
            if let Some(c) = spread_of_all(framed.iter().map(|&i| placed.frame(i))) {
                self.frame_skew_corrected.add(c);
            }
        }
        if let Some(s) = here.skew_ns {
            self.skew.add(convert::signed(s));
            if let Some(r) = b.skew_ns() {
                self.receive_skew.add(convert::signed(r));
            }
        }
        match here.corrected_ns {
            Some(c) => self.skew_corrected.add(c),
            None if here.actions >= 2 => self.uncorrected += u64::from(here.actions),
            None => {}
        }
        for a in &b.actions {
            let c = &joined.connections[a.connection];
            let actor = self
                .actors
                .entry((c.probe, c.app.clone()))
                .or_insert_with(|| ActorBuilder {
                    connection: a.connection,
                    ..ActorBuilder::default()
                });
            actor.actions += 1;
            actor.late += u64::from(a.late_ns > 0);
            actor.frames += u64::from(a.frame.is_some());
            if let Some(reaction) =
                lead_rule::reaction_ns(a.target.mono_ns, a.late_ns, a.done.mono_ns)
            {
                actor.reactions.add(reaction);
            }
            if a.late_ns == 0 {
                actor.timer_error.add(a.timer_error_ns());
            }
            if a.late_ns == 0 {
                self.timer_error.add(a.timer_error_ns());
            } else {
                self.late_listed.push(LateAction {
                    broadcast: b.key.describe(),
                    connection: format!("{} #{}", joined.actor_name(a.connection), c.conn),
                    late_ns: a.late_ns,
                });
            }
            if let Some(read) = b.receipts.iter().find(|r| r.connection == a.connection) {
                let spare = convert::signed(a.target.mono_ns) - convert::signed(read.mono_ns);
                self.spare.add(spare);
                if let Some(actor) = self.actors.get_mut(&(c.probe, c.app.clone())) {
                    actor.spare.add(spare);
                }
                if a.late_ns == 0
                    && a.bound_acted_on_ns
                        .is_none_or(|bound| convert::signed(bound) > spare)
                {
                    self.on_wide_bound += 1;
                }
            }
            if let Some(agent) = b.agent {
                self.lead_given
                    .add(convert::signed(a.act_at_ns) - convert::signed(agent.start.wall_ns));
            }
        }
        if self.late_listed.len() > 4 * LATE_LISTED {
            self.trim_late();
        }
    }

    fn trim_late(&mut self) {
        self.late_listed.sort_by(|a, b| {
            b.late_ns
                .cmp(&a.late_ns)
                .then(a.broadcast.cmp(&b.broadcast))
        });
        self.late_listed.truncate(LATE_LISTED);
    }

    /// The figures; `None` when no probe acted.
    pub fn finish(&mut self, joined: &Joined) -> Option<ActionFigures> {
        let acting = |p: &crate::analysis::join::Probe| {
            p.act_plan.is_some() || p.app.is_some() || !p.notices.is_empty()
        };
        if self.actions == 0 && !joined.probes.iter().any(acting) {
            return None;
        }
        self.trim_late();
        let mut by_actor: Vec<ActorFigures> = self
            .actors
            .iter()
            .map(|((probe, app), a)| ActorFigures {
                name: joined.actor_name(a.connection),
                kind: joined.actor_of(a.connection),
                actions: a.actions,
                late: a.late,
                timer_error_ns: a.timer_error.finish(),
                spare_ns: a.spare.finish(),
                frames: a.frames,
                readiness_ns: a
                    .reactions
                    .finish()
                    .map_or(0, |d| lead_rule::readiness_ns(&d)),
                notices: app.as_ref().and_then(|app| {
                    joined.probes[*probe]
                        .notices
                        .iter()
                        .find(|n| &n.app == app)
                        .cloned()
                }),
                app: joined.probes[*probe].app.clone().filter(|_| app.is_none()),
            })
            .collect();
        // An app beside a probe that never answered acted on nothing the
        // report can see: it is listed all the same, with its notices.
        for (probe, p) in joined.probes.iter().enumerate() {
            for n in &p.notices {
                if !self.actors.contains_key(&(probe, Some(n.app.clone()))) {
                    by_actor.push(ActorFigures {
                        name: format!("{}/{}", p.name, n.app),
                        kind: ActorKind::NativeApp,
                        actions: 0,
                        late: 0,
                        timer_error_ns: None,
                        spare_ns: None,
                        frames: 0,
                        readiness_ns: 0,
                        notices: Some(n.clone()),
                        app: None,
                    });
                }
            }
        }
        by_actor.sort_by(|a, b| a.kind.cmp(&b.kind).then(a.name.cmp(&b.name)));
        Some(ActionFigures {
            actions: self.actions,
            late: self.late,
            late_listed: self.late_listed.clone(),
            action_skew_ns: self.skew.finish(),
            action_skew_corrected_ns: self.skew_corrected.finish(),
            receive_skew_ns: self.receive_skew.finish(),
            timer_error_ns: self.timer_error.finish(),
            lead_given_ns: self.lead_given.finish(),
            spare_ns: self.spare.finish(),
            uncorrected_actions: self.uncorrected,
            on_wide_bound: self.on_wide_bound,
            receipts_without_action: self.receipts_without_action,
            unmatched_actions: joined.unmatched_actions,
            auto_lead: self.auto_leads.finish().map(|lead_ns| AutoLeadFigures {
                broadcasts: self.auto_broadcasts,
                lead_ns,
                on_probe_reads: self.auto_on_probes,
                actions: self.auto_actions,
                late: self.auto_late,
                capped: self.auto_capped,
                ceiling_ns: self.auto_ceiling,
                wanted_max_ns: self.auto_wanted_max,
                on_tail_model: self.auto_tail_model,
                left_out: self.auto_left_out.iter().cloned().collect(),
            }),
            by_actor,
            frames: self.frames,
            frame_skew_ns: self.frame_skew.finish(),
            frame_skew_corrected_ns: self.frame_skew_corrected.finish(),
        })
    }
}

/// How long after a broadcast's start its time to act should be, from the
/// latencies measured to each copy's read by its client (its userspace
/// stamp: an app cannot act before it has the message), by the one rule
/// `lead=auto` follows too ([`crate::analysis::lead_rule`]): a copy read
/// after its time makes its client act late.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct LeadAdvice {
    /// What the latencies are measured from: `"start"` (the agent's
    /// broadcast start, or the tap's first byte) or `"trigger"` (the times
    /// the broadcasts were asked for, `--triggers`).
    pub from: &'static str,
    /// Copies measured.
    pub copies: u64,
    /// The smallest lead that would have put every copy in time: the
    /// largest latency's upper bound (each clock's bound added).
    pub every_copy_ns: i64,
    /// The lead to use: the p99.9 of the reads at the latest their clock
    /// bounds allow (a tail model with fewer than
    /// [`lead_rule::MIN_EVIDENCE`] reads), plus the slowest device's
    /// readiness and a margin.
    pub p999_ns: i64,
    /// The worst clock bound of any read (in `p999_ns` through each
    /// read's upper bound).
    pub worst_bound_ns: u64,
    /// What the quantile rests on.
    pub evidence: Evidence,
    /// The slowest acting device's readiness, in `p999_ns`.
    pub readiness_ns: u64,
}

impl LeadAdvice {
    /// From the latency in the agent's timebase (estimates and bounds)
    /// and how many of its reads are independent (a device's copies of a
    /// broadcast once), the worst clock bound seen and the slowest
    /// device's readiness.
    pub fn from_corrected(
        latency: &BoundedSummary,
        independent: u64,
        worst_bound_ns: u64,
        readiness_ns: u64,
        from: &'static str,
    ) -> LeadAdvice {
        let covering = lead_rule::covering(&latency.hi, independent);
        LeadAdvice {
            from,
            copies: latency.estimate.count,
            every_copy_ns: latency.hi.max,
            p999_ns: convert::signed(lead_rule::lead_ns(&covering, readiness_ns)),
            worst_bound_ns,
            evidence: covering.evidence,
            readiness_ns,
        }
    }

    /// From latencies on one clock (no clock error to add), `independent`
    /// of them independent.
    pub fn from_raw(
        latency: &Summary,
        independent: u64,
        readiness_ns: u64,
        from: &'static str,
    ) -> LeadAdvice {
        let covering = lead_rule::covering(latency, independent);
        LeadAdvice {
            from,
            copies: latency.count,
            every_copy_ns: latency.max,
            p999_ns: convert::signed(lead_rule::lead_ns(&covering, readiness_ns)),
            worst_bound_ns: 0,
            evidence: covering.evidence,
            readiness_ns,
        }
    }
}
