//! `GET /clock`: the time exchange over WebSocket, so a browser or any app
//! can learn its offset to this host's wall clock, the clock a FastAPI or
//! Go server on the same box reads when it computes a time to act.
//!
//! Text frames in JSON ([`skewscope_core::time_exchange::json`]). `t2` is
//! the kernel's receive stamp of the request's last segment, moved to the
//! wall clock (`SO_TIMESTAMPING`; the moment the frame was read where the
//! kernel gives none), and `t3` is read just before the reply is written:
//! the time the request waits for this task counts in neither, so it adds
//! nothing to the client's round trip the offset is bounded by.
//!
//! Each connection may ask [`CLOCK_BURST`] at once and
//! [`CLOCK_PER_SECOND`] after; past that it is closed with 1008. A frame
//! over 1 KiB is closed with 1009, a binary one with 1003, and a request
//! that is not one gets an `{"error": …}` reply (and counts toward the rate).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use skewscope_core::control_rate::ControlRate;
use skewscope_core::time_exchange::TimeKey;
use skewscope_core::time_exchange::json::{encode_error, encode_reply, parse_request};
use skewscope_os::rx_stamp::{LastRx, RxStamped};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use crate::counters::ClockServiceCounters;
use crate::server::conn::Conn;

/// Requests a connection may send at once: the clock module's schedule
/// starts with a burst of up to 24 pairs (`MAX_BURST_ROUNDS` in
/// skewscope-core's clock schedule), and bursts again when its bound degrades.
pub const CLOCK_BURST: u32 = 64;
/// Requests per second a connection may keep sending: the schedule's
/// fastest steady rate is a pair every 100 ms, while the drift is loosely
/// known.
pub const CLOCK_PER_SECOND: u32 = 30;
/// Largest frame or message accepted.
const MAX_FRAME: usize = 1024;
/// A connection that sends nothing this long is closed.
const IDLE: Duration = Duration::from_secs(600);

/// Serves one upgraded `/clock` connection until it closes or misbehaves.
/// `leftover` is what followed the request head; with a `key` (the agent
/// has a token) every reply carries its tag.
pub async fn serve(
    conn: Conn,
    leftover: Vec<u8>,
    counters: ClockServiceCounters,
    key: Option<TimeKey>,
) {
    match conn {
        Conn::Plain(tcp) => {
            let (stream, last_rx) = RxStamped::new(tcp);
            serve_on(stream, last_rx, leftover, counters, key).await
        }
        Conn::Tls(tls, last_rx) => {
            let conn = Conn::Tls(tls, last_rx.clone());
            serve_on(conn, last_rx, leftover, counters, key).await
        }
    }
}

async fn serve_on<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    last_rx: LastRx,
    leftover: Vec<u8>,
    counters: ClockServiceCounters,
    key: Option<TimeKey>,
) {
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME))
        .max_frame_size(Some(MAX_FRAME));
    let mut ws =
        WebSocketStream::from_partially_read(stream, leftover, Role::Server, Some(config)).await;
    counters.sessions.inc();
    let closed = session(&mut ws, &last_rx, &counters, key.as_ref()).await;
    counters.sessions.dec();
    if let Some((code, reason)) = closed {
        let _ = ws
            .close(Some(crate::server::close_frame::close_frame(code, reason)))
            .await;
        // Read on (discarding) until the client answers the close or a
        // moment has passed: closing a socket with unread bytes (a flood's
        // rest) sends a reset, which can reach the client before it reads
        // our close frame, so it would never learn why (seen in CI).
        let _ = tokio::time::timeout(LINGER, async { while let Some(Ok(_)) = ws.next().await {} })
            .await;
    }
}

/// How long a closed session is read on for the client's answer.
const LINGER: Duration = Duration::from_secs(2);

/// Answers requests; returns the close to send, if the agent ends it.
async fn session<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    last_rx: &LastRx,
    counters: &ClockServiceCounters,
    key: Option<&TimeKey>,
) -> Option<(CloseCode, &'static str)> {
    let mut rate = ControlRate::with(
        skewscope_os::clock::mono_ns(),
        CLOCK_BURST,
        CLOCK_PER_SECOND,
    );
    loop {
        let message = match tokio::time::timeout(IDLE, ws.next()).await {
            Ok(Some(message)) => message,
            Ok(None) => return None,
            Err(_) => return Some((CloseCode::Away, "idle")),
        };
        let t2_wall_ns = received_wall_ns(last_rx);
        let text = match message {
            Ok(Message::Text(text)) => text,
            Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
            Ok(Message::Close(_)) => return None,
            Ok(Message::Binary(_)) => {
                counters.refused_binary.inc();
                return Some((CloseCode::Unsupported, "clock requests are JSON text"));
            }
            Err(tokio_tungstenite::tungstenite::Error::Capacity(_)) => {
                counters.refused_too_big.inc();
                return Some((CloseCode::Size, "a clock request is under 1 KiB"));
            }
            Err(_) => return None,
        };
        if !rate.allow(skewscope_os::clock::mono_ns()) {
            counters.refused_rate.inc();
            return Some((CloseCode::Policy, "too many clock requests"));
        }
        let reply = match parse_request(&text) {
            Ok(request) => {
                counters.answered.inc();
                let t3_wall_ns = skewscope_os::clock::now().wall_ns;
                encode_reply(&text, &request, t2_wall_ns, t3_wall_ns, key)
            }
            Err(why) => {
                counters.malformed.inc();
                encode_error(why)
            }
        };
        if ws.send(Message::Text(reply.into())).await.is_err() {
            return None;
        }
    }
}

/// The wall time the request's last segment arrived: the kernel's stamp of
/// it, moved to this process's wall clock; now, where the kernel gave none.
///
/// Where the two clocks differ (a libfaketime shift), the kernel's is read
/// first and the process's after it, as the probe reads a receipt: a
/// preemption between the two readings then places `t2` late, which only
/// loosens the exchange's bound. Read the other way round it placed `t2`
/// early by the preemption, which can tighten a bound past the truth: the
/// likely cause of a page's offset whose bound missed the truth by 19 µs
/// under faketime, once in ten runs of the suite under two busy loops.
fn received_wall_ns(last_rx: &LastRx) -> u64 {
    let same = skewscope_os::clock::libc_realtime_is_kernels();
    let kernel_first = (!same).then(skewscope_os::clock::kernel_realtime_ns);
    let now = skewscope_os::clock::now();
    let kernel_now = kernel_first.unwrap_or(now.wall_ns);
    let delay = last_rx.delay_ns(kernel_now).unwrap_or(0);
    now.wall_ns.saturating_sub(delay)
}
