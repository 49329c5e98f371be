//! `POST /purge`: one selector over this node's cache zones and, in a cluster, over every
//! member's.
//!
//! In a cluster the node that takes the purge applies it, then sends the same query with
//! `local=1` to every other live member's admin API (the address each registered in etcd,
//! with this node's admin token: the members share one config), in parallel, and waits at most
//! [`PEER_TIMEOUT`] for each. The answer says which nodes confirmed and what each purged; it
//! is 200 when all did and 502 when one did not (a purge is idempotent: send it again). Direct
//! calls rather than an etcd event: the caller learns who has purged, not merely that an event
//! was written, and a purge does not wait for etcd to be up.
//!
//! The peer call is a bare HTTP/1.1 request on a fresh connection (`Connection: close`, the
//! answer read to its end, at most 64 KiB): one request per member per purge, not a hot path
//! that would justify a pool or a client crate.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_cache::PurgeSelector;
use weir_http::{Method, RequestHead};

use super::{json_error, query_params, AdminReply, JSON};
use crate::runtime::RuntimeConfig;

/// How long a member has to confirm a purge.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(1);

/// Whether `req` is a purge: answered by [`cluster`] once every disk tier recorded it (and,
/// in a cluster, every member confirmed), never before.
pub fn is_purge(req: &RequestHead) -> bool {
    req.path() == b"/purge" && is_purge_method(&req.method)
}

pub(super) fn is_purge_method(m: &Method) -> bool {
    matches!(m, Method::Post) || matches!(m, Method::Other(x) if &x[..] == b"PURGE")
}

