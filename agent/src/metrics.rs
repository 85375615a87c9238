//! `/metrics`: the agent's health in Prometheus's exposition format, built
//! with `prometheus-client`.
//!
//! The registry holds handles and nothing else: the agent's own counters
//! ([`AgentCounters`], updated where the work happens) and the live join's
//! figures ([`LiveFigures`], updated on its own thread). A scrape renders
//! them on the HTTP task that answers it, reading no other part's state.

use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::counters::AgentCounters;
use crate::live::LiveFigures;

/// The registry `/metrics` renders.
pub struct Metrics {
    registry: Registry,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Registers `counters` and `figures` (and the agent's version).
    pub fn new(counters: &AgentCounters, figures: &LiveFigures) -> Metrics {
        let mut registry = Registry::default();
        counters.register(&mut registry);
        figures.register(&mut registry);
        registry.register(
            "skewscope_build",
            "The agent's version",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        Metrics { registry }
    }

    /// The exposition text in OpenMetrics, which Prometheus reads
    /// ([`crate::exposition`] gives it to other clients in the classic format).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
