//! The UDP time exchange between probe and agent, as bytes: sans-IO encoding
//! and validation, and the tag that lets a probe refuse a reply it cannot
//! trust. The same exchange in JSON, for the agent's `/clock` WebSocket, is
//! [`json`].
//!
//! Request and reply have the same fixed size, so the agent's port can never
//! answer with more bytes than it was sent (no amplification):
//!
//! ```text
//! 0..4   "SKTM"      4      version (2)     5     kind (1 request, 2 reply)
//! 6      flags (reply: 1 = tagged)          7     zero
//! 8..16  request id (u64 LE, random per request)
//! 16..24 t1: probe wall clock at send (echoed back)
//! 24..32 t2: agent wall clock at receive (reply only)
//! 32..40 t3: agent wall clock at send (reply only)
//! 40..48 zero
//! 48..64 tag (reply, when tagged): HMAC-SHA-256 over bytes 0..48 under
//!        the key derived from the agent's token, its first 128 bits
//! ```
//!
//! **Why a tag.** The exchange sets every device's clock, so a device that
//! acts on it trusts it with the whole site's timing. A random request id
//! stops only an attacker who cannot see the traffic; on a shared Wi-Fi or
//! behind an ARP spoof, one who can rewrite t2/t3 moves every clock while
//! every bound "holds". With a token, the agent tags each reply and a probe
//! holding the same token refuses any reply whose tag fails (counted, never
//! used), as NTP's symmetric keys do (RFC 8573, there with AES-CMAC). The
//! key is derived once per process ([`TimeKey::from_token`]); 128 bits is
//! the truncation RFC 2104 recommends as the least for HMAC-SHA-256, and a
//! forger gets one try per reply. The token itself never crosses the wire.
//!
//! Version 1 (48 bytes, no tag) is what probes before the tag sent: the
//! agent still answers it in kind, untagged.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

pub mod json;

/// Size of every version-2 time packet, request or reply.
pub const PACKET_LEN: usize = 64;
/// Size of a version-1 packet (untagged; older probes).
pub const V1_PACKET_LEN: usize = 48;
/// Bytes of the tag kept (of HMAC-SHA-256's 32).
pub const TAG_LEN: usize = 16;
const MAGIC: &[u8; 4] = b"SKTM";
const VERSION: u8 = 2;
const V1: u8 = 1;
const REQUEST: u8 = 1;
const REPLY: u8 = 2;
const TAGGED: u8 = 1;
/// What the key derivation binds the token to: a key for this exchange is
/// no key for anything else the token is used for.
const KEY_LABEL: &[u8] = b"skewscope time exchange tag v2";

/// The key a token gives the time exchange: HMAC-SHA-256 keyed with
/// HMAC-SHA-256(token, label), its pads computed once.
#[derive(Clone)]
pub struct TimeKey(Hmac<Sha256>);

impl std::fmt::Debug for TimeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TimeKey(..)")
    }
}

impl TimeKey {
    /// Derives the key from the agent's bearer token (`--token-file`).
    pub fn from_token(token: &str) -> TimeKey {
        let mut derive =
            <Hmac<Sha256> as KeyInit>::new_from_slice(token.as_bytes()).expect("any key length");
        derive.update(KEY_LABEL);
        let key = derive.finalize().into_bytes();
        TimeKey(<Hmac<Sha256> as KeyInit>::new_from_slice(&key).expect("any key length"))
    }

    /// The tag of `bytes`.
    pub fn tag(&self, bytes: &[u8]) -> [u8; TAG_LEN] {
        let mut mac = self.0.clone();
        mac.update(bytes);
        let full = mac.finalize().into_bytes();
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&full[..TAG_LEN]);
        tag
    }

    /// Whether `tag` is `bytes`' tag (compared in constant time).
    pub fn verify(&self, bytes: &[u8], tag: &[u8]) -> bool {
        let mut mac = self.0.clone();
        mac.update(bytes);
        tag.len() == TAG_LEN && mac.verify_truncated_left(tag).is_ok()
    }
}

