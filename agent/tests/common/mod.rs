//! What several of the agent's integration tests share.

use std::time::Duration;

use agent::RunningAgent;

/// Waits until `agent` serves exactly `n` WebSocket clients, failing after
/// 30 s (a safety net: the count is what is waited for).
pub async fn wait_for_clients(agent: &RunningAgent, n: usize) {
    if let Err(seen) = agent.wait_for_clients(n, Duration::from_secs(30)).await {
        panic!("{seen} clients, want {n}");
    }
}
