//! What a connection reads its payloads from: a WebSocket ([`Wire`]),
//! bare or with a protocol riding on it (Socket.IO, STOMP, MQTT: a core
//! [`Layer`]), or an HTTP event stream ([`EventSource`]). Every payload
//! carries the stamp of the read that completed it, taken before any
//! protocol looks at the bytes, so the receive loop, the matching, acting
//! and the upload are the same whatever the protocol.

use std::collections::VecDeque;
use std::time::Duration;

use skewscope_core::Stamp;
use skewscope_core::mqtt::{Mqtt, MqttOptions};
use skewscope_core::protocol_layer::{Frame, Layer, LayerError};
use skewscope_core::socketio::{SocketIo, SocketIoOptions};
use skewscope_core::stomp::{Stomp, StompOptions};

use super::event_source::EventSource;
use crate::config::Protocol;
use crate::error::ConnectError;
use crate::wire::{Incoming, Stream, Wire, WireError};

/// How long a closing connection keeps reading for the server's close reply
/// (and how long a close may take to write). Messages the server sent before
/// it saw our close arrive in this window and are recorded; a server that
/// never replies costs at most this long.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// When a read completed: the process's clocks, and the kernel's realtime
/// clock read first (see [`arrival`]).
pub(crate) type Arrival = (Stamp, u64);

/// When a frame was complete: the kernel's realtime clock read first, then
/// the process's clocks. The interval since the kernel's stamp is measured to
/// the first reading, so it never includes the time the second took (or a
/// preemption between them), and the kernel arrival derived from `at` is
/// never placed early: late at worst.
///
/// Where the process's clock is the kernel's (no libfaketime), one reading
/// serves both: two vDSO reads, no syscall.
pub(crate) fn arrival() -> Arrival {
    if skewscope_os::clock::libc_realtime_is_kernels() {
        let now = skewscope_os::clock::now_raw();
        return (now, now.wall_ns);
    }
    let kernel_now = skewscope_os::clock::kernel_realtime_ns();
    (skewscope_os::clock::now_raw(), kernel_now)
}

/// What the server sent, as the receive loop handles it.
#[derive(Debug)]
pub(crate) enum Got {
    /// A payload, and when the read that completed it did.
    Message {
        /// The payload: the WebSocket message, or what the protocol carried.
        payload: Vec<u8>,
        /// Its arrival.
        at: Arrival,
    },
    /// A WebSocket ping or pong.
    Control,
    /// Something that carried no payload (a protocol's own message).
    Quiet,
    /// The server's WebSocket close: its code and reason.
    Close(Option<(u16, String)>),
}

enum Transport {
    Ws(Wire),
    Sse(EventSource),
}

/// One connection's source of payloads.
pub(crate) struct Link {
    transport: Transport,
    layer: Option<Box<dyn Layer>>,
    /// Payloads read but not yet handed out, with their arrival.
    pending: VecDeque<(Vec<u8>, Arrival)>,
    /// What ended the stream, handed out after the payloads before it.
    broken: Option<WireError>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("layer", &self.layer.as_ref().map(|l| l.name()))
            .finish_non_exhaustive()
    }
}

/// The layer a protocol runs over a WebSocket (`None`: bare messages, or
/// not a WebSocket at all).
pub(crate) fn layer_for(protocol: &Protocol, max_message: usize) -> Option<Box<dyn Layer>> {
    match protocol {
        Protocol::Ws | Protocol::Sse { .. } => None,
        Protocol::SocketIo { namespace, events } => {
            Some(Box::new(SocketIo::new(SocketIoOptions {
                namespace: namespace.clone(),
                events: events.clone(),
            })))
        }
        Protocol::Stomp {
            destination,
            login,
            passcode,
            headers,
            heart_beat,
        } => Some(Box::new(Stomp::new(StompOptions {
            destination: destination.clone(),
            login: login.clone(),
            passcode: passcode.clone(),
            headers: headers.clone(),
            heart_beat_ms: u32::try_from(heart_beat.as_millis()).unwrap_or(u32::MAX),
            max_frame: max_message,
        }))),
        Protocol::Mqtt {
            version,
            topics,
            qos,
            keep_alive,
            username,
            password,
        } => Some(Box::new(Mqtt::new(MqttOptions {
            version: *version,
            // Unique per connection (a broker drops the older of two with
            // one id); 23 letters and digits, what every broker accepts.
            client_id: format!("skewscope{:014x}", fastrand::u64(..) >> 8),
            username: username.clone(),
            password: password.clone(),
            topics: topics.clone(),
            qos: *qos,
            keep_alive_s: u16::try_from(keep_alive.as_secs()).unwrap_or(u16::MAX),
            max_packet: max_message,
        }))),
    }
}

