//! Reading a certificate chain and its key from PEM files, with the checks an operator wants at
//! load time rather than at the first handshake: readable files, a key that matches the
//! certificate, a certificate that is valid now. Each error names the file.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::error::TlsError;

/// A loaded certificate: what rustls signs with, and the names it is valid for.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub key: Arc<CertifiedKey>,
    /// DNS names from the subjectAltName (or the subject's CN when there is none), lowercase.
    pub names: Vec<String>,
    /// The leaf's expiry (Unix seconds).
    pub not_after: i64,
}

/// Reads the PEM certificates of `path` (at least one).
pub(crate) fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let text = std::fs::read(path).map_err(|e| TlsError::file("read", path, e))?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::certificate(format_args!("{}: bad PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsError::certificate(format_args!(
            "{}: no PEM certificate found",
            path.display()
        )));
    }
    Ok(certs)
}

/// Reads the PEM private key of `path` (PKCS#8, PKCS#1 or SEC1).
pub(crate) fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = std::fs::read(path).map_err(|e| TlsError::file("read", path, e))?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        TlsError::certificate(format_args!(
            "{}: no private key found (PKCS#8, PKCS#1 or SEC1 PEM): {e}",
            path.display()
        ))
    })
}

/// Loads `cert` (chain) and `key`, checking that they belong together and that the
/// certificate is valid at `now` (seconds since the epoch).
pub(crate) fn load(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
    now: i64,
) -> Result<Loaded, TlsError> {
    let chain = read_certs(cert)?;
    let private = read_key(key)?;
    let (names, not_after) = check_leaf(&chain[0], cert, now)?;
    let certified = CertifiedKey::from_der(chain, private, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => TlsError::certificate(format_args!(
            "key {} does not match certificate {}",
            key.display(),
            cert.display()
        )),
        other => TlsError::certificate(format_args!("{}: unusable key: {other}", key.display())),
    })?;
    Ok(Loaded {
        key: Arc::new(certified),
        names,
        not_after,
    })
}

/// Checks the leaf's validity period; returns its DNS names and its expiry.
fn check_leaf(
    der: &CertificateDer<'_>,
    path: &Path,
    now: i64,
) -> Result<(Vec<String>, i64), TlsError> {
    let (_, x509) = x509_parser::parse_x509_certificate(der).map_err(|e| {
        TlsError::certificate(format_args!(
            "{}: not an X.509 certificate: {e}",
            path.display()
        ))
    })?;
    let validity = x509.validity();
    if validity.not_after.timestamp() < now {
        return Err(TlsError::certificate(format_args!(
            "{}: certificate expired on {}",
            path.display(),
            validity.not_after
        )));
    }
    if validity.not_before.timestamp() > now {
        return Err(TlsError::certificate(format_args!(
            "{}: certificate is not valid before {}",
            path.display(),
            validity.not_before
        )));
    }
    let mut names = Vec::new();
    if let Ok(Some(san)) = x509.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(n) = name {
                names.push(n.to_ascii_lowercase());
            }
        }
    }
    if names.is_empty() {
        if let Some(cn) = x509.subject().iter_common_name().next() {
            if let Ok(cn) = cn.as_str() {
                names.push(cn.to_ascii_lowercase());
            }
        }
    }
    Ok((names, validity.not_after.timestamp()))
}

/// The subject of a DER certificate as a string (`CN=client, O=Example`: attributes in certificate order, comma and space between), for
/// routes and logs.
pub(crate) fn subject(der: &[u8]) -> Option<String> {
    let (_, x509) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(x509.subject().to_string())
}
