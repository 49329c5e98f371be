//! On-demand issuance (Caddy's `on_demand_tls`): a TLS handshake for a name no certificate of
//! the listener covers is held while a certificate is obtained for that name, when the
//! section's `allow` list names it or its `ask` endpoint approves it.
//!
//! A client chooses the names it sends, so every step is bounded before a CA is asked:
//! * the name must be a DNS name a CA would issue for (letters, digits, `-`, at least two
//!   labels, at most 253 bytes); anything else is refused without a word to anybody;
//! * a name refused by `ask` is remembered for [`DENIED_FOR`], so a client repeating it costs
//!   one table lookup; at most [`ASKING`] asks run at once (more handshakes are not held);
//! * concurrent handshakes for one name wait for one order ([`OnDemand::obtain`]);
//! * new orders are limited to `rate` per `per` (a token bucket) and the names served to
//!   `max_names`; a certificate already in storage is loaded without counting;
//! * a handshake waits at most `wait`; the order goes on without it.
//!
//! Each name's certificate is its own [`AcmeCerts`] (stored under `storage/<name>/`, reused
//! after a restart at its first handshake) and is renewed by its section's thread
//! (`acme.rs`). Orders run on a thread of their own, not on the worker that held the
//! handshake: a client that gives up does not cancel an order half made.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use super::acme::{AcmeCerts, Challenges};
use crate::config::model::{Acme, OnDemand as Settings};

/// How long a name `ask` refused is refused without asking again.
pub const DENIED_FOR: Duration = Duration::from_secs(60);
/// Asks in flight at most; handshakes past it go on with the default certificate.
pub const ASKING: usize = 16;
/// Refused names remembered at most (the table is cleared when full).
const DENIED_MAX: usize = 10_000;

/// Why a handshake was not given a certificate of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    NotADnsName,
    NotAllowed,
    Busy,
    RateLimited,
    TooManyNames,
    Failed(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::NotADnsName => f.write_str("not a DNS name"),
            Refused::NotAllowed => f.write_str("not allowed (allow list, ask)"),
            Refused::Busy => f.write_str("too many asks in flight"),
            Refused::RateLimited => f.write_str("over the rate of new certificates"),
            Refused::TooManyNames => f.write_str("max_names reached"),
            Refused::Failed(e) => write!(f, "order failed: {e}"),
        }
    }
}

/// An order's outcome, once known.
type Outcome = Option<Result<(), Refused>>;

/// A token bucket of new orders.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The on-demand state of one `acme:` section.
#[derive(Debug)]
pub struct OnDemand {
    pub settings: Settings,
    /// The section's settings, for each name's own certificate.
    acme: Acme,
    storage: std::path::PathBuf,
    directory_ca: Option<std::path::PathBuf>,
    challenges: Arc<Challenges>,
    /// Names served, with their certificates (issued or loaded from storage).
    certs: Mutex<HashMap<String, Arc<AcmeCerts>>>,
    /// Orders in progress: their outcome, once known.
    inflight: Mutex<HashMap<String, watch::Receiver<Outcome>>>,
    denied: Mutex<HashMap<String, Instant>>,
    asking: std::sync::atomic::AtomicUsize,
    bucket: Mutex<Bucket>,
}

