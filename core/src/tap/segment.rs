//! One captured IP packet, read as a TCP segment: addresses, sequence
//! number, flags and payload. Captures come without a link-layer header
//! (the OS layer reads `AF_PACKET` as `SOCK_DGRAM`), so parsing starts at
//! the IP header, version 4 or 6.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A TCP segment as captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSegment<'a> {
    /// Sender.
    pub src: SocketAddr,
    /// Receiver.
    pub dst: SocketAddr,
    /// Sequence number of the first payload byte (of the SYN, when set).
    pub seq: u32,
    /// SYN, FIN and RST, the flags the stream follower needs.
    pub flags: TcpFlags,
    /// The payload: with GSO/TSO a super-packet of many MSS.
    pub payload: &'a [u8],
}

/// The TCP flags a follower acts on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpFlags {
    /// Opens a direction of the stream: its sequence number is the ISN.
    pub syn: bool,
    /// The sender has no more to send.
    pub fin: bool,
    /// The connection was reset.
    pub rst: bool,
}

/// Why a packet is not a TCP segment this tap can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    /// Shorter than the headers it announces.
    #[error("truncated packet")]
    Truncated,
    /// Not IPv4 or IPv6.
    #[error("not an IP packet")]
    NotIp,
    /// IP, but not TCP (or TCP behind IPv6 extension headers).
    #[error("not TCP")]
    NotTcp,
    /// A fragment of a larger IP packet (TCP never sends those itself).
    #[error("an IP fragment")]
    Fragment,
}

const TCP_PROTOCOL: u8 = 6;

/// Reads an IP packet that carries TCP.
pub fn parse(packet: &[u8]) -> Result<TcpSegment<'_>, SegmentError> {
    match packet.first().map(|b| b >> 4) {
        Some(4) => parse_v4(packet),
        Some(6) => parse_v6(packet),
        Some(_) => Err(SegmentError::NotIp),
        None => Err(SegmentError::Truncated),
    }
}

fn parse_v4(p: &[u8]) -> Result<TcpSegment<'_>, SegmentError> {
    if p.len() < 20 {
        return Err(SegmentError::Truncated);
    }
    let header = usize::from(p[0] & 0x0f) * 4;
    // A GSO super-packet may announce 0 when it is over 64 KiB: then the
    // capture's length is the packet's.
    let total = match usize::from(u16::from_be_bytes([p[2], p[3]])) {
        0 => p.len(),
        n => n.min(p.len()),
    };
    let fragment = u16::from_be_bytes([p[6], p[7]]);
    if fragment & 0x3fff != 0 {
        return Err(SegmentError::Fragment);
    }
    if p[9] != TCP_PROTOCOL {
        return Err(SegmentError::NotTcp);
    }
    if header < 20 || total < header {
        return Err(SegmentError::Truncated);
    }
    let src = IpAddr::V4(Ipv4Addr::new(p[12], p[13], p[14], p[15]));
    let dst = IpAddr::V4(Ipv4Addr::new(p[16], p[17], p[18], p[19]));
    parse_tcp(&p[header..total], src, dst)
}

fn parse_v6(p: &[u8]) -> Result<TcpSegment<'_>, SegmentError> {
    if p.len() < 40 {
        return Err(SegmentError::Truncated);
    }
    if p[6] != TCP_PROTOCOL {
        return Err(SegmentError::NotTcp);
    }
    let total = match usize::from(u16::from_be_bytes([p[4], p[5]])) {
        0 => p.len(),
        n => (40 + n).min(p.len()),
    };
    let addr = |at: usize| {
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&p[at..at + 16]);
        IpAddr::V6(Ipv6Addr::from(octets))
    };
    parse_tcp(&p[40..total], addr(8), addr(24))
}

