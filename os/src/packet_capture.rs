//! Capturing one TCP port's outgoing packets for the tap (issue 10): an
//! `AF_PACKET` socket read through a `TPACKET_V3` ring, with a classic BPF
//! filter so only that port's outgoing TCP segments reach user space. Every
//! packet carries the kernel's stamp of when it left for the driver.
//!
//! The socket is `SOCK_DGRAM`, so packets start at the IP header (no link
//! layer to parse, on any interface). On loopback each packet passes twice,
//! out and in; only the outgoing pass is kept (in the filter and again
//! from the ring's packet type). Needs `CAP_NET_RAW`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{Ordering, fence};
use std::time::Duration;

use nix::sys::socket::{AddressFamily, SockFlag, SockProtocol, SockType, socket};

/// One block of the ring: a power-of-two multiple of the page size, large
/// enough for a 256 KiB super-packet.
const BLOCK_BYTES: usize = 1 << 20;
/// A frame slot, for the kernel's bookkeeping (V3 packs packets by size).
const FRAME_BYTES: usize = 2048;
/// A block is handed to user space at the latest this long after its first
/// packet, so a quiet moment does not hold packets back. A block then holds
/// at least this long of packets, however few: the ring's blocks times this
/// is how long the tap thread (at the lowest priority) may be kept off the
/// CPU before packets are dropped. 10 ms gave 160 ms with 16 blocks, and a
/// test with two CPU hogs beside it dropped packets.
const BLOCK_TIMEOUT_MS: u32 = 40;

/// How long after capture a packet is at the latest in user space's hands,
/// the ring being read: a tap that read nothing for this long has every
/// packet stamped before now minus this.
pub const HANDOVER: Duration = Duration::from_millis(BLOCK_TIMEOUT_MS as u64 * 2);

/// What the kernel counted since the socket opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// Packets the filter passed.
    pub packets: u64,
    /// Of those, packets dropped because the ring was full.
    pub drops: u64,
}

/// An open capture of one port's outgoing TCP packets.
pub struct PacketCapture {
    fd: OwnedFd,
    ring: NonNull<u8>,
    blocks: usize,
    next_block: usize,
    stats: CaptureStats,
}

// SAFETY: the ring is memory the kernel shares with this socket alone; it
// is read and released only through `&mut self`, so moving the capture to
// another thread moves the only user of it.
#[allow(unsafe_code)]
unsafe impl Send for PacketCapture {}

impl PacketCapture {
    /// Opens a capture of TCP segments sent from local port `port`, on
    /// interface `interface` or on all, with a ring of about `ring_bytes`.
    pub fn open(port: u16, interface: Option<&str>, ring_bytes: usize) -> io::Result<Self> {
        let fd = socket(
            AddressFamily::Packet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::EthAll,
        )
        .map_err(|e| match e {
            nix::errno::Errno::EPERM => io::Error::new(
                io::ErrorKind::PermissionDenied,
                "capturing packets needs the CAP_NET_RAW capability: run as root, or under systemd copy the drop-in /usr/share/doc/skewscope-agent/examples/tap.conf to /etc/systemd/system/skewscope-agent.service.d/ (it grants CAP_NET_RAW and sets PrivateUsers=no, without which the capability does not reach the host's network)",
            ),
            e => io::Error::from(e),
        })?;
        attach_filter(&fd, &outgoing_tcp_from_port(port))?;
        set_int(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            libc::tpacket_versions::TPACKET_V3 as i32,
        )?;
        let blocks = (ring_bytes / BLOCK_BYTES).max(2);
        let ring = map_ring(&fd, blocks)?;
        let capture = PacketCapture {
            fd,
            ring,
            blocks,
            next_block: 0,
            stats: CaptureStats::default(),
        };
        if let Some(name) = interface {
            let index = nix::net::if_::if_nametoindex(name).map_err(|e| {
                io::Error::new(io::ErrorKind::NotFound, format!("interface {name}: {e}"))
            })?;
            bind_to(&capture.fd, index)?;
        }
        Ok(capture)
    }

    /// Waits up to `timeout` for a block of packets and hands each to
    /// `each` with its kernel stamp (ns since 1970) and bytes (from the IP
    /// header); returns how many, or `None` when no block came in time
    /// (the ring is empty but for what the kernel has not handed over yet).
    pub fn next_block(
        &mut self,
        timeout: Duration,
        mut each: impl FnMut(u64, &[u8]),
    ) -> io::Result<Option<usize>> {
        if !self.block_ready() {
            let mut fds = [nix::poll::PollFd::new(
                std::os::fd::AsFd::as_fd(&self.fd),
                nix::poll::PollFlags::POLLIN,
            )];
            let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
            nix::poll::poll(&mut fds, ms).map_err(io::Error::from)?;
            if !self.block_ready() {
                return Ok(None);
            }
        }
        // What the kernel wrote before it set the status is visible now.
        fence(Ordering::Acquire);
        let n = self.walk_block(&mut each);
        self.release_block();
        Ok(Some(n))
    }

