//! What a server sent right behind its `101` response. tungstenite reads the
//! response in chunks, so the first frames can arrive in the same read and
//! land in its buffer; the probe reads frames itself ([`crate::wire`]), so
//! [`Recording`] keeps a copy of what the handshake read, up to the end of
//! the response's head, and hands over what follows it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Longest response head copied; tungstenite refuses longer ones anyway.
const MAX_HEAD: usize = 64 * 1024;

/// A stream whose reads are copied until an HTTP response head has ended.
#[derive(Debug)]
pub(crate) struct Recording<S> {
    inner: S,
    seen: Vec<u8>,
    /// Where the head ends in `seen`, once it has.
    head_end: Option<usize>,
}

impl<S> Recording<S> {
    /// Starts copying `inner`'s reads.
    pub(crate) fn new(inner: S) -> Recording<S> {
        Recording {
            inner,
            seen: Vec::new(),
            head_end: None,
        }
    }

    /// The stream, and the bytes read after the response head.
    pub(crate) fn into_parts(mut self) -> (S, Vec<u8>) {
        let after = match self.head_end {
            Some(end) => self.seen.split_off(end),
            None => Vec::new(),
        };
        (self.inner, after)
    }

    fn copy(&mut self, bytes: &[u8]) {
        if self.head_end.is_some() || self.seen.len() >= MAX_HEAD {
            return;
        }
        let from = self.seen.len().saturating_sub(3);
        self.seen.extend_from_slice(bytes);
        self.head_end = self.seen[from..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|i| from + i + 4);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Recording<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        this.copy(&buf.filled()[before..]);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Recording<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn bytes_behind_the_head_are_handed_over_however_the_reads_fall() {
        let head = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n";
        let mut wire = head.to_vec();
        wire.extend_from_slice(b"\x81\x02hi");
        // Reads of 1 byte, of 7, and all at once: the split never matters.
        for chunk in [1usize, 7, 4096] {
            let mut r = Recording::new(&wire[..]);
            let mut got = Vec::new();
            let mut buf = vec![0u8; chunk];
            loop {
                let n = r.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                if r.head_end.is_some() {
                    break;
                }
            }
            let (_, after) = r.into_parts();
            assert_eq!(after, &got[head.len()..], "reads of {chunk}");
        }
    }
}
