//! Who may upload a run: the device that started it.
//!
//! Each run has an owner secret, derived from a key only its device holds
//! and the run's id ([`owner_secret`]): a probe restarted on the same
//! device finds the secret of every earlier run it uploads, with nothing
//! kept per run. The probe says it in its hello; the agent keeps a digest
//! of it ([`OwnerDigest`]) from the first hello that gives one, and from
//! then on takes the run only from a hello with the same secret. A run id
//! is public (`/audit/status` lists it): without the secret, anyone with
//! the token could take a run's upload over and append records of its own.
//!
//! Sans-IO: keys and secrets are handed in.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// What the device key is bound to, so the secret means nothing else.
const LABEL: &[u8] = b"skewscope run owner v1";

/// Bytes of a device key.
pub const DEVICE_KEY_LEN: usize = 32;

/// The owner secret of run `run_id` under the device's key.
pub fn owner_secret(device_key: &[u8], run_id: u128) -> u128 {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(device_key).expect("any key length");
    mac.update(LABEL);
    mac.update(&run_id.to_be_bytes());
    let out = mac.finalize().into_bytes();
    let mut first = [0u8; 16];
    first.copy_from_slice(&out[..16]);
    u128::from_be_bytes(first)
}

/// What the agent keeps of an owner secret: its SHA-256, so the file it is
/// kept in proves nothing to whoever reads it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct OwnerDigest([u8; 32]);

impl std::fmt::Debug for OwnerDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnerDigest(..)")
    }
}

impl OwnerDigest {
    /// The digest of `secret`.
    pub fn of(secret: u128) -> OwnerDigest {
        OwnerDigest(Sha256::digest(secret.to_be_bytes()).into())
    }

    /// Whether `secret` is the one this digest was made of, in time that
    /// does not depend on where they differ.
    pub fn matches(&self, secret: u128) -> bool {
        let other = OwnerDigest::of(secret);
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// As kept in a file: 64 hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Read back from [`OwnerDigest::to_hex`]; `None` for anything else.
    pub fn from_hex(text: &str) -> Option<OwnerDigest> {
        let text = text.trim();
        if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(OwnerDigest(out))
    }
}

/// Whether a hello may take a run, given what the agent knows of its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The hello gave the owner's secret (or the first secret: the run is
    /// now bound to it, and the digest must be kept).
    Owner {
        /// The run was not bound before: keep this digest.
        bind: Option<OwnerDigest>,
    },
    /// An unbound run, a hello without a secret (a probe from before
    /// secrets): it may upload, but never take over a connection that
    /// uploads the run now.
    Unproven,
    /// The run is bound to another secret, or the hello gave none: refused.
    NotOwner,
}

/// What a hello with `secret` may do with a run bound to `owner`.
pub fn claim(owner: Option<&OwnerDigest>, secret: Option<u128>) -> Claim {
    match (owner, secret) {
        (Some(owner), Some(secret)) if owner.matches(secret) => Claim::Owner { bind: None },
        (Some(_), _) => Claim::NotOwner,
        (None, Some(secret)) => Claim::Owner {
            bind: Some(OwnerDigest::of(secret)),
        },
        (None, None) => Claim::Unproven,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_run_has_its_own_secret_and_only_it_claims_the_run() {
        let key = [7u8; DEVICE_KEY_LEN];
        let (a, b) = (owner_secret(&key, 1), owner_secret(&key, 2));
        assert_ne!(a, b);
        assert_eq!(a, owner_secret(&key, 1), "the same on every start");
        assert_ne!(a, owner_secret(&[8u8; DEVICE_KEY_LEN], 1));

        let Claim::Owner { bind: Some(digest) } = claim(None, Some(a)) else {
            panic!("the first secret binds the run");
        };
        assert_eq!(claim(Some(&digest), Some(a)), Claim::Owner { bind: None });
        assert_eq!(claim(Some(&digest), Some(b)), Claim::NotOwner);
        assert_eq!(claim(Some(&digest), None), Claim::NotOwner);
        assert_eq!(claim(None, None), Claim::Unproven);
    }

    #[test]
    fn the_digest_is_kept_as_hex_and_read_back_strictly() {
        let d = OwnerDigest::of(42);
        assert_eq!(OwnerDigest::from_hex(&d.to_hex()), Some(d));
        assert_eq!(OwnerDigest::from_hex(&format!("{}\n", d.to_hex())), Some(d));
        assert_eq!(OwnerDigest::from_hex("00"), None);
        assert_eq!(OwnerDigest::from_hex(&"g".repeat(64)), None);
        assert!(!format!("{d:?}").contains(&d.to_hex()[..8]));
    }
}
