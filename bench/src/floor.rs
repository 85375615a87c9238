//! The CPU floor: one thread writing the same pre-encoded frame to N connected
//! sockets in a loop. No fan-out engine can do less work per client on one core.

use std::io::{self, Write};
use std::net::{TcpListener, TcpStream};

use wire::clock::mono_ns;

/// N connected loopback socket pairs: the sending ends, and the receiving ends
/// for a drain.
pub fn socket_pairs(n: usize) -> io::Result<(Vec<TcpStream>, Vec<TcpStream>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let mut senders = Vec::with_capacity(n);
    let mut receivers = Vec::with_capacity(n);
    for _ in 0..n {
        let client = TcpStream::connect(addr)?;
        let (server, _) = listener.accept()?;
        server.set_nodelay(true)?;
        senders.push(server);
        receivers.push(client);
    }
    Ok((senders, receivers))
}

/// Writes `frame` to every socket once; returns the span from the first write's
/// start to the last write's return, in nanoseconds.
pub fn write_all_once(senders: &mut [TcpStream], frame: &[u8]) -> io::Result<u64> {
    let start = mono_ns();
    for s in senders.iter_mut() {
        s.write_all(frame)?;
    }
    Ok(mono_ns() - start)
}
