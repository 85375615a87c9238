//! Every count the agent keeps about its own work, as handles.
//!
//! Each counter and gauge is created once, here, and handed down to the
//! part that updates it: the shards count clients in and out, the hub its
//! broadcasts, the recorder what it could not write, the time port its
//! packets, the ingest what it stored and refused. Nothing reads back up
//! into those parts to report: `/metrics` renders these same handles
//! ([`AgentCounters::register`]) and `/healthz` a [`Health`] snapshot of
//! them ([`AgentCounters::snapshot`]), so the two cannot disagree.
//!
//! The handles are `prometheus-client`'s atomics: an update is one atomic
//! add, and a clone shares the value.

use std::collections::BTreeMap;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Serialize;
use skewscope_core::record::{CloseReason, TimePortTotals};

/// A label set of fixed names and values.
pub type Labels = Vec<(&'static str, &'static str)>;

/// The counters of the whole agent, grouped by the part that updates them.
#[derive(Clone, Debug)]
pub struct AgentCounters {
    /// WebSocket clients: the hub and its shards.
    pub clients: ClientCounters,
    /// Broadcasts the hub started.
    pub broadcasts: Counter,
    /// `/publish` body bytes announced by requests in flight.
    pub publish_bytes_in_flight: Gauge,
    /// Records the recorder could not write (a full disk).
    pub records_lost: Counter,
    /// Fan-out shards that stopped answering their heartbeat (or whose
    /// thread ended), as the agent's last health check saw them.
    pub shards_stuck: Gauge,
    /// The UDP time port's packets, when it runs.
    pub time_port: Option<TimePortCounters>,
    /// Uploads stored and refused.
    pub ingest: IngestCounters,
    /// `/clock`: the time exchange over WebSocket.
    pub clock: ClockServiceCounters,
    /// Connections whose TLS handshake failed or timed out (`--tls-cert`):
    /// a client that does not trust the certificate, or speaks plain HTTP
    /// to a TLS port.
    pub tls_handshakes_failed: Counter,
    /// Requests refused for a missing or wrong bearer token, by endpoint
    /// ([`UNAUTHORIZED_ENDPOINTS`]): an app that publishes without the
    /// token is seen, not only its failure.
    pub unauthorized: Family<Labels, Counter>,
}

/// The endpoints a token guards, as `skewscope_http_unauthorized_total`
/// labels them.
pub const UNAUTHORIZED_ENDPOINTS: &[&str] = &[
    "publish",
    "start_test",
    "ingest",
    "audit",
    "sweep",
    "metrics",
    "other",
];

impl AgentCounters {
    /// A request to `path` refused for its token: counted by endpoint.
    pub fn unauthorized(&self, path: &str) {
        let endpoint = match path {
            "/publish" => "publish",
            "/start_test" => "start_test",
            "/ingest" => "ingest",
            "/metrics" => "metrics",
            p if p.starts_with("/audit/") => "audit",
            p if p == "/sweep" || p.starts_with("/sweep/") => "sweep",
            _ => "other",
        };
        self.unauthorized
            .get_or_create(&vec![("endpoint", endpoint)])
            .inc();
    }
}

/// What `/clock` did: requests answered and refused, sessions open, and
/// sessions it closed.
#[derive(Clone, Debug)]
pub struct ClockServiceCounters {
    /// Requests answered.
    pub answered: Counter,
    /// Requests that were not requests (answered with an error).
    pub malformed: Counter,
    /// Sessions closed for asking too often (1008).
    pub refused_rate: Counter,
    /// Sessions closed for a frame over 1 KiB (1009).
    pub refused_too_big: Counter,
    /// Sessions closed for a binary frame (1003).
    pub refused_binary: Counter,
    /// Sessions refused because too many were open (503).
    pub refused_full: Counter,
    /// Sessions open now.
    pub sessions: Gauge,
    requests: Family<Labels, Counter>,
    closed: Family<Labels, Counter>,
}

impl ClockServiceCounters {
    fn new() -> ClockServiceCounters {
        let requests = Family::<Labels, Counter>::default();
        let closed = Family::<Labels, Counter>::default();
        ClockServiceCounters {
            answered: requests.get_or_create_owned(&vec![("result", "answered")]),
            malformed: requests.get_or_create_owned(&vec![("result", "malformed")]),
            refused_rate: closed.get_or_create_owned(&vec![("reason", "rate")]),
            refused_too_big: closed.get_or_create_owned(&vec![("reason", "too_big")]),
            refused_binary: closed.get_or_create_owned(&vec![("reason", "binary")]),
            refused_full: closed.get_or_create_owned(&vec![("reason", "full")]),
            sessions: Gauge::default(),
            requests,
            closed,
        }
    }
}

