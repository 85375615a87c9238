//! The live join's owner: one thread, at the lowest CPU priority, that
//! joins the agent's records with what probes upload
//! ([`skewscope_core::analysis::live`]) and keeps `/metrics`' live figures.
//!
//! Events come up to it on one bounded channel, from two senders that know
//! nothing of it but a [`LiveFeed`]: the recorder hands it each record it
//! writes, the ingest worker each batch it stored. It updates the
//! [`LiveFigures`] handles it was given; nothing reads back into it but
//! `lead=auto`'s [`AutoLeadHandle`], which it writes and the HTTP tasks
//! read. When no broadcast waits to be judged it sleeps until the next
//! event.

use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use skewscope_core::analysis::auto_lead::{AutoLead, AutoLeadNow, LeadBasis};
use skewscope_core::analysis::live::{Judged, LiveJoin, ProbeHealth};
use skewscope_core::record::{AgentRecord, ProbeRecord};

use crate::counters::Labels;
use crate::recorder::RecordObserver;

/// Events queued for the live join at most; past it an event is dropped
/// and counted (the live figures then miss it; the log does not).
const QUEUE: usize = 65_536;

/// How often broadcasts waiting for the probes are judged by time alone.
const TICK: Duration = Duration::from_secs(1);

/// How often, with no broadcast waiting but probe runs followed, silent
/// runs are looked for (one is forgotten after ten minutes).
const IDLE_TICK: Duration = Duration::from_secs(60);

/// A per-probe gauge.
type ProbeGauge = Family<Vec<(&'static str, String)>, Gauge<f64, AtomicU64>>;

/// The figures the live join keeps, as handles `/metrics` renders.
#[derive(Clone, Debug)]
pub struct LiveFigures {
    fanout_span: Histogram,
    skew: Histogram,
    skew_upper: Histogram,
    judged: Counter,
    receipts: Family<Labels, Counter>,
    unmatched: Counter,
    action_skew_upper: Histogram,
    actions: Family<Labels, Counter>,
    actions_unmatched: Counter,
    pending: Gauge,
    dropped: Counter,
    probe_offset: ProbeGauge,
    probe_bound: ProbeGauge,
    probe_synced: ProbeGauge,
    probe_last_upload: ProbeGauge,
    auto_lead: AutoLeadHandle,
    auto_lead_seconds: Gauge<f64, AtomicU64>,
    auto_lead_wanted_seconds: Gauge<f64, AtomicU64>,
    auto_lead_copies: Gauge,
    auto_lead_left_out: Gauge,
}

/// The lead `lead=auto` gives now: the live thread writes it after each
/// judgement, `/publish` and `/start_test` read it, and count each lead
/// the ceiling cut short.
#[derive(Clone, Debug)]
pub struct AutoLeadHandle {
    now: Arc<Mutex<AutoLeadNow>>,
    capped: Counter,
}

impl AutoLeadHandle {
    fn new() -> AutoLeadHandle {
        AutoLeadHandle {
            now: Arc::new(Mutex::new(AutoLead::default().now())),
            capped: Counter::default(),
        }
    }

    /// The lead to give a broadcast now, and what it rests on.
    pub fn now(&self) -> AutoLeadNow {
        self.now.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A broadcast was given a lead, `auto` what `lead=auto` chose it
    /// from: counted when the ceiling cut it short.
    pub fn given(&self, auto: Option<&AutoLeadNow>) {
        if auto.is_some_and(AutoLeadNow::capped) {
            self.capped.inc();
        }
    }

    fn set(&self, now: AutoLeadNow) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = now;
    }
}

/// Histogram buckets for durations: 10 µs doubling to about 10 s.
fn duration_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(10e-6, 2.0, 21)
}

impl Default for LiveFigures {
    fn default() -> Self {
        LiveFigures::new()
    }
}