    /// The kernel's counters (packets passed, dropped for a full ring).
    pub fn stats(&mut self) -> io::Result<CaptureStats> {
        // The kernel resets them on every read: add them up here.
        let s = packet_statistics(&self.fd)?;
        self.stats.packets += u64::from(s.tp_packets);
        self.stats.drops += u64::from(s.tp_drops);
        Ok(self.stats)
    }

    fn block_ptr(&self, index: usize) -> *mut libc::tpacket_block_desc {
        self.ring
            .as_ptr()
            .wrapping_add(index * BLOCK_BYTES)
            .cast::<libc::tpacket_block_desc>()
    }

    #[allow(unsafe_code)]
    fn block_ready(&self) -> bool {
        let block = self.block_ptr(self.next_block);
        // SAFETY: `block` is inside the mapped ring (index < blocks); the
        // kernel writes the status word concurrently, hence the volatile read.
        let status = unsafe { std::ptr::addr_of!((*block).hdr.bh1.block_status).read_volatile() };
        status & libc::TP_STATUS_USER != 0
    }

    #[allow(unsafe_code)]
    fn walk_block(&self, each: &mut impl FnMut(u64, &[u8])) -> usize {
        let base = self.block_ptr(self.next_block).cast::<u8>();
        // SAFETY: the block is ours until released (its status says
        // TP_STATUS_USER); its header is a tpacket_block_desc at its start.
        let hdr = unsafe { std::ptr::addr_of!((*self.block_ptr(self.next_block)).hdr.bh1).read() };
        let mut offset = hdr.offset_to_first_pkt as usize;
        let mut passed = 0;
        for _ in 0..hdr.num_pkts {
            if offset + libc::TPACKET3_HDRLEN > BLOCK_BYTES {
                break; // a kernel bug would be needed; never read past the block
            }
            // SAFETY: `offset` is inside the block (checked above); the
            // kernel placed a tpacket3_hdr there, then a sockaddr_ll at the
            // aligned end of it.
            let (p, pkttype) = unsafe {
                let at = base.add(offset);
                let p = at.cast::<libc::tpacket3_hdr>().read_unaligned();
                let sll_at = (std::mem::size_of::<libc::tpacket3_hdr>() + libc::TPACKET_ALIGNMENT
                    - 1)
                    & !(libc::TPACKET_ALIGNMENT - 1);
                let sll = at.add(sll_at).cast::<libc::sockaddr_ll>().read_unaligned();
                (p, sll.sll_pkttype)
            };
            let start = offset + usize::from(p.tp_net);
            let skip = usize::from(p.tp_net.saturating_sub(p.tp_mac));
            let len = (p.tp_snaplen as usize).saturating_sub(skip);
            if pkttype == libc::PACKET_OUTGOING && start + len <= BLOCK_BYTES {
                // SAFETY: [start, start + len) is inside the block (checked),
                // which stays ours until released after this walk.
                let bytes = unsafe { std::slice::from_raw_parts(base.add(start), len) };
                let at_ns = u64::from(p.tp_sec) * 1_000_000_000 + u64::from(p.tp_nsec);
                each(at_ns, bytes);
                passed += 1;
            }
            if p.tp_next_offset == 0 {
                break;
            }
            offset += p.tp_next_offset as usize;
        }
        passed
    }

    #[allow(unsafe_code)]
    fn release_block(&mut self) {
        // Our reads of the block are done before the kernel may reuse it.
        fence(Ordering::Release);
        let block = self.block_ptr(self.next_block);
        // SAFETY: `block` is inside the ring; writing TP_STATUS_KERNEL hands
        // it back, as the packet(7) ring protocol asks.
        unsafe {
            std::ptr::addr_of_mut!((*block).hdr.bh1.block_status)
                .write_volatile(libc::TP_STATUS_KERNEL)
        };
        self.next_block = (self.next_block + 1) % self.blocks;
    }
}

impl Drop for PacketCapture {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: the mapping was made with this length in `map_ring` and is
        // not used after this.
        unsafe { libc::munmap(self.ring.as_ptr().cast(), self.blocks * BLOCK_BYTES) };
    }
}

