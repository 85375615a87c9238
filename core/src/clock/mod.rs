//! The clock model, defined once: a device's clock against the agent's, from
//! its time exchanges, as an estimate with a bound that holds on any link.
//!
//! The probe acts on it, the agent's live join and the report judge with
//! it, and the JavaScript module (`clients/js/skewscope-clock.js`) is a port
//! of it, held to the same bits by shared vectors
//! (`clients/clock-vectors/`). docs/measurements.md says what the bound
//! means and what no two-way exchange can know.
//!
//! - `exchange`: one exchange as two causality constraints;
//! - `region`: every clock consistent with them, and its extent at a moment;
//! - `model`: the exchanges of a run, segments and windows, queries;
//! - `device`: a whole run's model with its wall-clock steps, for reports;
//! - `steps`: where a wall clock stepped;
//! - [`schedule`]: when to exchange, so the bound converges fast and stays.

pub(crate) mod device;
pub(crate) mod exchange;
mod hull;
pub(crate) mod model;
pub(crate) mod region;
pub mod schedule;
pub(crate) mod steps;

pub use device::DeviceClock;
pub use exchange::Exchange;
pub use model::{ClockModel, Correction, Estimate, HORIZON_NS, Interval};
pub use region::{Extent, MAX_DRIFT, WANDER};
pub use steps::{ClockStep, find_steps};
