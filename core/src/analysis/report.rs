//! The report: counts and distributions computed from a [`Joined`] run, in the
//! shape the JSON output documents. Rendering for people lives in the collector.

use serde::Serialize;

use crate::analysis::actions::{ActionFigures, ActionsBuilder, LeadAdvice};
use crate::analysis::clock_figures::{
    BoundedSummary, DeviceClockSummary, StepSummary, TimingBuilder,
};
use crate::analysis::diagnosis::{Diagnosis, DiagnosisBuilder, SkewSplit};
use crate::analysis::join::{BroadcastKey, ClockIdentity, Joined, JoinedBroadcast};
use crate::analysis::stats::{Summary, SummaryBuilder};
use crate::convert;
use crate::record::{ClockState, SendOrder, TimePortTotals};

/// How much a log file contributed, and what was lost reading it.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct InputSummary {
    /// The file as given on the command line.
    pub file: String,
    /// `"agent"` or `"probe"`.
    pub kind: &'static str,
    /// Intact records read.
    pub records: u64,
    /// Bytes not part of an intact record.
    pub skipped_bytes: u64,
    /// The file ends mid-record (its writer was killed mid-write).
    pub torn_tail: bool,
}

/// Where a report's broadcasts come from, and whose clock is the reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReferenceKind {
    /// The agent's hub sent the broadcasts: its log has each one's start
    /// and per-client sends, and its clock is the reference.
    Hub,
    /// The agent tapped the server the probes listened to: broadcasts and
    /// their sends are the tap's, the agent's clock the reference.
    Tap,
    /// The probes listened to a server the agent neither ran nor tapped:
    /// broadcasts are what the probes received, the agent's log is the
    /// clock reference only (no latency split).
    Clock,
    /// No agent log: broadcasts are what the probes received, on each
    /// device's clock as it is.
    None,
}

/// Which reference a report used, and why: a report that guessed wrong
/// would show zero receipts and everything unmatched without a word.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Reference {
    /// The reference.
    pub kind: ReferenceKind,
    /// Why, for people: what in the logs decided it.
    pub why: String,
    /// Probe runs left out, and why (they listened to another server than
    /// the reference's); empty when none.
    pub left_out: Option<String>,
}

/// What a report's `--match` kept and left out, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct MatchCounts {
    /// The expression, as given.
    pub expression: String,
    /// Broadcasts judged: their payload matched.
    pub matched: u64,
    /// Left out: their payload did not match.
    pub left_out: u64,
    /// Left out: no probe recorded their payload, or it was cut before it
    /// could be told (JSON over 4 KiB).
    pub unknown: u64,
}

/// Which clocks the cross-connection figures were measured with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ClockBasis {
    /// Every receipt (and the agent, if present) came from one host and nothing
    /// measured says otherwise: one clock, so raw skew carries no clock error.
    SingleHost,
    /// Every receipt could be mapped into the agent's timebase with a bound:
    /// `skew_corrected_ns` holds the defensible figures.
    CorrectedToAgent,
    /// Some receipts came from clocks that could not be bounded (no time
    /// exchange): raw skew includes their offsets, and corrected figures leave
    /// those receipts out.
    UncorrectedDeviceClocks,
}

/// How the report told clocks apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ClockNaming {
    /// Every log records its kernel's boot id: clocks are told apart exactly.
    BootId,
    /// Some log records no boot id (written before skewscope recorded it):
    /// those are told apart by host name, which devices of one OS image share.
    HostName,
}

