//! `skewscope-agent`: run the hub until SIGINT or SIGTERM, then flush everything.

use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};

use agent::{AgentConfig, RunningAgent};

fn main() -> anyhow::Result<()> {
    let config = AgentConfig::parse();
    // HTTP and upgrades need little; the shards have their own threads.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let agent = RunningAgent::start(config).await?;
        println!("listening on {}", agent.addr);
        println!("recording to {}", agent.log_path.display());
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        eprintln!("skewscope-agent: stopping; flushing records");
        agent.shutdown().await
    })
}
