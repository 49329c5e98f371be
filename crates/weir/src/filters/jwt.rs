//! `jwt`: JSON Web Tokens (RFC 7519) in `Authorization: Bearer`, a cookie or a query
//! parameter, verified by `jsonwebtoken` (aws-lc-rs underneath, as our TLS): HS256/384/512,
//! RS256/384/512, PS256/384/512, ES256/384 and EdDSA, from an allow-list per filter (`none` is
//! not an algorithm here). `exp`, `nbf` and `iat` are checked with `leeway`, then `iss`, `aud`
//! and the required claims. A verified token's claims become `$jwt_claim_NAME` and its
//! `consumer_claim` (`sub`) `$consumer`, for the filters after this one, the upstream request's
//! header edits and the access log. A request without a token gets `401` with
//! `WWW-Authenticate: Bearer`; a bad one `Bearer error="invalid_token"` (RFC 6750 §3).
//!
//! Keys ([`super::jwt_keys`]): an HMAC `secret`, a `keys` file (PEM, JWK or JWKS), or a JWKS
//! fetched from `jwks_url` through an upstream ([`Remote`]): kept for the response's max-age
//! (`jwks_max_age` when it gives none) and refreshed after it, fetched again when a token names
//! a `kid` the set lacks (at most once per 30 s: Envoy's filter never does, and 401s every
//! token signed after a key rotation until its cache expires), and the last good set kept when
//! a fetch fails. Requests that need a fetch already under way wait for it instead of failing.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::jwt_keys::{self, Key};
use super::registry::{plain, Build, Built, Cx};
use super::{Answer, Caps, Client, Flow, Identity, Phases, Req, State};
use crate::config::{model_auth, BaseDir, CompileError};

/// The least time between two fetches for an unknown `kid`.
const KID_REFETCH: Duration = Duration::from_secs(30);
/// The longest a request waits for a JWKS fetch.
const FETCH_WAIT: Duration = Duration::from_secs(10);
/// The largest JWKS document read.
const MAX_JWKS: usize = 1 << 20;
/// After a failed fetch, none is tried again for this long, whatever the requests ask (with
/// no good set yet, every request once started a fetch of its own: 126 in 5.6 s).
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

static FETCH_FAILED_LOG: crate::logs::Limited = crate::logs::Limited::new();

#[derive(Debug)]
pub struct Jwt {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    validation: Validation,
    leeway: u64,
    /// Non-registered claims a token must carry.
    required: Vec<String>,
    keys: Vec<Key>,
    remote: Option<Remote>,
    source: Source,
    consumer_claim: String,
    forward: bool,
}

#[derive(Debug)]
enum Source {
    Bearer,
    Cookie(String),
    Query(String),
}

/// A JWKS fetched through an upstream.
#[derive(Debug)]
pub struct Remote {
    upstream: usize,
    request: weir_http::RequestHead,
    default_max_age: Duration,
    keys: RwLock<Arc<Vec<Key>>>,
    state: Mutex<Fetching>,
    /// Bumped after every fetch, so that requests waiting for one see it end.
    done: tokio::sync::watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Fetching {
    /// When the set in hand goes stale (`None`: no set yet).
    expires: Option<Instant>,
    last_kid_fetch: Option<Instant>,
    in_flight: bool,
    /// No fetch before this (the last one failed).
    retry_at: Option<Instant>,
}

/// What checking a token with the keys in hand said.
enum Checked {
    Valid(Box<Map<String, Value>>),
    Invalid(&'static str),
    /// No key fits the token's `kid` (or there is no key yet).
    NoKey,
}

impl Build<&Cx<'_>> for model_auth::Jwt {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        plain(Jwt::compile(self, cx.path, cx.base, cx.upstreams)?)
    }
}

