//! The admin API, served on the `admin` listener only (keep it on loopback or a management
//! network). Every request first passes [`guard`]: Host and Origin checks against DNS rebinding
//! and cross-site requests, an optional bearer token, and each endpoint's methods.
//!
//! * `GET /health` → `{"status":"ok"}` (liveness: the process answers)
//! * `GET /ready` → 200 `{"ready":true,...}` when every upstream has at least one server up,
//!   else 503 with the upstreams that have none (readiness, for a load balancer in front). The
//!   listeners are bound before the admin listener answers at all.
//! * `GET /stats` → per zone: objects, bytes, limit, hits, misses, stale, revalidated, stores,
//!   evictions, coalesced, purged.
//! * `POST /purge?…` (or `PURGE /purge?…`) with one selector — `url=host/path?query`,
//!   `prefix=host/path`, `host=name`, `regex=…` (over `host/path?query`), `tag=…`
//!   (Surrogate-Key / Cache-Tag), `all=1` — and optionally `zone=NAME` and `soft=1` (mark stale,
//!   revalidate on next use, instead of removing). → `{"purged": N}`. In a cluster the purge
//!   is sent to every live member too ([`purge`]): the answer adds `nodes`, `confirmed` and
//!   `unconfirmed`, and is 502 when a member did not confirm; `local=1` purges this node only.
//! * `GET /metrics` → Prometheus/OpenMetrics text ([`scrape`]).
//! * `GET /status` → pid, version, uptime, config generation and file, workers, listeners
//!   (what `weir status` shows).
//! * `POST /reload` → re-reads the config file as SIGHUP does: 200 `{"reloaded":true}`, or 500
//!   `{"reloaded":false,"error":…}` with the running config kept.
//! * `POST /upstreams/drain?upstream=U&server=S`, `POST /upstreams/enable?…` → takes a server
//!   out of rotation and back ([`upstreams`]).
//! * `GET /` → the live dashboard (`dashboard.html`: traffic and error rates over time, routes,
//!   upstream servers with drain/enable buttons, cache zones, purge and reload buttons), fed by
//! * `GET /dashboard.json` ([`dashboard`]), from the server's own last minutes of samples.
//! * `GET /openapi.json` → this API described as OpenAPI 3.0 (checked against the real
//!   endpoints in `tests/admin_api.rs`).

pub mod client;
mod dashboard;
pub mod guard;
pub mod purge;
pub mod scrape;
mod scrape_cluster;
mod scrape_filters;
mod scrape_servers;
mod scrape_storage;
mod shield;
mod status;
mod upstreams;

use std::sync::atomic::Ordering;

use weir_http::{Method, RequestHead};

use crate::runtime::RuntimeConfig;

/// The live dashboard, one self-contained page (no external resources: weir runs offline).
pub const DASHBOARD: &str = include_str!("dashboard.html");

/// The OpenAPI description of this API.
pub const OPENAPI: &str = include_str!("openapi.json");

/// An admin answer: status, content type, body.
#[derive(Debug)]
pub struct AdminReply {
    pub status: u16,
    pub content_type: &'static [u8],
    pub body: String,
    /// Field lines to add (`Allow`, `WWW-Authenticate`).
    pub lines: Vec<u8>,
}

/// Whether `req` is answered by [`answer_later`] (it waits on another task, a disk or a node):
/// a reload, or a purge (recorded by the disk tiers, sent to the other members of a cluster).
pub fn waits(req: &RequestHead, _cfg: &RuntimeConfig) -> bool {
    (req.path() == b"/reload" && req.method == Method::Post) || purge::is_purge(req)
}

/// The answer to a request [`waits`] chose.
pub async fn answer_later(req: &RequestHead, cfg: &RuntimeConfig) -> AdminReply {
    if req.path() == b"/reload" {
        reload(cfg).await
    } else {
        purge::cluster(req, cfg).await
    }
}

