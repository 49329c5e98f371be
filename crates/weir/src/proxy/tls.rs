//! TLS to upstream servers (`https://` servers, or an upstream with a `tls:` section): rustls
//! with the aws-lc-rs provider, verified against the system's roots or a given CA, SNI from the
//! server's host (or `tls.sni`), an optional client certificate, and session resumption across
//! the pool's connections (rustls' in-memory session store, one per upstream and config).
//! Health checks connect through [`connect`] too, so they see what requests see.
//!
//! `insecure_skip_verify` accepts any certificate but still checks the handshake's signatures
//! (the verifier the load generator uses, one piece for both); it is logged at warn on every
//! load of the config, so it cannot go unnoticed in production.

use std::io;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::RootCertStore;
use tokio::net::TcpStream;
use tokio_util::either::Either;

use crate::config::{model, BaseDir, CompileError};

pub use super::socket::Socket;

/// An upstream connection: a socket, or the pipe of one HTTP/2 stream (`h2_upstream.rs`).
pub type UpStream = Either<Socket, tokio::io::DuplexStream>;

/// The socket under an upstream connection (for probes); `None` for an HTTP/2 stream.
pub fn socket(s: &UpStream) -> Option<&Socket> {
    match s {
        Either::Left(s) => Some(s),
        Either::Right(_) => None,
    }
}

/// An upstream's TLS settings, compiled.
#[derive(Clone)]
pub struct UpstreamTls {
    connector: tokio_rustls::TlsConnector,
    /// `tls.sni`, when given; else each server's host.
    sni: Option<ServerName<'static>>,
}

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("sni", &self.sni)
            .finish()
    }
}

impl UpstreamTls {
    /// The name a server at `host` is asked for and verified as.
    pub fn name_for(&self, host: &str) -> Result<ServerName<'static>, String> {
        match &self.sni {
            Some(n) => Ok(n.clone()),
            None => ServerName::try_from(host.to_string())
                .map_err(|e| format!("{host:?} is not a TLS server name: {e}")),
        }
    }
}

/// The system's root certificates, read once per process.
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::warn!(error = %e, "reading the system's root certificates");
            }
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            tracing::debug!(roots = added, "system root certificates loaded");
            Arc::new(roots)
        })
        .clone()
}

/// Compiles an upstream's `tls:` section (at key `path`) for upstream `name`.
pub(crate) fn compile(
    t: &model::UpstreamTls,
    name: &str,
    path: &str,
    base: &BaseDir,
    h2: bool,
) -> Result<UpstreamTls, CompileError> {
    let provider = Arc::new(crate::tls::provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| (path.to_string(), e.to_string()))?;
    let builder = if t.insecure_skip_verify {
        tracing::warn!(
            upstream = name,
            "upstream TLS certificates are NOT verified (insecure_skip_verify): for labs only"
        );
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(
                weir_loadgen::transport::SignaturesOnly::new(provider),
            ))
    } else {
        let roots = match &t.ca {
            Some(ca) => {
                let at = format!("{path}.ca");
                let mut roots = RootCertStore::empty();
                for cert in crate::tls::certs::read_certs(&base.0.join(ca))
                    .map_err(|m| (at.clone(), m.to_string()))?
                {
                    roots.add(cert).map_err(|e| (at.clone(), e.to_string()))?;
                }
                Arc::new(roots)
            }
            None => system_roots(),
        };
        builder.with_root_certificates(roots)
    };
    let mut cfg = match &t.client_cert {
        None => builder.with_no_client_auth(),
        Some(c) => {
            let at = format!("{path}.client_cert");
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            let loaded = crate::tls::certs::load(
                &base.0.join(&c.cert),
                &base.0.join(&c.key),
                &crate::tls::provider(),
                now,
            )
            .map_err(|m| (at.clone(), m.to_string()))?;
            let key = crate::tls::certs::read_key(&base.0.join(&c.key))
                .map_err(|m| (at.clone(), m.to_string()))?;
            builder
                .with_client_auth_cert(loaded.key.cert.clone(), key)
                .map_err(|e| (at, e.to_string()))?
        }
    };
    cfg.alpn_protocols = vec![if h2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    let sni = match &t.sni {
        Some(s) => Some(
            ServerName::try_from(s.clone())
                .map_err(|e| (format!("{path}.sni"), format!("not a server name: {e}")))?,
        ),
        None => None,
    };
    Ok(UpstreamTls {
        connector: tokio_rustls::TlsConnector::from(Arc::new(cfg)),
        sni,
    })
}

/// Connects to `addr` within `within`, sends `preamble` (a PROXY protocol header: before
/// TLS, as HAProxy's `send-proxy` does), then makes the TLS handshake when `tls` is given
/// (`socket::connect` calls this for servers with an address).
pub async fn connect(
    addr: std::net::SocketAddr,
    tls: Option<(&UpstreamTls, &ServerName<'static>)>,
    within: Duration,
    preamble: &[u8],
) -> io::Result<Socket> {
    let open = async {
        let mut tcp = TcpStream::connect(addr).await?;
        let _ = tcp.set_nodelay(true);
        if !preamble.is_empty() {
            tokio::io::AsyncWriteExt::write_all(&mut tcp, preamble).await?;
        }
        match tls {
            None => Ok(Socket::Tcp(tcp)),
            Some((t, name)) => {
                let s = t.connector.connect(name.clone(), tcp).await?;
                Ok(Socket::Tls(Box::new(s)))
            }
        }
    };
    tokio::time::timeout(within, open)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))?
}
