//! `/metrics`: the agent's health in Prometheus's exposition format, built
//! with `prometheus-client`. Counters and the fan-out histogram are fed from
//! the record stream by the recorder thread ([`Metrics::observe`]), never by
//! a shard. Receive skew comes from the live join
//! ([`skewscope_core::analysis::live`]) of those records with what probes
//! upload, fed and judged on the ingest thread ([`Metrics::ingested`],
//! [`Metrics::tick`]). Values that live elsewhere (clients connected, the
//! time port's and ingest's counters, records lost, each probe's clock) are
//! read at scrape time. Rendering runs on the HTTP task that answers the
//! scrape.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use skewscope_core::analysis::live::{Judged, LiveJoin};
use skewscope_core::record::{AgentRecord, CloseReason, ProbeRecord, SendOutcome};

use crate::engine::hub::Hub;
use crate::ingest::IngestStore;
use crate::time_port::TimeCounters;

/// Broadcasts whose fan-out is still being gathered, at most: one whose
/// shards never all report (recording off) is forgotten past this.
const PENDING_BROADCASTS: usize = 1024;

/// One broadcast's fan-out span being gathered: as the report defines it,
/// from the start to the last completed write, a queued copy counting when
/// its `SendCompleted` comes (and not at all if its client is dropped).
#[derive(Debug)]
struct PendingSpan {
    start_mono_ns: u64,
    last_done_mono_ns: Option<u64>,
    shards_left: usize,
    /// Connections whose copy is still queued.
    queued: Vec<u64>,
}

impl PendingSpan {
    fn done(&self) -> bool {
        self.shards_left == 0 && self.queued.is_empty()
    }

    fn completed(&mut self, mono_ns: u64) {
        self.last_done_mono_ns = self.last_done_mono_ns.max(Some(mono_ns));
    }
}

/// Histogram buckets for durations: 10 µs doubling to about 10 s.
fn duration_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(10e-6, 2.0, 21)
}

