//! The TLS and HTTP/2 part of the config file: a listener's `tls:` section and the top-level
//! `http2:` limits. Re-exported from `model.rs`.

use serde::Deserialize;

use super::units::Size;

/// A listener's TLS termination.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    /// Certificates, chosen by the name the client asks for (SNI). The first is the default,
    /// for clients that send no name or one that matches no certificate. May be empty when
    /// `acme` obtains the listener's certificate.
    #[serde(default)]
    pub certificates: Vec<Certificate>,
    /// Certificates obtained and renewed automatically from an ACME CA (Let's Encrypt).
    pub acme: Option<Acme>,
    /// OCSP stapling of `certificates`.
    pub ocsp: Option<Ocsp>,
    /// `tls1.2` and/or `tls1.3`.
    #[serde(default = "default_protocols")]
    pub protocols: Vec<String>,
    /// Cipher suites by their IANA names (`TLS13_AES_128_GCM_SHA256`,
    /// `TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`, ...); absent: rustls' defaults, all AEAD with
    /// forward secrecy.
    pub ciphers: Option<Vec<String>>,
    /// Protocols offered by ALPN, in order of preference: `h2`, `http/1.1`.
    #[serde(default = "default_alpn")]
    pub alpn: Vec<String>,
    /// Resumption by TLS 1.3 tickets and TLS 1.2 session tickets, with keys that rotate every
    /// 6 hours and live in this process only.
    #[serde(default = "default_true")]
    pub session_tickets: bool,
    /// Sessions kept for resumption by id (TLS 1.2 clients without tickets); 0: none.
    #[serde(default = "default_session_cache")]
    pub session_cache: usize,
    /// Verify client certificates (mTLS).
    pub client_auth: Option<ClientAuth>,
}

/// ACME (RFC 8555): one certificate for `names`, obtained at start when none is stored,
/// renewed `renew_before` its expiry, stored under `storage` and reused across restarts.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Acme {
    /// The names the certificate is for (each must resolve to this server); in a site, its
    /// hosts when absent.
    #[serde(default)]
    pub names: Vec<String>,
    /// The CA's directory URL.
    #[serde(default = "default_acme_directory")]
    pub directory: String,
    /// A contact address for the account (`ops@example.com`).
    pub email: Option<String>,
    /// `http-01` (answered on the plain-HTTP listeners' port 80), `tls-alpn-01` (answered on
    /// this listener, port 443), or `dns-01` (a TXT record set through `dns`; the one that
    /// issues wildcards).
    #[serde(default = "default_acme_challenge")]
    pub challenge: String,
    /// How `dns-01` sets and removes its TXT records.
    pub dns: Option<AcmeDns>,
    /// Where the account and certificates are kept.
    #[serde(default = "default_acme_storage")]
    pub storage: String,
    /// PEM file of the CA that signed the directory's HTTPS certificate, for a private or test
    /// ACME server; absent: the system's roots.
    pub directory_ca: Option<String>,
    /// Renew when the certificate expires within this.
    #[serde(default = "default_renew_before")]
    pub renew_before: super::units::Dur,
    /// How often the certificate's expiry is looked at.
    #[serde(default = "default_check_every")]
    pub check_every: super::units::Dur,
    /// The first wait after a failed attempt; it doubles after each failure, up to
    /// `check_every`.
    #[serde(default = "default_acme_retry")]
    pub retry_after: super::units::Dur,
    /// Certificates obtained at the first handshake for names approved then (Caddy's
    /// `on_demand_tls`), beside `names` (which may then be empty).
    pub on_demand: Option<OnDemand>,
    /// The longest one order may take with the CA (DNS-01's propagation wait and record changes
    /// come on top): a CA that stops answering fails the attempt instead of holding it.
    #[serde(default = "default_order_timeout")]
    pub order_timeout: super::units::Dur,
}

fn default_order_timeout() -> super::units::Dur {
    super::units::Dur(std::time::Duration::from_secs(300))
}

/// DNS-01's records: set by weir's own RFC 2136 client (`rfc2136`), or by a command (`exec`,
/// lego's and acme.sh's `exec` provider), run as `COMMAND... present FQDN VALUE` before the CA is
/// asked to look and `COMMAND... cleanup FQDN VALUE` after, where FQDN is
/// `_acme-challenge.<name>.` and VALUE the TXT record's text. One of the two.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AcmeDns {
    /// The command and its first arguments (`[/usr/local/bin/dns-hook, --zone, example.com]`).
    pub exec: Option<Vec<String>>,
    /// Dynamic updates (RFC 2136) signed with a TSIG key, sent to the zone's primary server.
    pub rfc2136: Option<Rfc2136>,
    /// Wait this long after the records are set before the CA looks (DNS propagation).
    #[serde(default)]
    pub propagation: super::units::Dur,
    /// The time limit of each call (the command's, or the updates' with their zone lookup).
    #[serde(default = "default_hook_timeout")]
    pub timeout: super::units::Dur,
}

