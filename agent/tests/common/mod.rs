//! What several of the agent's integration tests share.

use std::time::{Duration, Instant};

use agent::RunningAgent;

/// Waits until `agent` serves exactly `n` WebSocket clients, failing after
/// 30 s (a safety net: the count is what is waited for).
pub async fn wait_for_clients(agent: &RunningAgent, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while agent.clients() != n {
        assert!(
            Instant::now() < deadline,
            "{} clients, want {n}",
            agent.clients()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
