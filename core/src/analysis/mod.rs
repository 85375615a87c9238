//! From records to a report, without I/O. The steps, in the order a report
//! runs them:
//!
//! - [`join`]: which receipt belongs to which broadcast (the rule of
//!   `matching`, which the live join follows too) and which send, each
//!   broadcast's `fanout` (span, queued, dropped) defined once;
//! - [`crate::clock`] (beside the analysis, since the probe acts on it too):
//!   each device's clock against the agent's, with a bound that holds;
//! - [`placing`]: one broadcast's arrivals, reads, actions and frames placed
//!   on the agent's clock once, with their bounds, for every stage after it;
//! - [`clock_figures`]: skew and latency moved into the agent's timebase with
//!   intervals that contain the truth, and the latency split;
//! - `timebase`: one rule for moving a moment into the agent's clock and
//!   for a broadcast whose copies are not all there, every join's skew uses it;
//! - [`tapped`]: a server the agent taps, joined like the hub's own records;
//! - [`triggers`]: latency from trigger times, for servers that record nothing;
//! - [`stats`]: HDR-histogram summaries (percentiles, never a mean alone);
//! - [`figures`]: the series the HTML report plots;
//! - [`live`]: the join as records arrive, for the agent's `/metrics`;
//! - [`settled`]: when nothing more can come from a probe about a
//!   broadcast, one rule for the live join and the audit;
//! - [`report`]: the whole report, as rendered and as JSON;
//! - [`actions`]: what the probes' actions came to, and the lead to give;
//! - [`lead_rule`]: how long a lead must be, one rule for the report's
//!   advice and `lead=auto`;
//! - [`auto_lead`]: `lead=auto`, the shortest lead the live join's reads allow;
//! - [`diagnosis`]: why: how much of the skew the fan-out order and the
//!   network explain, what delivery adds, who is late every time;
//! - [`verdict`]: the report held against an audit's thresholds.

pub mod actions;
pub mod auto_lead;
pub mod clock_figures;
pub mod diagnosis;
pub(crate) mod fanout;
pub mod figures;
pub mod join;
pub mod lead_rule;
pub mod live;
pub(crate) mod matching;
pub mod placing;
pub mod report;
pub mod settled;
pub mod stats;
pub mod tapped;
pub(crate) mod timebase;
pub mod triggers;
pub mod verdict;