/// RFC 2136 dynamic updates: the TXT record added (TTL 60) before the CA looks and that record
/// deleted after, each UPDATE signed with a TSIG key (RFC 8945) and the server's answer checked
/// against it, over TCP.
#[derive(Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rfc2136 {
    /// The primary server: `host:port`, `host` (port 53), `[v6]:port`.
    pub server: String,
    /// The zone updated (`example.com`); absent: found by asking the server for the SOA of the
    /// record's name, then of each parent, as nsupdate does.
    pub zone: Option<String>,
    /// The key's name, as the server knows it; with `key_file`, needed only when the file holds
    /// several keys.
    pub key_name: Option<String>,
    /// The key's secret, base64 (`${TSIG_SECRET}` keeps it out of the file).
    pub key_secret: Option<String>,
    /// A key file in bind's format (`tsig-keygen -a hmac-sha256 NAME`), instead of `key_secret`.
    pub key_file: Option<String>,
    /// `hmac-sha256` (the default), `hmac-sha384` or `hmac-sha512`; a key file names its own.
    pub algorithm: Option<String>,
}

/// Without the secret: `AcmeCerts`, which holds these settings, is logged with `{:?}`.
impl std::fmt::Debug for Rfc2136 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rfc2136")
            .field("server", &self.server)
            .field("zone", &self.zone)
            .field("key_name", &self.key_name)
            .field(
                "key_secret",
                &self.key_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("key_file", &self.key_file)
            .field("algorithm", &self.algorithm)
            .finish()
    }
}

fn default_hook_timeout() -> super::units::Dur {
    super::units::Dur(std::time::Duration::from_secs(60))
}

fn default_acme_directory() -> String {
    "https://acme-v02.api.letsencrypt.org/directory".into()
}

fn default_acme_challenge() -> String {
    "tls-alpn-01".into()
}

fn default_acme_storage() -> String {
    "/var/lib/weir/acme".into()
}

fn default_renew_before() -> super::units::Dur {
    super::units::Dur(std::time::Duration::from_secs(30 * 86_400))
}

fn default_check_every() -> super::units::Dur {
    super::units::Dur(std::time::Duration::from_secs(12 * 3600))
}

fn default_acme_retry() -> super::units::Dur {
    super::units::Dur(std::time::Duration::from_secs(60))
}

/// OCSP stapling: each certificate's status, fetched from its responder (the certificate's
/// Authority Information Access URL, or `responder`) or read from `file`, refreshed, and sent
/// in the handshake.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Ocsp {
    /// A responder URL (`http://…`) used instead of the certificates' own.
    pub responder: Option<String>,
    /// A DER OCSP response to staple (for the first certificate), re-read at each refresh,
    /// instead of fetching one.
    pub file: Option<String>,
    /// PEM file of the issuer of the certificates, when their chain does not include it.
    pub issuer: Option<String>,
    /// How often the response is fetched again (sooner when it says its next update is
    /// sooner); failures retry after a minute and keep the previous response until it expires.
    #[serde(default = "default_ocsp_refresh")]
    pub refresh: super::units::Dur,
}

fn default_ocsp_refresh() -> super::units::Dur {
    super::units::Dur(std::time::Duration::from_secs(3600))
}

/// One certificate chain and its key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Certificate {
    /// PEM file: the certificate, then its intermediates.
    pub cert: String,
    /// PEM file: the private key (PKCS#8, PKCS#1 or SEC1; RSA, ECDSA or Ed25519).
    pub key: String,
    /// Names it is chosen for (`example.com`, `*.example.com`); absent: the DNS names of the
    /// certificate's subjectAltName.
    #[serde(default)]
    pub names: Vec<String>,
}

/// Client certificate verification.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientAuth {
    /// PEM file of the CA certificates client certificates must chain to.
    pub ca: String,
    /// `required` (the handshake fails without a valid certificate) or `optional` (a client
    /// without one is let in; one with an invalid one is not).
    #[serde(default)]
    pub mode: ClientAuthMode,
}

/// Whether a client certificate is required.
#[derive(Debug, Default, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuthMode {
    #[default]
    Required,
    Optional,
}

fn default_protocols() -> Vec<String> {
    vec!["tls1.2".into(), "tls1.3".into()]
}

fn default_alpn() -> Vec<String> {
    vec!["h2".into(), "http/1.1".into()]
}

fn default_true() -> bool {
    true
}

fn default_session_cache() -> usize {
    20_000
}

