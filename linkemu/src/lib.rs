//! A userspace link emulator, for skewscope's tests and benchmarks.
//!
//! This kernel has `tbf` but not `netem`, so jitter, power-save holds and
//! loss are made here: a relay between a device and the server that delays
//! every packet by what a seeded [`model::LinkModel`] of the link's
//! [`profile::Profile`] decides, each direction on its own, and logs every
//! delay it applied ([`relay::Applied`]) so a test knows the true one-way
//! delays and the physical limit of any two-way bound through it.
//!
//! - [`profile`]: the links the field has: wired, good and busy Wi-Fi,
//!   asymmetric;
//! - [`model`]: a packet's fate, decided without I/O (the benchmarks drive
//!   it with simulated time);
//! - [`relay`]: the TCP and UDP relays on one port.

pub mod model;
pub mod profile;
pub mod relay;

pub use model::{Carrier, Direction, Fate, LinkModel};
pub use profile::Profile;
pub use relay::{Applied, Link, physical_limit_ns};