/// The agent run, as reported.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AgentSummary {
    /// Server host name.
    pub host: String,
    /// Fan-out shards.
    pub shards: u16,
    /// Send order.
    pub order: &'static str,
    /// Copies queued because a client's send buffer was full.
    pub queued: u64,
    /// Clients dropped or failed during broadcasts.
    pub dropped: u64,
    /// The server clock's last claim about itself.
    pub claim: Option<ClockState>,
    /// The time port's counters (answered and dropped packets). Named
    /// `time_service` in the JSON, as it was before the code called it the
    /// time port everywhere: readers of the JSON keep working.
    #[serde(rename = "time_service")]
    pub time_port: Option<TimePortTotals>,
    /// Steps of the server's wall clock during the run.
    pub clock_steps: Vec<StepSummary>,
    /// How its log ends: without a stop record, its counters (the time
    /// port's) are the last periodic ones, not the run's totals.
    pub ended: crate::analysis::join::RunEnd,
    /// Records the agent could not write (a full disk), as it recorded once
    /// writing worked again: broadcasts among them may be missing here.
    pub records_lost: u64,
}

/// Per-probe figures.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ProbeSummary {
    /// Probe name.
    pub name: String,
    /// Device host name, for people.
    pub host: String,
    /// The device kernel's boot id: what names its clock (`None` in logs that
    /// predate it).
    pub boot_id: Option<String>,
    /// Connections it held (each counted once, however often it reconnected).
    pub connections: u64,
    /// Times one of its connections was opened again after the server
    /// closed or lost it (`--reconnect`).
    pub reconnects: u64,
    /// Broadcasts its connections received.
    pub receipts: u64,
    /// Broadcasts its connections missed.
    pub missing: u64,
    /// Its clock against the agent's.
    #[serde(flatten)]
    pub clock: DeviceClockSummary,
    /// How its log ends (a stop, `--max-log-bytes`, or neither).
    pub ended: crate::analysis::join::RunEnd,
    /// Connection openings over TLS (`wss://`).
    pub tls_connections: u64,
    /// Of those, without a check of the server's certificate (`--insecure`):
    /// anyone on the path could have been the server.
    pub tls_unverified: u64,
    /// Connection openings on which the server compressed what it sent
    /// (permessage-deflate, as it does for browsers).
    pub deflate_connections: u64,
    /// When it is the browser probe (`/probe`): the page it ran in. Its
    /// stamps are userspace readings of the page's clock, its bound the
    /// WebSocket time exchange's.
    pub page: Option<crate::record::PageProbe>,
    /// When it is an app's own run (the clock module in a site's app, given
    /// a name): its module and what it runs in. It receives only what it
    /// acted on, so it is never counted missing anything.
    pub app: Option<crate::record::AppRun>,
    /// What it deleted from its `--out-dir` at start (only logs the agent
    /// had in full) and kept, within `--keep-runs` and `--keep-bytes`;
    /// `None` when it kept no limits (`--out`, or logs from before them).
    pub logs_pruned: Option<crate::record::LogsPruned>,
    /// Its time exchange's authentication: keyed (it took only tagged
    /// replies) and replies refused; `None` in logs from before the tag.
    pub clock_tags: Option<crate::record::ClockTags>,
}

/// One broadcast among the worst by skew.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct BroadcastSummary {
    /// `"id 12"` (agent), `"seq 12"` or `"hash 0123abcd… #0"` (probes only).
    pub broadcast: String,
    /// Connections that received it.
    pub receipts: u64,
    /// Connections that missed it.
    pub missing: u64,
    /// Its skew.
    pub skew_ns: Option<u64>,
    /// Start to last completed write, when the agent recorded it.
    pub fanout_ns: Option<u64>,
    /// Its skew split into fan-out and network (and what delivery adds),
    /// when it could be ([`crate::analysis::diagnosis`]).
    pub split: Option<SkewSplit>,
}