impl Jwt {
    pub(crate) fn compile(
        j: model_auth::Jwt,
        path: &str,
        base: &BaseDir,
        upstreams: &std::collections::HashMap<String, usize>,
    ) -> Result<Jwt, CompileError> {
        let mut algorithms = Vec::new();
        for (i, a) in j.algorithms.iter().enumerate() {
            let alg: Algorithm = a.parse().map_err(|_| {
                (
                    format!("{path}.algorithms[{i}]"),
                    format!("{a:?}: use HS256/384/512, RS256/384/512, PS256/384/512, ES256/384 or EdDSA"),
                )
            })?;
            algorithms.push(alg);
        }
        if algorithms.is_empty() {
            return Err((
                format!("{path}.algorithms"),
                "list the algorithms accepted".into(),
            ));
        }
        let families: Vec<_> = algorithms.iter().map(|a| a.family()).collect();
        if families.iter().any(|f| *f != families[0]) {
            return Err((
                format!("{path}.algorithms"),
                "one family of key per filter (HMAC, RSA, EC or EdDSA): mixing them invites algorithm confusion".into(),
            ));
        }
        let mut keys = Vec::new();
        if let Some(s) = &j.secret {
            keys.push(
                jwt_keys::secret(s, j.secret_base64).map_err(|e| (format!("{path}.secret"), e))?,
            );
        }
        if let Some(f) = &j.keys {
            let p = base.0.join(f);
            let text = std::fs::read(&p).map_err(|e| {
                (
                    format!("{path}.keys"),
                    format!("cannot read {}: {e}", p.display()),
                )
            })?;
            keys.extend(
                jwt_keys::from_file(&text)
                    .map_err(|e| (format!("{path}.keys"), format!("{}: {e}", p.display())))?,
            );
        }
        let remote = match (&j.jwks_url, &j.jwks_upstream) {
            (Some(url), Some(up)) => {
                Some(Remote::compile(url, up, j.jwks_max_age.0, path, upstreams)?)
            }
            (Some(_), None) => {
                return Err((
                    format!("{path}.jwks_upstream"),
                    "a jwks_url is fetched through an upstream: name it".into(),
                ))
            }
            (None, Some(_)) => {
                return Err((format!("{path}.jwks_url"), "give the JWKS URL".into()))
            }
            (None, None) => None,
        };
        if keys.is_empty() && remote.is_none() {
            return Err((
                path.to_string(),
                "no key: give secret, keys or jwks_url".into(),
            ));
        }
        if let Some(k) = keys.iter().find(|k| k.key.family() != families[0]) {
            return Err((
                path.to_string(),
                format!(
                    "a {:?} key for {:?} algorithms",
                    k.key.family(),
                    families[0]
                ),
            ));
        }
        let mut validation = Validation::new(algorithms[0]);
        validation.algorithms = algorithms;
        validation.leeway = j.leeway.0.as_secs();
        validation.validate_nbf = true;
        validation.validate_aud = !j.audiences.is_empty();
        if !j.audiences.is_empty() {
            validation.set_audience(&j.audiences);
        }
        if !j.issuers.is_empty() {
            validation.set_issuer(&j.issuers);
        }
        let registered = ["exp", "nbf", "aud", "iss", "sub"];
        validation.set_required_spec_claims(
            &j.required_claims
                .iter()
                .filter(|c| registered.contains(&c.as_str()))
                .collect::<Vec<_>>(),
        );
        let required = j
            .required_claims
            .into_iter()
            .filter(|c| !registered.contains(&c.as_str()))
            .collect();
        let source = match (j.cookie, j.query) {
            (Some(_), Some(_)) => {
                return Err((
                    path.to_string(),
                    "the token comes from a cookie or a query parameter, not both".into(),
                ))
            }
            (Some(c), None) => Source::Cookie(c),
            (None, Some(q)) => Source::Query(q),
            (None, None) => Source::Bearer,
        };
        Ok(Jwt {
            inner: Arc::new(Inner {
                leeway: j.leeway.0.as_secs(),
                validation,
                required,
                keys,
                remote,
                source,
                consumer_claim: j.consumer_claim,
                forward: j.forward_token,
            }),
        })
    }
}