impl OnDemand {
    pub fn new(
        acme: &Acme,
        settings: Settings,
        storage: std::path::PathBuf,
        directory_ca: Option<std::path::PathBuf>,
        challenges: Arc<Challenges>,
    ) -> OnDemand {
        let mut acme = acme.clone();
        acme.on_demand = None;
        OnDemand {
            bucket: Mutex::new(Bucket {
                tokens: f64::from(settings.rate),
                at: Instant::now(),
            }),
            settings,
            acme,
            storage,
            directory_ca,
            challenges,
            certs: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            denied: Mutex::new(HashMap::new()),
            asking: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The certificate served for `name` (lowercase, no trailing dot), if one was obtained.
    pub fn cert(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let certs = lock(&self.certs);
        let c = certs.get(name)?;
        let current = c.current.load();
        current.as_ref().map(|c| c.key.clone())
    }

    /// Every name's certificate, for renewals.
    pub fn all(&self) -> Vec<Arc<AcmeCerts>> {
        lock(&self.certs).values().cloned().collect()
    }

    /// A certificate for `name` (lowercase, no trailing dot): at once when one is served,
    /// else approved, loaded from storage or ordered. Concurrent calls for one name share one
    /// order.
    pub async fn obtain(self: &Arc<Self>, name: &str) -> Result<(), Refused> {
        if self.cert(name).is_some() {
            return Ok(());
        }
        if !issuable(name) {
            return Err(Refused::NotADnsName);
        }
        let waiting = lock(&self.inflight).get(name).cloned();
        if let Some(mut rx) = waiting {
            return wait(&mut rx).await;
        }
        self.approve(name).await?;
        // Stored from an earlier run: served without an order.
        let certs = self.child(name);
        if certs.current.load().is_some() {
            self.keep(name, certs)?;
            return Ok(());
        }
        let mut rx = {
            let mut inflight = lock(&self.inflight);
            if let Some(rx) = inflight.get(name) {
                rx.clone()
            } else {
                if lock(&self.certs).len() >= self.settings.max_names {
                    return Err(Refused::TooManyNames);
                }
                if !self.take_token() {
                    return Err(Refused::RateLimited);
                }
                let (tx, rx) = watch::channel(None);
                inflight.insert(name.to_string(), rx.clone());
                self.order(name.to_string(), certs, tx);
                rx
            }
        };
        wait(&mut rx).await
    }

    /// Whether `allow` or `ask` approves `name`.
    async fn approve(&self, name: &str) -> Result<(), Refused> {
        if self.settings.allow.iter().any(|p| matches(p, name)) {
            return Ok(());
        }
        let Some(ask) = &self.settings.ask else {
            return Err(Refused::NotAllowed);
        };
        {
            let mut denied = lock(&self.denied);
            match denied.get(name) {
                Some(until) if *until > Instant::now() => return Err(Refused::NotAllowed),
                Some(_) => {
                    denied.remove(name);
                }
                None => {}
            }
        }
        use std::sync::atomic::Ordering;
        if self.asking.fetch_add(1, Ordering::SeqCst) >= ASKING {
            self.asking.fetch_sub(1, Ordering::SeqCst);
            return Err(Refused::Busy);
        }
        let answer = ask_endpoint(ask, name).await;
        self.asking.fetch_sub(1, Ordering::SeqCst);
        match answer {
            Ok(true) => Ok(()),
            Ok(false) => {
                let mut denied = lock(&self.denied);
                if denied.len() >= DENIED_MAX {
                    denied.clear();
                }
                denied.insert(name.to_string(), Instant::now() + DENIED_FOR);
                Err(Refused::NotAllowed)
            }
            Err(e) => {
                static ASK_FAILED: crate::logs::Limited = crate::logs::Limited::new();
                if let Some(suppressed) = ASK_FAILED.admit() {
                    tracing::warn!(ask = %ask, name, error = %e, suppressed, "on-demand TLS: the ask endpoint did not answer; the name is refused");
                }
                Err(Refused::NotAllowed)
            }
        }
    }

    /// The certificate state for `name` (its stored certificate loaded, if any).
    fn child(&self, name: &str) -> Arc<AcmeCerts> {
        if let Some(c) = lock(&self.certs).get(name) {
            return c.clone();
        }
        let mut settings = self.acme.clone();
        settings.names = vec![name.to_string()];
        Arc::new(AcmeCerts::new(
            settings,
            self.storage.clone(),
            self.directory_ca.clone(),
            self.challenges.clone(),
        ))
    }

    /// Serves `certs` for `name` from now on.
    fn keep(&self, name: &str, certs: Arc<AcmeCerts>) -> Result<(), Refused> {
        let mut all = lock(&self.certs);
        if all.len() >= self.settings.max_names && !all.contains_key(name) {
            return Err(Refused::TooManyNames);
        }
        all.insert(name.to_string(), certs);
        Ok(())
    }

    /// Takes one order from the bucket.
    fn take_token(&self) -> bool {
        let mut b = lock(&self.bucket);
        let per = self.settings.per.0.as_secs_f64().max(0.001);
        let rate = f64::from(self.settings.rate);
        let now = Instant::now();
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * rate / per).min(rate);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Orders a certificate for `name` on a thread of its own; the outcome goes to `tx`.
    fn order(self: &Arc<Self>, name: String, certs: Arc<AcmeCerts>, tx: watch::Sender<Outcome>) {
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("weir-acme-od".into())
            .spawn(move || {
                let outcome = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt.block_on(super::acme_issue::obtain(&certs)),
                    Err(e) => Err(e.to_string()),
                };
                let outcome = match outcome {
                    Ok(()) => me.keep(&name, certs),
                    Err(e) => {
                        tracing::warn!(name, error = %e, "on-demand TLS: obtaining a certificate failed");
                        Err(Refused::Failed(e))
                    }
                };
                lock(&me.inflight).remove(&name);
                let _ = tx.send(Some(outcome));
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "on-demand TLS: cannot start an order");
        }
    }
}

/// What a listener with on-demand issuance checks before a handshake (`server/tls.rs`): its
/// certificate resolver, and the section that obtains certificates on demand.
#[derive(Debug)]
pub struct Gate {
    pub(crate) resolver: Arc<super::sni::SniResolver>,
    pub(crate) od: Arc<OnDemand>,
}

impl Gate {
    /// The name a handshake must wait for: the one the client sent, when no certificate
    /// serves it yet and the handshake is not a TLS-ALPN-01 validation.
    pub fn wanted(&self, hello: &rustls::server::ClientHello<'_>) -> Option<String> {
        let name = hello
            .server_name()?
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let mut offered = hello.alpn().into_iter().flatten();
        if offered.next() == Some(super::acme::ACME_TLS_ALPN) && offered.next().is_none() {
            return None;
        }
        if self.resolver.covers(&name) {
            return None;
        }
        Some(name)
    }