/// What the recorder counts, and the registry that renders it.
pub struct Metrics {
    registry: Registry,
    broadcasts: Counter,
    fanout: Histogram,
    opened: Counter,
    closed: Family<Vec<(&'static str, &'static str)>, Counter>,
    skew: Histogram,
    skew_upper: Histogram,
    judged: Counter,
    receipts: Family<Vec<(&'static str, &'static str)>, Counter>,
    /// The agent's records joined with the probes' uploads.
    live: Arc<Mutex<LiveJoin>>,
    /// Broadcasts whose span is not known yet, by id.
    pending: Mutex<BTreeMap<u64, PendingSpan>>,
    shards: usize,
    /// Set once the server's parts exist ([`Metrics::attach`]).
    sources: Arc<OnceLock<Sources>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Where the scrape-time values come from.
pub struct Sources {
    /// The hub (clients connected).
    pub hub: Arc<Hub>,
    /// The time port's counters, when it runs.
    pub time: Option<Arc<TimeCounters>>,
    /// Uploads.
    pub ingest: Arc<IngestStore>,
    /// Records the recorder could not write.
    pub records_lost: Arc<AtomicU64>,
}

impl Metrics {
    /// The agent's metrics, for a hub of `shards` shards.
    pub fn new(shards: usize) -> Metrics {
        let mut registry = Registry::default();
        let broadcasts = Counter::default();
        registry.register(
            "skewscope_broadcasts",
            "Broadcasts the hub started",
            broadcasts.clone(),
        );
        let fanout = Histogram::new(duration_buckets());
        registry.register(
            "skewscope_fanout_span_seconds",
            "From a broadcast's start to its last completed write, over every shard (the report's fan-out span)",
            fanout.clone(),
        );
        let opened = Counter::default();
        registry.register(
            "skewscope_clients_opened",
            "WebSocket clients that joined the hub",
            opened.clone(),
        );
        let closed = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
        registry.register(
            "skewscope_clients_closed",
            "WebSocket clients that left or were closed, by reason",
            closed.clone(),
        );
        registry.register(
            "skewscope_build",
            "The agent's version",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        let skew = Histogram::new(duration_buckets());
        registry.register(
            "skewscope_receive_skew_seconds",
            "Per broadcast, once final: last minus first kernel receive time over the probe connections that got it, device clocks as they are",
            skew.clone(),
        );
        let skew_upper = Histogram::new(duration_buckets());
        registry.register(
            "skewscope_receive_skew_upper_bound_seconds",
            "Per broadcast, once final: the upper bound of its skew in the agent's clock (every receipt's device clock bounded by time exchanges); what an audit judges",
            skew_upper.clone(),
        );
        let judged = Counter::default();
        registry.register(
            "skewscope_broadcasts_judged",
            "Broadcasts final and joined with the probes' uploaded receipts",
            judged.clone(),
        );
        let receipts = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
        registry.register(
            "skewscope_receipts",
            "Probe connections targeted by judged broadcasts: received, missing (its probe had uploaded past the broadcast without it) or unjudged (its probe had not)",
            receipts.clone(),
        );
        let live = Arc::new(Mutex::new(LiveJoin::since(
            skewscope_os::clock::now().wall_ns,
            shards.max(1),
        )));
        let sources = Arc::new(OnceLock::new());
        registry.register_collector(Box::new(Live {
            sources: sources.clone(),
            live: live.clone(),
        }));
        Metrics {
            sources,
            registry,
            broadcasts,
            fanout,
            opened,
            closed,
            skew,
            skew_upper,
            judged,
            receipts,
            live,
            pending: Mutex::new(BTreeMap::new()),
            shards: shards.max(1),
        }
    }

    /// Adds what is read at scrape time, once it exists (the recorder,
    /// which feeds the rest, starts first).
    pub fn attach(&self, sources: Sources) {
        let _ = self.sources.set(sources);
    }

    /// Counts what `record` says (called by the recorder, for every record).
    pub fn observe(&self, record: &AgentRecord) {
        if matches!(
            record,
            AgentRecord::Broadcast(_)
                | AgentRecord::ShardSends(_)
                | AgentRecord::ConnectionOpened(_)
                | AgentRecord::ConnectionClosed(_)
        ) {
            self.live
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .agent(record);
        }
        match record {
            AgentRecord::Broadcast(b) => {
                self.broadcasts.inc();
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                pending.insert(
                    b.id,
                    PendingSpan {
                        start_mono_ns: b.at.mono_ns,
                        last_done_mono_ns: None,
                        shards_left: self.shards,
                        queued: Vec::new(),
                    },
                );
                while pending.len() > PENDING_BROADCASTS {
                    pending.pop_first();
                }
            }
            AgentRecord::ShardSends(s) => {
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(span) = pending.get_mut(&s.broadcast) {
                    for slot in &s.slots {
                        match slot.outcome {
                            SendOutcome::Written => span.completed(slot.mono_ns),
                            SendOutcome::Queued => span.queued.push(slot.conn),
                            SendOutcome::Dropped | SendOutcome::Failed => {}
                        }
                    }
                    span.shards_left = span.shards_left.saturating_sub(1);
                }
                self.settle(&mut pending, s.broadcast);
            }
            AgentRecord::SendCompleted(c) => {
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(span) = pending.get_mut(&c.broadcast) {
                    span.queued.retain(|&conn| conn != c.conn);
                    span.completed(c.mono_ns);
                }
                self.settle(&mut pending, c.broadcast);
            }
            AgentRecord::ConnectionOpened(_) => {
                self.opened.inc();
            }
            AgentRecord::ConnectionClosed(c) => {
                self.closed
                    .get_or_create(&vec![("reason", reason_label(&c.reason))])
                    .inc();
                // Its queued copies will never complete.
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                let waiting: Vec<u64> = pending
                    .iter_mut()
                    .filter(|(_, span)| span.queued.contains(&c.conn))
                    .map(|(id, span)| {
                        span.queued.retain(|&conn| conn != c.conn);
                        *id
                    })
                    .collect();
                for id in waiting {
                    self.settle(&mut pending, id);
                }
            }
            _ => {}
        }
    }

    /// Observes broadcast `id`'s span once nothing more can complete it.
    fn settle(&self, pending: &mut BTreeMap<u64, PendingSpan>, id: u64) {
        if !pending.get(&id).is_some_and(PendingSpan::done) {
            return;
        }
        let span = pending.remove(&id).expect("checked above");
        if let Some(end) = span.last_done_mono_ns {
            self.fanout
                .observe(end.saturating_sub(span.start_mono_ns) as f64 / 1e9);
        }
    }

    /// Takes in records probe run `run_id` uploaded (called by the ingest
    /// thread once they are stored), then judges what became final.
    pub fn ingested(&self, run_id: u128, records: &[ProbeRecord], now_wall_ns: u64) {
        let judged = {
            let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
            for r in records {
                live.probe(run_id, r, now_wall_ns);
            }
            live.judge(now_wall_ns)
        };
        self.count_judged(&judged);
    }

    /// Judges what became final by time alone (called by the ingest thread
    /// about once a second).
    pub fn tick(&self, now_wall_ns: u64) {
        let judged = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .judge(now_wall_ns);
        self.count_judged(&judged);
    }

    fn count_judged(&self, judged: &[Judged]) {
        for j in judged {
            self.judged.inc();
            if let Some(s) = j.skew_ns {
                self.skew.observe(s as f64 / 1e9);
            }
            if let Some(s) = j.skew_upper_ns {
                self.skew_upper.observe(s as f64 / 1e9);
            }
            for (result, n) in [
                ("received", j.receipts),
                ("missing", j.missing),
                ("unjudged", j.unjudged),
            ] {
                self.receipts
                    .get_or_create(&vec![("result", result)])
                    .inc_by(u64::from(n));
            }
        }
    }

    /// The exposition text (OpenMetrics, which Prometheus reads).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The content type of [`Metrics::render`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A bounded label for each close reason (the reason's detail is in the log).
fn reason_label(reason: &CloseReason) -> &'static str {
    match reason {
        CloseReason::ClientClosed => "client_closed",
        CloseReason::ProtocolError(_) => "protocol_error",
        CloseReason::FrameTooLarge => "frame_too_large",
        CloseReason::QueueOverflow => "queue_overflow",
        CloseReason::SocketError(_) => "socket_error",
        CloseReason::Shutdown => "shutdown",
        CloseReason::TooManyControlFrames => "too_many_control_frames",
    }
}

/// The values read at scrape time.
struct Live {
    sources: Arc<OnceLock<Sources>>,
    live: Arc<Mutex<LiveJoin>>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Live")
    }
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.encode_probes(&mut encoder)?;
        let Some(s) = self.sources.get() else {
            return Ok(());
        };
        let clients = ConstGauge::new(s.hub.clients() as i64);
        clients.encode(encoder.encode_descriptor(
            "skewscope_clients_connected",
            "WebSocket clients connected now",
            None,
            clients.metric_type(),
        )?)?;
        let lost = ConstCounter::new(s.records_lost.load(Ordering::Relaxed));
        lost.encode(encoder.encode_descriptor(
            "skewscope_records_lost",
            "Records the agent could not write to its log (a full disk)",
            None,
            lost.metric_type(),
        )?)?;
        if let Some(time) = &s.time {
            let c = time.snapshot();
            let mut family = encoder.encode_descriptor(
                "skewscope_time_port_packets",
                "Time-exchange packets, by result",
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (result, n) in [
                ("answered", c.answered),
                ("malformed", c.malformed),
                ("oversized", c.oversized),
                ("replayed", c.replayed),
            ] {
                ConstCounter::new(n).encode(family.encode_family(&[("result", result)])?)?;
            }
        }
        let ingest = &s.ingest.counters;
        let stored = ConstCounter::new(ingest.records.load(Ordering::Relaxed));
        stored.encode(encoder.encode_descriptor(
            "skewscope_ingest_records",
            "Probe records uploaded and durably stored",
            None,
            stored.metric_type(),
        )?)?;
        let rejected: Vec<(&'static str, u64)> = ingest
            .rejected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        let mut family = encoder.encode_descriptor(
            "skewscope_ingest_rejections",
            "Upload connections refused, by reason",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (reason, n) in rejected {
            ConstCounter::new(n).encode(family.encode_family(&[("reason", reason)])?)?;
        }
        Ok(())
    }
}

impl Live {
    /// Each probe's clock, and what the live join could not match.
    fn encode_probes(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (probes, counts, pending) = {
            let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
            (live.probes(), live.counts(), live.pending())
        };
        let unmatched = ConstCounter::new(counts.unmatched);
        unmatched.encode(encoder.encode_descriptor(
            "skewscope_receipts_unmatched",
            "Uploaded receipts that matched no broadcast waiting to be judged (late, duplicate, or not the agent's)",
            None,
            unmatched.metric_type(),
        )?)?;
        let pending = ConstGauge::new(pending as i64);
        pending.encode(encoder.encode_descriptor(
            "skewscope_broadcasts_pending_judgement",
            "Broadcasts waiting for the probes' uploads to pass them",
            None,
            pending.metric_type(),
        )?)?;
        let gauge = |encoder: &mut DescriptorEncoder,
                     name: &str,
                     help: &str,
                     values: &[(&str, f64)]|
         -> Result<(), std::fmt::Error> {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for &(probe, v) in values {
                ConstGauge::new(v).encode(family.encode_family(&[("probe", probe)])?)?;
            }
            Ok(())
        };
        let offsets: Vec<(&str, f64)> = probes
            .iter()
            .filter_map(|p| p.offset_ns.map(|(o, _)| (p.name.as_str(), o as f64 / 1e9)))
            .collect();
        gauge(
            encoder,
            "skewscope_probe_clock_offset_seconds",
            "Device clock minus the agent's, from the probe's latest time exchanges",
            &offsets,
        )?;
        let bounds: Vec<(&str, f64)> = probes
            .iter()
            .filter_map(|p| p.offset_ns.map(|(_, b)| (p.name.as_str(), b as f64 / 1e9)))
            .collect();
        gauge(
            encoder,
            "skewscope_probe_clock_offset_bound_seconds",
            "Error bound of that offset (half the best exchange's round trip, grown by drift)",
            &bounds,
        )?;
        let synced: Vec<(&str, f64)> = probes
            .iter()
            .filter_map(|p| p.synced.map(|s| (p.name.as_str(), f64::from(u8::from(s)))))
            .collect();
        gauge(
            encoder,
            "skewscope_probe_clock_synced",
            "1 when the device clock claims to be synchronised (adjtimex or chronyd), else 0",
            &synced,
        )?;
        let uploads: Vec<(&str, f64)> = probes
            .iter()
            .map(|p| (p.name.as_str(), p.last_upload_wall_ns as f64 / 1e9))
            .collect();
        gauge(
            encoder,
            "skewscope_probe_last_upload_timestamp_seconds",
            "When the probe last uploaded records (agent clock, Unix time)",
            &uploads,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewscope_core::Stamp;
    use skewscope_core::record::{
        AgentConnectionClosed, BroadcastStarted, SendCompleted, SendSlot, ShardSends,
    };

    fn at(mono_ns: u64) -> Stamp {
        Stamp {
            wall_ns: mono_ns,
            mono_ns,
        }
    }

    #[test]
    fn a_broadcast_is_observed_once_every_shard_has_reported() {
        let m = Metrics::new(2);
        m.observe(&AgentRecord::Broadcast(BroadcastStarted {
            id: 1,
            seq: None,
            hash: 0,
            len: 3,
            text: true,
            at: at(1_000_000),
        }));
        let sends = |shard, t| {
            AgentRecord::ShardSends(ShardSends {
                broadcast: 1,
                shard,
                loop_start_mono_ns: 1_000_000,
                slots: vec![
                    SendSlot {
                        conn: 1,
                        position: 0,
                        outcome: SendOutcome::Written,
                        mono_ns: t,
                    },
                    // A full send buffer: its copy completes later, or never.
                    SendSlot {
                        conn: 10 + u64::from(shard),
                        position: 1,
                        outcome: SendOutcome::Queued,
                        mono_ns: t,
                    },
                ],
            })
        };
        m.observe(&sends(0, 1_500_000));
        assert!(m.render().contains("skewscope_fanout_span_seconds_count 0"));
        m.observe(&sends(1, 3_000_000));
        assert!(
            m.render().contains("skewscope_fanout_span_seconds_count 0"),
            "not before the queued copies are done"
        );
        // Shard 0's queued copy completes at 5 ms; shard 1's client is dropped.
        m.observe(&AgentRecord::SendCompleted(SendCompleted {
            broadcast: 1,
            conn: 10,
            mono_ns: 5_000_000,
        }));
        m.observe(&AgentRecord::ConnectionClosed(AgentConnectionClosed {
            conn: 11,
            at: at(6_000_000),
            reason: CloseReason::QueueOverflow,
        }));
        let text = m.render();
        assert!(text.contains("skewscope_broadcasts_total 1"), "{text}");
        assert!(
            text.contains("skewscope_fanout_span_seconds_count 1"),
            "{text}"
        );
        // 4 ms from the start to the last completed write, as the report
        // counts it (the dropped client's copy never completed).
        assert!(
            text.contains("skewscope_fanout_span_seconds_sum 0.004"),
            "{text}"
        );
        m.observe(&AgentRecord::ConnectionClosed(AgentConnectionClosed {
            conn: 1,
            at: at(4_000_000),
            reason: CloseReason::TooManyControlFrames,
        }));
        assert!(
            m.render()
                .contains("skewscope_clients_closed_total{reason=\"too_many_control_frames\"} 1")
        );
    }
}