impl LiveFigures {
    /// Every figure empty.
    pub fn new() -> LiveFigures {
        let receipts = Family::<Labels, Counter>::default();
        for result in ["received", "missing", "unjudged"] {
            let _ = receipts.get_or_create(&vec![("result", result)]);
        }
        let actions = Family::<Labels, Counter>::default();
        for result in ["in_time", "late"] {
            let _ = actions.get_or_create(&vec![("result", result)]);
        }
        LiveFigures {
            fanout_span: Histogram::new(duration_buckets()),
            skew: Histogram::new(duration_buckets()),
            skew_upper: Histogram::new(duration_buckets()),
            judged: Counter::default(),
            receipts,
            unmatched: Counter::default(),
            action_skew_upper: Histogram::new(duration_buckets()),
            actions,
            actions_unmatched: Counter::default(),
            pending: Gauge::default(),
            dropped: Counter::default(),
            probe_offset: ProbeGauge::default(),
            probe_bound: ProbeGauge::default(),
            probe_synced: ProbeGauge::default(),
            probe_last_upload: ProbeGauge::default(),
            auto_lead: AutoLeadHandle::new(),
            auto_lead_seconds: Gauge::default(),
            auto_lead_wanted_seconds: Gauge::default(),
            auto_lead_copies: Gauge::default(),
            auto_lead_left_out: Gauge::default(),
        }
    }

    /// The handle `lead=auto` is read through.
    pub fn auto_lead(&self) -> AutoLeadHandle {
        self.auto_lead.clone()
    }

    fn show_auto_lead(&self, now: AutoLeadNow) {
        self.auto_lead_seconds.set(now.lead_ns as f64 / 1e9);
        self.auto_lead_wanted_seconds
            .set(now.wanted_ns as f64 / 1e9);
        let copies = match now.basis {
            LeadBasis::Probes { copies, .. } => copies as i64,
            LeadBasis::FanoutOnly { .. } | LeadBasis::Nothing => 0,
        };
        self.auto_lead_copies.set(copies);
        self.auto_lead_left_out.set(now.left_out.len() as i64);
        self.auto_lead.set(now);
    }

