//! A WebSocket broadcast server that knows nothing of skewscope, for tests
//! of servers that are not the agent: every text sent on the returned
//! channel goes to every client connected at that moment.

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio::sync::broadcast;

/// Serves WebSocket clients on `listener` (any path), on the current
/// runtime; returns the sender whose texts they all get.
pub fn serve(listener: TcpListener) -> broadcast::Sender<String> {
    let (tx, _) = broadcast::channel::<String>(64);
    let sender = tx.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let mut rx = tx.subscribe();
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                loop {
                    tokio::select! {
                        m = rx.recv() => match m {
                            Ok(text) => if ws.send(text.into()).await.is_err() { return },
                            Err(_) => return,
                        },
                        incoming = ws.next() => if !matches!(incoming, Some(Ok(_))) { return },
                    }
                }
            });
        }
    });
    sender
}
