//! What every request handler is handed: the parts it may call into, the
//! limits it enforces and the counters it updates. Built once by the agent,
//! shared by every connection's task; it holds nothing that points back up.

use std::sync::Arc;
use std::time::Duration;

use crate::counters::AgentCounters;
use crate::engine::hub::Hub;
use crate::ingest::{IngestStore, Worker};
use crate::metrics::Metrics;
use crate::quiet::FanoutQuiet;
use crate::server::audit::AuditSource;

/// What every request handler needs.
pub struct Context {
    /// The fan-out engine.
    pub hub: Arc<Hub>,
    /// Bearer token required by `/publish`, `/start_test`, `/ingest` and
    /// `/audit/…`, if any.
    pub token: Option<String>,
    /// The time exchange's tag key, derived from `token` once: `/clock`
    /// tags its replies with it.
    pub time_key: Option<skewscope_core::time_exchange::TimeKey>,
    /// The lead `lead=auto` gives now (the live thread keeps it).
    pub auto_lead: crate::live::AutoLeadHandle,
    /// Largest `/publish` body.
    pub max_publish: usize,
    /// Body bytes all `/publish` requests in flight may hold together.
    pub publish_budget: Arc<tokio::sync::Semaphore>,
    /// Large `/publish` bodies stamped or made ready to send at once: one,
    /// on a blocking thread, so a queue of large bodies is parsed, copied
    /// and hashed one at a time off the runtime's thread while `/clock`,
    /// uploads and accepts go on.
    pub body_work: Arc<tokio::sync::Semaphore>,
    /// Most WebSocket clients at once (`--max-clients`).
    pub max_clients: Option<usize>,
    /// Subprotocols the hub answers (`--subprotocol`).
    pub subprotocols: Vec<String>,
    /// The agent's counters: updated here (refusals, publish bytes) and
    /// shown by `/healthz`.
    pub counters: AgentCounters,
    /// What `/metrics` renders.
    pub metrics: Metrics,
    /// Bearer token `/metrics` requires (`--metrics-token-file`), if any.
    pub metrics_token: Option<String>,
    /// Time allowed for a request head or body to arrive.
    pub request_timeout: Duration,
    /// Uploaded probe runs (`/ingest`).
    pub ingest: Arc<IngestStore>,
    /// The thread that checks and stores uploads.
    pub ingest_worker: Worker,
    /// Lets uploads wait while a broadcast is fanned out.
    pub quiet: FanoutQuiet,
    /// This run and its data directory, for `/audit/…`.
    pub audit: AuditSource,
    /// Connections whose request head has not arrived yet, at most
    /// `--max-pending` (one permit each).
    pub pending: Arc<tokio::sync::Semaphore>,
    /// `/clock` sessions open, at most `--max-clock-sessions` (one permit each).
    pub clock_sessions: Arc<tokio::sync::Semaphore>,
    /// Where a sweep from several machines meets its workers (`/sweep`).
    pub sweep_board: crate::sweep_board::SweepBoard,
    /// The TLS every connection is served under (`--tls-cert`), if any.
    pub tls: Option<Arc<crate::tls::ServerTls>>,
}