/// Everything `skewscope report` prints, in the shape of its JSON output.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// The logs read.
    pub inputs: Vec<InputSummary>,
    /// The agent run, when an agent log was given.
    pub agent: Option<AgentSummary>,
    /// Where the broadcasts come from and whose clock is the reference,
    /// and why (set by whoever read the logs; `None` when not said).
    pub reference: Option<Reference>,
    /// What `--match` judged and left out; `None` without it.
    pub matched: Option<MatchCounts>,
    /// Which clocks the skew was measured with.
    pub clock_basis: ClockBasis,
    /// How clocks were told apart.
    pub clocks_named_by: ClockNaming,
    /// Probes whose clocks were set by an unauthenticated time exchange
    /// (it ran without the agent's token: anyone on the path could have
    /// moved them), by name; see [`ProbeSummary::clock_tags`].
    pub clocks_unauthenticated: Vec<String>,
    /// Broadcasts seen (agent log) or distinct messages received (probes only).
    pub broadcasts: u64,
    /// Probe connections (each counted once, however often it reconnected).
    pub connections: u64,
    /// Times a probe connection was opened again after the server closed or
    /// lost it. Broadcasts sent while a connection was down are not counted
    /// missing for it: it was not connected.
    pub reconnects: u64,
    /// Receipts joined to a broadcast, duplicates excluded.
    pub receipts: u64,
    /// (broadcast, connection) pairs where a connection that was listening did not
    /// receive the broadcast.
    pub missing: u64,
    /// Receipts of a broadcast already received on that connection.
    pub duplicates: u64,
    /// Receipts matching no broadcast in the agent log.
    pub unmatched: u64,
    /// Skew per broadcast: max − min receipt time over the connections that got
    /// it, each device's wall clock as it is (raw). Receipt time is the kernel's
    /// receive stamp where there is one.
    pub skew_ns: Option<Summary>,
    /// The same, at the userspace stamps: the difference is device delivery.
    pub skew_userspace_ns: Option<Summary>,
    /// Skew with every receipt mapped into the agent's timebase, with intervals.
    pub skew_corrected_ns: Option<BoundedSummary>,
    /// Skew among connections of one probe (one clock): no clock error.
    pub skew_intra_device_ns: Option<Summary>,
    /// Per receipt: receipt time − broadcast start, raw clocks (needs the agent log).
    pub latency_ns: Option<Summary>,
    /// The same in the agent's timebase, with intervals.
    pub latency_corrected_ns: Option<BoundedSummary>,
    /// Per receipt: receipt time − the trigger time given for its broadcast
    /// (`skewscope report --triggers`), for servers that record nothing.
    pub latency_from_trigger: Option<crate::analysis::triggers::TriggerLatency>,
    /// Per broadcast: start to the last completed write on the agent.
    pub fanout_ns: Option<Summary>,
    /// Latency split, per receipt: start to the agent's write of that copy.
    pub fanout_position_ns: Option<Summary>,
    /// Latency split: agent write (kernel TX stamp when recorded) to the device
    /// kernel's receive stamp, across clocks, with intervals.
    pub network_ns: Option<BoundedSummary>,
    /// Receipts whose network interval lay wholly below what causality
    /// allows (the copy arriving before it was sent): the device's offset
    /// bound did not hold there. Their interval is raised to the causal
    /// floor; a count above 0 says to distrust that device's bounds.
    pub network_acausal: u64,
    /// Latency split: device kernel receive to the probe's userspace stamp.
    pub delivery_ns: Option<Summary>,
    /// Receipts left out of corrected figures: no offset estimate for them.
    pub uncorrected_receipts: u64,
    /// Receipts with no kernel receive stamp (their userspace stamp is used).
    pub receipts_without_kernel_stamp: u64,
    /// Per-probe breakdown.
    pub probes: Vec<ProbeSummary>,
    /// The five broadcasts with the largest skew.
    pub worst_broadcasts: Vec<BroadcastSummary>,
    /// What the agent's tap of the server saw, when it tapped one.
    pub tap: Option<crate::analysis::tapped::TapSummary>,
    /// What the probes' actions came to (`--act-at`), when any probe acts.
    pub actions: Option<ActionFigures>,
    /// Why: the skew split into the fan-out order and the network, what
    /// delivery adds, and the connections late every time.
    pub why: Option<Diagnosis>,
    /// The lead to give broadcasts' time to act, from the latencies
    /// measured (from the start, else from the triggers).
    pub lead: Option<LeadAdvice>,
    /// The largest clock bound of any receipt measured from the start.
    #[serde(skip)]
    pub worst_bound_ns: u64,
    /// Latency to the probes' reads, in the agent's timebase (what the
    /// lead advice is drawn from).
    #[serde(skip)]
    pub read_latency_corrected: Option<BoundedSummary>,
    /// The same on one clock.
    #[serde(skip)]
    pub read_latency_raw: Option<Summary>,
    /// Independent reads in `read_latency_corrected`: a device's copies of
    /// one broadcast once (the lead rule's evidence).
    #[serde(skip)]
    pub read_independent_corrected: u64,
    /// The same in `read_latency_raw`.
    #[serde(skip)]
    pub read_independent_raw: u64,
}

