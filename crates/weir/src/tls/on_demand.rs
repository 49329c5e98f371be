//! On-demand issuance (Caddy's `on_demand_tls`): a TLS handshake for a name no certificate of
//! the listener covers is held while a certificate is obtained for that name, when the
//! section's `allow` list names it or its `ask` endpoint approves it.
//!
//! A client chooses the names it sends, so every step is bounded before anybody is asked:
//! * the name must be a DNS name a CA would issue for (letters, digits, `-`, at least two
//!   labels, at most 253 bytes); anything else is refused without a word to anybody;
//! * one piece of work per name: concurrent handshakes for a name wait for the same one
//!   (its storage look-up, its approval, its order), and at most [`PENDING`] names are worked
//!   on at once, [`PER_CLIENT`] of them for one client address;
//! * a name stored by an earlier order is served again without asking (it was approved then);
//! * asks are limited to [`ASK_RATE`] per second; a name `ask` refused is refused without
//!   asking for [`DENIED_FOR`], and a name whose order failed is not ordered again for
//!   [`FAILED_FOR`];
//! * new orders are limited to `rate` per `per` (a token bucket; the default, 10 per 10 minutes,
//!   stays within Let's Encrypt's 300 new orders per 3 hours), and the names served or being
//!   ordered to `max_names`;
//! * a name no handshake asked for within `forget_after` is forgotten (not served, not renewed,
//!   its storage removed), and at `max_names` the least recently asked-for name is forgotten to
//!   make room if none asked for it within `per`: names a random-SNI client made up under an
//!   `allow` wildcard do not fill the table for good (`weir check` warns about a wildcard
//!   without `ask`);
//! * a handshake waits at most `wait` (after reading its ClientHello within `timeouts.header`,
//!   and before finishing within it again); the order goes on without it, within
//!   `acme_issue::limit`.
//!
//! The state (names served, refusals, the bucket) is kept by the registry across reloads
//! for a storage directory and CA (`runtime/registry.rs`), so a reload neither refills the
//! bucket nor forgets a refusal.
//!
//! Each name's certificate is its own [`AcmeCerts`], stored under `storage/on-demand/<name>/`
//! (apart from the sections' own, named by their first name) and renewed by its section's
//! thread (`acme.rs`). The work runs on a thread of its own, not on the worker that held the
//! handshake: a client that gives up does not cancel an order half made.

use super::error::TlsError;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use super::acme::{AcmeCerts, Challenges};
use crate::config::model::{Acme, OnDemand as Settings};

/// How long a name `ask` refused is refused without asking again.
pub const DENIED_FOR: Duration = Duration::from_secs(60);
/// How long a name whose order failed is not ordered again.
pub const FAILED_FOR: Duration = Duration::from_secs(600);
/// Names worked on at once (looked up, asked about or ordered), and per client address.
pub const PENDING: usize = 64;
pub const PER_CLIENT: usize = 4;
/// Asks per second at most (a burst of as many).
pub const ASK_RATE: f64 = 20.0;
/// Refusals remembered at most.
const REFUSED_MAX: usize = 10_000;

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
            Refused::Busy => f.write_str("too many names or asks in progress"),
            Refused::RateLimited => f.write_str("over the rate of new certificates"),
            Refused::TooManyNames => f.write_str("max_names reached"),
            Refused::Failed(e) => write!(f, "order failed: {e}"),
        }
    }
}

/// An order's outcome, once known.
type Outcome = Option<Result<(), Refused>>;