/// A probe's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Random id, echoed in the reply and used to refuse replays.
    pub id: u64,
    /// Probe wall clock when sent.
    pub t1_wall_ns: u64,
    /// Its version: 2, or 1 from a probe before the tag (answered in kind).
    pub version: u8,
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
    /// Shorter than a packet, or not a packet of this protocol and version.
    Malformed,
    /// Longer than a packet.
    Oversized,
    /// A reply without a tag, to a probe that holds a key.
    Untagged,
    /// A reply whose tag is not its bytes' under the probe's key: altered
    /// on the way, or from an agent with another token.
    BadTag,
}

fn header(version: u8, kind: u8) -> [u8; PACKET_LEN] {
    let mut p = [0u8; PACKET_LEN];
    p[..4].copy_from_slice(MAGIC);
    p[4] = version;
    p[5] = kind;
    p
}

fn u64_at(p: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(p[at..at + 8].try_into().expect("8 bytes"))
}

/// The version of a well-formed packet of `kind`.
fn check(p: &[u8], kind: u8) -> Result<u8, Invalid> {
    if p.len() > PACKET_LEN {
        return Err(Invalid::Oversized);
    }
    if p.len() < V1_PACKET_LEN || &p[..4] != MAGIC || p[5] != kind {
        return Err(Invalid::Malformed);
    }
    match (p[4], p.len()) {
        (VERSION, PACKET_LEN) => Ok(VERSION),
        (V1, V1_PACKET_LEN) => Ok(V1),
        _ => Err(Invalid::Malformed),
    }
}

impl Request {
    /// A version-2 request.
    pub fn new(id: u64, t1_wall_ns: u64) -> Request {
        Request {
            id,
            t1_wall_ns,
            version: VERSION,
        }
    }

    /// The request's bytes: [`PACKET_LEN`] for version 2, else
    /// [`V1_PACKET_LEN`].
    pub fn encode(&self) -> Vec<u8> {
        let mut p = header(self.version, REQUEST);
        p[8..16].copy_from_slice(&self.id.to_le_bytes());
        p[16..24].copy_from_slice(&self.t1_wall_ns.to_le_bytes());
        let len = if self.version == V1 {
            V1_PACKET_LEN
        } else {
            PACKET_LEN
        };
        p[..len].to_vec()
    }

    /// Validates bytes received by the agent.
    pub fn decode(p: &[u8]) -> Result<Request, Invalid> {
        let version = check(p, REQUEST)?;
        Ok(Request {
            id: u64_at(p, 8),
            t1_wall_ns: u64_at(p, 16),
            version,
        })
    }
}

impl Reply {
    /// The reply to `request`: as many bytes as it had, tagged under `key`
    /// when there is one and the request is version 2.
    pub fn encode(&self, request: &Request, key: Option<&TimeKey>) -> Vec<u8> {
        let mut p = header(request.version, REPLY);
        p[8..16].copy_from_slice(&self.id.to_le_bytes());
        p[16..24].copy_from_slice(&self.t1_wall_ns.to_le_bytes());
        p[24..32].copy_from_slice(&self.t2_wall_ns.to_le_bytes());
        p[32..40].copy_from_slice(&self.t3_wall_ns.to_le_bytes());
        if request.version == V1 {
            return p[..V1_PACKET_LEN].to_vec();
        }
        if let Some(key) = key {
            p[6] = TAGGED;
            let tag = key.tag(&p[..V1_PACKET_LEN]);
            p[V1_PACKET_LEN..].copy_from_slice(&tag);
        }
        p.to_vec()
    }

