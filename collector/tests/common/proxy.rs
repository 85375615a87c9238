//! A TCP proxy between a probe's uploader and the agent, for the upload
//! tests: it can refuse connections (the agent out of reach) and cut every
//! connection after some bytes from the probe (a flaky link).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A running proxy.
pub struct Proxy {
    /// Where the probe connects: `127.0.0.1:PORT`.
    pub addr: String,
    open: Arc<AtomicBool>,
    held: Arc<AtomicBool>,
    /// Connections cut after `cut_after` bytes.
    pub cuts: Arc<AtomicUsize>,
}

impl Proxy {
    /// Forwards to `upstream`; with `cut_after`, closes both sides of a
    /// connection once that many bytes came from the client. Starts open or
    /// refusing (accepting and closing at once).
    pub fn start(upstream: &str, cut_after: Option<usize>, open: bool) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = Proxy {
            addr: listener.local_addr().unwrap().to_string(),
            open: Arc::new(AtomicBool::new(open)),
            held: Arc::default(),
            cuts: Arc::default(),
        };
        let (open, held, cuts) = (proxy.open.clone(), proxy.held.clone(), proxy.cuts.clone());
        let upstream = upstream.to_owned();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if !open.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (cuts, held) = (cuts.clone(), held.clone());
                std::thread::spawn(move || pipe(client, server, cut_after, Some(&cuts), &held));
                let never = AtomicBool::new(false);
                std::thread::spawn(move || pipe(s2, c2, None, None, &never));
            }
        });
        proxy
    }

    /// From now on, forward new connections.
    pub fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
    }

    /// From now on, hold what clients send (their connections stay up, for
    /// at most [`HOLD_AT_MOST`]): a link that stalls without breaking.
    pub fn hold(&self) {
        self.held.store(true, Ordering::SeqCst);
    }
}

/// The longest a held link holds.
pub const HOLD_AT_MOST: std::time::Duration = std::time::Duration::from_secs(30);

fn pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    cut_after: Option<usize>,
    cuts: Option<&AtomicUsize>,
    held: &AtomicBool,
) {
    let mut buf = [0u8; 1024];
    let mut sent = 0;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let holding = std::time::Instant::now();
        while held.load(Ordering::SeqCst) && holding.elapsed() < HOLD_AT_MOST {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let n = cut_after.map_or(n, |limit| n.min(limit - sent));
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        sent += n;
        if cut_after.is_some_and(|limit| sent >= limit) {
            if let Some(cuts) = cuts {
                cuts.fetch_add(1, Ordering::SeqCst);
            }
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
