//! The tap: captured IPv4/IPv6 TCP packets of a server it follows, through
//! segment parsing, reassembly, the HTTP upgrade and the frames.

use skewscope_core::tap::Tap;

/// The port the fuzzed tap follows; the seeds' server listens on it.
pub const TAP_PORT: u16 = 8000;
/// Largest message followed: small, so the limit is reached.
const MAX_MESSAGE: usize = 4096;

/// The input is a capture: packets, each preceded by its length (u16, big
/// endian). The tap reads them in order and finishes; what it follows
/// stays consistent (never more WebSockets than connections), and it holds
/// no connection, WebSocket or inflater after it finished.
pub fn tap(data: &[u8]) {
    let mut tap = Tap::new(TAP_PORT, MAX_MESSAGE);
    let mut events = Vec::new();
    let mut at_ns = 1_000_000_000u64;
    for packet in packets(data) {
        tap.packet(at_ns, packet, &mut events);
        at_ns += 1_000;
        assert!(tap.websockets() <= tap.connections());
    }
    tap.finish(at_ns, &mut events);
    assert_eq!(tap.connections(), 0, "connections left after finish");
    assert_eq!(tap.websockets(), 0);
    assert_eq!(tap.inflater_bytes(), 0, "inflaters left after finish");
}

/// Splits a capture into its length-prefixed packets (a short last one is
/// taken as it is).
pub fn packets(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while data.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([data[0], data[1]]));
        let end = (2 + len).min(data.len());
        out.push(&data[2..end]);
        data = &data[end..];
    }
    out
}

/// Joins packets into the capture format [`tap`] reads (for seeds).
pub fn capture(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in packets {
        let len = u16::try_from(p.len()).expect("seed packets under 64 KiB");
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(p);
    }
    out
}
