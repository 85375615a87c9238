//! Who this host is. Reports need to know which records share a clock: the
//! host name says it for people, but many devices carry the same name (every
//! image of an OS ships one), so the clock itself is named by the kernel's
//! boot id, which is random per boot.

/// Where Linux publishes the boot id.
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// This host's name, for people. A missing name must not stop a
/// measurement: falls back to `"unknown-host"`.
pub fn host_name() -> String {
    let name = nix::unistd::gethostname()
        .map(|n| n.to_string_lossy().trim().to_owned())
        .unwrap_or_default();
    if name.is_empty() {
        "unknown-host".to_owned()
    } else {
        name
    }
}

/// The kernel's boot id (a UUID, new at every boot): it names one clock
/// exactly, since `CLOCK_MONOTONIC` restarts and the wall clock may be set at
/// boot. `None` where the kernel does not publish it.
pub fn boot_id() -> Option<String> {
    let text = std::fs::read_to_string(BOOT_ID_PATH).ok()?;
    let id = text.trim();
    (!id.is_empty()).then(|| id.to_owned())
}

/// A fresh identity for a run starting now: 128 random bits from the
/// kernel (`/dev/urandom`) and this boot's id.
pub fn new_run_identity() -> std::io::Result<skewscope_core::record::RunIdentity> {
    Ok(skewscope_core::record::RunIdentity {
        run_id: u128::from_le_bytes(random_bytes()?),
        boot_id: boot_id(),
    })
}

/// `N` bytes from the kernel's random source: for what must not be
/// guessed (run ids, the device key that makes runs' owner secrets).
pub fn random_bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_name_is_never_empty() {
        assert!(!host_name().is_empty());
    }

    #[test]
    fn run_ids_differ_and_carry_the_boot_id() {
        let a = new_run_identity().unwrap();
        let b = new_run_identity().unwrap();
        assert_ne!(a.run_id, b.run_id);
        assert_eq!(a.boot_id, boot_id());
    }

    #[test]
    fn boot_id_is_a_stable_uuid() {
        let id = boot_id().expect("Linux publishes a boot id");
        assert_eq!(id.len(), 36, "{id}");
        assert_eq!(boot_id().as_deref(), Some(id.as_str()));
    }
}
