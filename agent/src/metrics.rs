//! `/metrics`: the agent's health in Prometheus's exposition format, built
//! with `prometheus-client`. Counters and the fan-out histogram are fed from
//! the record stream by the recorder thread ([`Metrics::observe`]), never by
//! a shard; values that live elsewhere (clients connected, the time port's
//! and ingest's counters, records lost) are read at scrape time. Rendering
//! runs on the HTTP task that answers the scrape.

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
use skewscope_core::record::{AgentRecord, CloseReason, SendOutcome};

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
        let sources = Arc::new(OnceLock::new());
        registry.register_collector(Box::new(Live(sources.clone())));
        Metrics {
            sources,
            registry,
            broadcasts,
            fanout,
            opened,
            closed,
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
struct Live(Arc<OnceLock<Sources>>);

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Live")
    }
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = self.0.get() else {
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