impl Report {
    /// Sets the latency from trigger times (`--triggers`), and the lead
    /// advice with it when no latency from the start was measured.
    pub fn set_trigger_latency(
        &mut self,
        latency: Option<crate::analysis::triggers::TriggerLatency>,
    ) {
        self.latency_from_trigger = latency;
        self.lead = self.advise_lead();
    }

    /// The lead advice from the best latency the report has: from the
    /// start in the agent's timebase, else on one clock, else from triggers.
    fn advise_lead(&self) -> Option<LeadAdvice> {
        // What the slowest acting device needs from read to act.
        let readiness = self
            .actions
            .iter()
            .flat_map(|a| &a.by_actor)
            .map(|a| a.readiness_ns)
            .max()
            .unwrap_or(0);
        // To the probes' reads: an app cannot act before it has the message.
        if self.clock_basis != ClockBasis::SingleHost
            && let Some(l) = &self.read_latency_corrected
        {
            return Some(LeadAdvice::from_corrected(
                l,
                self.read_independent_corrected,
                self.worst_bound_ns,
                readiness,
                "start",
            ));
        }
        if let Some(l) = &self.read_latency_raw {
            return Some(LeadAdvice::from_raw(
                l,
                self.read_independent_raw,
                readiness,
                "start",
            ));
        }
        let from_trigger = self.latency_from_trigger.as_ref()?.latency_ns.as_ref()?;
        // One trigger a broadcast, each timed once: every one independent.
        Some(LeadAdvice::from_raw(
            from_trigger,
            from_trigger.count,
            readiness,
            "trigger",
        ))
    }

    /// Computes the report of a joined run.
    pub fn build(joined: &Joined, inputs: Vec<InputSummary>) -> Report {
        let mut builder = ReportBuilder::new(joined);
        for b in &joined.broadcasts {
            builder.add(joined, b);
        }
        builder.finish(joined, inputs)
    }
}

/// How many broadcasts the report lists as the worst.
const WORST_LISTED: usize = 5;

/// What orders the worst list: skew (largest first), then first receipt
/// (probes' broadcasts; 0 for the agent's), then the broadcast's key.
type WorstKey = (std::cmp::Reverse<Option<u64>>, u64, BroadcastKey);

/// The report built one broadcast at a time: what it keeps is histograms
/// and counts, so its memory does not grow with the receipts.
pub struct ReportBuilder {
    timing: TimingBuilder,
    actions: ActionsBuilder,
    diagnosis: DiagnosisBuilder,
    skews: SummaryBuilder,
    userspace_skews: SummaryBuilder,
    latencies: SummaryBuilder,
    fanouts: SummaryBuilder,
    /// Per probe: receipts and missing receipts.
    per_probe: Vec<(u64, u64)>,
    /// The worst so far, worst first; among equals, as [`join`] orders
    /// broadcasts (by id, or by first receipt), whatever order they came in.
    ///
    /// [`join`]: crate::analysis::join::join
    worst: Vec<(WorstKey, BroadcastSummary)>,
    broadcasts: u64,
    receipts: u64,
    missing: u64,
    queued: u64,
    dropped: u64,
}

