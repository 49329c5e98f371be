//! TLS termination with rustls and its aws-lc-rs provider (no OpenSSL): the server config of a
//! listener's `tls:` section, certificates chosen by SNI ([`sni`]), loaded and checked from PEM
//! files ([`certs`]), session resumption, and client certificates (mTLS).
//!
//! Not written by hand: the handshake and record layer are rustls', driven by `tokio-rustls`
//! for the handshake and for HTTP/2. HTTP/1.1 over TLS writes through rustls' own buffers from
//! `server/client_io.rs`, so a response and its records leave in one `send`.
//!
//! Certificates are read when a config is compiled, so a reload (SIGHUP, `POST /reload`)
//! re-reads them; the ticket keys and the session cache belong to the process ([`Shared`]) so
//! that sessions resume across reloads.

pub mod acme;
mod acme_issue;
pub mod acme_threads;
pub(crate) mod certs;
pub(crate) mod dns_update;
pub mod error;
pub mod hello;
pub(crate) mod ocsp;
pub mod on_demand;
pub(crate) mod quic;
pub(crate) mod records;
mod session;
pub(crate) mod sni;
pub(crate) mod stream;
pub(crate) mod tsig_key;

use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;
use rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use rustls::server::{ProducesTickets, ServerSessionMemoryCache, StoresServerSessions};
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};

use crate::config::model::{ClientAuthMode, Tls};
use crate::config::{BaseDir, CompileError};

/// Resumption state that outlives configs: ticket keys (rotating every 6 hours) and the
/// session-id cache.
#[derive(Debug, Default)]
pub struct Shared {
    ticketer: OnceLock<Option<Arc<dyn ProducesTickets>>>,
    cache: OnceLock<Arc<dyn StoresServerSessions>>,
}

impl Shared {
    fn ticketer(&self) -> Option<Arc<dyn ProducesTickets>> {
        self.ticketer
            .get_or_init(|| match rustls::crypto::aws_lc_rs::Ticketer::new() {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot make TLS ticket keys; tickets off");
                    None
                }
            })
            .clone()
    }

    fn cache(&self, size: usize) -> Arc<dyn StoresServerSessions> {
        self.cache
            .get_or_init(|| ServerSessionMemoryCache::new(size))
            .clone()
    }
}

/// What a connection's handshake settled, for routes and logs.
#[derive(Debug, Default, Clone)]
pub struct TlsInfo {
    /// The name the client asked for (SNI), lowercase.
    pub sni: Option<Box<str>>,
    /// `TLSv1.2` or `TLSv1.3`.
    pub protocol: &'static str,
    /// The IANA name of the cipher suite.
    pub cipher: &'static str,
    /// The verified client certificate's subject (mTLS).
    pub client_subject: Option<Box<str>>,
    /// The handshake resumed a session.
    pub resumed: bool,
}

impl TlsInfo {
    /// Reads what the handshake settled from the connection.
    pub(crate) fn of(conn: &rustls::CommonState, sni: Option<&str>) -> TlsInfo {
        TlsInfo {
            sni: sni.map(|s| s.to_ascii_lowercase().into()),
            protocol: match conn.protocol_version() {
                Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
                Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
                _ => "-",
            },
            cipher: conn
                .negotiated_cipher_suite()
                .and_then(|s| s.suite().as_str())
                .unwrap_or("-"),
            client_subject: conn
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| certs::subject(c))
                .map(Into::into),
            resumed: matches!(conn.handshake_kind(), Some(rustls::HandshakeKind::Resumed)),
        }
    }
}

/// The provider every TLS config uses.
pub(crate) fn provider() -> CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

/// A certificate file a listener serves, for the dashboard.
#[derive(Debug, Clone)]
pub struct FileCert {
    pub names: Vec<String>,
    /// Unix seconds.
    pub not_after: i64,
}

/// A listener's server config, the certificate files it loaded, and its on-demand gate.
pub(crate) type Compiled = (
    Arc<ServerConfig>,
    Vec<FileCert>,
    Option<Arc<on_demand::Gate>>,
);

