//! HTTPS: a listener that accepts TCP connections and completes each TLS handshake (rustls)
//! in a task of its own, bounded in time, so a slow or silent client never holds up the
//! others; `axum::serve` takes it like a plain `TcpListener`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Connections that finished their handshake, waiting to be served.
const READY: usize = 1024;

/// A listener of TLS connections.
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

/// Reads a certificate chain and its private key (PEM files) into a server configuration.
///
/// # Errors
/// A message naming the file and what is wrong with it.
pub fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "--tls-cert {}: no certificate in the file",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("--tls-key {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("--tls-cert and --tls-key do not make a usable pair: {e}"))
}

impl TlsListener {
    /// Serves TLS on `listener` with `config`; handshakes run in tasks of their own.
    ///
    /// # Errors
    /// The listener's address cannot be read.
    pub fn new(listener: TcpListener, config: rustls::ServerConfig) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let (send, ready) = mpsc::channel(READY);
        tokio::spawn(async move {
            loop {
                let Ok((tcp, addr)) = listener.accept().await else {
                    // Out of descriptors and the like: wait a little, as axum does.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                // Requests and answers are small and alternate: send each at once.
                let _ = tcp.set_nodelay(true);
                let (acceptor, handed) = (acceptor.clone(), send.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = handed.send((tls, addr)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%addr, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
                    }
                });
                if send.is_closed() {
                    return;
                }
            }
        });
        Ok(Self { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            if let Some(ready) = self.ready.recv().await {
                return ready;
            }
            // The accepting task ended: nothing will come; wait for shutdown.
            std::future::pending::<()>().await;
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
