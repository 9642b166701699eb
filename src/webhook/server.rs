//! HTTPS for the webhook: rustls with a certificate that can be swapped while serving (rotation,
//! or a cert-manager directory that changed), hyper's HTTP/1.1 and an axum router.

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The certificate the server presents; empty until the first one is set (a handshake then
/// fails).
#[derive(Debug, Default)]
pub struct CertSlot(RwLock<Option<(Arc<CertifiedKey>, String)>>);

impl ResolvesServerCert for CertSlot {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().ok()?.as_ref().map(|(k, _)| k.clone())
    }
}

impl CertSlot {
    /// Serve `cert_pem` (a chain) with `key_pem` from now on. Returns whether it changed.
    pub fn set(&self, cert_pem: &str, key_pem: &str) -> Result<bool, String> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        if self.0.read().map_err(|e| e.to_string())?.as_ref().is_some_and(|(_, c)| c == cert_pem) {
            return Ok(false);
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("reading the certificate: {e}"))?;
        if chain.is_empty() {
            return Err("the certificate file holds no certificate".into());
        }
        // The key's parse error never includes the key.
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|_| "reading the private key failed")?;
        let signing = rustls::crypto::aws_lc_rs::sign::any_supported_type(&key)
            .map_err(|_| "the private key is of an unsupported type")?;
        let certified = Arc::new(CertifiedKey::new(chain, signing));
        *self.0.write().map_err(|e| e.to_string())? = Some((certified, cert_pem.to_string()));
        Ok(true)
    }

    /// Whether a certificate is set.
    pub fn is_set(&self) -> bool {
        self.0.read().map(|s| s.is_some()).unwrap_or(false)
    }
}

/// Serve `router` over TLS on `listener` with the certificates of `certs` until `stop`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    certs: Arc<CertSlot>,
    router: axum::Router,
    stop: impl Future<Output = ()>,
) -> Result<(), String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(certs);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "webhook: accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut stop => return Ok(()),
        };
        let (acceptor, router) = (acceptor.clone(), router.clone());
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "webhook: TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let service = hyper_util::service::TowerToHyperService::new(router);
            let conn =
                hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(tls), service);
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "webhook: connection ended with an error");
            }
        });
    }
}