/// The classic BPF program: keep TCP segments sent from `port` (IPv4 that
/// is not a later fragment, or IPv6 with TCP as its next header), drop the
/// rest. Offsets are from the IP header (a `SOCK_DGRAM` packet socket).
fn outgoing_tcp_from_port(port: u16) -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = 0x20;
    const LD_H_ABS: u16 = 0x28;
    const LD_B_ABS: u16 = 0x30;
    const LD_H_IND: u16 = 0x48;
    const LDX_B_MSH: u16 = 0xb1;
    const RSH_K: u16 = 0x74;
    const JEQ_K: u16 = 0x15;
    const JSET_K: u16 = 0x45;
    const RET_K: u16 = 0x06;
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let port = u32::from(port);
    // jt/jf count instructions to skip; ACCEPT is 17, DROP 18.
    vec![
        /* 0 */
        op(
            LD_W_ABS,
            0,
            0,
            (libc::SKF_AD_OFF + libc::SKF_AD_PKTTYPE) as u32,
        ),
        /* 1 */ op(JEQ_K, 0, 16, u32::from(libc::PACKET_OUTGOING)),
        /* 2 */ op(LD_B_ABS, 0, 0, 0),
        /* 3 */ op(RSH_K, 0, 0, 4),
        /* 4 */ op(JEQ_K, 1, 0, 4),
        /* 5 */ op(JEQ_K, 7, 12, 6),
        /* 6 v4 */ op(LD_B_ABS, 0, 0, 9),
        /* 7 */ op(JEQ_K, 0, 10, 6),
        /* 8 */ op(LD_H_ABS, 0, 0, 6),
        /* 9 */ op(JSET_K, 8, 0, 0x1fff),
        /* 10 */ op(LDX_B_MSH, 0, 0, 0),
        /* 11 */ op(LD_H_IND, 0, 0, 0),
        /* 12 */ op(JEQ_K, 4, 5, port),
        /* 13 v6 */ op(LD_B_ABS, 0, 0, 6),
        /* 14 */ op(JEQ_K, 0, 3, 6),
        /* 15 */ op(LD_H_ABS, 0, 0, 40),
        /* 16 */ op(JEQ_K, 0, 1, port),
        /* 17 ACCEPT */ op(RET_K, 0, 0, u32::MAX),
        /* 18 DROP */ op(RET_K, 0, 0, 0),
    ]
}

#[allow(unsafe_code)]
fn attach_filter(fd: &OwnedFd, program: &[libc::sock_filter]) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    // Why libc: nix has no SO_ATTACH_FILTER. SAFETY: `prog` points at
    // `program`, alive for the call; the kernel copies it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            std::ptr::addr_of!(prog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    check(rc)
}

#[allow(unsafe_code)]
fn set_int(fd: &OwnedFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: an int option, passed by pointer for the call's duration.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            std::ptr::addr_of!(value).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    check(rc)
}

#[allow(unsafe_code)]
fn map_ring(fd: &OwnedFd, blocks: usize) -> io::Result<NonNull<u8>> {
    let req = libc::tpacket_req3 {
        tp_block_size: BLOCK_BYTES as u32,
        tp_block_nr: blocks as u32,
        tp_frame_size: FRAME_BYTES as u32,
        tp_frame_nr: (blocks * BLOCK_BYTES / FRAME_BYTES) as u32,
        tp_retire_blk_tov: BLOCK_TIMEOUT_MS,
        tp_sizeof_priv: 0,
        tp_feature_req_word: 0,
    };
    // Why libc: nix wraps neither PACKET_RX_RING nor the ring's mmap.
    // SAFETY: `req` is a valid tpacket_req3 for the call's duration.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            std::ptr::addr_of!(req).cast(),
            std::mem::size_of::<libc::tpacket_req3>() as libc::socklen_t,
        )
    };
    check(rc)?;
    // SAFETY: maps the ring the kernel just made for this socket, with the
    // size it was asked for; the result is checked before use.
    let ring = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            blocks * BLOCK_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if ring == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(ring.cast()).ok_or_else(|| io::Error::other("mmap returned null"))
}

#[allow(unsafe_code)]
fn bind_to(fd: &OwnedFd, index: u32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; zero is a valid start.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    addr.sll_ifindex = index as i32;
    // Why libc: nix's LinkAddr cannot be built from parts. SAFETY: `addr`
    // is a valid sockaddr_ll for the call's duration.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            std::ptr::addr_of!(addr).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    check(rc)
}

#[allow(unsafe_code)]
fn packet_statistics(fd: &OwnedFd) -> io::Result<libc::tpacket_stats_v3> {
    // SAFETY: plain data; zero is a valid start.
    let mut stats: libc::tpacket_stats_v3 = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
    // SAFETY: `stats` and `len` are valid and writable for the call.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            std::ptr::addr_of_mut!(stats).cast(),
            &mut len,
        )
    };
    check(rc)?;
    Ok(stats)
}

fn check(rc: i32) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests;
