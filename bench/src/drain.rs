//! The receiving side of a benchmark: one thread that reads and discards
//! everything arriving on a set of sockets, so senders never block on a full
//! receiver.

use std::io::{self, Read};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use mio::{Events, Interest, Poll, Token, Waker};

const WAKER: Token = Token(usize::MAX);

/// A running drain; dropping it stops the thread and closes the sockets.
pub struct Drain {
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl Drain {
    /// Upgrades `n` WebSocket clients of the hub at `addr` (off the async
    /// runtime: the upgrades block) and starts draining them.
    pub async fn upgraded(addr: std::net::SocketAddr, n: usize) -> anyhow::Result<Drain> {
        let streams = tokio::task::spawn_blocking(move || {
            (0..n)
                .map(|_| crate::ws_client::upgrade(addr))
                .collect::<anyhow::Result<Vec<_>>>()
        })
        .await??;
        Ok(Drain::start(streams)?)
    }

    /// Starts draining `streams`.
    pub fn start(streams: Vec<TcpStream>) -> io::Result<Drain> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let mut sockets = Vec::with_capacity(streams.len());
        for (i, s) in streams.into_iter().enumerate() {
            s.set_nonblocking(true)?;
            let mut s = mio::net::TcpStream::from_std(s);
            poll.registry()
                .register(&mut s, Token(i), Interest::READABLE)?;
            sockets.push(s);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("drain".into())
            .spawn(move || run(poll, sockets, &flag))?;
        Ok(Drain {
            stop,
            waker,
            thread: Some(thread),
        })
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(mut poll: Poll, mut sockets: Vec<mio::net::TcpStream>, stop: &AtomicBool) {
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::Relaxed) {
        if poll.poll(&mut events, None).is_err() {
            continue;
        }
        for event in events.iter() {
            let Some(s) = sockets.get_mut(event.token().0) else {
                continue;
            };
            loop {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => continue,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        }
    }
}