/// Builds the server config of a listener's `tls:` section at key path `path`; `acme` is the
/// state of its `acme:` section and of its sites' (from the registry), each serving its names.
pub(crate) fn server_config(
    t: &Tls,
    path: &str,
    base: &BaseDir,
    shared: &Shared,
    acme: Vec<Arc<acme::AcmeCerts>>,
) -> Result<Compiled, CompileError> {
    let mut provider = provider();
    if let Some(names) = &t.ciphers {
        let mut chosen = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let found = provider
                .cipher_suites
                .iter()
                .find(|s| s.suite().as_str() == Some(name.as_str()));
            match found {
                Some(s) => chosen.push(*s),
                None => {
                    let known: Vec<_> = provider
                        .cipher_suites
                        .iter()
                        .filter_map(|s| s.suite().as_str())
                        .collect();
                    return Err((
                        format!("{path}.ciphers[{i}]"),
                        format!("unknown cipher suite {name:?}; known: {}", known.join(", ")),
                    ));
                }
            }
        }
        provider.cipher_suites = chosen;
    }
    let mut versions: Vec<&'static SupportedProtocolVersion> = Vec::new();
    for (i, v) in t.protocols.iter().enumerate() {
        versions.push(match v.as_str() {
            "tls1.2" => &rustls::version::TLS12,
            "tls1.3" => &rustls::version::TLS13,
            other => {
                return Err((
                    format!("{path}.protocols[{i}]"),
                    format!("unknown protocol {other:?}; known: tls1.2, tls1.3"),
                ))
            }
        });
    }
    if versions.is_empty() {
        return Err((format!("{path}.protocols"), "lists no protocol".into()));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if t.certificates.is_empty() && acme.is_empty() {
        return Err((
            format!("{path}.certificates"),
            "lists no certificate (give certificates, or acme to obtain one)".into(),
        ));
    }
    let mut loaded = Vec::with_capacity(t.certificates.len());
    for (i, c) in t.certificates.iter().enumerate() {
        let at = format!("{path}.certificates[{i}]");
        let l = certs::load(&base.0.join(&c.cert), &base.0.join(&c.key), &provider, now)
            .map_err(|m| (at.clone(), m.to_string()))?;
        let slot: sni::Slot = Arc::new(arc_swap::ArcSwap::new(l.key.clone()));
        loaded.push((l, &c.names, slot));
    }
    let alpn_challenge = acme.iter().any(|a| a.settings.challenge == "tls-alpn-01");
    let mut resolver =
        sni::SniResolver::new(loaded.first().map(|(_, _, s)| s.clone()), acme.clone());
    for (l, names, slot) in &loaded {
        let names = if names.is_empty() { &l.names } else { *names };
        for n in names {
            resolver.add(n, slot);
        }
    }
    if let Some(o) = &t.ocsp {
        let targets = loaded
            .iter()
            .enumerate()
            .map(|(i, (l, _, slot))| ocsp_target(o, path, i, base, l, slot))
            .collect::<Result<Vec<_>, _>>()?;
        if targets.is_empty() {
            return Err((
                format!("{path}.ocsp"),
                "staples the listed certificates, and there are none".into(),
            ));
        }
        ocsp::start(targets, o.refresh.0);
    }
    let provider = Arc::new(provider);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| (format!("{path}.protocols"), e.to_string()))?;
    let builder = match &t.client_auth {
        None => builder.with_no_client_auth(),
        Some(auth) => {
            let at = format!("{path}.client_auth.ca");
            let mut roots = RootCertStore::empty();
            for cert in certs::read_certs(&base.0.join(&auth.ca))
                .map_err(|m| (at.clone(), m.to_string()))?
            {
                roots.add(cert).map_err(|e| (at.clone(), e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match auth.mode {
                ClientAuthMode::Required => verifier,
                ClientAuthMode::Optional => verifier.allow_unauthenticated(),
            };
            builder.with_client_cert_verifier(
                verifier.build().map_err(|e| (at.clone(), e.to_string()))?,
            )
        }
    };
    let resolver = Arc::new(resolver);
    let gate = acme.iter().find_map(|a| a.on_demand.clone()).map(|od| {
        Arc::new(on_demand::Gate {
            resolver: resolver.clone(),
            od,
        })
    });
    let mut cfg = builder.with_cert_resolver(resolver);
    let mut alpn = Vec::new();
    for (i, p) in t.alpn.iter().enumerate() {
        match p.as_str() {
            "h2" | "http/1.1" => alpn.push(p.as_bytes().to_vec()),
            other => {
                return Err((
                    format!("{path}.alpn[{i}]"),
                    format!("unknown protocol {other:?}; known: h2, http/1.1"),
                ))
            }
        }
    }
    if alpn_challenge {
        // Only a client offering nothing else gets it (`sni.rs`), and the connection ends after
        // the handshake (`server/tls.rs`).
        alpn.push(acme::ACME_TLS_ALPN.to_vec());
    }
    cfg.alpn_protocols = alpn;
    // The server's cipher preference, as nginx's `ssl_prefer_server_ciphers`.
    cfg.ignore_client_order = true;
    // rustls hands a parked connection's record keys over (`tls/records.rs`).
    cfg.enable_secret_extraction = true;
    cfg.session_storage = if t.session_cache > 0 {
        shared.cache(t.session_cache)
    } else {
        Arc::new(NoServerSessionStorage {})
    };
    match (t.session_tickets, shared.ticketer()) {
        (true, Some(ticketer)) => {
            cfg.ticketer = ticketer;
            // One ticket per handshake: a browser resumes once per connection it opens.
            cfg.send_tls13_tickets = 1;
        }
        _ => cfg.send_tls13_tickets = 0,
    }
    let files = loaded
        .iter()
        .map(|(l, _, _)| FileCert {
            names: l.names.clone(),
            not_after: l.not_after,
        })
        .collect();
    Ok((Arc::new(cfg), files, gate))
}

/// What stapling certificate `i` fetches: its request, and the responder or file.
fn ocsp_target(
    o: &crate::config::model::Ocsp,
    path: &str,
    i: usize,
    base: &BaseDir,
    l: &certs::Loaded,
    slot: &sni::Slot,
) -> Result<ocsp::Target, CompileError> {
    let at = format!("{path}.ocsp");
    let issuer_file = match &o.issuer {
        Some(f) => Some(
            certs::read_certs(&base.0.join(f))
                .map_err(|m| (format!("{at}.issuer"), m.to_string()))?
                .into_iter()
                .next()
                .ok_or_else(|| (format!("{at}.issuer"), "holds no certificate".to_string()))?,
        ),
        None => None,
    };
    let chain = &l.key.cert;
    let issuer = ocsp::issuer_of(chain, issuer_file.as_ref()).ok_or_else(|| {
        (
            format!("{path}.certificates[{i}]"),
            "its chain has no issuer certificate to ask OCSP about; add it to the PEM file or give ocsp.issuer".to_string(),
        )
    })?;
    let (request, serial) =
        ocsp::request_for(&chain[0], issuer).map_err(|m| (at.clone(), m.to_string()))?;
    let file = (i == 0)
        .then(|| o.file.as_ref().map(|f| base.0.join(f)))
        .flatten();
    let responder = o
        .responder
        .clone()
        .or_else(|| ocsp::responder_of(&chain[0]));
    if responder.is_none() && file.is_none() {
        return Err((
            format!("{path}.certificates[{i}]"),
            "has no OCSP responder URL (Authority Information Access); give ocsp.responder or ocsp.file".into(),
        ));
    }
    Ok(ocsp::Target {
        slot: Arc::downgrade(slot),
        responder,
        file,
        request,
        serial,
        name: l
            .names
            .first()
            .cloned()
            .unwrap_or_else(|| format!("certificates[{i}]")),
    })
}