/// This node's purge: `{"purged":N,"soft":B}`, 400/404 for a bad selector or zone, or 503
/// when a disk tier could not record it (a restart would undo it: not acknowledged).
pub(super) async fn local(params: &[(String, String)], cfg: &RuntimeConfig) -> (u16, String) {
    let param = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let selector = if let Some(u) = param("url") {
        match purge_url(u) {
            Ok(url) => PurgeSelector::Url(url),
            Err(why) => return (400, json_error(&why)),
        }
    } else if let Some(p) = param("prefix") {
        PurgeSelector::Prefix(p.as_bytes().to_vec())
    } else if let Some(h) = param("host") {
        PurgeSelector::Host(h.to_ascii_lowercase().into_bytes())
    } else if let Some(r) = param("regex") {
        match regex::bytes::Regex::new(r) {
            Ok(re) => PurgeSelector::Regex(re),
            Err(e) => return (400, json_error(&format!("invalid regex: {e}"))),
        }
    } else if let Some(t) = param("tag") {
        PurgeSelector::Tag(t.to_string())
    } else if param("all").is_some() {
        PurgeSelector::All
    } else {
        return (
            400,
            json_error("give one of url, prefix, host, regex, tag, all"),
        );
    };
    let soft = matches!(param("soft"), Some("1" | "true"));
    let zones: Vec<_> = match param("zone") {
        Some(z) => match cfg.cache_zones.iter().find(|c| c.name == z) {
            Some(zone) => vec![zone.clone()],
            None => return (404, json_error(&format!("no cache zone named {z:?}"))),
        },
        None => cfg.cache_zones.clone(),
    };
    let mut purged = 0;
    let mut failed = Vec::new();
    for z in &zones {
        match z.purge(&selector, soft).await {
            Ok(n) => purged += n,
            Err(why) => failed.push(why),
        }
    }
    if !failed.is_empty() {
        tracing::warn!(selector = %selector, soft, purged, errors = ?failed, "purge not recorded on disk");
        let body = serde_json::json!({
            "purged": purged, "soft": soft,
            "error": failed.join("; "),
        });
        return (503, body.to_string());
    }
    tracing::info!(selector = %selector, soft, purged, "purge");
    (200, format!(r#"{{"purged":{purged},"soft":{soft}}}"#))
}

/// A purge applied here and, in a cluster, sent to every other live member; see the module doc.
pub async fn cluster(req: &RequestHead, cfg: &RuntimeConfig) -> AdminReply {
    let query = req.query().unwrap_or(b"");
    let params = query_params(query);
    let (status, body) = local(&params, cfg).await;
    let reply = |status, body: String| AdminReply {
        status,
        content_type: JSON,
        body,
        lines: Vec::new(),
    };
    let Some(cluster) = &cfg.cluster else {
        return reply(status, body);
    };
    if params.iter().any(|(k, _)| k == "local") {
        // A member's share of another node's purge.
        return reply(status, body);
    }
    if status != 200 {
        // A bad selector is bad everywhere: say so once, send nothing.
        return reply(status, body);
    }
    let mine: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let soft = mine["soft"].as_bool().unwrap_or(false);
    let token = cfg.admin.as_ref().and_then(|a| a.token());
    let target = format!("/purge?{}&local=1", String::from_utf8_lossy(query));
    let members = cluster.state.members();
    let calls = members.iter().filter(|m| m.node != cluster.node).map(|m| {
        let (node, admin) = (m.node.clone(), m.admin);
        let (target, token, from) = (&target, token, &cluster.node);
        async move {
            let outcome = match admin {
                None => Err("registered no admin address".to_string()),
                Some(addr) => {
                    match tokio::time::timeout(PEER_TIMEOUT, call(addr, target, token, from)).await
                    {
                        Ok(r) => r,
                        Err(_) => Err(format!("no answer within {PEER_TIMEOUT:?}")),
                    }
                }
            };
            (node, outcome)
        }
    });
    let answers = futures_util::future::join_all(calls).await;
    let mut nodes = serde_json::Map::new();
    nodes.insert(cluster.node.clone(), mine.clone());
    let mut total = mine["purged"].as_u64().unwrap_or(0);
    let mut confirmed = vec![cluster.node.clone()];
    let mut unconfirmed = Vec::new();
    for (node, outcome) in answers {
        match outcome {
            Ok(n) => {
                total += n;
                confirmed.push(node.clone());
                nodes.insert(node, serde_json::json!({ "purged": n }));
            }
            Err(why) => {
                tracing::warn!(member = %node, error = %why, "cluster purge not confirmed");
                unconfirmed.push(node.clone());
                nodes.insert(node, serde_json::json!({ "error": why }));
            }
        }
    }
    confirmed.sort();
    tracing::info!(?confirmed, ?unconfirmed, total, "cluster purge");
    let status = if unconfirmed.is_empty() { 200 } else { 502 };
    let body = serde_json::json!({
        "purged": total, "soft": soft, "nodes": nodes,
        "confirmed": confirmed, "unconfirmed": unconfirmed,
    });
    reply(status, body.to_string())
}

/// One member's purge: the number it purged, or why it did not confirm.
async fn call(
    addr: SocketAddr,
    target: &str,
    token: Option<&str>,
    from: &str,
) -> Result<u64, String> {
    let mut conn = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let mark = format!("Weir-Peer: {from}\r\n");
    let request = super::client::request("POST", target, addr, token, &mark);
    conn.write_all(request.as_bytes())
        .await
        .map_err(|e| format!("send to {addr}: {e}"))?;
    let mut answer = Vec::new();
    (&mut conn)
        .take(64 * 1024)
        .read_to_end(&mut answer)
        .await
        .map_err(|e| format!("read from {addr}: {e}"))?;
    let (status, body) = super::client::answer(&answer)
        .ok_or_else(|| format!("{addr} answered no HTTP/1.1 status line"))?;
    if status != 200 {
        return Err(format!("{addr} answered {status}: {}", body.trim()));
    }
    let v: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| format!("{addr} answered no JSON: {e}"))?;
    v["purged"]
        .as_u64()
        .ok_or_else(|| format!("{addr} answered without a purged count"))
}

/// The cache-key form of a purge URL: `host[:port]/path?query` as keys hold it (authority
/// normalised as requests' are: lowercase, default port dropped), from that form or a full
/// `http://` / `https://` URL. An error for a value that could match nothing (no path, a bad
/// host): `{"purged":0}` for a typo was no answer.
fn purge_url(u: &str) -> Result<Vec<u8>, String> {
    let (rest, default_port) = if let Some(r) = u.strip_prefix("http://") {
        (r, 80)
    } else if let Some(r) = u.strip_prefix("https://") {
        (r, 443)
    } else {
        (u, 80)
    };
    let bad = || {
        format!("url={u:?} can match no cached object: give host[:port]/path?query or a full http(s) URL")
    };
    let slash = rest.find('/').ok_or_else(bad)?;
    let (authority, path) = rest.split_at(slash);
    let a = weir_http::authority::parse_authority(authority.as_bytes(), default_port)
        .map_err(|_| bad())?;
    let mut out = a
        .normalised
        .unwrap_or_else(|| authority.as_bytes().to_vec());
    out.extend_from_slice(path.split('#').next().unwrap_or(path).as_bytes());
    Ok(out)
}