    /// Registers every figure for `/metrics`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "skewscope_fanout_span_seconds",
            "From a broadcast's start to its last completed write, over every shard (the report's fan-out span)",
            self.fanout_span.clone(),
        );
        registry.register(
            "skewscope_receive_skew_seconds",
            "Per broadcast, once final: last minus first kernel receive time over the probe connections that got it, device clocks as they are",
            self.skew.clone(),
        );
        registry.register(
            "skewscope_receive_skew_upper_bound_seconds",
            "Per broadcast, once final: the upper bound of its skew in the agent's clock (every receipt's device clock bounded by time exchanges); what an audit judges",
            self.skew_upper.clone(),
        );
        registry.register(
            "skewscope_broadcasts_judged",
            "Broadcasts final and joined with the probes' uploaded receipts",
            self.judged.clone(),
        );
        registry.register(
            "skewscope_receipts",
            "Probe connections targeted by judged broadcasts: received, missing (its probe had uploaded past the broadcast without it) or unjudged (its probe had not)",
            self.receipts.clone(),
        );
        registry.register(
            "skewscope_receipts_unmatched",
            "Uploaded receipts that matched no broadcast waiting to be judged (late, duplicate, or not the agent's)",
            self.unmatched.clone(),
        );
        registry.register(
            "skewscope_action_skew_upper_bound_seconds",
            "Per broadcast acted on by two probe connections or more (--act-at), once final: the upper bound of its action skew in the agent's clock",
            self.action_skew_upper.clone(),
        );
        registry.register(
            "skewscope_actions",
            "Probe actions on judged broadcasts: in_time, or late (the message came after its time to act)",
            self.actions.clone(),
        );
        registry.register(
            "skewscope_actions_unmatched",
            format!(
                "Uploaded actions whose broadcast was already judged (a lead longer than the largest seen before plus {} s) or that matched none",
                skewscope_core::analysis::settled::SETTLE_MARGIN_NS / 1_000_000_000
            ),
            self.actions_unmatched.clone(),
        );
        registry.register(
            "skewscope_auto_lead_seconds",
            format!(
                "The lead lead=auto gives now: p{} of the reads (start to read in the agent's clock at the latest its bound allows) over the last {} s, a tail model with fewer than {} independent reads (a device's copies of a broadcast once), plus the slowest device's readiness and a margin of {} us (or 1/{} of an empirical quantile when more); at most --max-lead; without uploads the fan-out span plus {} ms for the network",
                skewscope_core::analysis::lead_rule::QUANTILE * 100.0,
                skewscope_core::analysis::auto_lead::WINDOW_NS / 1_000_000_000,
                skewscope_core::analysis::lead_rule::MIN_EVIDENCE,
                skewscope_core::analysis::lead_rule::MARGIN_NS / 1_000,
                (1.0 / skewscope_core::analysis::lead_rule::MARGIN_SHARE).round(),
                skewscope_core::analysis::auto_lead::NETWORK_ALLOWANCE_NS / 1_000_000
            ),
            self.auto_lead_seconds.clone(),
        );
        registry.register(
            "skewscope_auto_lead_wanted_seconds",
            "What the reads ask lead=auto for before the ceiling (--max-lead): above the ceiling, broadcasts get the ceiling and some copies will be late",
            self.auto_lead_wanted_seconds.clone(),
        );
        registry.register(
            "skewscope_auto_lead_capped",
            "Broadcasts given the ceiling (--max-lead) by lead=auto because the reads asked for more: their slowest copies are late",
            self.auto_lead.capped.clone(),
        );
        registry.register(
            "skewscope_auto_lead_copies",
            "Copies that lead rests on (0: the fan-out span and the network allowance, no uploads)",
            self.auto_lead_copies.clone(),
        );
        registry.register(
            "skewscope_auto_lead_left_out_devices",
            "Devices left out of lead=auto's lead for implausible reads (later than the ceiling while others are within it, before the start, or far outside every other device's); the /publish response names them",
            self.auto_lead_left_out.clone(),
        );
        registry.register(
            "skewscope_broadcasts_pending_judgement",
            "Broadcasts waiting for the probes' uploads to pass them",
            self.pending.clone(),
        );
        registry.register(
            "skewscope_live_events_dropped",
            "Records and uploads the live join could not take (its queue was full): its figures miss them, the logs do not",
            self.dropped.clone(),
        );
        registry.register(
            "skewscope_probe_clock_offset_seconds",
            "Device clock minus the agent's, from the probe's latest time exchanges",
            self.probe_offset.clone(),
        );
        registry.register(
            "skewscope_probe_clock_offset_bound_seconds",
            "Error bound of that offset: the truth lies within it (the clock model's bound, docs/clock-model.md)",
            self.probe_bound.clone(),
        );
        registry.register(
            "skewscope_probe_clock_synced",
            "1 when the device clock claims to be synchronised (adjtimex or chronyd), else 0",
            self.probe_synced.clone(),
        );
        registry.register(
            "skewscope_probe_last_upload_timestamp_seconds",
            "When the probe last uploaded records (agent clock, Unix time)",
            self.probe_last_upload.clone(),
        );
    }
}

/// What comes up to the live join.
enum Event {
    /// One of the agent's records, as the recorder wrote it.
    Agent(AgentRecord),
    /// Records probe run `run_id` uploaded, stored at agent wall time `at_wall_ns`.
    Uploaded {
        run_id: u128,
        records: Vec<ProbeRecord>,
        at_wall_ns: u64,
    },
    /// The agent is stopping.
    Stop,
}

/// A sender of events to the live join: what the recorder and the ingest
/// worker hold.
#[derive(Clone, Debug)]
pub struct LiveFeed {
    events: SyncSender<Event>,
    dropped: Counter,
}