    /// Validates a version-2 reply received by the probe; with a `key`,
    /// only a reply whose tag verifies is one.
    pub fn decode(p: &[u8], key: Option<&TimeKey>) -> Result<Reply, Invalid> {
        if check(p, REPLY)? != VERSION {
            return Err(Invalid::Malformed);
        }
        if let Some(key) = key {
            if p[6] & TAGGED == 0 {
                return Err(Invalid::Untagged);
            }
            if !key.verify(&p[..V1_PACKET_LEN], &p[V1_PACKET_LEN..]) {
                return Err(Invalid::BadTag);
            }
        }
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

    fn reply() -> Reply {
        Reply {
            id: 7,
            t1_wall_ns: 123,
            t2_wall_ns: 456,
            t3_wall_ns: 789,
        }
    }

    #[test]
    fn request_and_reply_round_trip_at_the_same_size() {
        let req = Request::new(7, 123);
        let bytes = req.encode();
        assert_eq!(bytes.len(), PACKET_LEN);
        assert_eq!(Request::decode(&bytes), Ok(req));
        let key = TimeKey::from_token("s3cret");
        for key in [None, Some(&key)] {
            let encoded = reply().encode(&req, key);
            assert_eq!(encoded.len(), bytes.len());
            assert_eq!(Reply::decode(&encoded, key), Ok(reply()));
        }
    }

    #[test]
    fn a_version_1_request_gets_a_version_1_reply_untagged() {
        let mut old = Request::new(7, 123);
        old.version = 1;
        let bytes = old.encode();
        assert_eq!(bytes.len(), V1_PACKET_LEN);
        assert_eq!(Request::decode(&bytes), Ok(old));
        let key = TimeKey::from_token("s3cret");
        let answer = reply().encode(&old, Some(&key));
        assert_eq!(answer.len(), V1_PACKET_LEN, "never more than was sent");
        assert_eq!(answer[6], 0, "untagged");
        // A version-2 probe does not take it.
        assert_eq!(Reply::decode(&answer, None), Err(Invalid::Malformed));
    }

    #[test]
    fn a_keyed_probe_refuses_untagged_altered_and_foreign_replies() {
        let req = Request::new(7, 123);
        let key = TimeKey::from_token("s3cret");
        assert_eq!(
            Reply::decode(&reply().encode(&req, None), Some(&key)),
            Err(Invalid::Untagged)
        );
        let good = reply().encode(&req, Some(&key));
        // t2 moved by 3 ms on the way, and every single bit of the tagged
        // bytes and of the tag flipped in turn.
        let mut moved = good.clone();
        moved[24..32].copy_from_slice(&(456u64 + 3_000_000).to_le_bytes());
        assert_eq!(Reply::decode(&moved, Some(&key)), Err(Invalid::BadTag));
        for bit in 0..PACKET_LEN * 8 {
            let mut flipped = good.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(Reply::decode(&flipped, Some(&key)).is_err(), "bit {bit}");
        }
        let other = TimeKey::from_token("another");
        assert_eq!(Reply::decode(&good, Some(&other)), Err(Invalid::BadTag));
        // Without a key the reply reads (and the report says unauthenticated).
        assert_eq!(
            Reply::decode(&moved, None).map(|r| r.t2_wall_ns),
            Ok(3_000_456)
        );
    }

    #[test]
    fn the_key_is_hmac_sha_256_under_the_derived_key() {
        // RFC 4231 test case 2 checks the primitive: key "Jefe".
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        let full = mac.finalize().into_bytes();
        assert_eq!(
            full[..4],
            [0x5b, 0xdc, 0xc1, 0x46],
            "RFC 4231 4.3, first bytes"
        );
        // Derived, not the token: tags under the raw token differ.
        let raw = TimeKey(<Hmac<Sha256> as KeyInit>::new_from_slice(b"Jefe").unwrap());
        assert_ne!(TimeKey::from_token("Jefe").tag(b"x"), raw.tag(b"x"));
        assert_eq!(format!("{:?}", TimeKey::from_token("Jefe")), "TimeKey(..)");
    }

    #[test]
    fn bad_packets_are_classified() {
        let good = Request::new(1, 2).encode();
        assert_eq!(Request::decode(&good[..47]), Err(Invalid::Malformed));
        assert_eq!(Request::decode(&good[..50]), Err(Invalid::Malformed));
        let mut long = good.clone();
        long.push(0);
        assert_eq!(Request::decode(&long), Err(Invalid::Oversized));
        let mut wrong = good.clone();
        wrong[0] = b'X';
        assert_eq!(Request::decode(&wrong), Err(Invalid::Malformed));
        let mut future = good.clone();
        future[4] = 3;
        assert_eq!(Request::decode(&future), Err(Invalid::Malformed));
        // A reply is not a request (no reflection loops between agents).
        let reply = reply().encode(&Request::new(1, 2), None);
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
