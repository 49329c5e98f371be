//! Choosing a certificate by the name the client sent (SNI): an exact name first, then a
//! `*.` wildcard one label deep (`*.example.com` covers `a.example.com`, not `example.com` or
//! `a.b.example.com`, as RFC 6125 says), then the default (the first certificate).

use std::collections::HashMap;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The certificates of one listener, by name.
#[derive(Debug)]
pub(crate) struct SniResolver {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// By the suffix after `*.`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    default: Arc<CertifiedKey>,
}

impl SniResolver {
    pub(crate) fn new(default: Arc<CertifiedKey>) -> SniResolver {
        SniResolver {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
            default,
        }
    }

    /// Adds `name` for `key`; the first certificate given a name keeps it.
    pub(crate) fn add(&mut self, name: &str, key: &Arc<CertifiedKey>) {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        match name.strip_prefix("*.") {
            Some(suffix) => self.wildcard.entry(suffix.to_string()),
            None => self.exact.entry(name),
        }
        .or_insert_with(|| key.clone());
    }

    /// The certificate for `name` (lowercase or not); the default when none matches.
    pub(crate) fn pick(&self, name: Option<&str>) -> &Arc<CertifiedKey> {
        let Some(name) = name else {
            return &self.default;
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(k) = self.exact.get(&name) {
            return k;
        }
        if let Some((_, parent)) = name.split_once('.') {
            if let Some(k) = self.wildcard.get(parent) {
                return k;
            }
        }
        &self.default
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.pick(hello.server_name()).clone())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(tag: &str) -> Arc<CertifiedKey> {
        let k = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![tag.to_string()])
            .unwrap()
            .self_signed(&k)
            .unwrap();
        let der = rustls_pki_types::PrivateKeyDer::try_from(k.serialize_der()).unwrap();
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        Arc::new(CertifiedKey::from_der(vec![cert.der().clone()], der, &provider).unwrap())
    }

    #[test]
    fn exact_then_one_label_wildcard_then_default() {
        let (d, a, w) = (key("default"), key("a.example.com"), key("*.example.com"));
        let mut r = SniResolver::new(d.clone());
        r.add("A.example.com.", &a);
        r.add("*.example.com", &w);
        r.add("a.example.com", &w); // first one keeps the name
        let cases: &[(Option<&str>, &Arc<CertifiedKey>)] = &[
            (Some("a.example.com"), &a),
            (Some("A.EXAMPLE.COM"), &a),
            (Some("b.example.com"), &w),
            (Some("example.com"), &d),
            (Some("x.b.example.com"), &d),
            (Some("other.org"), &d),
            (None, &d),
        ];
        for (name, want) in cases {
            assert!(Arc::ptr_eq(r.pick(*name), want), "{name:?}");
        }
    }
}
