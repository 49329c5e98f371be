//! A listener's TLS, compiled: its `tls:` section with the certificates and ACME sections of
//! its sites added (`routes/sites.rs`), each ACME section's state from the registry, and, on a
//! TCP listener, no ALPN protocol but ACME's.

use std::sync::Arc;

use super::Registry;
use crate::config::{model, BaseDir, CompileError};
use crate::tls::acme::AcmeCerts;

/// What a listener's sites bring to its TLS, each with its key path.
#[derive(Debug, Default)]
pub(super) struct FromSites {
    pub certificates: Vec<(String, model::Certificate)>,
    pub acme: Vec<(String, model::Acme)>,
}

/// The server config of listener `path`, or `None` without `tls:`; every ACME state it uses is
/// added to `acme_all`.
pub(super) fn compile(
    tls: Option<model::Tls>,
    sites: FromSites,
    tcp: bool,
    path: &str,
    (base, registry): (&BaseDir, &Arc<Registry>),
    acme_all: &mut Vec<Arc<AcmeCerts>>,
    files: &mut Vec<(String, crate::tls::FileCert)>,
) -> Result<Option<ListenerTls>, CompileError> {
    let Some(mut t) = tls else {
        if let Some((key, _)) = sites.certificates.first() {
            return Err(no_tls(key));
        }
        if let Some((key, _)) = sites.acme.first() {
            return Err(no_tls(key));
        }
        return Ok(None);
    };
    let mut acme = Vec::new();
    if let Some(a) = &t.acme {
        acme.push(compile_acme(
            a,
            &format!("{path}.tls.acme"),
            registry,
            base,
        )?);
    }
    for (key, a) in &sites.acme {
        acme.push(compile_acme(a, key, registry, base)?);
    }
    // The sites' files go after the listener's own (whose first stays the default); a file
    // error names the site's key.
    let own = t.certificates.len();
    let keys: Vec<String> = sites.certificates.iter().map(|(k, _)| k.clone()).collect();
    t.certificates
        .extend(sites.certificates.into_iter().map(|(_, c)| c));
    if let Some(second) = acme.iter().filter(|a| a.on_demand.is_some()).nth(1) {
        return Err((
            format!("{path}.tls"),
            format!(
                "two `acme:` sections with `on_demand` on one listener (the second names {:?}): keep one",
                second.names()
            ),
        ));
    }
    acme_all.extend(acme.iter().cloned());
    let (cfg, loaded, on_demand) =
        crate::tls::server_config(&t, &format!("{path}.tls"), base, &registry.tls, acme)
            .map_err(|(key, message)| (site_key(&key, path, own, &keys), message))?;
    files.extend(loaded.into_iter().map(|f| (path.to_string(), f)));
    if !tcp {
        return Ok(Some(ListenerTls {
            config: cfg,
            on_demand,
        }));
    }
    if on_demand.is_some() {
        return Err((
            format!("{path}.tls"),
            "on-demand certificates are for HTTP listeners, not `tcp:` ones".into(),
        ));
    }
    // A terminating TCP listener relays the client's protocol as it is: it settles none by
    // ALPN (but still answers ACME's TLS-ALPN-01).
    let mut c = (*cfg).clone();
    c.alpn_protocols
        .retain(|p| p.as_slice() == crate::tls::acme::ACME_TLS_ALPN);
    Ok(Some(ListenerTls {
        config: Arc::new(c),
        on_demand: None,
    }))
}

/// A listener's compiled TLS: its server config, and the gate of on-demand issuance when an
/// `acme:` section has `on_demand`.
#[derive(Debug)]
pub(super) struct ListenerTls {
    pub config: Arc<rustls::ServerConfig>,
    pub on_demand: Option<Arc<crate::tls::on_demand::Gate>>,
}