/// The `/clock` counters in `/healthz`.
#[derive(Clone, Debug, Serialize)]
pub struct ClockHealth {
    /// Requests answered.
    pub answered: u64,
    /// Requests refused as malformed.
    pub malformed: u64,
    /// Sessions open now.
    pub sessions: i64,
    /// Sessions closed or refused: for their rate, a frame too big, a
    /// binary frame, too many open.
    pub closed: BTreeMap<&'static str, u64>,
}

/// What happened to WebSocket clients.
#[derive(Clone, Debug)]
pub struct ClientCounters {
    /// Connected now.
    pub connected: Gauge,
    /// Of those, the ones that agreed to permessage-deflate.
    pub deflate: Gauge,
    /// Joined the hub.
    pub opened: Counter,
    /// Left or were closed, by [`close_label`].
    pub closed: Family<Labels, Counter>,
    /// Upgrades answered 503 for `--max-clients` (a series of `refused`).
    pub refused_max_clients: Counter,
    /// Connections answered 503 because too many had sent no request yet
    /// (`--max-pending`; a series of `refused`).
    pub refused_pending: Counter,
    /// Both refusals, by reason, as `/metrics` shows them.
    refused: Family<Labels, Counter>,
}

/// The time port's packets, by what became of them: each a series of one
/// family, so `/metrics` shows them by result.
#[derive(Clone, Debug)]
pub struct TimePortCounters {
    /// Requests answered.
    pub answered: Counter,
    /// Dropped: shorter than a request, or not one.
    pub malformed: Counter,
    /// Dropped: longer than a request (answering could amplify).
    pub oversized: Counter,
    /// Dropped: a request id seen recently.
    pub replayed: Counter,
    packets: Family<Labels, Counter>,
}

/// Uploads: what was stored, and what was refused.
#[derive(Clone, Debug, Default)]
pub struct IngestCounters {
    /// Records durably stored.
    pub records: Counter,
    /// Records received again after a lost ack, and not stored twice.
    pub duplicates: Counter,
    /// Batches refused for space (data budget or disk): nothing stored, no ack.
    pub busy: Counter,
    /// Runs a newer connection took over from one still open (a probe that
    /// reconnected, or a page that reloaded, before its old connection's end
    /// was seen).
    pub takeovers: Counter,
    /// Upload connections refused, by reason ([`INGEST_REJECTIONS`]).
    pub rejections: Family<Labels, Counter>,
}

/// Every reason an upload connection is refused for: the protocol's own
/// ([`skewscope_core::ingest::IngestError::counter`]) and the agent's.
pub const INGEST_REJECTIONS: &[&str] = &[
    "malformed",
    "version",
    "oversized",
    "corrupt_frame",
    "sequence_gap",
    "wrong_run",
    "token",
    "handshake",
    "not_owner",
    "run_in_use",
];

/// Every close reason's label.
const CLOSE_LABELS: &[&str] = &[
    "client_closed",
    "protocol_error",
    "frame_too_large",
    "queue_overflow",
    "socket_error",
    "shutdown",
    "too_many_control_frames",
];

/// A bounded label for each close reason (its detail is in the log).
pub fn close_label(reason: &CloseReason) -> &'static str {
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

/// What `/healthz` says: the counters at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct Health {
    /// Always `"ok"` when the agent answers.
    pub status: &'static str,
    /// WebSocket clients connected now.
    pub clients: i64,
    /// Of those, the ones that agreed to permessage-deflate.
    pub deflate_clients: i64,
    /// Upgrades refused for `--max-clients`.
    pub refused_clients: u64,
    /// Connections refused for `--max-pending`.
    pub refused_pending: u64,
    /// `/publish` body bytes held by requests in flight.
    pub publish_bytes_in_flight: i64,
    /// Records the log could not take.
    pub records_lost: u64,
    /// TLS handshakes that failed or timed out.
    pub tls_handshakes_failed: u64,
    /// Requests refused for their token, by endpoint (those with any).
    pub unauthorized: BTreeMap<&'static str, u64>,
    /// Shards stuck at the last health check.
    pub shards_stuck: i64,
    /// The time port's packets; `null` when it does not run.
    pub time: Option<TimePortTotals>,
    /// Uploads.
    pub ingest: IngestHealth,
    /// `/clock`.
    pub clock: ClockHealth,
}

/// The upload counters in `/healthz`.
#[derive(Clone, Debug, Serialize)]
pub struct IngestHealth {
    /// Records durably stored.
    pub records: u64,
    /// Records received twice and stored once.
    pub duplicates: u64,
    /// Batches refused for space.
    pub busy: u64,
    /// Runs a newer connection took over.
    pub takeovers: u64,
    /// Refused connections by reason (only reasons that happened).
    pub rejected: BTreeMap<&'static str, u64>,
}

