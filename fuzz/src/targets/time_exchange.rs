//! The probes' UDP time exchange packet.

use std::sync::OnceLock;

use skewscope_core::time_exchange::{Reply, Request, TimeKey};

/// The key a fuzzed reply is checked under (derived once: the time port
/// derives it once too).
fn key() -> &'static TimeKey {
    static KEY: OnceLock<TimeKey> = OnceLock::new();
    KEY.get_or_init(|| TimeKey::from_token("fuzz"))
}

/// A datagram read as a request (what the agent's time port reads) and as
/// a reply (what a probe reads, keyed and not): what decodes encodes back
/// to the same packet, so no field is misread; and no datagram passes a
/// keyed probe unless it is one the key tagged.
pub fn time_exchange(data: &[u8]) {
    if let Ok(request) = Request::decode(data) {
        assert_eq!(Request::decode(&request.encode()), Ok(request));
        let reply = Reply {
            id: request.id,
            t1_wall_ns: request.t1_wall_ns,
            t2_wall_ns: 1,
            t3_wall_ns: 2,
        };
        let answer = reply.encode(&request, Some(key()));
        assert_eq!(answer.len(), data.len(), "never more than was sent");
    }
    let v2 = Request::new(0, 0);
    if let Ok(reply) = Reply::decode(data, None) {
        assert_eq!(Reply::decode(&reply.encode(&v2, None), None), Ok(reply));
        let tagged = reply.encode(&v2, Some(key()));
        assert_eq!(Reply::decode(&tagged, Some(key())), Ok(reply));
    }
    if let Ok(reply) = Reply::decode(data, Some(key())) {
        // It verified: it is the tagged encoding of what it says.
        assert_eq!(reply.encode(&v2, Some(key())), data);
    }
}