impl Remote {
    fn compile(
        url: &str,
        upstream: &str,
        default_max_age: Duration,
        path: &str,
        upstreams: &std::collections::HashMap<String, usize>,
    ) -> Result<Remote, CompileError> {
        let upstream =
            super::split::upstream(upstream, format!("{path}.jwks_upstream"), upstreams)?;
        let bad = || {
            (
                format!("{path}.jwks_url"),
                format!("{url:?} is not an http:// or https:// URL"),
            )
        };
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
            .ok_or_else(bad)?;
        let (host, target) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if host.is_empty() {
            return Err(bad());
        }
        let raw =
            format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n\r\n");
        let mut b = bytes::BytesMut::from(raw.as_bytes());
        let request = weir_http::parse_request(&mut b, &Default::default())
            .ok()
            .flatten()
            .ok_or_else(bad)?;
        Ok(Remote {
            upstream,
            request,
            default_max_age,
            keys: RwLock::new(Arc::new(Vec::new())),
            state: Mutex::new(Fetching::default()),
            done: tokio::sync::watch::channel(0).0,
        })
    }

    fn keys(&self) -> Arc<Vec<Key>> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Fetching> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a fetch's result: a good set replaces the keys; a failure keeps the last good set
    /// (and tries again after a few seconds).
    fn install(&self, got: Result<(weir_http::ResponseHead, Bytes), String>) {
        let now = Instant::now();
        let parsed = got.and_then(|(head, body)| {
            if head.status != 200 {
                return Err(format!("status {}", head.status));
            }
            let max_age = head
                .header("cache-control")
                .and_then(max_age)
                .unwrap_or(self.default_max_age);
            jwt_keys::from_jwks(&body).map(|k| (k, max_age))
        });
        let mut s = self.state();
        s.in_flight = false;
        match parsed {
            Ok((keys, max_age)) => {
                tracing::info!(keys = keys.len(), "jwt: JWKS fetched");
                *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
                s.expires = Some(now + max_age);
                s.retry_at = None;
            }
            Err(e) => {
                if let Some(suppressed) = FETCH_FAILED_LOG.admit() {
                    tracing::warn!(suppressed, "jwt: JWKS fetch failed, keeping the last good set (next try in {RETRY_AFTER_FAILURE:?}): {e}");
                }
                s.expires = Some(now + RETRY_AFTER_FAILURE);
                s.retry_at = Some(now + RETRY_AFTER_FAILURE);
            }
        }
        drop(s);
        self.done.send_modify(|n| *n += 1);
    }
}

/// `max-age=N` of a Cache-Control value.
/// Whether the token's protected header has a `crit` parameter.
fn has_crit(token: &str) -> bool {
    use base64::Engine;
    let Some(head) = token.split('.').next() else {
        return false;
    };
    let Ok(json) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(head) else {
        return false;
    };
    serde_json::from_slice::<Map<String, Value>>(&json).is_ok_and(|m| m.contains_key("crit"))
}

fn max_age(v: &[u8]) -> Option<Duration> {
    let v = std::str::from_utf8(v).ok()?;
    v.split(',').find_map(|d| {
        let d = d.trim();
        let n = d.strip_prefix("max-age=")?;
        n.trim_matches('"').parse().ok().map(Duration::from_secs)
    })
}

impl Inner {
    fn token<'r>(&self, req: &'r Req<'_>) -> Option<&'r [u8]> {
        match &self.source {
            Source::Bearer => {
                let (scheme, t) =
                    super::basic_auth::split_scheme(req.head.header("authorization")?)?;
                scheme.eq_ignore_ascii_case(b"bearer").then_some(t)
            }
            Source::Cookie(c) => crate::vars::cookie(req.head, c.as_bytes()),
            Source::Query(q) => crate::vars::arg(req.head.query()?, q.as_bytes()),
        }
    }

