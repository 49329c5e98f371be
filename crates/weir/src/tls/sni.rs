//! Choosing a certificate by the name the client sent (SNI): a TLS-ALPN-01 challenge's
//! certificate when the client offers only `acme-tls/1`; then the ACME certificate whose names
//! include it (the listener's, or a site's: several may be obtained side by side); then an
//! exact name, then a `*.` wildcard one label deep (`*.example.com`
//! covers `a.example.com`, not `example.com` or `a.b.example.com`, as RFC 6125 says), then one
//! obtained on demand for the name (`on_demand.rs`), then the default (the first certificate,
//! else the ACME one).
//!
//! Each configured certificate sits in a [`Slot`], which OCSP stapling (`ocsp.rs`) swaps for
//! the same certificate with a fresh response: one atomic load per handshake.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::acme::{AcmeCerts, Challenges, ACME_TLS_ALPN};

/// A certificate that may be replaced while it is served.
pub(crate) type Slot = Arc<ArcSwap<CertifiedKey>>;

/// The certificates of one listener, by name.
#[derive(Debug)]
pub(crate) struct SniResolver {
    exact: HashMap<String, Slot>,
    /// By the suffix after `*.`.
    wildcard: HashMap<String, Slot>,
    default: Option<Slot>,
    /// ACME certificate sets, each for its names (the first is the default when no file
    /// certificate is).
    acme: Vec<Arc<AcmeCerts>>,
}

impl SniResolver {
    pub(crate) fn new(default: Option<Slot>, acme: Vec<Arc<AcmeCerts>>) -> SniResolver {
        SniResolver {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
            default,
            acme,
        }
    }

    /// Adds `name` for `key`; the first certificate given a name keeps it.
    pub(crate) fn add(&mut self, name: &str, key: &Slot) {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        match name.strip_prefix("*.") {
            Some(suffix) => self.wildcard.entry(suffix.to_string()),
            None => self.exact.entry(name),
        }
        .or_insert_with(|| key.clone());
    }

    /// The configured certificate for `name` (lowercase or not); the default when none
    /// matches.
    #[cfg(test)]
    pub(crate) fn pick(&self, name: Option<&str>) -> Option<&Slot> {
        name.map(|n| n.trim_end_matches('.').to_ascii_lowercase())
            .and_then(|n| self.named(&n))
            .or(self.default.as_ref())
    }

    /// A file certificate naming `name` (lowercase, no trailing dot), exactly or by a wildcard;
    /// not the default.
    fn named(&self, name: &str) -> Option<&Slot> {
        if let Some(k) = self.exact.get(name) {
            return Some(k);
        }
        let (_, parent) = name.split_once('.')?;
        self.wildcard.get(parent)
    }

    /// The certificate obtained on demand for `name`, if any.
    fn on_demand(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.acme
            .iter()
            .filter_map(|a| a.on_demand.as_ref())
            .find_map(|od| od.cert(name))
    }

    /// Whether a certificate of its own serves `name` (lowercase, no trailing dot): an ACME
    /// one naming it and obtained, a file naming it, or one obtained on demand.
    pub(crate) fn covers(&self, name: &str) -> bool {
        self.acme
            .iter()
            .any(|a| a.serves(name) && a.current.load().is_some())
            || self.named(name).is_some()
            || self.on_demand(name).is_some()
    }

    fn challenges(&self) -> Option<&Challenges> {
        self.acme.first().map(|a| &*a.challenges)
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name();
        if let Some(challenges) = self.challenges() {
            let mut offered = hello.alpn().into_iter().flatten();
            if offered.next() == Some(ACME_TLS_ALPN) && offered.next().is_none() {
                return challenges.alpn_cert(name);
            }
        }
        let acme_cert = |a: &AcmeCerts| a.current.load().as_ref().map(|c| c.key.clone());
        let Some(name) = name else {
            // No name: the first ACME certificate (as with one `acme:`), else the default.
            return self
                .acme
                .iter()
                .find_map(|a| acme_cert(a))
                .or_else(|| self.default.as_ref().map(|s| s.load_full()));
        };
        if let Some(c) = self
            .acme
            .iter()
            .filter(|a| a.serves(name))
            .find_map(|a| acme_cert(a))
        {
            return Some(c);
        }
        let lower = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(s) = self.named(&lower) {
            return Some(s.load_full());
        }
        if let Some(c) = self.on_demand(&lower) {
            return Some(c);
        }
        match &self.default {
            Some(s) => Some(s.load_full()),
            // Nothing names it and no file certificate is the default: the first ACME one.
            None => self.acme.iter().find_map(|a| acme_cert(a)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(tag: &str) -> Slot {
        let k = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![tag.to_string()])
            .unwrap()
            .self_signed(&k)
            .unwrap();
        let der = rustls_pki_types::PrivateKeyDer::try_from(k.serialize_der()).unwrap();
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        Arc::new(ArcSwap::from_pointee(
            CertifiedKey::from_der(vec![cert.der().clone()], der, &provider).unwrap(),
        ))
    }

    #[test]
    fn exact_then_one_label_wildcard_then_default() {
        let (d, a, w) = (key("default"), key("a.example.com"), key("*.example.com"));
        let mut r = SniResolver::new(Some(d.clone()), Vec::new());
        r.add("A.example.com.", &a);
        r.add("*.example.com", &w);
        r.add("a.example.com", &w); // first one keeps the name
        let cases: &[(Option<&str>, &Slot)] = &[
            (Some("a.example.com"), &a),
            (Some("A.EXAMPLE.COM"), &a),
            (Some("b.example.com"), &w),
            (Some("example.com"), &d),
            (Some("x.b.example.com"), &d),
            (Some("other.org"), &d),
            (None, &d),
        ];
        for (name, want) in cases {
            assert!(Arc::ptr_eq(r.pick(*name).unwrap(), want), "{name:?}");
        }
    }
}
