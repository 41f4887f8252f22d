//! TLS for the TCP listener (rustls with the ring provider): the certificate chain and key
//! from PEM files, loaded once at start, and the rule of where plain HTTP may listen.
//!
//! This module owns loading the files and the listening rule ([`check_listen`]); the
//! handshake of each connection happens in [`crate::listener`], before HTTP is spoken.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;

/// Where the certificate chain and its private key are (PEM).
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why the server will not start as configured.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the TLS certificate {path}: {reason}")]
    Certificate { path: PathBuf, reason: String },
    #[error("cannot read the TLS key {path}: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("the TLS certificate and key do not fit together: {0}")]
    Config(String),
    #[error(
        "refusing to serve plain HTTP on {listen}, which is reachable beyond this machine: \
         the token and every terminal's bytes would cross the network in clear. Give \
         --tls-cert and --tls-key, or --allow-plain-http if a trusted network or a TLS proxy \
         in front makes that safe"
    )]
    PlainBeyondLoopback { listen: SocketAddr },
}

impl From<TlsError> for std::io::Error {
    fn from(error: TlsError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, error.to_string())
    }
}

/// Whether `listen` is reachable only from this machine.
pub fn is_loopback(listen: SocketAddr) -> bool {
    listen.ip().is_loopback()
}

/// Refuses plain HTTP on an address beyond loopback unless `allow_plain_http` says it is
/// meant; TLS may listen anywhere.
pub fn check_listen(
    listen: SocketAddr,
    has_tls: bool,
    allow_plain_http: bool,
) -> Result<(), TlsError> {
    if has_tls || allow_plain_http || is_loopback(listen) {
        Ok(())
    } else {
        Err(TlsError::PlainBeyondLoopback { listen })
    }
}

/// The rustls configuration of `files`, speaking HTTP/1.1 only (as the listener does).
pub fn load(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certificates(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| TlsError::Key {
        path: files.key.clone(),
        reason: e.to_string(),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let failed = |reason: String| TlsError::Certificate {
        path: path.to_owned(),
        reason,
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| failed(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| failed(e.to_string()))?;
    if chain.is_empty() {
        return Err(failed("no CERTIFICATE block in it".to_owned()));
    }
    Ok(chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_beyond_loopback_needs_the_flag() {
        let any: SocketAddr = "0.0.0.0:1".parse().unwrap_or_else(|e| panic!("{e}"));
        let lan: SocketAddr = "192.168.1.5:1".parse().unwrap_or_else(|e| panic!("{e}"));
        let local: SocketAddr = "127.0.0.1:1".parse().unwrap_or_else(|e| panic!("{e}"));
        let local6: SocketAddr = "[::1]:1".parse().unwrap_or_else(|e| panic!("{e}"));
        assert!(check_listen(any, false, false).is_err());
        assert!(check_listen(lan, false, false).is_err());
        assert!(check_listen(any, true, false).is_ok());
        assert!(check_listen(any, false, true).is_ok());
        assert!(check_listen(local, false, false).is_ok());
        assert!(check_listen(local6, false, false).is_ok());
    }

    #[test]
    fn a_missing_file_is_named() {
        let files = TlsFiles {
            cert: PathBuf::from("/nonexistent/cert.pem"),
            key: PathBuf::from("/nonexistent/key.pem"),
        };
        let error = load(&files)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("/nonexistent/cert.pem"), "{error}");
    }
}
