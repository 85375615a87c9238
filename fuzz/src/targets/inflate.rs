//! The permessage-deflate inflater, on compressed messages from a server.

use skewscope_core::permessage_deflate::inflate::Inflater;

/// Largest plaintext allowed: small, so the limit is reached.
const MAX: usize = 8192;

/// The first byte chooses context takeover and where the input splits into
/// two messages of one connection; each inflates to at most the limit or
/// is refused, and a refusal leaves the inflater usable for the next.
pub fn inflate(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let mut inflater = Inflater::new(control & 1 == 1);
    let cut = usize::from(control >> 1).min(rest.len());
    for message in [&rest[..cut], &rest[cut..]] {
        if let Ok(plain) = inflater.message(message, MAX) {
            assert!(plain.len() <= MAX, "inflated past the limit");
        }
    }
}