    /// Holds a handshake for `name` until its certificate is served, it is refused, or
    /// `wait` passed (the order goes on).
    pub async fn hold(&self, name: &str) {
        let outcome = tokio::time::timeout(self.od.settings.wait.0, self.od.obtain(name)).await;
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(why @ (Refused::RateLimited | Refused::TooManyNames | Refused::Busy))) => {
                static LIMITED: crate::logs::Limited = crate::logs::Limited::new();
                if let Some(suppressed) = LIMITED.admit() {
                    tracing::warn!(name, reason = %why, suppressed, "on-demand TLS: no certificate ordered");
                }
            }
            Ok(Err(why)) => tracing::debug!(name, reason = %why, "on-demand TLS: no certificate"),
            Err(_) => {
                tracing::debug!(
                    name,
                    "on-demand TLS: the handshake stopped waiting; the order goes on"
                )
            }
        }
    }
}

/// Waits for an order's outcome.
async fn wait(rx: &mut watch::Receiver<Outcome>) -> Result<(), Refused> {
    match rx.wait_for(|o| o.is_some()).await {
        Ok(o) => o
            .clone()
            .unwrap_or(Err(Refused::Failed("no outcome".into()))),
        Err(_) => Err(Refused::Failed("the order ended without an outcome".into())),
    }
}

/// Whether a CA could issue for `name` (lowercase): a DNS name of two labels or more, not an
/// address.
pub fn issuable(name: &str) -> bool {
    name.len() <= 253
        && name.contains('.')
        && name.parse::<std::net::IpAddr>().is_err()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// Whether allow-list pattern `p` (exact, or `*.suffix` one label deep) names `name`.
pub fn matches(p: &str, name: &str) -> bool {
    let p = p.trim_end_matches('.');
    match p.strip_prefix("*.") {
        Some(suffix) => name
            .split_once('.')
            .is_some_and(|(_, parent)| parent.eq_ignore_ascii_case(suffix)),
        None => p.eq_ignore_ascii_case(name),
    }
}

/// `GET {ask}?domain={name}` (HTTP/1.1, plain): whether it answered 2xx, within 5 s.
async fn ask_endpoint(ask: &str, name: &str) -> Result<bool, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = ask
        .strip_prefix("http://")
        .ok_or("ask must be an http:// URL")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let sep = if path.contains('?') { '&' } else { '?' };
    let request = format!(
        "GET {path}{sep}domain={name} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: weir\r\nConnection: close\r\n\r\n"
    );
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| format!("{authority}: {e}"))?;
        s.write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut head = [0u8; 12];
        s.read_exact(&mut head).await.map_err(|e| e.to_string())?;
        if !head.starts_with(b"HTTP/1.") {
            return Err("not an HTTP answer".to_string());
        }
        Ok(head[9] == b'2')
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| "no answer within 5s".to_string())?
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dns_names_a_ca_issues_for_are_asked_about() {
        for ok in ["a.example.com", "x-1.b2.example", "xn--bcher-kva.example"] {
            assert!(issuable(ok), "{ok}");
        }
        let long = format!("{}.example", "a".repeat(64));
        for bad in [
            "localhost",
            "127.0.0.1",
            "a..example",
            "-a.example",
            "a-.example",
            "A.example",
            "a_b.example",
            "a.example.",
            "*.example.com",
            long.as_str(),
            "",
        ] {
            assert!(!issuable(bad), "{bad:?}");
        }
    }

    #[test]
    fn allow_patterns_are_exact_or_one_label_wildcards() {
        let cases = [
            ("shop.example", "shop.example", true),
            ("shop.example", "x.shop.example", false),
            ("*.example", "a.example", true),
            ("*.example", "a.b.example", false),
            ("*.example", "example", false),
            ("*.Example.", "a.example", true),
        ];
        for (p, n, want) in cases {
            assert_eq!(matches(p, n), want, "{p} {n}");
        }
    }
}
