//! skewscope's OS layer: every syscall the binaries make, behind small safe
//! functions, so that the core stays pure and the binaries stay thin.
//!
//! This is the only crate allowed `unsafe` (three functions: the raw
//! `clock_gettime` syscall, `adjtimex` and `setpriority`, each with its
//! reason beside it; and the bench-only io_uring batch); everything else
//! goes through nix's safe wrappers or std.
//!
//! - [`clock`]: reading `CLOCK_REALTIME` and `CLOCK_MONOTONIC` into a [`Stamp`];
//! - [`clock_claims`]: what the clock says about its own error (`adjtimex`,
//!   `chronyc`);
//! - [`host`]: host name and the kernel's boot id (what names a clock);
//! - [`files`]: the open-file limit;
//! - [`priority`]: background threads at the lowest CPU priority;
//! - [`rx_stamp`], [`tx_stamp`]: kernel receive and transmit timestamps
//!   (`SO_TIMESTAMPING`, `recvmsg` control messages);
//! - [`settings`]: TOML settings files merged under command-line flags.
//!
//! [`Stamp`]: skewscope_core::Stamp

pub mod clock;
pub mod clock_claims;
pub mod files;
pub mod host;
pub mod priority;
pub mod rx_stamp;
pub mod settings;
pub mod tx_stamp;
#[cfg(feature = "uring")]
pub mod uring;