/// Listener `l`'s HTTP/3 (`quic: true`) at key path `path`, given its compiled TLS (and
/// whether it issues certificates on demand, and whether its `protocols` have TLS 1.3);
/// `None` without `quic`.
pub(super) fn quic(
    l: &model::Listener,
    (tls, on_demand, tls13): (Option<&rustls::ServerConfig>, bool, bool),
    address: std::net::SocketAddr,
    (h3, idle): (&crate::config::model_http3::Http3, std::time::Duration),
    path: &str,
) -> Result<Option<Arc<super::QuicListen>>, CompileError> {
    if !l.quic {
        return Ok(None);
    }
    let key = format!("{path}.quic");
    let refuse = |m: &str| Err((key.clone(), m.to_string()));
    if l.address.starts_with("unix:") {
        return refuse("QUIC runs over UDP: a unix-socket listener cannot serve it");
    }
    if l.proxy_protocol.is_some() {
        return refuse("the PROXY protocol has no QUIC form here: put `quic` on a listener without `proxy_protocol`");
    }
    let Some(tls) = tls else {
        return refuse(
            "HTTP/3 is always encrypted: the listener needs `tls:` (certificates or `acme:`)",
        );
    };
    if on_demand {
        return refuse("on-demand certificates are obtained during a TCP handshake: keep `quic` on a listener without `acme.on_demand`");
    }
    if !tls13 {
        return refuse("QUIC runs TLS 1.3 only: add TLSv1.3 to `tls.protocols`");
    }
    crate::tls::quic::check(h3)?;
    let server =
        crate::tls::quic::server_config(tls, h3, idle).map_err(|m| (key.clone(), m.to_string()))?;
    let alt_svc = match address.port() {
        0 => bytes::Bytes::new(),
        port => bytes::Bytes::from(format!("Alt-Svc: h3=\":{port}\"; ma=86400\r\n")),
    };
    Ok(Some(Arc::new(super::QuicListen { server, alt_svc })))
}

fn no_tls(key: &str) -> CompileError {
    (
        key.to_string(),
        "a site's certificates need the listener's `tls:` section (`tls: {}` takes the defaults)"
            .into(),
    )
}

/// `listeners[0].tls.certificates[N]...` for one of the sites' files: that site's key instead.
fn site_key(key: &str, path: &str, own: usize, sites: &[String]) -> String {
    let prefix = format!("{path}.tls.certificates[");
    let Some(rest) = key.strip_prefix(&prefix) else {
        return key.to_string();
    };
    let Some((n, tail)) = rest.split_once(']') else {
        return key.to_string();
    };
    match n.parse::<usize>().ok().and_then(|n| n.checked_sub(own)) {
        Some(i) if i < sites.len() => format!("{}{tail}", sites[i]),
        _ => key.to_string(),
    }
}

/// An `acme:` section's `on_demand`, checked.
fn on_demand_checked(
    a: &model::Acme,
    od: &model::OnDemand,
    path: &str,
) -> Result<(), CompileError> {
    if od.ask.is_none() && od.allow.is_empty() {
        return Err((
            path.to_string(),
            "needs `ask` (a URL that approves names) or `allow` (the names): otherwise any name a client sends would be ordered".into(),
        ));
    }
    if let Some(ask) = &od.ask {
        let ok = ask
            .strip_prefix("http://")
            .is_some_and(|rest| rest.split('/').next().is_some_and(|h| h.contains(':')));
        if !ok {
            return Err((
                format!("{path}.ask"),
                format!("{ask:?}: an http://host:port/path URL (a service of yours, asked `?domain=NAME`)"),
            ));
        }
    }
    for (i, p) in od.allow.iter().enumerate() {
        let bare = p.strip_prefix("*.").unwrap_or(p).trim_end_matches('.');
        if !crate::tls::on_demand::issuable(&bare.to_ascii_lowercase()) {
            return Err((
                format!("{path}.allow[{i}]"),
                format!("{p:?} is not a DNS name or `*.name`"),
            ));
        }
    }
    if a.challenge == "dns-01" {
        return Err((
            path.to_string(),
            "on-demand names are proved by http-01 or tls-alpn-01, not dns-01".into(),
        ));
    }
    if od.rate == 0 || od.per.0.is_zero() {
        return Err((
            format!("{path}.rate"),
            "at least one certificate per `per` (use `allow`/`ask` to refuse names)".into(),
        ));
    }
    if od.max_names == 0 {
        return Err((format!("{path}.max_names"), "must be at least 1".into()));
    }
    Ok(())
}

