//! TLS on the agent's one port (`--tls-cert`, `--tls-key`): every endpoint
//! (`wss://…/ws`, `/clock`, `/ingest`, `https://…/probe`, `/publish`,
//! `/metrics`, `/healthz`) is then served over TLS only, so the bearer
//! token never crosses the LAN in clear and the probe page is a secure
//! context (cross-origin isolated, 5 µs clock steps in Chromium).
//!
//! The certificate chain and key are read at start (a bad file stops the
//! start) and again on SIGHUP: a renewed certificate takes effect for new
//! connections without a restart; a reload that fails keeps the one in use
//! and says why.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Why the certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file is missing, unreadable or holds no certificate.
    #[error("--tls-cert {path}: {reason}")]
    Cert {
        /// The file as given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The key file is missing, unreadable or holds no private key.
    #[error("--tls-key {path}: {reason}")]
    Key {
        /// The file as given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the pair (a key that does not match the certificate,
    /// an unsupported key type).
    #[error("--tls-cert and --tls-key: {0}")]
    Pair(String),
}

/// The agent's TLS settings, reloadable while it serves.
#[derive(Debug)]
pub struct ServerTls {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<ServerConfig>>,
}

impl ServerTls {
    /// Reads the PEM certificate chain (leaf first, then intermediates) and
    /// its private key.
    pub fn load(cert: &Path, key: &Path) -> Result<ServerTls, TlsError> {
        let config = server_config(cert, key)?;
        Ok(ServerTls {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: RwLock::new(config),
        })
    }

    /// Reads both files again; new connections get the new pair, open ones
    /// keep theirs. On an error the pair in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = server_config(&self.cert, &self.key)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = config;
        Ok(())
    }

    /// An acceptor with the pair in use now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config())
    }

    /// The settings in use now (the pair, the protocol versions).
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The most bytes a certificate chain or key file may hold: a PEM chain is
/// a few KiB.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// A PEM file's bytes, when it is a regular file of at most
/// [`MAX_PEM_BYTES`]: a FIFO or a device put at the path is refused without
/// being opened (opening a FIFO waits for a writer, and a reload would wait
/// with it), and `/dev/zero` cannot fill memory.
fn read_regular(path: &Path) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_PEM_BYTES {
        return Err(format!(
            "{} bytes: a PEM file is at most {MAX_PEM_BYTES}",
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(
            std::fs::File::open(path).map_err(|e| e.to_string())?,
            MAX_PEM_BYTES,
        ),
        &mut bytes,
    )
    .map_err(|e| e.to_string())?;
    Ok(bytes)
}

fn server_config(cert_path: &Path, key_path: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let cert_error = |reason: String| TlsError::Cert {
        path: cert_path.to_owned(),
        reason,
    };
    let cert_pem = read_regular(cert_path).map_err(cert_error)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_error(e.to_string()))?;
    if chain.is_empty() {
        return Err(cert_error("no PEM certificate in it".into()));
    }
    let key_error = |reason: String| TlsError::Key {
        path: key_path.to_owned(),
        reason,
    };
    let key_pem = read_regular(key_path).map_err(key_error)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| key_error(e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Pair(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Pair(e.to_string()))?;
    // HTTP/1.1 only: browsers then never try HTTP/2 on a port that speaks
    // only HTTP/1.1 and WebSocket.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // No resumption tickets: clients reconnect rarely, and a ticket would
    // be one more record a shard writes after the hand-over.
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let certified = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        let (cert, key) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert, certified.cert.pem()).unwrap();
        std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
        (cert, key)
    }

    #[test]
    fn a_fifo_at_the_path_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair(dir.path(), "ok");
        let tls = ServerTls::load(&cert, &key).unwrap();
        std::fs::remove_file(&cert).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&cert)
            .status()
            .unwrap();
        assert!(made.success());
        let e = tls.reload().unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    #[test]
    fn bad_files_say_which_and_why_and_a_failed_reload_keeps_the_pair() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair(dir.path(), "a");
        let (_, other_key) = pair(dir.path(), "b");
        let tls = ServerTls::load(&cert, &key).unwrap();
        let missing = dir.path().join("none.pem");
        let e = ServerTls::load(&missing, &key).unwrap_err().to_string();
        assert!(
            e.starts_with("--tls-cert ") && e.contains("none.pem"),
            "{e}"
        );
        let e = ServerTls::load(&cert, &cert).unwrap_err().to_string();
        assert!(e.starts_with("--tls-key "), "{e}");
        std::fs::write(dir.path().join("empty.pem"), "").unwrap();
        let e = ServerTls::load(&dir.path().join("empty.pem"), &key)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no PEM certificate"), "{e}");
        let e = ServerTls::load(&cert, &other_key).unwrap_err().to_string();
        assert!(e.starts_with("--tls-cert and --tls-key"), "{e}");

        let before = Arc::as_ptr(&tls.current.read().unwrap());
        std::fs::write(&cert, "garbage").unwrap();
        assert!(tls.reload().is_err());
        assert_eq!(Arc::as_ptr(&tls.current.read().unwrap()), before);
        let (cert2, key2) = pair(dir.path(), "c");
        std::fs::rename(cert2, &cert).unwrap();
        std::fs::rename(key2, &key).unwrap();
        tls.reload().unwrap();
        assert_ne!(Arc::as_ptr(&tls.current.read().unwrap()), before);
    }
}
