//! The UDP time exchange between probe and agent, as bytes: sans-IO encoding
//! and validation. The same exchange in JSON, for the agent's `/clock`
//! WebSocket, is [`json`].
//!
//! Request and reply have the same fixed size, so the agent's port can never
//! answer with more bytes than it was sent (no amplification):
//!
//! ```text
//! 0..4   "SKTM"      4      version (1)     5     kind (1 request, 2 reply)
//! 6..8   zero        8..16  request id (u64 LE, random per request)
//! 16..24 t1: probe wall clock at send (echoed back)
//! 24..32 t2: agent wall clock at receive (reply only)
//! 32..40 t3: agent wall clock at send (reply only)
//! 40..48 zero
//! ```

pub mod json;

/// Size of every time packet, request or reply.
pub const PACKET_LEN: usize = 48;
const MAGIC: &[u8; 4] = b"SKTM";
const VERSION: u8 = 1;
const REQUEST: u8 = 1;
const REPLY: u8 = 2;

/// A probe's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Random id, echoed in the reply and used to refuse replays.
    pub id: u64,
    /// Probe wall clock when sent.
    pub t1_wall_ns: u64,
}

/// The agent's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The request's id.
    pub id: u64,
    /// The request's t1.
    pub t1_wall_ns: u64,
    /// Agent wall clock when the request arrived.
    pub t2_wall_ns: u64,
    /// Agent wall clock when the reply left.
    pub t3_wall_ns: u64,
}

/// Why a packet was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// Shorter than a packet, or not a request of this protocol and version.
    Malformed,
    /// Longer than a packet.
    Oversized,
}

fn header(kind: u8) -> [u8; PACKET_LEN] {
    let mut p = [0u8; PACKET_LEN];
    p[..4].copy_from_slice(MAGIC);
    p[4] = VERSION;
    p[5] = kind;
    p
}

fn u64_at(p: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(p[at..at + 8].try_into().expect("8 bytes"))
}

fn check(p: &[u8], kind: u8) -> Result<(), Invalid> {
    if p.len() > PACKET_LEN {
        return Err(Invalid::Oversized);
    }
    if p.len() < PACKET_LEN || &p[..4] != MAGIC || p[4] != VERSION || p[5] != kind {
        return Err(Invalid::Malformed);
    }
    Ok(())
}

impl Request {
    /// The request's bytes.
    pub fn encode(&self) -> [u8; PACKET_LEN] {
        let mut p = header(REQUEST);
        p[8..16].copy_from_slice(&self.id.to_le_bytes());
        p[16..24].copy_from_slice(&self.t1_wall_ns.to_le_bytes());
        p
    }

    /// Validates bytes received by the agent.
    pub fn decode(p: &[u8]) -> Result<Request, Invalid> {
        check(p, REQUEST)?;
        Ok(Request {
            id: u64_at(p, 8),
            t1_wall_ns: u64_at(p, 16),
        })
    }
}

impl Reply {
    /// The reply's bytes: exactly as many as the request's.
    pub fn encode(&self) -> [u8; PACKET_LEN] {
        let mut p = header(REPLY);
        p[8..16].copy_from_slice(&self.id.to_le_bytes());
        p[16..24].copy_from_slice(&self.t1_wall_ns.to_le_bytes());
        p[24..32].copy_from_slice(&self.t2_wall_ns.to_le_bytes());
        p[32..40].copy_from_slice(&self.t3_wall_ns.to_le_bytes());
        p
    }

    /// Validates bytes received by the probe.
    pub fn decode(p: &[u8]) -> Result<Reply, Invalid> {
        check(p, REPLY)?;
        Ok(Reply {
            id: u64_at(p, 8),
            t1_wall_ns: u64_at(p, 16),
            t2_wall_ns: u64_at(p, 24),
            t3_wall_ns: u64_at(p, 32),
        })
    }
}

/// Remembers recent request ids so a replayed request is refused.
#[derive(Debug)]
pub struct ReplayGuard {
    recent: std::collections::HashSet<u64>,
    order: std::collections::VecDeque<u64>,
    capacity: usize,
}

impl ReplayGuard {
    /// Remembers up to `capacity` ids.
    pub fn new(capacity: usize) -> ReplayGuard {
        ReplayGuard {
            recent: std::collections::HashSet::with_capacity(capacity),
            order: std::collections::VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    /// True the first time an id is seen (within the window), false for a replay.
    pub fn first_time(&mut self, id: u64) -> bool {
        if !self.recent.insert(id) {
            return false;
        }
        self.order.push_back(id);
        if self.order.len() > self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.recent.remove(&old);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_and_reply_round_trip_at_the_same_size() {
        let req = Request {
            id: 7,
            t1_wall_ns: 123,
        };
        let bytes = req.encode();
        assert_eq!(Request::decode(&bytes), Ok(req));
        let reply = Reply {
            id: 7,
            t1_wall_ns: 123,
            t2_wall_ns: 456,
            t3_wall_ns: 789,
        };
        assert_eq!(reply.encode().len(), bytes.len());
        assert_eq!(Reply::decode(&reply.encode()), Ok(reply));
    }

    #[test]
    fn bad_packets_are_classified() {
        let good = Request {
            id: 1,
            t1_wall_ns: 2,
        }
        .encode();
        assert_eq!(Request::decode(&good[..47]), Err(Invalid::Malformed));
        let mut long = good.to_vec();
        long.push(0);
        assert_eq!(Request::decode(&long), Err(Invalid::Oversized));
        let mut wrong = good;
        wrong[0] = b'X';
        assert_eq!(Request::decode(&wrong), Err(Invalid::Malformed));
        // A reply is not a request (no reflection loops between agents).
        let reply = Reply {
            id: 1,
            t1_wall_ns: 2,
            t2_wall_ns: 3,
            t3_wall_ns: 4,
        }
        .encode();
        assert_eq!(Request::decode(&reply), Err(Invalid::Malformed));
        assert_eq!(Request::decode(&[]), Err(Invalid::Malformed));
    }

    #[test]
    fn replays_are_refused_within_the_window() {
        let mut g = ReplayGuard::new(2);
        assert!(g.first_time(1));
        assert!(!g.first_time(1));
        assert!(g.first_time(2));
        assert!(g.first_time(3)); // 1 falls out of the window
        assert!(g.first_time(1));
    }
}
