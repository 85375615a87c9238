//! A raw WebSocket client for the benchmarks: it upgrades, then leaves the
//! socket to a drain (or to a hostile writer), with no library in the way.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use anyhow::ensure;

/// A raw WebSocket client named as a probe: upgrade, then leave the socket
/// to the drain.
pub(crate) fn upgrade(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    upgrade_as(addr, true)
}

/// A raw WebSocket client, named as a probe (`?probe=bench`) or not.
pub(crate) fn upgrade_as(addr: SocketAddr, probe: bool) -> anyhow::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    upgrade_over(&mut s, if probe { "/ws?probe=bench" } else { "/ws" })?;
    Ok(s)
}

/// Sends the upgrade request for `path` over `stream` (a socket, or a TLS
/// stream over one) and reads the answer's head, which must be a 101.
pub(crate) fn upgrade_over(stream: &mut (impl Read + Write), path: &str) -> anyhow::Result<()> {
    stream.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        .as_bytes(),
    )?;
    stream.flush()?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte)?;
        head.push(byte[0]);
        ensure!(head.len() < 4096, "upgrade response too long");
    }
    ensure!(head.starts_with(b"HTTP/1.1 101"), "upgrade refused");
    Ok(())
}
