//! The capture on a real loopback, in a network namespace of the test's own
//! (a user namespace gives it CAP_NET_RAW there, with no privilege outside).

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use skewscope_core::tap::segment::parse;

use super::*;
use crate::test_namespace::in_own_namespace;

#[test]
fn a_ring_nobody_reads_drops_and_says_so() {
    if !in_own_namespace("packet_capture::tests::a_ring_nobody_reads_drops_and_says_so") {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // The smallest ring (two 1 MiB blocks), never read while 8 MiB pass.
    let mut capture = PacketCapture::open(port, Some("lo"), 0).unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    let reader = std::thread::spawn(move || {
        let mut sink = vec![0u8; 1 << 16];
        let mut got = 0usize;
        while got < 8 << 20 {
            got += std::io::Read::read(&mut client, &mut sink).unwrap();
        }
    });
    let chunk = vec![7u8; 16 * 1024];
    for _ in 0..(8 << 20) / chunk.len() {
        server.write_all(&chunk).unwrap();
    }
    reader.join().unwrap();
    // The kernel counts a drop as the packet finds the ring full.
    let stats = capture.stats().unwrap();
    assert!(
        stats.drops > 0,
        "a full ring drops, and the kernel counts it: {stats:?}"
    );
    assert!(stats.packets > stats.drops, "{stats:?}");
    // What it kept still reads, and reading frees the ring again.
    let mut read = 0;
    while capture
        .next_block(Duration::from_millis(50), |_, _| {})
        .unwrap()
        .is_some()
    {
        read += 1;
    }
    assert!(read >= 1);
}

#[test]
fn captures_a_ports_outgoing_segments_in_its_own_namespace() {
    if !in_own_namespace(
        "packet_capture::tests::captures_a_ports_outgoing_segments_in_its_own_namespace",
    ) {
        return;
    }

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut capture = PacketCapture::open(port, Some("lo"), 4 << 20).unwrap();
    let before = crate::clock::now().wall_ns;
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    server.write_all(b"one").unwrap();
    server.write_all(b"two").unwrap();
    // Neither the client's bytes nor another port's are the tapped server's.
    client.write_all(b"from the client").unwrap();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let _o = TcpStream::connect(other.local_addr().unwrap()).unwrap();
    other.accept().unwrap().0.write_all(b"noise").unwrap();

    let (mut payload, mut syn_ack, mut packets) = (Vec::new(), false, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while payload.len() < 6 && Instant::now() < deadline {
        capture
            .next_block(Duration::from_millis(100), |at_ns, bytes| {
                let s = parse(bytes).expect("only TCP segments pass the filter");
                assert_eq!(s.src.port(), port, "only the tapped port's segments");
                assert!(at_ns >= before, "stamped when sent");
                syn_ack |= s.flags.syn;
                payload.extend_from_slice(s.payload);
                packets += 1;
            })
            .unwrap();
    }
    assert!(syn_ack, "the SYN-ACK is captured: it starts the stream");
    assert_eq!(payload, b"onetwo", "each outgoing segment once, in order");
    let stats = capture.stats().unwrap();
    assert!(stats.packets >= packets as u64, "{stats:?}");
    assert_eq!(stats.drops, 0);
}

#[test]
fn the_filter_is_a_valid_program_that_ends_in_returns() {
    let program = outgoing_tcp_from_port(8000);
    // Every jump lands inside the program; the last two are the returns.
    for (i, insn) in program.iter().enumerate() {
        if insn.code & 0x07 == 0x05 {
            for skip in [insn.jt, insn.jf] {
                assert!(i + 1 + usize::from(skip) < program.len(), "jump at {i}");
            }
        }
    }
    let n = program.len();
    assert_eq!((program[n - 2].code, program[n - 2].k), (0x06, u32::MAX));
    assert_eq!((program[n - 1].code, program[n - 1].k), (0x06, 0));
}
