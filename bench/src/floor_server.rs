//! The CPU floor as a server, so bench/run can measure it with the same probe
//! swarm, topology and cores as the servers it is compared with: it accepts
//! WebSocket upgrades on `/ws`, and `GET /start_test` writes one pre-encoded
//! frame to every connection from one thread, nothing else per client.
//!
//! It is a measuring instrument, not a server: blocking, one request at a time,
//! no reads after the upgrade (probes send nothing that needs an answer during
//! a run), no error recovery beyond dropping a connection that fails.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use anyhow::Context;
use wire::clock::mono_ns;

/// The text bench/run's go and fastapi peers broadcast: 450 bytes of lorem ipsum.
fn peer_text() -> String {
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit. "
        .repeat(8)
        .chars()
        .take(450)
        .collect()
}

/// Serves until killed.
pub fn serve(listen: SocketAddr, staged: bool) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    let text = peer_text();
    let mut frame = vec![0x81, 126];
    frame.extend((text.len() as u16).to_be_bytes());
    frame.extend(text.as_bytes());
    let mut clients: Vec<TcpStream> = Vec::new();
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        // A request that misbehaves only costs its own connection.
        if let Err(e) = handle(&mut stream, &mut clients, &frame, staged) {
            eprintln!("floor-server: {e}");
        }
    }
    Ok(())
}

/// One HTTP request: an upgrade keeps the socket, anything else is answered
/// and closed.
fn handle(
    stream: &mut TcpStream,
    clients: &mut Vec<TcpStream>,
    frame: &[u8],
    staged: bool,
) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut key = None;
    for _ in 0..100 {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.trim().eq_ignore_ascii_case("sec-websocket-key")
        {
            key = Some(value.trim().to_owned());
        }
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("");
    if path.starts_with("/ws") {
        let Some(key) = key else {
            return respond(stream, "400 Bad Request", "{}");
        };
        let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
        write!(
            stream,
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {accept}\r\n\r\n"
        )?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(None)?;
        clients.push(stream.try_clone()?);
        return Ok(());
    }
    if path.starts_with("/start_test") {
        let span = if staged {
            clients.retain(|c| crate::floor::stage(c, frame).is_ok());
            let start = mono_ns();
            clients.retain(|c| c.set_nodelay(true).is_ok());
            mono_ns() - start
        } else {
            let start = mono_ns();
            // The floor: the same buffer to every socket, one write each.
            clients.retain_mut(|c| c.write_all(frame).is_ok());
            mono_ns() - start
        };
        let body = format!("{{\"clients\":{},\"span_ns\":{span}}}", clients.len());
        return respond(stream, "200 OK", &body);
    }
    if path.starts_with("/healthz") {
        return respond(
            stream,
            "200 OK",
            &format!("{{\"clients\":{}}}", clients.len()),
        );
    }
    respond(stream, "404 Not Found", "{}")
}

fn respond(stream: &mut TcpStream, status: &str, body: &str) -> io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
}
