//! A small broadcast WebSocket server on 127.0.0.1 for the probe's tests, and
//! helpers to read what a probe wrote.
#![allow(dead_code)] // each test binary uses its own subset

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use skewscope_core::log::{AnyLog, Decoded};
use skewscope_core::record::{ProbeConnectionClosed, ProbeConnectionOpened, ProbeRecord, Receipt};
use skewscope_os::log_files::read_file;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// Upper bound for any single wait in a test: a bug fails the test, never hangs it.
pub const LIMIT: Duration = Duration::from_secs(10);

/// A loopback address nobody listens on: a port the kernel gave and took
/// back (the listener is dropped at once).
pub fn nobody_listens_on() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Runs `fut`, failing the test if it takes longer than [`LIMIT`].
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(LIMIT, fut).await {
        Ok(value) => value,
        Err(_) => panic!("{what} did not happen within {LIMIT:?}"),
    }
}

#[derive(Clone, Debug)]
enum Command {
    Send(Message),
    /// Drop every client socket without a close frame.
    Vanish,
    /// Send every client a close frame (code 1001) with this reason.
    Close(&'static str),
}

/// What the accept loop, the client tasks and the test share.
struct State {
    /// `X-Skewscope-Conn` base: the n-th client gets `base + n`.
    conn_header: Option<u64>,
    commands: broadcast::Sender<Command>,
    /// TCP connections accepted.
    accepted: watch::Sender<usize>,
    /// Clients whose upgrade completed.
    clients: watch::Sender<usize>,
    /// Data frames written, over all clients.
    sent: watch::Sender<u64>,
    /// Whether upgrades may proceed (else accepted sockets wait).
    upgrades: watch::Sender<bool>,
    /// Request targets (path and query) of completed upgrades.
    requests: Mutex<Vec<String>>,
}

/// A broadcast server: every connected client gets every message the test
/// broadcasts. Stops (dropping all clients) when dropped.
pub struct BroadcastServer {
    addr: SocketAddr,
    state: Arc<State>,
    accept_loop: tokio::task::JoinHandle<()>,
}

impl Drop for BroadcastServer {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

impl BroadcastServer {
    /// Listens on 127.0.0.1:0. With `conn_header = Some(base)`, the n-th client
    /// (from 0) gets `X-Skewscope-Conn: base + n` in its upgrade response, as a
    /// skewscope agent would send.
    pub async fn start(conn_header: Option<u64>) -> BroadcastServer {
        BroadcastServer::listen(conn_header, true).await
    }

    /// Like [`BroadcastServer::start`], but accepted sockets wait for
    /// [`BroadcastServer::allow_upgrades`] before their upgrade is answered.
    pub async fn start_holding_upgrades() -> BroadcastServer {
        BroadcastServer::listen(None, false).await
    }

    async fn listen(conn_header: Option<u64>, upgrades: bool) -> BroadcastServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            conn_header,
            commands: broadcast::channel(1024).0,
            accepted: watch::channel(0).0,
            clients: watch::channel(0).0,
            sent: watch::channel(0).0,
            upgrades: watch::channel(upgrades).0,
            requests: Mutex::new(Vec::new()),
        });
        let accept_loop = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        BroadcastServer {
            addr,
            state,
            accept_loop,
        }
    }

    /// The URL a probe should dial.
    pub fn url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }

    /// TCP connections accepted so far.
    pub fn accepted(&self) -> usize {
        *self.state.accepted.borrow()
    }

    /// Waits until `n` TCP connections have been accepted.
    pub async fn wait_for_accepted(&self, n: usize) {
        let mut accepted = self.state.accepted.subscribe();
        within("connections arriving", accepted.wait_for(|&a| a >= n))
            .await
            .unwrap();
    }

    /// Lets held upgrades proceed.
    pub fn allow_upgrades(&self) {
        self.state.upgrades.send_replace(true);
    }

    /// Waits until `n` clients have completed their upgrade.
    pub async fn wait_for_clients(&self, n: usize) {
        let mut clients = self.state.clients.subscribe();
        within("clients connecting", clients.wait_for(|&c| c >= n))
            .await
            .unwrap();
    }

    /// Sends `message` to every connected client.
    pub fn broadcast(&self, message: Message) {
        self.state.commands.send(Command::Send(message)).unwrap();
    }

    /// Waits until `frames` data frames in total have been written to clients.
    pub async fn wait_sent(&self, frames: u64) {
        let mut sent = self.state.sent.subscribe();
        within("the server sending", sent.wait_for(|&s| s >= frames))
            .await
            .unwrap();
    }

    /// Drops every client's socket without a close handshake.
    pub fn vanish(&self) {
        self.state.commands.send(Command::Vanish).unwrap();
    }

    /// Closes every client cleanly: a close frame with code 1001 and `reason`.
    pub fn close_all(&self, reason: &'static str) {
        self.state.commands.send(Command::Close(reason)).unwrap();
    }

    /// The request targets (path and query) clients upgraded with.
    pub fn request_targets(&self) -> Vec<String> {
        self.state.requests.lock().unwrap().clone()
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    // Client tasks live in this set, so aborting the loop drops every client.
    let mut client_tasks = JoinSet::new();
    for index in 0u64.. {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        // Subscribe before the upgrade completes: a probe that sees its upgrade
        // done can rely on receiving the next broadcast.
        let commands = state.commands.subscribe();
        state.accepted.send_modify(|a| *a += 1);
        client_tasks.spawn(serve_client(stream, index, commands, Arc::clone(&state)));
    }
}

