//! The device key that makes each run's owner secret
//! ([`skewscope_core::run_owner`]): kept once per log directory, readable by
//! the probe's user only, so a probe restarted there can prove it owns every
//! earlier run it uploads, with nothing kept per run. It never leaves the
//! device: only each run's secret is sent, and only to the agent.

use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use skewscope_core::run_owner::DEVICE_KEY_LEN;

/// The key's file name, in the directory of the run's log.
pub const KEY_FILE: &str = ".skewscope-owner.key";

/// The key of the log directory `dir`, made the first time (mode 0600).
pub fn device_key(dir: &Path) -> io::Result<[u8; DEVICE_KEY_LEN]> {
    let path = key_path(dir);
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut file) => {
            let key = skewscope_os::host::random_bytes::<DEVICE_KEY_LEN>()?;
            file.write_all(&key)?;
            file.sync_all()?;
            Ok(key)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let mut key = [0u8; DEVICE_KEY_LEN];
            let mut file = std::fs::File::open(&path)?;
            file.read_exact(&mut key).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{}: not a device key ({e}); remove it to make a new one (earlier runs' uploads then cannot be resumed)", path.display()),
                )
            })?;
            Ok(key)
        }
        Err(e) => Err(e),
    }
}

/// Where the key of `dir` is kept.
pub fn key_path(dir: &Path) -> PathBuf {
    dir.join(KEY_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_key_is_made_once_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let key = device_key(dir.path()).unwrap();
        assert_eq!(device_key(dir.path()).unwrap(), key);
        let mode = std::fs::metadata(key_path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(key_path(dir.path()), b"short").unwrap();
        let e = device_key(dir.path()).unwrap_err();
        assert!(e.to_string().contains("not a device key"), "{e}");
    }
}
