//! Why the agent could not start or did not stop cleanly: one variant a
//! cause, each with the OS error under it, so a supervisor (or a test) can
//! tell a taken port from an unreadable token file from a full disk.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Why [`crate::RunningAgent::start`] failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `--token-file` (or `--metrics-token-file`) cannot be read.
    #[error("cannot read --token-file {}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The token file holds nothing: a hub open to anyone is refused.
    #[error("--token-file {} is empty; put the bearer token in it", path.display())]
    EmptyToken {
        /// The file.
        path: PathBuf,
    },
    /// `--tls-cert` or `--tls-key` cannot be used.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The data limits leave no room for the open segment.
    #[error(
        "max_data_bytes ({max_data_bytes}) must be at least twice segment_bytes ({segment_bytes}): the open segment is never removed"
    )]
    DataLimits {
        /// `--max-data-bytes`.
        max_data_bytes: u64,
        /// `--segment-bytes`.
        segment_bytes: u64,
    },
    /// The TCP port is taken or not ours.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// The UDP time port is taken or not ours.
    #[error("cannot serve the time exchange on udp {addr}")]
    TimePort {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// The record log cannot be created in the data directory.
    #[error("cannot create a record log in {}", dir.display())]
    RecordLog {
        /// `--data-dir`.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The directory for uploaded probe runs cannot be created.
    #[error("cannot create {}/probes", dir.display())]
    ProbeRuns {
        /// `--data-dir`.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// `--tap-port` cannot be tapped (no capability, no such interface).
    #[error("cannot tap port {port}")]
    Tap {
        /// The port.
        port: u16,
        /// Why.
        source: io::Error,
    },
    /// A resource the OS gives every process was refused: the open-file
    /// limit, a thread, a socket, random bytes for the run id.
    #[error("cannot {what}")]
    Os {
        /// What the agent was doing, as a sentence's end.
        what: &'static str,
        /// Why.
        source: io::Error,
    },
}

impl StartError {
    /// A closure for `map_err` that names what was being done.
    pub(crate) fn os(what: &'static str) -> impl FnOnce(io::Error) -> StartError {
        move |source| StartError::Os { what, source }
    }
}

/// Why [`crate::RunningAgent::shutdown`] did not end cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    /// A thread panicked while stopping: the log may lack its last records.
    #[error("agent shutdown panicked")]
    Panicked(#[source] tokio::task::JoinError),
    /// The record log could not be written for a while (a full disk?).
    #[error(
        "{0} records were lost because the record log could not be written (a full disk?); the log says when and how many"
    )]
    RecordsLost(u64),
}