async fn serve_client(
    stream: TcpStream,
    index: u64,
    mut commands: broadcast::Receiver<Command>,
    state: Arc<State>,
) {
    let mut upgrades = state.upgrades.subscribe();
    if upgrades.wait_for(|&allowed| allowed).await.is_err() {
        return;
    }
    #[allow(clippy::result_large_err)] // the signature tungstenite's `Callback` requires
    let callback = |request: &Request, mut response: Response| -> Result<Response, ErrorResponse> {
        state
            .requests
            .lock()
            .unwrap()
            .push(request.uri().to_string());
        if let Some(base) = state.conn_header {
            let value = (base + index).to_string().parse().unwrap();
            response.headers_mut().insert("X-Skewscope-Conn", value);
        }
        Ok(response)
    };
    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
        return;
    };
    state.clients.send_modify(|c| *c += 1);
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Ok(Command::Send(message)) => {
                    if ws.send(message).await.is_err() {
                        return;
                    }
                    state.sent.send_modify(|s| *s += 1);
                }
                Ok(Command::Close(reason)) => {
                    let frame = CloseFrame {
                        code: CloseCode::Away,
                        reason: reason.into(),
                    };
                    let _ = ws.close(Some(frame)).await;
                }
                Ok(Command::Vanish) | Err(_) => return,
            },
            // Reading answers the probe's close frame (tungstenite replies itself).
            incoming = ws.next() => if !matches!(incoming, Some(Ok(_))) {
                return;
            },
        }
    }
}

/// Waits (polling, at most [`LIMIT`]) until the log a probe process is still
/// writing satisfies `ready`: the only way to know what another process has seen.
pub async fn wait_for_log(path: &Path, what: &str, ready: impl Fn(&[ProbeRecord]) -> bool) {
    let poll = async {
        loop {
            // Before the probe created the file, or mid-write: not ready yet.
            if let Ok(AnyLog::Probe(decoded)) = read_file(path)
                && ready(&decoded.records)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    within(what, poll).await;
}

/// Reads a probe log, asserting it is one and was written without damage.
pub fn read_probe_log(path: &Path) -> Vec<ProbeRecord> {
    let decoded: Decoded<ProbeRecord> = match read_file(path).unwrap() {
        AnyLog::Probe(decoded) => decoded,
        AnyLog::Agent(_) => panic!("{} is an agent log", path.display()),
    };
    assert_eq!(decoded.skipped_bytes, 0, "damaged log");
    assert!(!decoded.torn_tail, "torn log");
    decoded.records
}

/// The receipts in a log, in file order.
pub fn receipts(records: &[ProbeRecord]) -> Vec<Receipt> {
    records
        .iter()
        .filter_map(|r| match r {
            ProbeRecord::Receipt(receipt) => Some(*receipt),
            _ => None,
        })
        .collect()
}

/// The connection-opened records in a log.
pub fn opened(records: &[ProbeRecord]) -> Vec<ProbeConnectionOpened> {
    records
        .iter()
        .filter_map(|r| match r {
            ProbeRecord::ConnectionOpened(o) => Some(o.clone()),
            _ => None,
        })
        .collect()
}

/// The connection-closed records in a log.
pub fn closed(records: &[ProbeRecord]) -> Vec<ProbeConnectionClosed> {
    records
        .iter()
        .filter_map(|r| match r {
            ProbeRecord::ConnectionClosed(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

/// Asserts the log starts with `Started` and ends with `Stopped`.
pub fn assert_framed(records: &[ProbeRecord]) {
    assert!(
        matches!(records.first(), Some(ProbeRecord::Started(_))),
        "first record is {:?}",
        records.first()
    );
    assert!(
        matches!(records.last(), Some(ProbeRecord::Stopped(_))),
        "last record is {:?}",
        records.last()
    );
}