impl Link {
    /// A WebSocket, with the protocol riding on it if any.
    pub(crate) fn ws(wire: Wire, layer: Option<Box<dyn Layer>>) -> Link {
        Link {
            transport: Transport::Ws(wire),
            layer,
            pending: VecDeque::new(),
            broken: None,
        }
    }

    /// An event stream.
    pub(crate) fn sse(source: EventSource) -> Link {
        Link {
            transport: Transport::Sse(source),
            layer: None,
            pending: VecDeque::new(),
            broken: None,
        }
    }

    /// The socket, for its addresses.
    pub(crate) fn get_ref(&self) -> &Stream {
        match &self.transport {
            Transport::Ws(wire) => wire.get_ref(),
            Transport::Sse(source) => source.get_ref(),
        }
    }

    /// For an event stream: the last event id and the reconnection time
    /// the server asked for.
    pub(crate) fn resume(&self) -> Option<(String, Option<u64>)> {
        match &self.transport {
            Transport::Sse(source) => Some((source.last_event_id().to_owned(), source.retry_ms())),
            Transport::Ws(_) => None,
        }
    }

    /// Whether closing is a handshake whose answer is worth waiting for.
    pub(crate) fn closes_with_handshake(&self) -> bool {
        matches!(self.transport, Transport::Ws(_))
    }