/// Asks `weir run` to reload, and waits for the outcome.
pub async fn reload(cfg: &RuntimeConfig) -> AdminReply {
    let json = |status, body: serde_json::Value| AdminReply {
        status,
        content_type: JSON,
        body: body.to_string(),
        lines: Vec::new(),
    };
    let sender = cfg
        .registry
        .reloader
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let Some(sender) = sender else {
        return json(
            503,
            serde_json::json!({"reloaded": false, "error": "this server was not started by `weir run`: nothing to reload from"}),
        );
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    if sender.send(tx).is_err() {
        return json(
            503,
            serde_json::json!({"reloaded": false, "error": "shutting down"}),
        );
    }
    match tokio::time::timeout(std::time::Duration::from_secs(60), rx).await {
        Ok(Ok(Ok(()))) => json(200, serde_json::json!({"reloaded": true})),
        Ok(Ok(Err(e))) => json(500, serde_json::json!({"reloaded": false, "error": e})),
        _ => json(
            503,
            serde_json::json!({"reloaded": false, "error": "no answer from the reloader"}),
        ),
    }
}

pub(super) const JSON: &[u8] = b"application/json";

/// Answers an admin request (all but [`reload`]); `generation` is the running config's.
pub fn handle(
    req: &RequestHead,
    cfg: &std::sync::Arc<RuntimeConfig>,
    generation: u64,
) -> AdminReply {
    let (status, body) = match (req.path(), &req.method) {
        (b"/metrics", Method::Get | Method::Head) => {
            let accept = req.header("accept");
            let (content_type, body) = scrape::scrape(cfg, generation, accept);
            return AdminReply {
                status: 200,
                content_type,
                body,
                lines: Vec::new(),
            };
        }
        (b"/openapi.json", Method::Get | Method::Head) => (200, OPENAPI.to_string()),
        (b"/status", Method::Get | Method::Head) => status::status(cfg, generation),
        (b"/dashboard.json", Method::Get | Method::Head) => dashboard::dashboard(cfg, generation),
        (b"/", Method::Get | Method::Head) => {
            return AdminReply {
                status: 200,
                content_type: b"text/html; charset=utf-8",
                body: DASHBOARD.to_string(),
                lines: Vec::new(),
            }
        }
        // Methods were checked by `guard::refuse` (405 with Allow, one table for all).
        _ => json_api(req, cfg),
    };
    AdminReply {
        status,
        content_type: JSON,
        body,
        lines: Vec::new(),
    }
}

/// The JSON endpoints.
fn json_api(req: &RequestHead, cfg: &RuntimeConfig) -> (u16, String) {
    let params = query_params(req.query().unwrap_or(b""));
    let param = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let is_purge_method = purge::is_purge_method(&req.method);
    match (req.path(), is_purge_method) {
        (b"/health", false) => (200, r#"{"status":"ok"}"#.into()),
        (b"/ready", false) => ready(cfg),
        (b"/stats", false) => (200, stats(cfg)),
        (b"/breakers", false) => (200, breakers(cfg)),
        (b"/cluster", false) => scrape_cluster::status(cfg),
        (b"/shield", false) => shield::list(cfg),
        (b"/shield/unblock", true) => shield::unblock(cfg, param("client")),
        (b"/upstreams/drain", _) => upstreams::set(cfg, param("upstream"), param("server"), true),
        (b"/upstreams/enable", _) => {
            upstreams::set(cfg, param("upstream"), param("server"), false)
        }
        _ => (
            404,
            json_error(
                "unknown admin path (/, /health, /ready, /status, /dashboard.json, /stats, /breakers, /cluster, /shield, /metrics, /purge, /upstreams/drain, /upstreams/enable, /reload, /openapi.json)",
            ),
        ),
    }
}

/// Readiness: every upstream has a server up.
fn ready(cfg: &RuntimeConfig) -> (u16, String) {
    readiness(cfg, None)
}

/// Readiness over the upstreams `only` names (all when `None`): 200 when each has a server up,
/// else 503 naming those that have none. Also the `health` route action's answer.
pub fn readiness(cfg: &RuntimeConfig, only: Option<&[usize]>) -> (u16, String) {
    let now = crate::proxy::upstream::now_ms();
    let down: Vec<&str> = cfg
        .upstreams
        .iter()
        .enumerate()
        .filter(|(i, _)| only.is_none_or(|o| o.contains(i)))
        .map(|(_, u)| u)
        .filter(|u| !(0..u.servers.len()).any(|i| u.is_up(i, now)))
        .map(|u| u.name.as_str())
        .collect();
    let body =
        serde_json::json!({ "ready": down.is_empty(), "upstreams_without_servers_up": down });
    (if down.is_empty() { 200 } else { 503 }, body.to_string())
}

/// `GET /breakers`: each circuit breaker's state and window.
fn breakers(cfg: &RuntimeConfig) -> String {
    let mut out = serde_json::Map::new();
    for c in &cfg.filters {
        if let crate::filters::compile::Kind::Breaker(b) = &c.kind {
            let s = b.snapshot();
            out.insert(
                s.name.clone(),
                serde_json::json!({
                    "state": s.phase.as_str(), "calls": s.calls, "failed": s.failed,
                    "slow": s.slow, "opened": s.opened,
                }),
            );
        }
    }
    serde_json::json!({ "breakers": out }).to_string()
}

fn stats(cfg: &RuntimeConfig) -> String {
    let mut zones = serde_json::Map::new();
    for z in &cfg.cache_zones {
        let (objects, bytes) = z.store.usage();
        let s = &z.store.stats;
        let n = |c: &weir_cache::Striped| c.load(Ordering::Relaxed);
        zones.insert(
            z.name.clone(),
            serde_json::json!({
                "objects": objects, "bytes": bytes, "limit": z.store.limit(),
                "hits": n(&s.hits), "misses": n(&s.misses), "stale": n(&s.stale),
                "revalidated": n(&s.revalidated), "stores": n(&s.stores), "evictions": n(&s.evictions),
                "coalesced": n(&s.coalesced), "purged": n(&s.purged),
            }),
        );
    }
    serde_json::json!({ "zones": zones }).to_string()
}

pub(super) fn json_error(msg: &str) -> String {
    serde_json::json!({ "error": msg }).to_string()
}

pub(super) fn query_params(q: &[u8]) -> Vec<(String, String)> {
    q.split(|b| *b == b'&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = match p.iter().position(|b| *b == b'=') {
                Some(i) => (&p[..i], &p[i + 1..]),
                None => (p, &b""[..]),
            };
            let decode = |s: &[u8]| {
                let plus: Vec<u8> = s
                    .iter()
                    .map(|b| if *b == b'+' { b' ' } else { *b })
                    .collect();
                percent_encoding::percent_decode(&plus)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (decode(k), decode(v))
        })
        .collect()
}