/// An `acme:` section checked, with its state from the registry.
pub(super) fn compile_acme(
    a: &model::Acme,
    path: &str,
    registry: &Arc<Registry>,
    base: &BaseDir,
) -> Result<Arc<AcmeCerts>, CompileError> {
    if a.names.is_empty() && a.on_demand.is_none() {
        return Err((format!("{path}.names"), "lists no name".into()));
    }
    if let Some(od) = &a.on_demand {
        on_demand_checked(a, od, &format!("{path}.on_demand"))?;
    }
    if !matches!(a.challenge.as_str(), "http-01" | "tls-alpn-01" | "dns-01") {
        return Err((
            format!("{path}.challenge"),
            format!(
                "unknown challenge {:?}; known: http-01, tls-alpn-01, dns-01",
                a.challenge
            ),
        ));
    }
    let dns01 = a.challenge == "dns-01";
    for (i, n) in a.names.iter().enumerate() {
        if n.starts_with("*.") && !dns01 {
            return Err((
                format!("{path}.names[{i}]"),
                "wildcards need the DNS-01 challenge (`challenge: dns-01` with `dns: { rfc2136: {...} }` or `dns: { exec: [...] }`)"
                    .into(),
            ));
        }
        let bare = n.strip_prefix("*.").unwrap_or(n);
        if bare.parse::<std::net::IpAddr>().is_ok() || !bare.contains('.') || bare.contains('*') {
            return Err((
                format!("{path}.names[{i}]"),
                format!("{n:?} is not a DNS name a CA will issue for"),
            ));
        }
    }
    let mut settings = a.clone();
    match (&a.dns, dns01) {
        (None, true) => {
            return Err((
                format!("{path}.dns"),
                "dns-01 needs `dns: { rfc2136: {...} }` (updates to the zone's primary server) or `dns: { exec: [command, args...] }` (a command that sets the TXT records)".into(),
            ))
        }
        (Some(_), false) => {
            return Err((
                format!("{path}.dns"),
                "only used with `challenge: dns-01`".into(),
            ))
        }
        (Some(d), true) => {
            settings.dns = Some(check_dns(d, &format!("{path}.dns"), base, &a.names)?)
        }
        (None, false) => {}
    }
    if !a.directory.starts_with("https://") {
        return Err((
            format!("{path}.directory"),
            "must be an https:// URL".into(),
        ));
    }
    let ca = a
        .directory_ca
        .as_ref()
        .filter(|f| !f.is_empty())
        .map(|f| base.0.join(f));
    if let Some(ca) = &ca {
        crate::tls::certs::read_certs(ca)
            .map_err(|m| (format!("{path}.directory_ca"), m.to_string()))?;
    }
    Ok(registry.acme(&settings, base.0.join(&a.storage), ca))
}

/// A `dns:` section checked: `exec` or `rfc2136`, the latter's server, zone and key (its file
/// read now, so that `weir check` and a reload find a bad one), with `key_file` resolved against
/// the config's directory.
fn check_dns(
    d: &model::AcmeDns,
    path: &str,
    base: &BaseDir,
    names: &[String],
) -> Result<model::AcmeDns, CompileError> {
    let mut d = d.clone();
    match (&d.exec, &mut d.rfc2136) {
        (Some(_), Some(_)) => Err((
            path.to_string(),
            "give `rfc2136` or `exec`, not both".into(),
        )),
        (None, None) => Err((
            path.to_string(),
            "give `rfc2136: { server, key_name, key_secret | key_file }` or `exec: [command, args...]`".into(),
        )),
        (Some(exec), None) if exec.is_empty() => {
            Err((format!("{path}.exec"), "name the command".into()))
        }
        (Some(_), None) => Ok(()),
        (None, Some(r)) => {
            let at = |k: &str| format!("{path}.rfc2136.{k}");
            crate::tls::dns_update::server_addr(&r.server).map_err(|m| (at("server"), m.to_string()))?;
            if let Some(z) = &r.zone {
                let zone = crate::tls::dns_update::name(z).map_err(|m| (at("zone"), m.to_string()))?;
                // Each record goes in this zone: one outside it could never be updated there.
                for n in names {
                    let record = format!("_acme-challenge.{}", n.trim_start_matches("*."));
                    let inside = crate::tls::dns_update::name(&record)
                        .is_ok_and(|fqdn| zone.zone_of(&fqdn));
                    if !inside {
                        return Err((
                            at("zone"),
                            format!("{record} (for {n}) is not in the zone {z}"),
                        ));
                    }
                }
            }
            if let Some(f) = &mut r.key_file {
                *f = base.0.join(&*f).display().to_string();
            }
            crate::tls::tsig_key::from_settings(r).map_err(|(k, m)| (at(k), m))?;
            Ok(())
        }
    }?;
    Ok(d)
}
