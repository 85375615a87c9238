//! The records the agent and the probes write, one enum per writer.
//!
//! Records are encoded with postcard inside the framing of [`crate::log`]. Postcard
//! tags enum variants by position, so new variants and record kinds are only ever
//! appended; anything else bumps [`crate::log::FORMAT_VERSION`].
//!
//! One file a writer: `agent` (the agent's log), `probe` (a probe's,
//! a page's, an app's), `tap` (what the tap follows), `clock` (what
//! both write of their clocks). Their types are re-exported here, so a
//! record is `record::Receipt` wherever it is used.

mod agent;
mod clock;
mod probe;
mod tap;

pub use agent::*;
pub use clock::*;
pub use probe::*;
pub use tap::*;