impl ReportBuilder {
    /// A report of `joined`'s logs, its broadcasts to come through
    /// [`ReportBuilder::add`].
    pub fn new(joined: &Joined) -> ReportBuilder {
        ReportBuilder {
            timing: TimingBuilder::new(joined),
            actions: ActionsBuilder::new(),
            diagnosis: DiagnosisBuilder::new(joined),
            skews: SummaryBuilder::new(),
            userspace_skews: SummaryBuilder::new(),
            latencies: SummaryBuilder::new(),
            fanouts: SummaryBuilder::new(),
            per_probe: vec![(0, 0); joined.probes.len()],
            worst: Vec::with_capacity(WORST_LISTED + 1),
            broadcasts: 0,
            receipts: 0,
            missing: 0,
            queued: 0,
            dropped: 0,
        }
    }

    /// The probes' clock models, for figures drawn from the same join.
    pub fn timing(&self) -> &TimingBuilder {
        &self.timing
    }

    /// Adds one broadcast of `joined`.
    pub fn add(&mut self, joined: &Joined, b: &JoinedBroadcast) {
        let placed = crate::analysis::placing::place_broadcast(joined, b, self.timing.clocks());
        self.timing.add(joined, &placed);
        self.actions.add(joined, &placed);
        let split = self.diagnosis.add(&placed);
        let skew = b.skew_ns();
        if let Some(s) = skew {
            self.skews.add(convert::signed(s));
        }
        if let Some(s) = crate::analysis::timebase::raw_spread(b.receipts.iter().map(|r| r.wall_ns))
        {
            self.userspace_skews.add(convert::signed(s));
        }
        if let Some(a) = b.agent {
            for r in &b.receipts {
                self.latencies.add(convert::narrow(
                    r.arrival_wall_ns() as i128 - a.start.wall_ns as i128,
                ));
            }
            if let Some(f) = a.fanout_span_ns {
                self.fanouts.add(convert::signed(f));
            }
            self.queued += u64::from(a.queued);
            self.dropped += u64::from(a.dropped);
        }
        for r in &b.receipts {
            self.per_probe[joined.connections[r.connection].probe].0 += 1;
        }
        for &m in &b.missing {
            self.per_probe[joined.connections[m].probe].1 += 1;
        }
        self.receipts += b.receipts.len() as u64;
        self.missing += b.missing.len() as u64;

        self.broadcasts += 1;
        let first = match b.key {
            BroadcastKey::Agent { .. } => 0,
            BroadcastKey::Message(_) => b.receipts.iter().map(|r| r.wall_ns).min().unwrap_or(0),
        };
        let key = (std::cmp::Reverse(skew), first, b.key);
        let place = self.worst.partition_point(|w| w.0 < key);
        if place < WORST_LISTED {
            self.worst.insert(
                place,
                (
                    key,
                    BroadcastSummary {
                        broadcast: b.key.describe(),
                        receipts: b.receipts.len() as u64,
                        missing: b.missing.len() as u64,
                        skew_ns: skew,
                        fanout_ns: b.agent.and_then(|a| a.fanout_span_ns),
                        split,
                    },
                ),
            );
            self.worst.truncate(WORST_LISTED);
        }
    }