    /// Runs the protocol's opening (CONNECT, SUBSCRIBE and their answers)
    /// until broadcasts reach this connection. Payloads that come during it
    /// are kept, with their stamps, for the receive loop.
    pub(crate) async fn open(&mut self) -> Result<(), ConnectError> {
        let Some(name) = self.layer.as_ref().map(|l| l.name()) else {
            return Ok(());
        };
        let mut out = Vec::new();
        if let Some(layer) = &mut self.layer {
            layer.start(skewscope_os::clock::raw_ns(), &mut out);
        }
        self.queue(out)
            .map_err(|e| ConnectError::BadUpgrade(e.to_string()))?;
        while !self.layer.as_ref().is_some_and(|l| l.ready()) {
            let failed = if let Some(e) = self.broken.take() {
                e
            } else {
                match self.step().await {
                    Some(Ok(Got::Close(frame))) => {
                        let said = match frame {
                            Some((code, reason)) if reason.is_empty() => format!(" (code {code})"),
                            Some((code, reason)) => format!(" (code {code}: {reason})"),
                            None => String::new(),
                        };
                        return Err(ConnectError::Refused(format!(
                            "the server closed the WebSocket during the {name} handshake{said}"
                        )));
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => e,
                    None => {
                        return Err(ConnectError::Refused(format!(
                            "the server dropped the connection during the {name} handshake"
                        )));
                    }
                }
            };
            if let Some((code, why)) = failed.close_code() {
                let _ = tokio::time::timeout(CLOSE_GRACE, self.send_close(code, why)).await;
            }
            return Err(match failed {
                WireError::Layer(LayerError::Refused(why) | LayerError::Gone(why)) => {
                    ConnectError::Refused(why)
                }
                other => ConnectError::BadUpgrade(format!("during the {name} handshake: {other}")),
            });
        }
        Ok(())
    }

    /// The next thing the server sent; `None` once the stream ended.
    pub(crate) async fn next(&mut self) -> Option<Result<Got, WireError>> {
        loop {
            if let Some((payload, at)) = self.pending.pop_front() {
                return Some(Ok(Got::Message { payload, at }));
            }
            if let Some(e) = self.broken.take() {
                return Some(Err(e));
            }
            match self.step().await {
                Some(Ok(Got::Quiet)) => continue,
                other => return other,
            }
        }
    }

    /// One read (or a protocol's deadline): payloads it completed go to
    /// `pending`, an error after them to `broken`.
    async fn step(&mut self) -> Option<Result<Got, WireError>> {
        let Link {
            transport,
            layer,
            pending,
            broken,
        } = self;
        match transport {
            Transport::Sse(source) => {
                let mut got = Vec::new();
                let read = source.read(&mut got).await;
                let at = arrival();
                pending.extend(got.into_iter().map(|p| (p, at)));
                match read? {
                    Ok(()) => Some(Ok(Got::Quiet)),
                    Err(e) if pending.is_empty() => Some(Err(e)),
                    Err(e) => {
                        *broken = Some(e);
                        Some(Ok(Got::Quiet))
                    }
                }
            }
            Transport::Ws(wire) => {
                let deadline = layer.as_ref().and_then(|l| l.deadline());
                let next = match deadline {
                    None => wire.next().await,
                    Some(deadline) => {
                        let wait = deadline.saturating_sub(skewscope_os::clock::raw_ns());
                        tokio::select! {
                            biased;
                            next = wire.next() => next,
                            () = tokio::time::sleep(Duration::from_nanos(wait)) => {
                                let mut out = Vec::new();
                                let due = layer.as_mut().map(|l| {
                                    l.on_deadline(skewscope_os::clock::raw_ns(), &mut out)
                                });
                                let queued = queue(wire, out);
                                return Some(match (due, queued) {
                                    (Some(Err(e)), _) => Err(e.into()),
                                    (_, Err(e)) => Err(e),
                                    _ => Ok(Got::Quiet),
                                });
                            }
                        }
                    }
                };
                // The frame is complete: stamp before anything else touches it.
                let at = arrival();
                match next? {
                    Ok(Incoming::Message { payload, text }) => {
                        let Some(layer) = layer else {
                            return Some(Ok(Got::Message { payload, at }));
                        };
                        let mut out = Vec::new();
                        let handled =
                            layer.on_message(&payload, text, at.0.mono_ns, &mut out, &mut |p| {
                                pending.push_back((p.to_vec(), at))
                            });
                        let failed = match (handled, queue(wire, out)) {
                            (Err(e), _) => Some(e.into()),
                            (_, Err(e)) => Some(e),
                            _ => None,
                        };
                        if let Some(e) = failed {
                            *broken = Some(e);
                        }
                        Some(Ok(Got::Quiet))
                    }
                    Ok(Incoming::Control) => Some(Ok(Got::Control)),
                    Ok(Incoming::Close(frame)) => Some(Ok(Got::Close(frame))),
                    Err(e) => Some(Err(e)),
                }
            }
        }
    }

    fn queue(&mut self, out: Vec<Frame>) -> Result<(), WireError> {
        match &mut self.transport {
            Transport::Ws(wire) => queue(wire, out),
            Transport::Sse(_) => Ok(()),
        }
    }

    /// Closes: the protocol's goodbye (a DISCONNECT) and a WebSocket close
    /// frame with `code` and `why`; an event stream is just ended.
    pub(crate) async fn send_close(&mut self, code: u16, why: &str) -> std::io::Result<()> {
        match &mut self.transport {
            Transport::Ws(wire) => {
                if let Some(layer) = &mut self.layer {
                    let mut out = Vec::new();
                    layer.goodbye(&mut out);
                    let _ = queue(wire, out);
                }
                wire.send_close(code, why).await
            }
            Transport::Sse(source) => {
                source.close().await;
                Ok(())
            }
        }
    }
}

/// Queues a layer's messages on the WebSocket.
fn queue(wire: &mut Wire, out: Vec<Frame>) -> Result<(), WireError> {
    for frame in out {
        match frame {
            Frame::Text(t) => wire.send_message(true, &t)?,
            Frame::Binary(b) => wire.send_message(false, &b)?,
        }
    }
    Ok(())
}
