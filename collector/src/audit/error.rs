//! Why an audit could not run (exit status 2), each cause with its source,
//! so a caller can tell an agent that refused from a disk that failed.

use std::path::PathBuf;

use super::agent_api::ApiError;
use super::mirror::SyncError;

/// Why the audit could not run ([`super::exit::CANNOT_AUDIT`]).
#[derive(Debug, thiserror::Error)]
pub enum CannotAudit {
    /// The agent did not answer, refused the token, or refused a trigger.
    #[error(transparent)]
    Agent(#[from] ApiError),
    /// A log could not be copied from the agent.
    #[error(transparent)]
    Copy(#[from] SyncError),
    /// No directory for the copy of the logs.
    #[error("cannot keep the copy of the agent's logs in {}: {source:#}", dir.display())]
    CopyDir {
        /// Where the copy was to go.
        dir: PathBuf,
        /// What failed.
        source: anyhow::Error,
    },
    /// The copy of the logs could not be read or joined.
    #[error("cannot read the copy of the agent's logs: {0:#}")]
    Logs(anyhow::Error),
    /// The agent's run changed under the audit: its broadcasts so far are
    /// in its data directory, the audit's window is gone.
    #[error(
        "the agent restarted during the audit (run {was} is now {now}); its broadcasts so far are in its data directory; run the audit again"
    )]
    AgentRestarted {
        /// The run the audit began with.
        was: String,
        /// The run answering now.
        now: String,
    },
    /// Fewer probes upload than `--require-probes` after `--settle`.
    #[error(
        "{uploading} probe(s) upload to the agent ({}) and --require-probes is {required}; start the others with --upload {agent}",
        if names.is_empty() { "none".to_string() } else { names.join(", ") }
    )]
    TooFewProbes {
        /// Probes uploading.
        uploading: usize,
        /// Their names, so the one missing can be told.
        names: Vec<String>,
        /// `--require-probes`.
        required: usize,
        /// The agent's URL, for the command to give the probes.
        agent: String,
    },
    /// A passive audit whose probes' logs hold no connection yet.
    #[error("no probe's records hold a connection yet: nothing to judge the window with")]
    NoConnection,
    /// The operator's trigger answered, the probes listen to the agent's
    /// hub, and the hub sent nothing after it.
    #[error(
        "the probes listen to the agent's hub, but it sent no broadcast within --settle {settle} of the trigger {trigger}: the app behind the trigger did not publish to this agent (check its /publish URL and token), or takes longer than --settle"
    )]
    TriggerSentNothing {
        /// The trigger URL.
        trigger: String,
        /// `--settle`.
        settle: String,
    },
    /// A passive audit of the hub that sent nothing in its window.
    #[error("the hub sent no broadcast in the window ({window})")]
    NoBroadcast {
        /// The window, as the operator gave it.
        window: String,
    },
}
