//! skewscope's OS layer: every syscall the binaries make, behind small safe
//! functions, so that the core stays pure and the binaries stay thin.
//!
//! This is the only crate allowed `unsafe` (two blocks: the raw
//! `clock_gettime` syscall and `adjtimex`, each with its reason beside it);
//! everything else goes through nix's safe wrappers or std.
//!
//! - [`clock`]: reading `CLOCK_REALTIME` and `CLOCK_MONOTONIC` into a [`Stamp`];
//! - [`clock_claims`]: what the clock says about its own error (`adjtimex`,
//!   `chronyc`);
//! - [`host`]: host name and the kernel's boot id (what names a clock);
//! - [`files`]: the open-file limit;
//! - [`rx_stamp`], [`tx_stamp`]: kernel receive and transmit timestamps
//!   (`SO_TIMESTAMPING`, `recvmsg` control messages);
//! - [`settings`]: TOML settings files merged under command-line flags.
//!
//! [`Stamp`]: skewscope_core::Stamp

pub mod clock;
pub mod clock_claims;
pub mod files;
pub mod host;
pub mod rx_stamp;
pub mod settings;
pub mod tx_stamp;
#[cfg(feature = "uring")]
pub mod uring;
