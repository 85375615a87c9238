//! What a client's bytes go through on their way to and from its socket:
//! nothing (`ws://`), or its own TLS session (`wss://`).
//!
//! A broadcast is still framed once for everyone; a TLS client's copy is
//! then sealed (encrypted into TLS records) for it alone, just before it is
//! written. The session's handshake is done before the client reaches a
//! shard (on the server's task, with its timeout), so a shard only ever
//! seals, writes and reads application data.

use std::io::{self, Read, Write};

use mio::net::TcpStream;
use rustls::ServerConnection;

/// TLS records add at most this much to a sealed copy per 16 KiB record
/// (header, AEAD tag, content type): a capacity hint, not a limit.
const RECORD_OVERHEAD: usize = 5 + 16 + 1;
const RECORD_PLAINTEXT: usize = 16 * 1024;

/// A client's transport below the WebSocket frames.
#[derive(Debug)]
pub enum Wire {
    /// Frames go to the socket as they are.
    Plain,
    /// Frames are sealed by this client's TLS session.
    Tls(Box<ServerConnection>),
}

impl Wire {
    /// A TLS session handed over after its handshake, ready for
    /// application data: sealing never stops at rustls's buffer limit (the
    /// client's queue bound limits what is owed instead).
    pub fn tls(mut session: Box<ServerConnection>) -> Wire {
        session.set_buffer_limit(None);
        Wire::Tls(session)
    }

    /// Whether frames must be sealed before they are written.
    pub fn seals(&self) -> bool {
        matches!(self, Wire::Tls(_))
    }

    /// `plain` as the bytes to write: TLS records carrying it (and any
    /// record the session owed before it, in order). Only for [`Wire::Tls`].
    pub fn seal(&mut self, plain: &[u8]) -> io::Result<Vec<u8>> {
        let Wire::Tls(session) = self else {
            return Ok(plain.to_vec());
        };
        session.writer().write_all(plain)?;
        let records = plain.len().div_ceil(RECORD_PLAINTEXT).max(1);
        let mut sealed = Vec::with_capacity(plain.len() + records * RECORD_OVERHEAD);
        while session.wants_write() {
            session.write_tls(&mut sealed)?;
        }
        Ok(sealed)
    }

    /// Records the session owes with no frame to carry them (a key update's
    /// answer, tickets after the handshake), if any.
    pub fn owed(&mut self) -> io::Result<Option<Vec<u8>>> {
        match self {
            Wire::Tls(session) if session.wants_write() => self.seal(&[]).map(Some),
            _ => Ok(None),
        }
    }

    /// Reads what the client sent, as WebSocket bytes: like `Read::read`
    /// on the socket (`Ok(0)` at its end, `WouldBlock` once it has nothing
    /// more), through the TLS session when there is one. A record that
    /// fails to open is an `InvalidData` error: the client is closed.
    pub fn read(&mut self, stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<usize> {
        let Wire::Tls(session) = self else {
            return stream.read(buf);
        };
        loop {
            match session.reader().read(buf) {
                // Ok(0): the client sent close_notify.
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if session.read_tls(stream)? == 0 {
                return Ok(0);
            }
            session
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}")))?;
        }
    }

    /// Application data the session decrypted before the hand-over and
    /// nobody read yet (a client may send its first frames with its
    /// upgrade request).
    pub fn take_buffered(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Wire::Tls(session) = self {
            let _ = session.process_new_packets();
            let _ = session.reader().read_to_end(&mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_passes_bytes_as_they_are() {
        let mut wire = Wire::Plain;
        assert!(!wire.seals());
        assert_eq!(wire.seal(b"abc").unwrap(), b"abc");
        assert!(wire.owed().unwrap().is_none());
        assert!(wire.take_buffered().is_empty());
    }
}
