//! Everything that can stop a probe run, each with what to do about it.
//!
//! OS errors are kept as `source()`, not repeated in the message: print the
//! chain (`{:#}` with anyhow) to see both.

use std::io;
use std::path::PathBuf;

/// Why a probe could not start or did not finish cleanly.
///
/// A library error type (not `anyhow`) so the collector's demo and the tests can
/// tell a server that was never reachable from a disk that filled up.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The configuration asks for something the probe cannot do.
    #[error("invalid probe configuration: {0}")]
    Config(String),

    /// The URL is not a plain `ws://` WebSocket URL this build can connect to.
    #[error("{url}: {reason}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it and what to use instead.
        reason: String,
    },

    /// The process may not open enough files for the requested connections.
    #[error("{0}; or use fewer --connections")]
    FileLimit(#[from] skewscope_os::files::FileLimitError),

    /// The record log could not be created.
    #[error(
        "cannot create the record log {path} (check that its directory exists and is writable)"
    )]
    CreateLog {
        /// The `--out` file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },

    /// Writing or syncing the record log failed part way; the run was stopped.
    #[error(
        "writing the record log {path} failed, so the run was stopped (check free space and permissions; \
         the records before the failure are in the file)"
    )]
    WriteLog {
        /// The `--out` file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },

    /// The log reached `--max-log-bytes`; recording and the run stopped.
    #[error(
        "the record log {path} reached its size limit ({max_bytes} bytes: --max-log-bytes, or what \
         --out-dir's --keep-bytes left this run), so recording and the run stopped; its last record \
         says so (raise the limit, or rotate the log with SIGHUP)"
    )]
    LogFull {
        /// The `--out` file.
        path: PathBuf,
        /// The limit.
        max_bytes: u64,
    },

    /// `--out-dir` has no room for a new run, and every log that would
    /// have to go is one the agent does not have in full.
    #[error(
        "{dir} is at its limits ({why}), and the logs that would have to go are the only copies of their records{}: not recording rather than deleting them. Raise --keep-runs or --keep-bytes (0: no limit), or move the logs away",
        if *uploading { " (the agent did not acknowledge them in full)" } else { " (without --upload nothing else has them)" }
    )]
    DiskIsTheLimit {
        /// The `--out-dir`.
        dir: PathBuf,
        /// Which limit.
        why: String,
        /// Whether the agent was asked.
        uploading: bool,
    },

    /// The agent refused the token the upload gave, or wanted one (401):
    /// nothing of the run could reach it, so the run was stopped at once.
    /// The text names the token's file and says what to give.
    #[error("{0}")]
    UploadRefused(String),

    /// The kernel gave no random bytes for the run's id.
    #[error("cannot draw a run id from /dev/urandom")]
    RunId(#[source] io::Error),

    /// The threads the connections run on could not be started.
    #[error("cannot start the connection threads")]
    Threads(#[source] io::Error),

    /// The run ended without a single connection: nothing was measured.
    #[error(
        "none of the {attempted} connection(s) to {url} could be opened (first error: {first_error}); \
         check that the server is running and the URL is right; the failures are recorded in {out}"
    )]
    NoneOpened {
        /// The URL probed.
        url: String,
        /// Connections attempted.
        attempted: u32,
        /// The first failure, for people.
        first_error: String,
        /// The record log.
        out: PathBuf,
    },
}

/// Why one connection attempt failed. Recorded in the log as it reads here
/// (the connection's failure record), and retried with `--reconnect`; the
/// variant says which side of the attempt it was.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// The upgrade request could not be made from the URL or a header.
    #[error("{0}")]
    Request(String),
    /// No TCP connection to the server.
    #[error("{url}: {source}")]
    Unreachable {
        /// The URL, credentials hidden.
        url: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TLS configuration could not be made.
    #[error(transparent)]
    Trust(#[from] crate::tls::TrustError),
    /// The server answered, but not with an upgrade: what it said.
    #[error("{0}")]
    Refused(String),
    /// A redirect the probe will not follow.
    #[error("{0}")]
    Redirect(String),
    /// The `101` broke the protocol and the connection was failed.
    #[error("{0}")]
    BadUpgrade(String),
    /// The upgrade failed below HTTP (TLS, a port that is not HTTP): what
    /// the port was found to speak.
    #[error("{0}")]
    Diagnosed(String),
    /// No upgrade within `--connect-timeout`.
    #[error("no WebSocket upgrade within the connect timeout ({0:?})")]
    TimedOut(std::time::Duration),
    /// The run is ending.
    #[error("the probe is shutting down")]
    ShuttingDown,
    /// The run was stopped while this connection was being made.
    #[error("{0} before the connection was made")]
    Stopped(crate::shutdown::StopReason),
}
