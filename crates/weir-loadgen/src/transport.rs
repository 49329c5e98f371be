//! The connection under the HTTP client: plain TCP or TLS (rustls with aws-lc-rs), opened with
//! TCP_NODELAY. TLS certificates are not verified (a load generator points at test servers, as
//! h2load and wrk do), but the server's handshake signature is, so the client does the work a
//! real one does. Session resumption is off unless asked for: every connection then makes a
//! full handshake, which is what a handshakes/s figure means.

use std::io;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio_util::either::Either;

use crate::options::Options;

/// A client connection: plain TCP or TLS.
pub type Stream = Either<TcpStream, Box<tokio_rustls::client::TlsStream<TcpStream>>>;

/// The TLS side of a run: one client config (and session store) per thread.
#[derive(Clone)]
pub struct Tls {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("name", &self.name).finish()
    }
}

impl Tls {
    /// The TLS settings for `opts`, if its target is `https://`.
    pub fn for_options(opts: &Options) -> Result<Option<Tls>, String> {
        if !opts.target.tls {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SignaturesOnly(provider)))
            .with_no_client_auth();
        cfg.alpn_protocols = if opts.h2 {
            vec![b"h2".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        if !opts.tls_resume {
            cfg.resumption = rustls::client::Resumption::disabled();
        }
        let name = ServerName::try_from(opts.target.server_name.clone())
            .map_err(|e| format!("{}: not a server name: {e}", opts.target.server_name))?;
        Ok(Some(Tls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(cfg)),
            name,
        }))
    }
}

/// Opens a connection to the target: TCP, then the TLS handshake if `tls` is given.
pub async fn connect(opts: &Options, tls: Option<&Tls>) -> io::Result<Stream> {
    let tcp = TcpStream::connect(opts.target.addr).await?;
    let _ = tcp.set_nodelay(true);
    match tls {
        None => Ok(Either::Left(tcp)),
        Some(t) => {
            let s = t.connector.connect(t.name.clone(), tcp).await?;
            if opts.h2 && s.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err(io::Error::other("the server did not agree to h2 (ALPN)"));
            }
            Ok(Either::Right(Box::new(s)))
        }
    }
}

/// Accepts any certificate, but checks the handshake signatures with the provider's
/// algorithms (the client's share of a handshake's cost). Also the verifier of weir's
/// `insecure_skip_verify` upstreams.
#[derive(Debug)]
pub struct SignaturesOnly(Arc<CryptoProvider>);

impl SignaturesOnly {
    pub fn new(provider: Arc<CryptoProvider>) -> SignaturesOnly {
        SignaturesOnly(provider)
    }
}

impl ServerCertVerifier for SignaturesOnly {
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
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