impl ClientCounters {
    /// Counts a client closed for `reason`.
    pub fn closed_for(&self, reason: &CloseReason) {
        self.closed
            .get_or_create(&vec![("reason", close_label(reason))])
            .inc();
    }
}

impl ClientCounters {
    fn new() -> ClientCounters {
        let refused = Family::<Labels, Counter>::default();
        let closed = Family::<Labels, Counter>::default();
        // Every label exists from the start, so a query sees 0, not nothing.
        for label in CLOSE_LABELS {
            let _ = closed.get_or_create(&vec![("reason", *label)]);
        }
        ClientCounters {
            connected: Gauge::default(),
            deflate: Gauge::default(),
            opened: Counter::default(),
            closed,
            refused_max_clients: refused.get_or_create_owned(&vec![("reason", "max_clients")]),
            refused_pending: refused.get_or_create_owned(&vec![("reason", "max_pending")]),
            refused,
        }
    }
}

impl TimePortCounters {
    fn new() -> TimePortCounters {
        let packets = Family::<Labels, Counter>::default();
        let result = |r| packets.get_or_create_owned(&vec![("result", r)]);
        TimePortCounters {
            answered: result("answered"),
            malformed: result("malformed"),
            oversized: result("oversized"),
            replayed: result("replayed"),
            packets,
        }
    }

    /// The counts as the log records them.
    pub fn snapshot(&self) -> TimePortTotals {
        TimePortTotals {
            answered: self.answered.get(),
            malformed: self.malformed.get(),
            oversized: self.oversized.get(),
            replayed: self.replayed.get(),
        }
    }
}

impl IngestCounters {
    /// Counts one refused upload connection; `reason` is one of
    /// [`INGEST_REJECTIONS`].
    pub fn reject(&self, reason: &'static str) {
        debug_assert!(INGEST_REJECTIONS.contains(&reason), "{reason}");
        self.rejections
            .get_or_create(&vec![("reason", reason)])
            .inc();
    }
}

impl AgentCounters {
    /// Every counter at zero; `time_port` when the agent serves the time
    /// exchange.
    pub fn new(time_port: bool) -> AgentCounters {
        let counters = AgentCounters {
            clients: ClientCounters::new(),
            broadcasts: Counter::default(),
            publish_bytes_in_flight: Gauge::default(),
            records_lost: Counter::default(),
            shards_stuck: Gauge::default(),
            time_port: time_port.then(TimePortCounters::new),
            ingest: IngestCounters::default(),
            clock: ClockServiceCounters::new(),
            tls_handshakes_failed: Counter::default(),
            unauthorized: {
                let family = Family::<Labels, Counter>::default();
                for endpoint in UNAUTHORIZED_ENDPOINTS {
                    let _ = family.get_or_create(&vec![("endpoint", *endpoint)]);
                }
                family
            },
        };
        for reason in INGEST_REJECTIONS {
            let _ = counters
                .ingest
                .rejections
                .get_or_create(&vec![("reason", *reason)]);
        }
        counters
    }

    /// Registers every handle for `/metrics`.
    pub fn register(&self, registry: &mut Registry) {
        let c = &self.clients;
        registry.register(
            "skewscope_clients_connected",
            "WebSocket clients connected now",
            c.connected.clone(),
        );
        registry.register(
            "skewscope_clients_deflate",
            "WebSocket clients connected now that agreed to permessage-deflate",
            c.deflate.clone(),
        );
        registry.register(
            "skewscope_clients_opened",
            "WebSocket clients that joined the hub",
            c.opened.clone(),
        );
        registry.register(
            "skewscope_clients_closed",
            "WebSocket clients that left or were closed, by reason",
            c.closed.clone(),
        );
        registry.register(
            "skewscope_connections_refused",
            "Connections answered 503: over --max-clients, or too many without a request yet (--max-pending)",
            c.refused.clone(),
        );
        registry.register(
            "skewscope_broadcasts",
            "Broadcasts the hub started",
            self.broadcasts.clone(),
        );
        registry.register(
            "skewscope_publish_bytes_in_flight",
            "/publish body bytes held by requests in flight (of --max-publish-in-flight)",
            self.publish_bytes_in_flight.clone(),
        );
        registry.register(
            "skewscope_records_lost",
            "Records the agent could not write to its log (a full disk)",
            self.records_lost.clone(),
        );
        registry.register(
            "skewscope_tls_handshakes_failed",
            "Connections whose TLS handshake failed or timed out (--tls-cert): a client that does not trust the certificate, or plain HTTP on the TLS port",
            self.tls_handshakes_failed.clone(),
        );
        registry.register(
            "skewscope_http_unauthorized",
            "Requests refused for a missing or wrong bearer token, by endpoint",
            self.unauthorized.clone(),
        );
        registry.register(
            "skewscope_shards_stuck",
            "Fan-out shards that did not answer a heartbeat within 5 s (or whose thread ended), at the last health check",
            self.shards_stuck.clone(),
        );
        if let Some(t) = &self.time_port {
            registry.register(
                "skewscope_time_port_packets",
                "Time-exchange packets, by result",
                t.packets.clone(),
            );
        }
        let i = &self.ingest;
        registry.register(
            "skewscope_ingest_records",
            "Probe records uploaded and durably stored",
            i.records.clone(),
        );
        registry.register(
            "skewscope_ingest_duplicates",
            "Probe records uploaded again after a lost acknowledgement, stored once",
            i.duplicates.clone(),
        );
        registry.register(
            "skewscope_ingest_busy",
            "Upload batches refused for space (data budget or a full disk): nothing stored, resent later",
            i.busy.clone(),
        );
        registry.register(
            "skewscope_ingest_takeovers",
            "Uploads a newer connection of the same run took over (a reconnect seen before the old connection's end)",
            i.takeovers.clone(),
        );
        registry.register(
            "skewscope_ingest_rejections",
            "Upload connections refused, by reason",
            i.rejections.clone(),
        );
        let k = &self.clock;
        registry.register(
            "skewscope_clock_requests",
            "/clock time-exchange requests: answered, or malformed (answered with an error)",
            k.requests.clone(),
        );
        registry.register(
            "skewscope_clock_sessions_refused",
            "/clock sessions closed or refused: rate (1008), too_big (1009), binary (1003), full (503)",
            k.closed.clone(),
        );
        registry.register(
            "skewscope_clock_sessions",
            "/clock sessions open now",
            k.sessions.clone(),
        );
    }