impl LiveFeed {
    /// Probe run `run_id` uploaded `records`, stored now.
    pub fn uploaded(&self, run_id: u128, records: Vec<ProbeRecord>) {
        self.send(Event::Uploaded {
            run_id,
            records,
            at_wall_ns: skewscope_os::clock::now().wall_ns,
        });
    }

    /// Queues without waiting: a live join that lags never holds up the
    /// recorder or an upload; what it misses is counted.
    fn send(&self, event: Event) {
        match self.events.try_send(event) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.inc();
            }
        }
    }
}

impl RecordObserver for LiveFeed {
    fn observe(&mut self, record: &AgentRecord) {
        // Only what the live join reads: a hub's other records never cross.
        if matches!(
            record,
            AgentRecord::Started(_)
                | AgentRecord::Broadcast(_)
                | AgentRecord::ShardSends(_)
                | AgentRecord::SendCompleted(_)
                | AgentRecord::ConnectionOpened(_)
                | AgentRecord::ConnectionClosed(_)
        ) {
            self.send(Event::Agent(record.clone()));
        }
    }
}

/// The running live join.
#[derive(Debug)]
pub struct LiveThread {
    events: SyncSender<Event>,
    thread: Option<JoinHandle<()>>,
}

impl LiveThread {
    /// Starts the live join for an agent run of `shards` shards that started
    /// at `started_wall_ns`, keeping `figures`; `lead=auto` gives at most
    /// `max_lead`.
    pub fn start(
        figures: LiveFigures,
        started_wall_ns: u64,
        shards: usize,
        max_lead: Duration,
    ) -> std::io::Result<(LiveThread, LiveFeed)> {
        let max_lead_ns = u64::try_from(max_lead.as_nanos()).unwrap_or(u64::MAX);
        let (events, queue) = mpsc::sync_channel(QUEUE);
        let feed = LiveFeed {
            events: events.clone(),
            dropped: figures.dropped.clone(),
        };
        let join = LiveJoin::since(started_wall_ns, shards);
        let thread = std::thread::Builder::new()
            .name("live-join".into())
            .spawn(move || {
                // Below the shards and the recorder: monitoring waits.
                if let Err(e) = skewscope_os::priority::lower_this_thread() {
                    tracing::warn!(target: "agent::live", "the live join runs at normal priority: {e}");
                }
                run(join, &queue, &figures, max_lead_ns);
            })?;
        Ok((
            LiveThread {
                events,
                thread: Some(thread),
            },
            feed,
        ))
    }

