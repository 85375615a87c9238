//! The CPU floor as a server, so bench/run can measure it with the same probe
//! swarm, topology and cores as the servers it is compared with: it accepts
//! WebSocket upgrades on `/ws`, and `GET /start_test` writes one pre-encoded
//! frame to every connection from one thread, nothing else per client.
//!
//! It is a measuring instrument, not a server: one thread, one request at a
//! time, no reads after the upgrade (probes send nothing that needs an answer
//! during a run). Request heads and upgrades go through the agent's own
//! `http` and `upgrade` modules.

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use agent::bench::conn::Conn;
use agent::bench::{http, upgrade};
use anyhow::Context;
use skewscope_os::clock::mono_ns;
use tokio::io::AsyncWriteExt;

use crate::floor::{stage, text_frame};

/// The text bench/run's go and fastapi peers broadcast: 450 bytes of lorem ipsum.
fn peer_text() -> String {
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit. "
        .repeat(8)
        .chars()
        .take(450)
        .collect()
}

/// Serves until killed. With `staged`, a broadcast first queues every frame
/// (MSG_MORE), then pushes each socket (TCP_NODELAY). With `threaded`, a
/// second thread that only sleeps makes it a threaded process; nothing else
/// changes.
pub fn serve(listen: SocketAddr, staged: bool, threaded: bool) -> anyhow::Result<()> {
    if threaded {
        std::thread::Builder::new().name("idle".into()).spawn(|| {
            loop {
                std::thread::park();
            }
        })?;
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(listen, staged))
}

async fn run(listen: SocketAddr, staged: bool) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let frame = text_frame(&peer_text());
    let mut clients: Vec<std::net::TcpStream> = Vec::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let mut stream = Conn::Plain(stream);
        // A request that misbehaves only costs its own connection.
        let Ok(request) = http::read_head(&mut stream, Duration::from_secs(5)).await else {
            continue;
        };
        match request.path.as_str() {
            "/ws" => match upgrade::accept(&request, clients.len() as u64, &[], false) {
                Ok(a) if stream.write_all(a.response.as_bytes()).await.is_ok() => {
                    // The floor writes with plain blocking calls.
                    let Ok(socket) = stream.into_parts().0.into_std() else {
                        continue;
                    };
                    if socket.set_nonblocking(false).is_ok() && socket.set_nodelay(true).is_ok() {
                        clients.push(socket);
                    }
                }
                Ok(_) => {}
                Err(e) => http::respond(&mut stream, 400, "", &e.to_string()).await,
            },
            "/start_test" => {
                let span = broadcast(&mut clients, &frame, staged);
                let body = format!("{{\"clients\":{},\"span_ns\":{span}}}", clients.len());
                http::respond(&mut stream, 200, "", &body).await;
            }
            "/healthz" => {
                let body = format!("{{\"clients\":{}}}", clients.len());
                http::respond(&mut stream, 200, "", &body).await;
            }
            _ => http::respond(&mut stream, 404, "", "{}").await,
        }
    }
}

/// The floor: the same buffer to every socket, one write each (or staged);
/// returns the span of the writes (or of the pushes), dropping sockets that fail.
fn broadcast(clients: &mut Vec<std::net::TcpStream>, frame: &[u8], staged: bool) -> u64 {
    if staged {
        clients.retain(|c| stage(c, frame).is_ok());
        let start = mono_ns();
        clients.retain(|c| c.set_nodelay(true).is_ok());
        return mono_ns() - start;
    }
    let start = mono_ns();
    clients.retain_mut(|c| c.write_all(frame).is_ok());
    mono_ns() - start
}