    /// Checks `token` with `keys` (and the static keys).
    fn check(&self, token: &str, keys: &[Key]) -> Checked {
        let Ok(header) = jsonwebtoken::decode_header(token) else {
            return Checked::Invalid("malformed token");
        };
        if has_crit(token) {
            // RFC 7515 §4.1.11: extensions the recipient must understand; weir understands
            // none, so a token that lists any (or an empty list, itself invalid) is refused.
            return Checked::Invalid("crit");
        }
        if !self.validation.algorithms.contains(&header.alg) {
            return Checked::Invalid("algorithm not allowed");
        }
        let kid = header.kid.as_deref();
        let mut tried = false;
        for k in self
            .keys
            .iter()
            .chain(keys)
            .filter(|k| k.fits(header.alg, kid))
        {
            tried = true;
            match jsonwebtoken::decode::<Map<String, Value>>(token, &k.key, &self.validation) {
                Ok(data) => return self.claims(data.claims),
                Err(e) => {
                    use jsonwebtoken::errors::ErrorKind as K;
                    match e.kind() {
                        K::InvalidSignature => continue,
                        K::ExpiredSignature => return Checked::Invalid("expired"),
                        K::ImmatureSignature => return Checked::Invalid("not yet valid"),
                        K::InvalidAudience => return Checked::Invalid("audience"),
                        K::InvalidIssuer => return Checked::Invalid("issuer"),
                        K::MissingRequiredClaim(_) => return Checked::Invalid("missing claim"),
                        _ => return Checked::Invalid("invalid"),
                    }
                }
            }
        }
        if tried {
            Checked::Invalid("signature")
        } else {
            Checked::NoKey
        }
    }

    /// The checks `jsonwebtoken` leaves to us: `iat` not in the future, required claims.
    fn claims(&self, claims: Map<String, Value>) -> Checked {
        if let Some(iat) = claims.get("iat") {
            let Some(iat) = iat.as_f64() else {
                return Checked::Invalid("iat");
            };
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            if iat > (now + self.leeway) as f64 {
                return Checked::Invalid("issued in the future");
            }
        }
        if self.required.iter().any(|c| !claims.contains_key(c)) {
            return Checked::Invalid("missing claim");
        }
        Checked::Valid(Box::new(claims))
    }

    fn accept(&self, claims: Map<String, Value>) -> Flow {
        let mut consumer = Vec::new();
        let id = Identity {
            claims,
            ..Default::default()
        };
        id.claim(&self.consumer_claim, &mut consumer);
        Flow::Authenticated(Arc::new(Identity {
            consumer: String::from_utf8_lossy(&consumer).into_owned(),
            ..id
        }))
    }

    fn decide(&self, checked: Checked) -> Flow {
        match checked {
            Checked::Valid(c) => self.accept(*c),
            Checked::Invalid(why) => refuse(Some(why)),
            Checked::NoKey => refuse(Some("unknown key")),
        }
    }
}

fn refuse(why: Option<&str>) -> Flow {
    let (challenge, body): (&'static [u8], &'static [u8]) = match why {
        None => (b"Bearer", b"a bearer token is required\n"),
        Some(_) => (b"Bearer error=\"invalid_token\"", b"invalid token\n"),
    };
    Flow::Respond(Answer {
        status: 401,
        fields: vec![(
            Bytes::from_static(b"WWW-Authenticate"),
            Bytes::from_static(challenge),
        )],
        body: Bytes::from_static(body),
    })
}

impl super::Filter for Jwt {
    fn phases(&self) -> Phases {
        match (&self.inner.forward, &self.inner.source) {
            (true, _) => Phases::REQUEST,
            (false, Source::Query(_)) => Phases::REQUEST | Phases::DROPS_ARG,
            (false, _) => Phases::REQUEST | Phases::DROPS_UPSTREAM,
        }
    }