fn parse_tcp(t: &[u8], src: IpAddr, dst: IpAddr) -> Result<TcpSegment<'_>, SegmentError> {
    if t.len() < 20 {
        return Err(SegmentError::Truncated);
    }
    let header = usize::from(t[12] >> 4) * 4;
    if header < 20 || t.len() < header {
        return Err(SegmentError::Truncated);
    }
    let flags = t[13];
    Ok(TcpSegment {
        src: SocketAddr::new(src, u16::from_be_bytes([t[0], t[1]])),
        dst: SocketAddr::new(dst, u16::from_be_bytes([t[2], t[3]])),
        seq: u32::from_be_bytes([t[4], t[5], t[6], t[7]]),
        flags: TcpFlags {
            fin: flags & 0x01 != 0,
            syn: flags & 0x02 != 0,
            rst: flags & 0x04 != 0,
        },
        payload: &t[header..],
    })
}

/// Builds IPv4 TCP packets, for tests of everything that reads them.
#[cfg(test)]
pub(crate) mod build {
    use super::*;

    /// An IPv4 packet from `src` to `dst` with this sequence number, flags
    /// and payload (no options, checksums left zero: the tap does not check
    /// them, the kernel already has).
    pub(crate) fn packet(
        src: SocketAddr,
        dst: SocketAddr,
        seq: u32,
        flags: TcpFlags,
        payload: &[u8],
    ) -> Vec<u8> {
        let (IpAddr::V4(s), IpAddr::V4(d)) = (src.ip(), dst.ip()) else {
            panic!("IPv4 only");
        };
        let total = 20 + 20 + payload.len();
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        // Over 64 KiB (BIG TCP super-packets), IPv4 says 0.
        let announced = u16::try_from(total).unwrap_or(0);
        p[2..4].copy_from_slice(&announced.to_be_bytes());
        p[8] = 64;
        p[9] = TCP_PROTOCOL;
        p[12..16].copy_from_slice(&s.octets());
        p[16..20].copy_from_slice(&d.octets());
        p[20..22].copy_from_slice(&src.port().to_be_bytes());
        p[22..24].copy_from_slice(&dst.port().to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[32] = 5 << 4;
        p[33] = u8::from(flags.fin) | u8::from(flags.syn) << 1 | u8::from(flags.rst) << 2 | 0x10;
        p.extend_from_slice(payload);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::build::packet;
    use super::*;

    #[test]
    fn ipv4_tcp_segments_are_read_and_the_rest_refused() {
        let (s, d): (SocketAddr, SocketAddr) = (
            "10.0.0.1:8000".parse().unwrap(),
            "10.0.0.2:5555".parse().unwrap(),
        );
        let syn = TcpFlags {
            syn: true,
            ..TcpFlags::default()
        };
        let p = packet(s, d, 7, syn, b"hello");
        let seg = parse(&p).unwrap();
        assert_eq!((seg.src, seg.dst, seg.seq, seg.flags), (s, d, 7, syn));
        assert_eq!(seg.payload, b"hello");
        // Capture padding past the IP length is not payload.
        let mut padded = p.clone();
        padded.extend_from_slice(&[0; 6]);
        assert_eq!(parse(&padded).unwrap().payload, b"hello");

        let mut udp = p.clone();
        udp[9] = 17;
        assert_eq!(parse(&udp), Err(SegmentError::NotTcp));
        let mut fragment = p.clone();
        fragment[7] = 1;
        assert_eq!(parse(&fragment), Err(SegmentError::Fragment));
        assert_eq!(parse(&p[..30]), Err(SegmentError::Truncated));
        assert_eq!(parse(&[0x20; 40]), Err(SegmentError::NotIp));
        assert_eq!(parse(&[]), Err(SegmentError::Truncated));
    }

    #[test]
    fn ipv6_tcp_segments_are_read() {
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&(20u16 + 2).to_be_bytes());
        p[6] = TCP_PROTOCOL;
        p[23] = 1; // ::1
        p[39] = 1;
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&8000u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&40000u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&99u32.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = 0x11; // FIN, ACK
        p.extend(tcp);
        p.extend_from_slice(b"ok");
        let seg = parse(&p).unwrap();
        assert_eq!(seg.src, "[::1]:8000".parse().unwrap());
        assert_eq!(seg.dst.port(), 40000);
        assert!(seg.flags.fin && !seg.flags.syn);
        assert_eq!(seg.payload, b"ok");
    }
}
