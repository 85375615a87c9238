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
use skewscope_core::record::{AgentRecord, CloseReason};

use crate::engine::hub::Hub;
use crate::ingest::IngestStore;
use crate::time_port::TimeCounters;

/// Broadcasts whose fan-out is still being gathered, at most: one whose
/// shards never all report (recording off) is forgotten past this.
const PENDING_BROADCASTS: usize = 1024;

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
    /// Broadcast id -> (start mono ns, latest write mono ns, shards left).
    pending: Mutex<BTreeMap<u64, (u64, u64, usize)>>,
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
            "From a broadcast's start to its last write returning, over every shard",
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
                pending.insert(b.id, (b.at.mono_ns, b.at.mono_ns, self.shards));
                while pending.len() > PENDING_BROADCASTS {
                    pending.pop_first();
                }
            }
            AgentRecord::ShardSends(s) => {
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                let Some(entry) = pending.get_mut(&s.broadcast) else {
                    return;
                };
                let latest = s.slots.iter().map(|slot| slot.mono_ns).max();
                entry.1 = entry.1.max(latest.unwrap_or(0));
                entry.2 = entry.2.saturating_sub(1);
                if entry.2 == 0 {
                    let (start, end, _) = *entry;
                    pending.remove(&s.broadcast);
                    self.fanout.observe(end.saturating_sub(start) as f64 / 1e9);
                }
            }
            AgentRecord::ConnectionOpened(_) => {
                self.opened.inc();
            }
            AgentRecord::ConnectionClosed(c) => {
                self.closed
                    .get_or_create(&vec![("reason", reason_label(&c.reason))])
                    .inc();
            }
            _ => {}
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
        AgentConnectionClosed, BroadcastStarted, SendOutcome, SendSlot, ShardSends,
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
                slots: vec![SendSlot {
                    conn: 1,
                    position: 0,
                    outcome: SendOutcome::Written,
                    mono_ns: t,
                }],
            })
        };
        m.observe(&sends(0, 1_500_000));
        assert!(m.render().contains("skewscope_fanout_span_seconds_count 0"));
        m.observe(&sends(1, 3_000_000));
        let text = m.render();
        assert!(text.contains("skewscope_broadcasts_total 1"), "{text}");
        assert!(
            text.contains("skewscope_fanout_span_seconds_count 1"),
            "{text}"
        );
        // 2 ms from the start to the later shard's last write.
        assert!(
            text.contains("skewscope_fanout_span_seconds_sum 0.002"),
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