    /// Judges nothing more and waits for the thread.
    pub fn stop(mut self) {
        let _ = self.events.send(Event::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(mut join: LiveJoin, queue: &Receiver<Event>, figures: &LiveFigures, max_lead_ns: u64) {
    let mut shown = Shown::default();
    let mut auto = AutoLead::new(max_lead_ns);
    loop {
        // Ticks only while something can become final by time alone.
        let wait = if join.pending_broadcasts() > 0 {
            Some(TICK)
        } else if join.followed_runs() > 0 {
            Some(IDLE_TICK)
        } else {
            None
        };
        let event = match wait {
            Some(wait) => match queue.recv_timeout(wait) {
                Ok(event) => Some(event),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            },
            None => match queue.recv() {
                Ok(event) => Some(event),
                Err(_) => return,
            },
        };
        match event {
            Some(Event::Agent(record)) => {
                for (_, fanout) in join.add_agent_record(&record) {
                    if let Some(span) = fanout.span_ns() {
                        figures.fanout_span.observe(span as f64 / 1e9);
                        auto.add_fanout_span(span);
                        figures.show_auto_lead(auto.now());
                    }
                }
                figures.pending.set(join.pending_broadcasts() as i64);
                continue;
            }
            Some(Event::Uploaded {
                run_id,
                records,
                at_wall_ns,
            }) => {
                for r in &records {
                    join.add_probe_record(run_id, r, at_wall_ns);
                }
            }
            Some(Event::Stop) => return,
            None => {}
        }
        let now_wall_ns = skewscope_os::clock::now().wall_ns;
        let mut judged = join.judge_final(now_wall_ns);
        // The lead first: once /metrics counts a broadcast judged, the
        // lead shown has taken it in (its reads, moved: nothing else reads
        // them).
        for j in &mut judged {
            auto.add_judged(now_wall_ns, &j.reads, &j.act_delays, &j.names);
            j.reads = Vec::new();
        }
        auto.tick(now_wall_ns);
        figures.show_auto_lead(auto.now());
        count(&judged, figures);
        shown.update(&mut join, figures);
    }
}

fn count(judged: &[Judged], figures: &LiveFigures) {
    for j in judged {
        figures.judged.inc();
        if let Some(s) = j.skew_ns {
            figures.skew.observe(s as f64 / 1e9);
        }
        if let Some(s) = j.skew_upper_ns {
            figures.skew_upper.observe(s as f64 / 1e9);
        }
        for (result, n) in [
            ("received", j.receipts),
            ("missing", j.missing),
            ("unjudged", j.unjudged),
        ] {
            figures
                .receipts
                .get_or_create(&vec![("result", result)])
                .inc_by(u64::from(n));
        }
        if let Some(s) = j.action_skew_upper_ns {
            figures.action_skew_upper.observe(s as f64 / 1e9);
        }
        for (result, n) in [("in_time", j.actions - j.late), ("late", j.late)] {
            figures
                .actions
                .get_or_create(&vec![("result", result)])
                .inc_by(u64::from(n));
        }
    }
}

/// What the gauges show now, so a forgotten probe's series are removed.
#[derive(Default)]
struct Shown {
    probes: Vec<String>,
    unmatched: u64,
    unmatched_actions: u64,
}

impl Shown {
    fn update(&mut self, join: &mut LiveJoin, figures: &LiveFigures) {
        figures.pending.set(join.pending_broadcasts() as i64);
        let unmatched = join.counts().unmatched;
        figures
            .unmatched
            .inc_by(unmatched.saturating_sub(self.unmatched));
        self.unmatched = unmatched;
        let unmatched_actions = join.counts().unmatched_actions;
        figures
            .actions_unmatched
            .inc_by(unmatched_actions.saturating_sub(self.unmatched_actions));
        self.unmatched_actions = unmatched_actions;
        let probes: Vec<ProbeHealth> = join.probe_health();
        let label = |name: &str| vec![("probe", name.to_owned())];
        for gone in self
            .probes
            .iter()
            .filter(|n| !probes.iter().any(|p| &p.name == *n))
        {
            for gauge in [
                &figures.probe_offset,
                &figures.probe_bound,
                &figures.probe_synced,
                &figures.probe_last_upload,
            ] {
                gauge.remove(&label(gone));
            }
        }
        for p in &probes {
            let l = label(&p.name);
            if let Some((offset, bound)) = p.offset_ns {
                figures
                    .probe_offset
                    .get_or_create(&l)
                    .set(offset as f64 / 1e9);
                figures
                    .probe_bound
                    .get_or_create(&l)
                    .set(bound as f64 / 1e9);
            }
            if let Some(synced) = p.synced {
                figures
                    .probe_synced
                    .get_or_create(&l)
                    .set(f64::from(u8::from(synced)));
            }
            figures
                .probe_last_upload
                .get_or_create(&l)
                .set(p.last_upload_wall_ns as f64 / 1e9);
        }
        self.probes = probes.into_iter().map(|p| p.name).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::AgentCounters;
    use crate::metrics::Metrics;
    use skewscope_core::Stamp;
    use skewscope_core::analysis::join::join;
    use skewscope_core::record::{
        AgentConnectionClosed, AgentStarted, BroadcastStarted, CloseReason, SendCompleted,
        SendOrder, SendOutcome, SendSlot, ShardSends,
    };

    fn at(mono_ns: u64) -> Stamp {
        Stamp {
            wall_ns: 1_764_000_000_000_000_000 + mono_ns,
            mono_ns,
        }
    }

    /// Two shards, ten broadcasts; some copies queued and completed later,
    /// one queued for a client that is then dropped, an unrecorded slot time.
    fn records() -> Vec<AgentRecord> {
        let mut out = vec![AgentRecord::Started(AgentStarted {
            host: "srv".into(),
            version: "0".into(),
            at: at(0),
            shards: 2,
            order: SendOrder::Rotate,
            per_client_times: true,
        })];
        for id in 1..=10u64 {
            let start = id * 10_000_000;
            out.push(AgentRecord::Broadcast(BroadcastStarted {
                id,
                seq: Some(id),
                hash: id,
                len: 450,
                text: true,
                at: at(start),
            }));
            for shard in 0..2u16 {
                let base = u64::from(shard) * 10;
                let slots = (0..3u64)
                    .map(|i| SendSlot {
                        conn: base + i + 1,
                        position: i as u32,
                        outcome: if i == 2 && id % 3 == 0 {
                            SendOutcome::Queued
                        } else {
                            SendOutcome::Written
                        },
                        mono_ns: if id == 5 && shard == 1 && i == 1 {
                            0
                        } else {
                            start + (i + 1) * 100_000 * (u64::from(shard) + id)
                        },
                    })
                    .collect();
                out.push(AgentRecord::ShardSends(ShardSends {
                    broadcast: id,
                    shard,
                    loop_start_mono_ns: start,
                    slots,
                }));
            }
            if id % 3 == 0 {
                // Shard 0's queued copy completes; shard 1's client is dropped.
                out.push(AgentRecord::SendCompleted(SendCompleted {
                    broadcast: id,
                    conn: 3,
                    mono_ns: start + 7_000_000,
                }));
                out.push(AgentRecord::ConnectionClosed(AgentConnectionClosed {
                    conn: 13,
                    at: at(start + 8_000_000),
                    reason: CloseReason::QueueOverflow,
                }));
            }
        }
        out
    }

    #[test]
    fn the_report_the_live_join_and_metrics_agree_on_every_span() {
        let records = records();
        let report: Vec<u64> = join(Some(&records), &[])
            .broadcasts
            .iter()
            .map(|b| b.agent.unwrap().fanout_span_ns.unwrap())
            .collect();
        assert_eq!(report.len(), 10);
        let mut live = LiveJoin::since(0, 2);
        let mut settled: Vec<(u64, u64)> = records
            .iter()
            .flat_map(|r| live.add_agent_record(r))
            .map(|(id, f)| (id, f.span_ns().unwrap()))
            .collect();
        settled.sort_unstable();
        let live_spans: Vec<u64> = settled.iter().map(|&(_, s)| s).collect();
        assert_eq!(
            live_spans, report,
            "the live join settles each span as the report"
        );

        // The live join's own thread, fed as the recorder feeds it, and
        // /metrics rendering its histogram.
        let figures = LiveFigures::new();
        let metrics = Metrics::new(&AgentCounters::new(false), &figures);
        let (thread, mut feed) =
            LiveThread::start(figures.clone(), 0, 2, Duration::from_secs(1)).unwrap();
        for r in &records {
            feed.observe(r);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !metrics
            .render()
            .contains("skewscope_fanout_span_seconds_count 10")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the live thread never settled them"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        thread.stop();
        let sum: f64 = report.iter().map(|&ns| ns as f64 / 1e9).sum();
        let text = metrics.render();
        let rendered: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("skewscope_fanout_span_seconds_sum "))
            .expect("the span histogram is rendered")
            .parse()
            .unwrap();
        assert!((rendered - sum).abs() < 1e-9, "{rendered} against {sum}");
        assert!(
            text.contains("skewscope_fanout_span_seconds_count 10"),
            "{text}"
        );
    }
}
