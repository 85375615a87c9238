//! The agent that taps the server a sweep loads (`--agent`): its segments
//! copied after each stage, so the stage's figures have the server's
//! fan-out span, measured from the packets that left it rather than
//! guessed from what arrived. The copies are followed as the audit follows
//! them ([`Mirror`]), a stage costing only what the tap wrote since.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::figures::{self, StageFigures};
use crate::audit::agent_api::AgentApi;
use crate::audit::mirror::Mirror;

/// Longest wait for the tap's records of a stage's broadcasts to reach the
/// agent's log (it writes them at least every 100 ms once a broadcast's
/// copies are all out; a stage of 10,000 connections takes longer to
/// follow).
pub const TAP_WAIT: Duration = Duration::from_secs(20);
/// Pause between looks at the agent's log while waiting.
const TAP_POLL: Duration = Duration::from_millis(200);

/// The agent tapping the server, and the local copies of its segments.
pub struct TapAgent {
    api: AgentApi,
    mirror: Mirror,
    url: String,
}

/// A stage's figures with the tap joined, and what the tap could not do.
pub struct TappedFigures {
    /// The figures.
    pub figures: StageFigures,
    /// Why they have no tap, or have it for fewer broadcasts than were
    /// heard; `None` when the tap saw every one.
    pub short: Option<String>,
}

impl TapAgent {
    /// The agent at `url` (`http://HOST:PORT`), asked with `token`, its
    /// segments copied under `dir`. It is asked once here, so a wrong
    /// address or token stops the sweep before any connection is opened.
    pub fn connect(
        url: &str,
        token: Option<String>,
        token_file: Option<PathBuf>,
        http: ureq::Agent,
        dir: &Path,
    ) -> anyhow::Result<TapAgent> {
        let api = AgentApi::new(url, token, http).token_from(token_file);
        api.status()
            .with_context(|| format!("--agent {url}: the agent that taps the server"))?;
        let mirror = Mirror::new(&dir.join("agent"))?;
        Ok(TapAgent {
            api,
            mirror,
            url: url.to_owned(),
        })
    }

    /// The stage's figures, with what the tap saw of its broadcasts. The
    /// receiving side's figures are measured from the stage's log alone,
    /// exactly as without `--agent`; the tap's come from joining the
    /// agent's log with it. The agent's log is copied again until the tap
    /// has as many broadcasts as the connections heard, or [`TAP_WAIT`]
    /// passes (then the figures say what it had).
    pub fn figures(
        &self,
        log: &Path,
        triggers: &[u64],
        listening: u32,
    ) -> anyhow::Result<TappedFigures> {
        let logs = [log.to_owned()];
        let (mut figures, _) = figures::measure(&logs, triggers, listening, &[])?;
        let deadline = Instant::now() + TAP_WAIT;
        loop {
            let status = self
                .api
                .status()
                .with_context(|| format!("--agent {}", self.url))?;
            let segments = self
                .mirror
                .sync_segments(&self.api, &status)
                .with_context(|| format!("cannot copy the log of the agent at {}", self.url))?;
            let (joined, not_tapped) = figures::measure(&logs, triggers, listening, &segments)?;
            let seen = joined.tap.as_ref().map_or(0, |t| t.broadcasts);
            let complete = not_tapped.is_none() && seen >= figures.heard;
            if not_tapped.is_some() || complete || Instant::now() >= deadline {
                let short = match not_tapped {
                    Some(why) => Some(format!(
                        "the agent at {} joined as no tap of this server: {why}",
                        self.url
                    )),
                    None if !complete => Some(format!(
                        "the agent's tap had {seen} of the {} broadcasts heard after {}: the fan-out span is of those",
                        figures.heard,
                        humantime::format_duration(TAP_WAIT)
                    )),
                    None => None,
                };
                figures.tap = joined.tap;
                return Ok(TappedFigures { figures, short });
            }
            std::thread::sleep(TAP_POLL);
        }
    }

    /// The agent's UDP time exchange (`HOST:PORT` of its address): the
    /// stage's probe exchanges with it, so its receipts are placed on the
    /// agent's clock even when the agent runs on another machine.
    pub fn time_server(url: &str) -> String {
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        rest.split(['/', '?', '#'])
            .next()
            .unwrap_or_default()
            .to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::TapAgent;

    #[test]
    fn the_time_exchange_is_the_agents_host_and_port() {
        assert_eq!(
            TapAgent::time_server("http://10.0.0.2:8080"),
            "10.0.0.2:8080"
        );
        assert_eq!(TapAgent::time_server("https://srv:8443"), "srv:8443");
    }
}
