//! rustls configuration for both tunnel ends (ring, the provider the rest of herd links). The
//! worker presents HERD_RPC_TLS_CERT and, with HERD_RPC_TLS_CA, requires a client certificate the
//! CA signed; the serving side verifies the worker against HERD_RPC_TLS_CA (its host name or IP
//! must be in the certificate) and presents its own certificate when it has one.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::{TlsAcceptor, TlsConnector};

fn chain(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let v: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{what} {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    if v.is_empty() {
        return Err(format!(
            "{what} {}: no PEM certificate in the file",
            path.display()
        ));
    }
    Ok(v)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("HERD_RPC_TLS_KEY {}: {e}", path.display()))
}

fn roots(ca: &Path) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in chain(ca, "HERD_RPC_TLS_CA")? {
        roots
            .add(c)
            .map_err(|e| format!("HERD_RPC_TLS_CA {}: {e}", ca.display()))?;
    }
    Ok(roots)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The worker's acceptor: its certificate, and client certificates required when `ca` is set.
pub fn acceptor(cert: &Path, key_path: &Path, ca: Option<&Path>) -> Result<TlsAcceptor, String> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots(ca)?),
                provider(),
            )
            .build()
            .map_err(|e| format!("HERD_RPC_TLS_CA: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain(cert, "HERD_RPC_TLS_CERT")?, key(key_path)?)
        .map_err(|e| format!("HERD_RPC_TLS_CERT/HERD_RPC_TLS_KEY: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The serving side's connector: workers verified against `ca`; `identity` presented as the
/// client certificate when set.
pub fn connector(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<TlsConnector, String> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots(ca)?);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, k)) => builder
            .with_client_auth_cert(chain(cert, "HERD_RPC_TLS_CERT")?, key(k)?)
            .map_err(|e| format!("HERD_RPC_TLS_CERT/HERD_RPC_TLS_KEY: {e}"))?,
    };
    Ok(TlsConnector::from(Arc::new(config)))
}
