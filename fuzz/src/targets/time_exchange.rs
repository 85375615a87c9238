//! The probes' UDP time exchange packet.

use skewscope_core::time_exchange::{Reply, Request};

/// A datagram read as a request (what the agent's time port reads) and as
/// a reply (what a probe reads): what decodes encodes back to the same
/// packet, so no field is misread.
pub fn time_exchange(data: &[u8]) {
    if let Ok(request) = Request::decode(data) {
        assert_eq!(Request::decode(&request.encode()), Ok(request));
    }
    if let Ok(reply) = Reply::decode(data) {
        assert_eq!(Reply::decode(&reply.encode()), Ok(reply));
    }
}
