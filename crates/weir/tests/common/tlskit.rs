//! TLS test fixtures: a throwaway CA, server and client certificates written as PEM files,
//! and clients (rustls over std sockets for HTTP/1.1; tokio for HTTP/2).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A CA and the PEM files of certificates it issued.
pub struct Pki {
    pub dir: PathBuf,
    ca_params: CertificateParams,
    ca_key: KeyPair,
    pub ca_der: CertificateDer<'static>,
}

/// A certificate's files, and its DER forms for a client.
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub chain: Vec<CertificateDer<'static>>,
    pub key_der: PrivateKeyDer<'static>,
}

impl Pki {
    /// A fresh CA whose files go in a directory of their own (`tag` keeps tests apart).
    pub fn new(tag: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("weir-pki-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("weir test CA {tag}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = params.self_signed(&ca_key).unwrap();
        let ca_der = ca_cert.der().clone();
        std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
        Pki {
            dir,
            ca_params: params,
            ca_key,
            ca_der,
        }
    }

    /// The CA certificate's PEM file.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// Issues a certificate for `names` (server) with common name `cn`, written as
    /// `<file>.pem` and `<file>.key`.
    pub fn issue(&self, file: &str, cn: &str, names: &[&str]) -> Issued {
        self.issue_with(file, cn, names, |_| {})
    }

    /// [`Pki::issue`], with `edit` applied to the parameters (validity, say).
    pub fn issue_with(
        &self,
        file: &str,
        cn: &str,
        names: &[&str],
        edit: impl FnOnce(&mut CertificateParams),
    ) -> Issued {
        self.issue_key(file, cn, names, KeyPair::generate().unwrap(), edit)
    }

    /// [`Pki::issue_with`] for a given key (RSA, Ed25519, ...).
    pub fn issue_key(
        &self,
        file: &str,
        cn: &str,
        names: &[&str],
        key: KeyPair,
        edit: impl FnOnce(&mut CertificateParams),
    ) -> Issued {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "weir tests");
        edit(&mut params);
        let issuer = rcgen::Issuer::from_params(&self.ca_params, &self.ca_key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        let cert_path = self.dir.join(format!("{file}.pem"));
        let key_path = self.dir.join(format!("{file}.key"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        Issued {
            cert: cert_path,
            key: key_path,
            chain: vec![cert.der().clone()],
            key_der: PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        }
    }
}

/// A client config trusting `ca`, offering `alpn`, with an optional client certificate.
pub fn client_config(
    ca: &CertificateDer<'static>,
    alpn: &[&str],
    client_cert: Option<&Issued>,
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut cfg = match client_cert {
        Some(c) => builder
            .with_client_auth_cert(c.chain.clone(), c.key_der.clone_key())
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    Arc::new(cfg)
}

/// A TLS 1.2-only client config trusting `ca`, offering HTTP/1.1.
pub fn tls12_config(ca: &CertificateDer<'static>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// A client config trusting `ca` that offers only `suite` (and its protocol version), HTTP/1.1.
pub fn suite_config(
    ca: &CertificateDer<'static>,
    suite: rustls::SupportedCipherSuite,
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites = vec![suite];
    let version = match suite {
        rustls::SupportedCipherSuite::Tls13(_) => &rustls::version::TLS13,
        rustls::SupportedCipherSuite::Tls12(_) => &rustls::version::TLS12,
    };
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// A TLS connection over a blocking socket.
pub type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Connects and completes the handshake for server name `sni`.
pub fn connect(
    addr: SocketAddr,
    sni: &str,
    cfg: &Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream> {
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let conn = rustls::ClientConnection::new(cfg.clone(), name).unwrap();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

/// The leaf certificate the server presented, as DER.
pub fn presented(s: &TlsStream) -> CertificateDer<'static> {
    s.conn.peer_certificates().unwrap()[0].clone().into_owned()
}

/// One HTTP/1.1 request and its response over `s`.
pub fn exchange(s: &mut TlsStream, raw: &str) -> super::Response {
    s.write_all(raw.as_bytes()).unwrap();
    s.flush().unwrap();
    super::read_response_to(s, raw.starts_with("HEAD "))
}

/// Reads until EOF or error; returns what came.
pub fn drain(s: &mut impl Read) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}