    fn caps(&self) -> Caps {
        match self.inner.remote {
            Some(_) => Caps::FETCH | Caps::IDENTITY,
            None => Caps::IDENTITY,
        }
    }

    fn request(&self, req: &Req<'_>, _: &mut State, _: &mut Option<usize>) -> Flow {
        let inner = &self.inner;
        let Some(token) = inner.token(req).filter(|t| !t.is_empty()) else {
            return refuse(None);
        };
        let Ok(token) = std::str::from_utf8(token) else {
            return refuse(Some("malformed"));
        };
        let Some(remote) = &inner.remote else {
            return inner.decide(inner.check(token, &[]));
        };
        let now = Instant::now();
        let mut keys = remote.keys();
        let mut checked = inner.check(token, &keys);
        // Whether this request starts a fetch, waits for one under way, or is decided now.
        let (start, wait, done) = loop {
            let mut s = remote.state();
            let unknown_kid = matches!(checked, Checked::NoKey);
            if unknown_kid {
                // A fetch may have installed the new keys since they were read: check again
                // with those instead of refusing (install swaps the keys under this lock).
                let current = remote.keys();
                if !Arc::ptr_eq(&current, &keys) {
                    drop(s);
                    keys = current;
                    checked = inner.check(token, &keys);
                    continue;
                }
            }
            let stale = s.expires.is_none_or(|e| now >= e);
            let kid_fetch_allowed = s
                .last_kid_fetch
                .is_none_or(|t| now.saturating_duration_since(t) >= KID_REFETCH);
            let may_fetch = s.retry_at.is_none_or(|t| now >= t);
            if s.in_flight {
                // Subscribed under the lock, so the end of the fetch under way is seen.
                break (
                    false,
                    unknown_kid,
                    unknown_kid.then(|| remote.done.subscribe()),
                );
            } else if may_fetch
                && ((unknown_kid && (kid_fetch_allowed || keys.is_empty())) || stale)
            {
                s.in_flight = true;
                if unknown_kid && !keys.is_empty() {
                    s.last_kid_fetch = Some(now);
                }
                break (true, unknown_kid, None);
            } else {
                break (false, false, None);
            }
        };
        let fetch = match (start, req.fetch) {
            (true, Some(f)) => Some(f.fetch(remote.upstream, remote.request.clone(), MAX_JWKS)),
            (true, None) => {
                remote.install(Err("no way to fetch here".into()));
                None
            }
            (false, _) => None,
        };
        if !wait {
            if let Some(fetch) = fetch {
                // The keys in hand decide this request; the refresh goes on by itself.
                let me = self.inner.clone();
                tokio::task::spawn_local(async move {
                    let got = fetch.await;
                    if let Some(r) = &me.remote {
                        r.install(got);
                    }
                });
            }
            return inner.decide(checked);
        }
        let me = self.inner.clone();
        let token = token.to_string();
        Flow::Wait(Box::pin(async move {
            let Some(remote) = &me.remote else {
                return refuse(Some("no key"));
            };
            match fetch {
                Some(f) => {
                    let got = tokio::time::timeout(FETCH_WAIT, f)
                        .await
                        .unwrap_or_else(|_| Err("timed out".into()));
                    remote.install(got);
                }
                None => {
                    if let Some(mut done) = done {
                        let _ = tokio::time::timeout(FETCH_WAIT, done.changed()).await;
                    }
                }
            }
            me.decide(me.check(&token, &remote.keys()))
        }))
    }

    fn drops_upstream(&self, _: &Client, name: &[u8]) -> bool {
        // A token in a cookie stays: the Cookie field carries the client's other cookies.
        matches!(self.inner.source, Source::Bearer) && name.eq_ignore_ascii_case(b"authorization")
    }

    fn drops_arg(&self, name: &[u8]) -> bool {
        matches!(&self.inner.source, Source::Query(q) if q.as_bytes() == name)
    }
}