    /// The counters now, for `/healthz`.
    pub fn snapshot(&self) -> Health {
        let rejected = INGEST_REJECTIONS
            .iter()
            .map(|&reason| {
                let n = self
                    .ingest
                    .rejections
                    .get_or_create(&vec![("reason", reason)])
                    .get();
                (reason, n)
            })
            .filter(|&(_, n)| n > 0)
            .collect();
        Health {
            status: "ok",
            clients: self.clients.connected.get(),
            deflate_clients: self.clients.deflate.get(),
            refused_clients: self.clients.refused_max_clients.get(),
            refused_pending: self.clients.refused_pending.get(),
            publish_bytes_in_flight: self.publish_bytes_in_flight.get(),
            records_lost: self.records_lost.get(),
            tls_handshakes_failed: self.tls_handshakes_failed.get(),
            unauthorized: UNAUTHORIZED_ENDPOINTS
                .iter()
                .map(|e| {
                    (
                        *e,
                        self.unauthorized
                            .get_or_create(&vec![("endpoint", *e)])
                            .get(),
                    )
                })
                .filter(|&(_, n)| n > 0)
                .collect(),
            shards_stuck: self.shards_stuck.get(),
            time: self.time_port.as_ref().map(TimePortCounters::snapshot),
            ingest: IngestHealth {
                records: self.ingest.records.get(),
                duplicates: self.ingest.duplicates.get(),
                busy: self.ingest.busy.get(),
                takeovers: self.ingest.takeovers.get(),
                rejected,
            },
            clock: ClockHealth {
                answered: self.clock.answered.get(),
                malformed: self.clock.malformed.get(),
                sessions: self.clock.sessions.get(),
                closed: [
                    ("rate", &self.clock.refused_rate),
                    ("too_big", &self.clock.refused_too_big),
                    ("binary", &self.clock.refused_binary),
                    ("full", &self.clock.refused_full),
                ]
                .into_iter()
                .map(|(k, c)| (k, c.get()))
                .filter(|&(_, n)| n > 0)
                .collect(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_and_metrics_show_the_same_handles() {
        let counters = AgentCounters::new(true);
        counters.clients.refused_pending.inc();
        counters.time_port.as_ref().unwrap().replayed.inc_by(3);
        counters.ingest.reject("token");
        counters.clients.closed_for(&CloseReason::QueueOverflow);
        let health = counters.snapshot();
        assert_eq!(health.refused_pending, 1);
        assert_eq!(health.time.unwrap().replayed, 3);
        assert_eq!(health.ingest.rejected.get("token"), Some(&1));
        assert_eq!(
            health.ingest.rejected.len(),
            1,
            "only reasons that happened"
        );
        let mut registry = Registry::default();
        counters.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "skewscope_connections_refused_total{reason=\"max_pending\"} 1",
            "skewscope_connections_refused_total{reason=\"max_clients\"} 0",
            "skewscope_time_port_packets_total{result=\"replayed\"} 3",
            "skewscope_ingest_rejections_total{reason=\"token\"} 1",
            "skewscope_ingest_rejections_total{reason=\"handshake\"} 0",
            "skewscope_clients_closed_total{reason=\"queue_overflow\"} 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}
