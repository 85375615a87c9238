//! TLS for `wss://`: rustls on ring (pure Rust but for ring's small C and
//! assembly core, which cross-compiles for every device target), trusting
//! the device's system roots, or only a private CA (`--ca-file`), or
//! nothing at all (`--insecure`, recorded so reports warn).

use std::path::Path;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Whom a run's TLS connections trust.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Trust {
    /// The device's system roots.
    System,
    /// Only the CAs in this PEM file.
    CaFile(std::path::PathBuf),
    /// Nobody is checked (`--insecure`).
    Nothing,
}

impl Trust {
    /// What `--ca-file` and `--insecure` ask for (they conflict on the
    /// command line; `--insecure` wins here).
    pub(crate) fn of(ca_file: Option<&Path>, insecure: bool) -> Trust {
        match (ca_file, insecure) {
            (_, true) => Trust::Nothing,
            (Some(path), false) => Trust::CaFile(path.to_owned()),
            (None, false) => Trust::System,
        }
    }
}

/// Why no TLS configuration could be made: a run stops at once on it.
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum TrustError {
    /// rustls refused the protocol versions (a build without them).
    #[error("TLS: {0}")]
    Rustls(String),
    /// `wss://` with system roots, and the device has none.
    #[error(
        "wss://: no trusted root certificates on this device (looked in the system \
         store, like /etc/ssl/certs); install ca-certificates or give --ca-file"
    )]
    NoSystemRoots,
    /// `--ca-file` could not be read or holds no usable certificate.
    #[error("--ca-file {path}: {reason}")]
    CaFile {
        /// The file as given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// A client configuration for `trust`, and whether it verifies servers.
pub(crate) fn client_config(trust: &Trust) -> Result<(Arc<ClientConfig>, bool), TrustError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TrustError::Rustls(e.to_string()))?;
    let config = match trust {
        Trust::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoCheck(
                provider.signature_verification_algorithms,
            )))
            .with_no_client_auth(),
        Trust::System => builder
            .with_root_certificates(system_roots()?)
            .with_no_client_auth(),
        Trust::CaFile(path) => builder
            .with_root_certificates(ca_file_roots(path)?)
            .with_no_client_auth(),
    };
    Ok((Arc::new(config), *trust != Trust::Nothing))
}

fn system_roots() -> Result<RootCertStore, TrustError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(TrustError::NoSystemRoots);
    }
    Ok(roots)
}

fn ca_file_roots(path: &Path) -> Result<RootCertStore, TrustError> {
    let bad = |reason: String| TrustError::CaFile {
        path: path.display().to_string(),
        reason,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no PEM certificate in it".into()));
    }
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| bad(e.to_string()))?;
    }
    Ok(roots)
}

/// `--insecure`: accepts any certificate, but still checks that the server
/// holds the key it presented (the handshake's signatures), so what is
/// skipped is exactly who the server is.
#[derive(Debug)]
struct NoCheck(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for NoCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