/// A token bucket.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(size: f64) -> Bucket {
        Bucket {
            tokens: size,
            at: Instant::now(),
        }
    }

    /// Takes a token, refilling `rate` per `per` up to `size`.
    fn take(&mut self, rate: f64, per: Duration, size: f64) -> bool {
        let now = Instant::now();
        let per = per.as_secs_f64().max(0.001);
        self.tokens =
            (self.tokens + now.duration_since(self.at).as_secs_f64() * rate / per).min(size);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Names in progress: each one's outcome to come, and how many each client started.
#[derive(Debug, Default)]
struct Pending {
    names: HashMap<String, (watch::Receiver<Outcome>, IpAddr)>,
    clients: HashMap<IpAddr, usize>,
}

/// A name served on demand.
#[derive(Debug)]
struct Served {
    certs: Arc<AcmeCerts>,
    /// When a handshake last asked for it (or it was stored).
    asked: Instant,
}

/// What on-demand issuance remembers across reloads (`runtime/registry.rs`).
#[derive(Debug)]
pub struct State {
    /// Names served, with their certificates (issued or loaded from storage) and when a
    /// handshake last asked for each.
    certs: Mutex<HashMap<String, Served>>,
    pending: Mutex<Pending>,
    /// Names refused (by `ask`, or by a failed order) until a time, and why.
    refused: Mutex<HashMap<String, (Instant, Refused)>>,
    orders: Mutex<Bucket>,
    asks: Mutex<Bucket>,
}

impl State {
    pub fn new(rate: u32) -> State {
        State {
            certs: Mutex::new(HashMap::new()),
            pending: Mutex::new(Pending::default()),
            refused: Mutex::new(HashMap::new()),
            orders: Mutex::new(Bucket::full(f64::from(rate))),
            asks: Mutex::new(Bucket::full(ASK_RATE)),
        }
    }
}

/// The on-demand issuance of one `acme:` section.
#[derive(Debug)]
pub struct OnDemand {
    pub settings: Settings,
    /// The section's settings, for each name's own certificate.
    acme: Acme,
    storage: std::path::PathBuf,
    directory_ca: Option<std::path::PathBuf>,
    challenges: Arc<Challenges>,
    threads: Arc<super::acme_threads::AcmeThreads>,
    pub state: Arc<State>,
}

impl OnDemand {
    /// The section's on-demand issuance, on `state` (carried over from the config before, or
    /// new).
    pub fn new(
        acme: &Acme,
        settings: Settings,
        storage: std::path::PathBuf,
        directory_ca: Option<std::path::PathBuf>,
        challenges: Arc<Challenges>,
        threads: Arc<super::acme_threads::AcmeThreads>,
        state: Option<Arc<State>>,
    ) -> OnDemand {
        let mut acme = acme.clone();
        acme.on_demand = None;
        OnDemand {
            state: state.unwrap_or_else(|| Arc::new(State::new(settings.rate))),
            settings,
            acme,
            storage: storage.join("on-demand"),
            directory_ca,
            challenges,
            threads,
        }
    }

    /// The certificate served for `name` (lowercase, no trailing dot), if one was obtained.
    pub fn cert(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let mut certs = lock(&self.state.certs);
        let c = certs.get_mut(name)?;
        c.asked = Instant::now();
        let current = c.certs.current.load();
        current.as_ref().map(|c| c.key.clone())
    }

    /// Every name's certificate, for renewals (names idle past `forget_after` are forgotten
    /// first: they are not renewed).
    pub fn all(&self) -> Vec<Arc<AcmeCerts>> {
        self.forget_idle();
        lock(&self.state.certs)
            .values()
            .map(|c| c.certs.clone())
            .collect()
    }

    /// Forgets the names no handshake asked for within `forget_after`.
    fn forget_idle(&self) {
        let limit = self.settings.forget_after.0;
        let gone: Vec<String> = {
            let mut certs = lock(&self.state.certs);
            let gone: Vec<String> = certs
                .iter()
                .filter(|(_, c)| c.asked.elapsed() >= limit)
                .map(|(n, _)| n.clone())
                .collect();
            for n in &gone {
                certs.remove(n);
            }
            gone
        };
        for n in gone {
            self.forgotten(&n, "no handshake asked for it within forget_after");
        }
    }

    /// Whether some name was not asked for within `per` (one [`Self::make_room`] could take).
    fn has_idle_name(&self) -> bool {
        lock(&self.state.certs)
            .values()
            .any(|c| c.asked.elapsed() >= self.settings.per.0)
    }

    /// At `max_names`: forgets the least recently asked-for name if none asked for it within
    /// `per`; whether room was made.
    fn make_room(&self) -> bool {
        let oldest = {
            let mut certs = lock(&self.state.certs);
            let oldest = certs
                .iter()
                .min_by_key(|(_, c)| c.asked)
                .filter(|(_, c)| c.asked.elapsed() >= self.settings.per.0)
                .map(|(n, _)| n.clone());
            if let Some(n) = &oldest {
                certs.remove(n);
            }
            oldest
        };
        match oldest {
            Some(n) => {
                self.forgotten(&n, "max_names reached, and it was asked for least recently");
                true
            }
            None => false,
        }
    }

    /// Removes a forgotten name's stored certificate, and says so (rate-limited).
    fn forgotten(&self, name: &str, why: &str) {
        if issuable(name) {
            let _ = std::fs::remove_dir_all(self.storage.join(name));
        }
        static FORGOT: crate::logs::Limited = crate::logs::Limited::new();
        if let Some(suppressed) = FORGOT.admit() {
            tracing::info!(name, why, suppressed, "on-demand TLS: name forgotten");
        }
    }

    /// A certificate for `name` (lowercase, no trailing dot) asked for by a handshake from
    /// `client`: at once when one is served, else looked up in storage, approved and ordered
    /// (one piece of work per name, shared by every handshake that waits for it).
    pub async fn obtain(self: &Arc<Self>, name: &str, client: IpAddr) -> Result<(), Refused> {
        if self.cert(name).is_some() {
            return Ok(());
        }
        if !issuable(name) {
            return Err(Refused::NotADnsName);
        }
        if let Some(why) = self.refused(name) {
            return Err(why);
        }
        let mut rx = {
            let mut pending = lock(&self.state.pending);
            if let Some((rx, _)) = pending.names.get(name) {
                rx.clone()
            } else {
                if pending.names.len() >= PENDING
                    || pending.clients.get(&client).copied().unwrap_or(0) >= PER_CLIENT
                {
                    return Err(Refused::Busy);
                }
                if lock(&self.state.certs).len() + pending.names.len() >= self.settings.max_names {
                    // Only names idle past `forget_after` go here: room is made for a new name
                    // only once it is approved and within the rate (`work`), so a name no one
                    // approves evicts no one (review of issue 52).
                    self.forget_idle();
                    if lock(&self.state.certs).len() + pending.names.len()
                        >= self.settings.max_names
                        && !self.has_idle_name()
                    {
                        return Err(Refused::TooManyNames);
                    }
                }
                let (tx, rx) = watch::channel(None);
                pending.names.insert(name.to_string(), (rx.clone(), client));
                *pending.clients.entry(client).or_default() += 1;
                drop(pending);
                self.start(name.to_string(), tx);
                rx
            }
        };
        wait(&mut rx).await
    }

    /// A refusal of `name` still in force.
    fn refused(&self, name: &str) -> Option<Refused> {
        let mut refused = lock(&self.state.refused);
        match refused.get(name) {
            Some((until, why)) if *until > Instant::now() => Some(why.clone()),
            Some(_) => {
                refused.remove(name);
                None
            }
            None => None,
        }
    }

    /// Refuses `name` for `for_` (expired refusals make room; a full table takes no more).
    fn refuse(&self, name: &str, why: Refused, for_: Duration) {
        let mut refused = lock(&self.state.refused);
        if refused.len() >= REFUSED_MAX {
            let now = Instant::now();
            refused.retain(|_, (until, _)| *until > now);
        }
        if refused.len() < REFUSED_MAX {
            refused.insert(name.to_string(), (Instant::now() + for_, why));
        }
    }

    /// The work for `name`, on a thread of its own; the outcome goes to `tx`, and the name
    /// leaves the pending table on every way out.
    fn start(self: &Arc<Self>, name: String, tx: watch::Sender<Outcome>) {
        /// Ends the name's work however the thread ends (a panic included).
        struct Done {
            me: Arc<OnDemand>,
            name: String,
            tx: watch::Sender<Outcome>,
        }
        impl Drop for Done {
            fn drop(&mut self) {
                let mut pending = lock(&self.me.state.pending);
                if let Some((_, client)) = pending.names.remove(&self.name) {
                    if let Some(n) = pending.clients.get_mut(&client) {
                        *n -= 1;
                        if *n == 0 {
                            pending.clients.remove(&client);
                        }
                    }
                }
                drop(pending);
                self.tx.send_if_modified(|o| {
                    if o.is_none() {
                        *o = Some(Err(Refused::Failed("the order ended".into())));
                        true
                    } else {
                        false
                    }
                });
            }
        }
        let done = Done {
            me: self.clone(),
            name,
            tx,
        };
        let threads = self.threads.clone();
        let spawned = threads.spawn("weir-acme-od", move || async move {
            let outcome = done.me.work(&done.name).await;
            let _ = done.tx.send(Some(outcome));
        });
        // On a failed spawn, or work cancelled at the server's stop, the future (and `done` in
        // it) is dropped: its Drop ends the work.
        if let Err(e) = spawned {
            tracing::error!(error = %e, "on-demand TLS: cannot start work on a name");
        }
    }

    /// Looks `name` up in storage, else approves and orders it.
    async fn work(&self, name: &str) -> Result<(), Refused> {
        let certs = self.child(name);
        if certs.current.load().is_some() {
            return self.keep(name, certs);
        }
        self.approve(name).await?;
        let took = {
            let rate = f64::from(self.settings.rate);
            lock(&self.state.orders).take(rate, self.settings.per.0, rate)
        };
        if !took {
            return Err(Refused::RateLimited);
        }
        // Approved, and within the rate: now, at `max_names`, the least recently asked-for
        // name idle for `per` makes room (this name is counted among the pending ones).
        let full = || {
            lock(&self.state.certs).len() + lock(&self.state.pending).names.len()
                > self.settings.max_names
        };
        if full() {
            let made = self.make_room();
            if !made || full() {
                return Err(Refused::TooManyNames);
            }
        }
        match super::acme_issue::obtain_guarded(&certs).await {
            Ok(()) => self.keep(name, certs),
            Err(e) => {
                tracing::warn!(name, error = %e, retry_in = ?FAILED_FOR, "on-demand TLS: obtaining a certificate failed");
                let why = Refused::Failed(e.to_string());
                self.refuse(name, why.clone(), FAILED_FOR);
                Err(why)
            }
        }
    }

    /// Whether `allow` or `ask` approves `name`.
    async fn approve(&self, name: &str) -> Result<(), Refused> {
        if self.settings.allow.iter().any(|p| matches(p, name)) {
            return Ok(());
        }
        let Some(ask) = &self.settings.ask else {
            return Err(Refused::NotAllowed);
        };
        if !lock(&self.state.asks).take(ASK_RATE, Duration::from_secs(1), ASK_RATE) {
            return Err(Refused::Busy);
        }
        match ask_endpoint(ask, name).await {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.refuse(name, Refused::NotAllowed, DENIED_FOR);
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
        if let Some(c) = lock(&self.state.certs).get(name) {
            return c.certs.clone();
        }
        let mut settings = self.acme.clone();
        settings.names = vec![name.to_string()];
        Arc::new(AcmeCerts::new(
            settings,
            self.storage.clone(),
            self.directory_ca.clone(),
            self.challenges.clone(),
            self.threads.clone(),
        ))
    }

    /// Serves `certs` for `name` from now on.
    fn keep(&self, name: &str, certs: Arc<AcmeCerts>) -> Result<(), Refused> {
        lock(&self.state.certs).insert(
            name.to_string(),
            Served {
                certs,
                asked: Instant::now(),
            },
        );
        Ok(())
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
    pub fn wanted(&self, hello: &super::hello::Fields) -> Option<String> {
        let name = hello
            .name
            .as_deref()?
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let mut offered = hello.alpn.iter().map(Vec::as_slice);
        if offered.next() == Some(super::acme::ACME_TLS_ALPN) && offered.next().is_none() {
            return None;
        }
        if self.resolver.covers(&name) {
            return None;
        }
        Some(name)
    }

    /// Holds a handshake for `name` from `client` until its certificate is served, it is
    /// refused, or `wait` passed (the order goes on).
    pub async fn hold(&self, name: &str, client: IpAddr) {
        let outcome =
            tokio::time::timeout(self.od.settings.wait.0, self.od.obtain(name, client)).await;
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
async fn ask_endpoint(ask: &str, name: &str) -> Result<bool, TlsError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = ask
        .strip_prefix("http://")
        .ok_or_else(|| TlsError::config("ask must be an http:// URL"))?;
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
            .map_err(|e| TlsError::network(authority, e))?;
        s.write_all(request.as_bytes())
            .await
            .map_err(|e| TlsError::network(authority, e))?;
        let mut head = [0u8; 12];
        s.read_exact(&mut head)
            .await
            .map_err(|e| TlsError::network(authority, e))?;
        if !head.starts_with(b"HTTP/1.") {
            return Err(TlsError::new(
                super::error::Kind::Network,
                format_args!("{authority}: not an HTTP answer"),
            ));
        }
        Ok(head[9] == b'2')
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| {
            TlsError::new(
                super::error::Kind::Network,
                format_args!("{authority}: no answer within 5s"),
            )
        })?
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
