//! Optional TLS on the listener (`HERD_TLS_CERT` / `HERD_TLS_KEY`): rustls (ring, the provider
//! reqwest already links) via tokio-rustls, offering h2 and http/1.1 by ALPN. The certificate
//! chain and key are read once at startup; a bad file is a startup error naming it.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// An acceptor for the PEM certificate chain at `cert` and the PEM private key at `key`.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("HERD_TLS_CERT {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("HERD_TLS_CERT {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "HERD_TLS_CERT {}: no PEM certificate in the file",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("HERD_TLS_KEY {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("HERD_TLS_CERT/HERD_TLS_KEY: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
