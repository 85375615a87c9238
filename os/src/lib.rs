//! skewscope's OS layer: every syscall the binaries make, behind small safe
//! functions, so that the core stays pure and the binaries stay thin.
//!
//! This is the only crate allowed `unsafe`, each block with its reason
//! beside it: the raw `clock_gettime` syscall, `adjtimex`, `setpriority`,
//! the packet capture's socket options and ring, and the bench-only
//! io_uring batch. Everything else goes through nix's safe wrappers or std.
//!
//! - [`clock`]: reading `CLOCK_REALTIME` and `CLOCK_MONOTONIC` into a [`Stamp`];
//! - [`clock_claims`]: what the clock says about its own error (`adjtimex`,
//!   `chronyc`);
//! - [`host`]: host name and the kernel's boot id (what names a clock);
//! - [`files`]: the open-file limit;
//! - [`priority`]: background threads at the lowest CPU priority;
//! - [`packet_capture`]: a port's outgoing TCP packets (`AF_PACKET`
//!   ring and BPF filter), for the tap;
//! - [`rx_stamp`], [`tx_stamp`]: kernel receive and transmit timestamps
//!   (`SO_TIMESTAMPING`, `recvmsg` control messages);
//! - [`settings`]: TOML settings files merged under command-line flags;
//! - `logging` (feature `cli`): the daemons' log lines, under a terminal
//!   or the journal.
//!
//! [`Stamp`]: skewscope_core::Stamp

pub mod clock;
pub mod clock_claims;
pub mod cpu;
pub mod files;
pub mod host;
#[cfg(feature = "cli")]
pub mod logging;
pub mod packet_capture;
pub mod priority;
pub mod rx_stamp;
pub mod settings;
#[cfg(any(test, feature = "test-support"))]
pub mod test_namespace;
pub mod tx_stamp;
#[cfg(feature = "uring")]
pub mod uring;
