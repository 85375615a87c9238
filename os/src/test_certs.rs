//! For other crates' TLS tests: a private CA and a server certificate it
//! signed for `localhost` and `127.0.0.1`, as PEM files, the way a site
//! with its own CA deploys the agent.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// The files of one private CA and one server certificate.
#[derive(Clone, Debug)]
pub struct PrivateCa {
    /// The CA's certificate: what clients trust (`--ca-file`).
    pub ca: PathBuf,
    /// The server's certificate chain (`--tls-cert`).
    pub cert: PathBuf,
    /// The server's key (`--tls-key`).
    pub key: PathBuf,
}

/// A new CA named `name`, and a server certificate it signed, written into
/// `dir` as `NAME-ca.pem`, `NAME-server.pem` and `NAME-server.key`.
pub fn private_ca(dir: &Path, name: &str) -> PrivateCa {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("skewscope test CA {name}"));
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("a CA key"))
        .expect("a self-signed CA");
    let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("server parameters");
    let key = KeyPair::generate().expect("a server key");
    let cert = params.signed_by(&key, &ca).expect("a server certificate");
    let files = PrivateCa {
        ca: dir.join(format!("{name}-ca.pem")),
        cert: dir.join(format!("{name}-server.pem")),
        key: dir.join(format!("{name}-server.key")),
    };
    std::fs::write(&files.ca, ca.pem()).expect("write the CA");
    std::fs::write(&files.cert, cert.pem()).expect("write the certificate");
    std::fs::write(&files.key, key.serialize_pem()).expect("write the key");
    files
}
