//! The authentication filters' keys: `basic_auth`, `api_key`, `jwt` and `forward_auth`.
//! Defaults follow the anchors (nginx `auth_basic` and `auth_request`, Envoy's `jwt_authn`,
//! Traefik's ForwardAuth, APISIX's `key-auth`) and are documented in docs/config.md.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::units::Dur;

/// HTTP Basic authentication against an htpasswd file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    /// The htpasswd file (relative to the config file), re-read on reload and when it changes.
    pub file: String,
    /// The realm named in `WWW-Authenticate`.
    #[serde(default = "realm")]
    pub realm: String,
    /// How long a verified user and password are remembered (by a keyed hash, never the
    /// password); `0` checks every request.
    #[serde(default = "five_minutes")]
    pub cache: Dur,
    /// Verified credentials remembered at most.
    #[serde(default = "ten_thousand")]
    pub cache_size: usize,
    /// Send the client's `Authorization` upstream (removed by default).
    #[serde(default)]
    pub forward_credentials: bool,
}

/// API keys, each with its consumer's name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    /// The request field that carries the key (default `x-api-key` when no `query` is given).
    #[serde(default)]
    pub header: Option<String>,
    /// The query parameter that carries the key.
    #[serde(default)]
    pub query: Option<String>,
    /// Consumer name → key (use `${VAR}` to take a key from the environment).
    #[serde(default)]
    pub keys: BTreeMap<String, String>,
    /// A file of `consumer:key` lines (relative to the config file), re-read on reload.
    #[serde(default)]
    pub file: Option<String>,
    /// Send the key upstream (removed by default: field and query parameter).
    #[serde(default)]
    pub forward_credentials: bool,
}

/// JSON Web Tokens (RFC 7519) verified with keys given here, in files, or from a JWKS URL.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Jwt {
    /// The algorithms accepted (`HS256`, `RS256`, `ES256`, `EdDSA`, ...); never `none`, and
    /// one family of key per filter.
    pub algorithms: Vec<String>,
    /// The HMAC secret, for `HS*`.
    #[serde(default)]
    pub secret: Option<String>,
    /// The secret is base64.
    #[serde(default)]
    pub secret_base64: bool,
    /// A PEM public key, a JWK or a JWKS file (relative to the config file).
    #[serde(default)]
    pub keys: Option<String>,
    /// A JWKS document fetched through `jwks_upstream` (`https://issuer/.well-known/jwks.json`).
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// The upstream the JWKS is fetched through (its servers, TLS and timeouts).
    #[serde(default)]
    pub jwks_upstream: Option<String>,
    /// How long a fetched JWKS is kept when its response gives no max-age.
    #[serde(default = "ten_minutes")]
    pub jwks_max_age: Dur,
    /// Clock skew allowed for `exp`, `nbf` and `iat`.
    #[serde(default = "one_minute")]
    pub leeway: Dur,
    /// Accepted `iss` values (any when empty).
    #[serde(default)]
    pub issuers: Vec<String>,
    /// Accepted `aud` values (any when empty).
    #[serde(default)]
    pub audiences: Vec<String>,
    /// Claims a token must have.
    #[serde(default = "exp")]
    pub required_claims: Vec<String>,
    /// Take the token from this cookie instead of `Authorization: Bearer`.
    #[serde(default)]
    pub cookie: Option<String>,
    /// Take the token from this query parameter instead of `Authorization: Bearer`.
    #[serde(default)]
    pub query: Option<String>,
    /// The claim that names the consumer (`$consumer`, the access log).
    #[serde(default = "sub")]
    pub consumer_claim: String,
    /// Send the token upstream (removed by default, as Envoy's `forward: false`).
    #[serde(default)]
    pub forward_token: bool,
}

/// A subrequest to an authentication service (nginx `auth_request`, Traefik ForwardAuth).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardAuth {
    /// The upstream of the auth service.
    pub upstream: String,
    /// The path asked (the client's method, path and fields go in `X-Forwarded-*`).
    #[serde(default = "slash")]
    pub path: String,
    /// Request fields sent to the auth service (default: `authorization` and `cookie`).
    #[serde(default = "credential_fields")]
    pub request_headers: Vec<String>,
    /// Fields of a 2xx answer copied onto the upstream request.
    #[serde(default)]
    pub copy_headers: Vec<String>,
    /// The field of a 2xx answer that names the consumer.
    #[serde(default)]
    pub consumer_header: Option<String>,
    /// How long an answer is kept per credential (`0`: ask every time).
    #[serde(default = "zero")]
    pub cache: Dur,
    /// Answers remembered at most.
    #[serde(default = "ten_thousand")]
    pub cache_size: usize,
    /// The largest answer body relayed to the client.
    #[serde(default = "sixty_four_k")]
    pub max_body: usize,
}

fn realm() -> String {
    "restricted".into()
}
fn five_minutes() -> Dur {
    Dur(std::time::Duration::from_secs(300))
}
fn ten_minutes() -> Dur {
    Dur(std::time::Duration::from_secs(600))
}
fn one_minute() -> Dur {
    Dur(std::time::Duration::from_secs(60))
}
fn zero() -> Dur {
    Dur(std::time::Duration::ZERO)
}
fn ten_thousand() -> usize {
    10_000
}
fn sixty_four_k() -> usize {
    65_536
}
fn exp() -> Vec<String> {
    vec!["exp".into()]
}
fn sub() -> String {
    "sub".into()
}
fn slash() -> String {
    "/".into()
}
fn credential_fields() -> Vec<String> {
    vec!["authorization".into(), "cookie".into()]
}