/// HTTP/2 limits, for every listener that speaks it. The defaults follow nginx's and the h2
/// crate's, with the flood limits of CVE-2023-44487 ("rapid reset") and CVE-2019-9512..9518.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Http2 {
    /// Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_streams: u32,
    /// Largest decoded request header list (SETTINGS_MAX_HEADER_LIST_SIZE); 431 beyond.
    pub max_header_list_size: Size,
    /// Each stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE).
    pub initial_window_size: Size,
    /// The connection's receive window.
    pub connection_window_size: Size,
    /// Largest frame the client may send (SETTINGS_MAX_FRAME_SIZE).
    pub max_frame_size: Size,
    /// Streams the client may reset before weir has answered them, per connection at once,
    /// before it is closed with GOAWAY ENHANCE_YOUR_CALM (rapid reset).
    pub max_pending_reset_streams: usize,
    /// Streams weir may reset for protocol errors on one connection before closing it.
    pub max_error_reset_streams: usize,
    /// Control frames (SETTINGS, PING, RST_STREAM, PRIORITY, WINDOW_UPDATE) and empty DATA or
    /// HEADERS frames a client may send per second before the connection is closed with
    /// GOAWAY ENHANCE_YOUR_CALM (the 2019 flood family).
    pub max_control_frames_per_second: u32,
}

impl Default for Http2 {
    fn default() -> Self {
        Http2 {
            max_concurrent_streams: 128,
            max_header_list_size: Size(32 * 1024),
            initial_window_size: Size(256 * 1024),
            connection_window_size: Size(1024 * 1024),
            max_frame_size: Size(16 * 1024),
            max_pending_reset_streams: 20,
            max_error_reset_streams: 1024,
            max_control_frames_per_second: 1000,
        }
    }
}

/// TLS to an upstream's servers. Servers written `https://` use TLS with these settings (the
/// defaults when the section is absent); with the section, every server of the upstream does.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTls {
    /// PEM file of the CA certificates servers are verified against; absent: the system's
    /// roots (`/etc/ssl/certs`).
    pub ca: Option<String>,
    /// The name sent as SNI and verified in the certificate; absent: each server's host.
    pub sni: Option<String>,
    /// Accept any certificate. For labs only: weir logs a warning at every load.
    #[serde(default)]
    pub insecure_skip_verify: bool,
    /// A client certificate, for servers that require one (mTLS).
    pub client_cert: Option<ClientCert>,
}

/// A client certificate chain and its key (PEM files).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientCert {
    pub cert: String,
    pub key: String,
}

/// On-demand issuance: a handshake for a name no certificate covers waits (up to `wait`) while
/// one is obtained for it, if `allow` lists it or `ask` approves it, within `rate`.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OnDemand {
    /// `http://host:port/path`: asked `GET path?domain=NAME` before ordering; a 2xx approves
    /// (Caddy's `ask`). Refusals are remembered for a minute.
    pub ask: Option<String>,
    /// Names approved without asking: exact, or `*.example.com` (one label under it).
    #[serde(default)]
    pub allow: Vec<String>,
    /// At most this many new certificates ordered per `per` (stored ones are not counted).
    #[serde(default = "default_on_demand_rate")]
    pub rate: u32,
    #[serde(default = "default_on_demand_per")]
    pub per: super::units::Dur,
    /// At most this many names served on demand. When it is reached, the name handshakes asked
    /// for least recently is forgotten to make room, if none asked for it within `per`.
    #[serde(default = "default_on_demand_max")]
    pub max_names: usize,
    /// A name no handshake asked for in this long is forgotten: no longer served or renewed,
    /// and its stored certificate removed (a name a random-SNI client made up is not kept).
    #[serde(default = "default_on_demand_forget")]
    pub forget_after: super::units::Dur,
    /// How long a handshake waits for its certificate; past it the handshake goes on with the
    /// default certificate and the order continues.
    #[serde(default = "default_on_demand_wait")]
    pub wait: super::units::Dur,
}

fn default_on_demand_rate() -> u32 {
    10
}

/// 10 new orders per 10 minutes, a burst of 10: at most 190 in 3 hours, within Let's Encrypt's
/// 300 new orders per 3 hours per account (it was 10 a minute: 600 an hour).
fn default_on_demand_per() -> super::units::Dur {
    super::units::Dur(std::time::Duration::from_secs(600))
}

fn default_on_demand_forget() -> super::units::Dur {
    super::units::Dur(std::time::Duration::from_secs(24 * 3600))
}

fn default_on_demand_max() -> usize {
    1000
}

fn default_on_demand_wait() -> super::units::Dur {
    super::units::Dur(std::time::Duration::from_secs(30))
}
