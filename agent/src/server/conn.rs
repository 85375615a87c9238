//! One accepted connection as the HTTP handlers see it: a TCP stream, or
//! the same stream under the agent's TLS. Every handler reads and writes a
//! `Conn`, so each endpoint is served the same way over both.
//!
//! Under TLS the socket is read through [`RxStamped`] from the start (the
//! TLS layer cannot be moved onto another reader after its handshake), so a
//! `/clock` request over TLS still gets the kernel's receive stamp of the
//! segment that carried it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use skewscope_os::rx_stamp::{LastRx, RxStamped};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// An accepted connection, plain or TLS (handshake done).
#[derive(Debug)]
pub enum Conn {
    /// `http://`, `ws://`.
    Plain(TcpStream),
    /// `https://`, `wss://`, with the stamp of the latest segment read.
    Tls(Box<TlsStream<RxStamped>>, LastRx),
}

impl Conn {
    /// The TCP stream below, for its socket options.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s, _) => s.get_ref().0.get_ref(),
        }
    }

    /// The TCP stream and, for TLS, its session: what a shard takes over.
    pub fn into_parts(self) -> (TcpStream, Option<Box<rustls::ServerConnection>>) {
        match self {
            Conn::Plain(s) => (s, None),
            Conn::Tls(s, _) => {
                let (stamped, session) = s.into_inner();
                (stamped.into_inner(), Some(Box::new(session)))
            }
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s, _) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s, _) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s, _) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s, _) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