    /// The report, with `joined`'s final counts (duplicates, unmatched).
    pub fn finish(&mut self, joined: &Joined, inputs: Vec<InputSummary>) -> Report {
        let timing = self.timing.finish(joined);
        let mut probes: Vec<ProbeSummary> = joined
            .probes
            .iter()
            .zip(&timing.devices)
            .zip(&self.per_probe)
            .map(|((p, clock), &(receipts, missing))| ProbeSummary {
                name: p.name.clone(),
                host: p.host.clone(),
                boot_id: p.identity.as_ref().and_then(|i| i.boot_id.clone()),
                connections: 0,
                reconnects: 0,
                receipts,
                missing,
                clock: clock.clone(),
                ended: p.ended,
                tls_connections: p.tls_connections,
                tls_unverified: p.tls_unverified,
                deflate_connections: p.deflate_connections,
                page: p.page.clone(),
                app: p.app.clone(),
                logs_pruned: p.logs_pruned.clone(),
                clock_tags: p.clock_tags,
            })
            .collect();
        let mut seen = std::collections::HashSet::new();
        // An app's connection beside a probe holds its actions, not one of
        // the probe's connections.
        for c in joined.connections.iter().filter(|c| c.app.is_none()) {
            if seen.insert((c.probe, c.conn)) {
                probes[c.probe].connections += 1;
            } else {
                probes[c.probe].reconnects += 1;
            }
        }

        let agent = joined.agent.as_ref().map(|a| AgentSummary {
            host: a.host.clone(),
            shards: a.shards,
            order: match a.order {
                SendOrder::Fixed => "fixed",
                SendOrder::Rotate => "rotate",
                SendOrder::Shuffle => "shuffle",
            },
            queued: self.queued,
            dropped: self.dropped,
            claim: a.clock_states.last().cloned(),
            time_port: a.time_port,
            clock_steps: timing.agent_steps.clone(),
            ended: a.ended,
            records_lost: a.records_lost,
        });
        let clock_basis = if timing.one_clock {
            ClockBasis::SingleHost
        } else if timing.uncorrected_receipts == 0 && timing.skew_corrected.is_some() {
            ClockBasis::CorrectedToAgent
        } else {
            ClockBasis::UncorrectedDeviceClocks
        };

        let by_boot_id = joined
            .clocks()
            .all(|c| matches!(c, ClockIdentity::BootId(_)));
        let clocks_named_by = if by_boot_id {
            ClockNaming::BootId
        } else {
            ClockNaming::HostName
        };

        let mut report = Report {
            inputs,
            agent,
            reference: None,
            matched: None,
            clock_basis,
            clocks_unauthenticated: unauthenticated(&probes),
            clocks_named_by,
            broadcasts: self.broadcasts,
            connections: probes.iter().map(|p| p.connections).sum(),
            reconnects: probes.iter().map(|p| p.reconnects).sum(),
            receipts: self.receipts,
            missing: self.missing,
            duplicates: joined.duplicates,
            unmatched: joined.unmatched,
            skew_ns: self.skews.finish(),
            skew_userspace_ns: self.userspace_skews.finish(),
            skew_corrected_ns: timing.skew_corrected,
            skew_intra_device_ns: timing.skew_intra_device,
            latency_ns: self.latencies.finish(),
            latency_corrected_ns: timing.latency_corrected,
            latency_from_trigger: None,
            fanout_ns: self.fanouts.finish(),
            fanout_position_ns: timing.fanout_position,
            network_ns: timing.network,
            network_acausal: timing.network_acausal,
            delivery_ns: timing.delivery,
            uncorrected_receipts: timing.uncorrected_receipts,
            receipts_without_kernel_stamp: timing.receipts_without_kernel_stamp,
            probes,
            worst_broadcasts: self.worst.iter().map(|w| w.1.clone()).collect(),
            tap: joined.tap.clone(),
            actions: self.actions.finish(joined),
            why: self.diagnosis.finish(joined),
            lead: None,
            worst_bound_ns: timing.worst_bound_ns,
            read_latency_corrected: timing.read_latency_corrected,
            read_latency_raw: timing.read_latency_raw,
            read_independent_corrected: timing.read_independent_corrected,
            read_independent_raw: timing.read_independent_raw,
        };
        report.lead = report.advise_lead();
        report
    }
}

/// The probes whose time exchange ran unkeyed and answered: the one rule
/// the text, the page and the audit say "unauthenticated" by.
fn unauthenticated(probes: &[ProbeSummary]) -> Vec<String> {
    // Each name once, in the probes' order (a restarted probe is two runs
    // of one name, not always side by side).
    let mut names: Vec<String> = Vec::new();
    for p in probes
        .iter()
        .filter(|p| p.clock.time_samples > 0 && p.clock_tags.is_some_and(|t| !t.keyed))
    {
        if !names.contains(&p.name) {
            names.push(p.name.clone());
        }
    }
    names
}
