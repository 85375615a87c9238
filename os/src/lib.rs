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
//! - [`files`]: the open-file limit, and the room for sockets under it;
//! - [`machine`]: what machine this is (kernel, CPU, memory, port range);
//! - [`process`]: another process's CPU time and command line;
//! - [`log_files`]: record logs on disk, written and read (the format is
//!   the core's);
//! - [`priority`]: background threads at the lowest CPU priority;
//! - [`packet_capture`]: a port's outgoing TCP packets (`AF_PACKET`
//!   ring and BPF filter), for the tap;
//! - [`rx_stamp`], [`tx_stamp`]: kernel receive and transmit timestamps
//!   (`SO_TIMESTAMPING`, `recvmsg` control messages);
//! - [`settings`]: TOML settings files merged under command-line flags;
//! - [`sockets`]: what std and tokio do not do with a socket (a listener's
//!   backlog, keepalive and unacknowledged-data timeouts, waking a UDP
//!   receive);
//! - `logging` (feature `cli`): the daemons' log lines, under a terminal
//!   or the journal.
//!
//! [`Stamp`]: skewscope_core::Stamp

// Log files are std::fs alone: they build on any OS, so `skewscope report`
// (core, this module, the collector without its demo) runs on a
// technician's laptop. Everything else is Linux's.
pub mod log_files;

#[cfg(target_os = "linux")]
pub mod clock;
#[cfg(target_os = "linux")]
pub mod clock_claims;
#[cfg(target_os = "linux")]
pub mod cpu;
#[cfg(target_os = "linux")]
pub mod files;
#[cfg(target_os = "linux")]
pub mod host;
#[cfg(all(target_os = "linux", feature = "cli"))]
pub mod logging;
#[cfg(target_os = "linux")]
pub mod machine;
#[cfg(target_os = "linux")]
pub mod packet_capture;
#[cfg(target_os = "linux")]
pub mod priority;
#[cfg(target_os = "linux")]
pub mod process;
#[cfg(target_os = "linux")]
pub mod rx_stamp;
#[cfg(target_os = "linux")]
pub mod settings;
#[cfg(target_os = "linux")]
pub mod sockets;
#[cfg(feature = "test-support")]
pub mod test_certs;
#[cfg(any(test, feature = "test-support"))]
pub mod test_listening;
#[cfg(all(target_os = "linux", any(test, feature = "test-support")))]
pub mod test_namespace;
#[cfg(target_os = "linux")]
pub mod tx_stamp;
#[cfg(all(target_os = "linux", feature = "uring"))]
pub mod uring;
