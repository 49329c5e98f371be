//! The compiled cache stage of a route.

use std::collections::HashMap;
use std::time::Duration;

use ipnet::IpNet;
use weir_cache::key::KeySpec;
use weir_cache::policy::StoreRules;

use crate::config::{model, CompileError};

/// `max_object_size` when the route does not set one (bounded by the zone's shard size).
const DEFAULT_MAX_OBJECT: u64 = 8 << 20;
/// The smallest `slice`: smaller ones would make one object per few bytes.
const MIN_SLICE: u64 = 1024;

/// A route's cache settings.
#[derive(Debug)]
pub struct CacheRoute {
    /// Index into the config's zones.
    pub zone: usize,
    pub key: KeySpec,
    pub normalize_accept_encoding: bool,
    pub rules: StoreRules,
    pub bypass_cookies: Vec<String>,
    pub bypass_headers: Vec<String>,
    /// Bypass GET requests (and HEAD, which a stored GET answers) / HEAD requests alone.
    pub bypass_get: bool,
    pub bypass_head: bool,
    pub max_object_size: usize,
    pub lock_timeout: Duration,
    pub hit_for_miss: u64,
    pub x_cache: bool,
    pub store_post_responses: bool,
    pub purge_from: Vec<IpNet>,
    /// Slice size: representations kept in slices, ranges filled slice by slice (`slice.rs`).
    pub slice: Option<u64>,
    /// The route authenticates (a filter with the identity phase runs before the cache) and
    /// its objects are shared across consumers all the same (`shared: true`): `weir check`
    /// says so.
    pub shared_across_consumers: bool,
}

impl CacheRoute {
    /// `authenticates`: the route's filters name a consumer before the cache runs.
    pub(crate) fn compile(
        c: model::Cache,
        path: &str,
        zones: &HashMap<String, (usize, u64)>,
        authenticates: bool,
    ) -> Result<CacheRoute, CompileError> {
        let mut keyed_by_consumer = authenticates && !c.shared;
        for (i, v) in c.key.vars.iter().enumerate() {
            match v.as_str() {
                "$consumer" => keyed_by_consumer = true,
                other => {
                    return Err((
                        format!("{path}.key.vars[{i}]"),
                        format!("{other:?}: only $consumer can be part of a cache key (headers, cookies and query_params have keys of their own)"),
                    ))
                }
            }
        }
        let (zone, shard_share) = *zones.get(&c.zone).ok_or_else(|| {
            let mut known: Vec<&String> = zones.keys().collect();
            known.sort();
            (
                format!("{path}.zone"),
                format!("no cache zone named {:?} (defined: {known:?})", c.zone),
            )
        })?;
        let mut ttl_by_status = Vec::new();
        for (status, ttl) in &c.ttl {
            let code: u16 = status
                .parse()
                .ok()
                .filter(|s| (200..=599).contains(s))
                .ok_or_else(|| {
                    (
                        format!("{path}.ttl.{status}"),
                        "keys are status codes (200-599)".to_string(),
                    )
                })?;
            let secs = if ttl == "forever" {
                u64::MAX
            } else {
                ttl.parse::<crate::config::units::Dur>()
                    .map_err(|m| (format!("{path}.ttl.{status}"), m))?
                    .0
                    .as_secs()
            };
            ttl_by_status.push((code, secs));
        }
        if c.ignore_origin && ttl_by_status.is_empty() {
            return Err((
                format!("{path}.ignore_origin"),
                "ignore_origin needs ttl rules, or nothing would be stored".into(),
            ));
        }
        let (mut bypass_get, mut bypass_head) = (false, false);
        for (i, m) in c.bypass.methods.iter().enumerate() {
            match m.to_ascii_uppercase().as_str() {
                "GET" => bypass_get = true,
                "HEAD" => bypass_head = true,
                _ => {
                    return Err((
                        format!("{path}.bypass.methods[{i}]"),
                        format!("{m:?}: only GET and HEAD use the cache, other methods always go to the upstream"),
                    ))
                }
            }
        }
        // An object must fit in one shard of the store; a larger limit would let weir announce
        // `stored` for objects the store then refuses.
        let max_object_size = match c.max_object_size {
            Some(s) if s.0 > shard_share => {
                return Err((
                    format!("{path}.max_object_size"),
                    format!(
                        "{} bytes is more than one shard of zone {:?} holds ({shard_share} bytes = max_size / shards); raise the zone's max_size, lower its shards, or lower this",
                        s.0, c.zone
                    ),
                ))
            }
            Some(s) => s.0,
            None => DEFAULT_MAX_OBJECT.min(shard_share),
        };
        let slice = match c.slice {
            Some(s) if s.0 < MIN_SLICE => {
                return Err((
                    format!("{path}.slice"),
                    format!("{} bytes is too small a slice (at least 1k; nginx users pick 1m)", s.0),
                ))
            }
            Some(s) if s.0 > max_object_size => {
                return Err((
                    format!("{path}.slice"),
                    format!(
                        "a slice of {} bytes is larger than max_object_size ({max_object_size} bytes): each slice is stored as one object",
                        s.0
                    ),
                ))
            }
            s => s.map(|s| s.0),
        };
        let listed = c
            .purge_from
            .unwrap_or_else(|| vec!["127.0.0.0/8".into(), "::1/128".into()]);
        let mut purge_from = Vec::new();
        for (i, cidr) in listed.iter().enumerate() {
            purge_from.push(
                cidr.parse::<IpNet>()
                    .or_else(|_| cidr.parse::<std::net::IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        (
                            format!("{path}.purge_from[{i}]"),
                            format!("{cidr:?} is not an address or CIDR"),
                        )
                    })?,
            );
        }
        Ok(CacheRoute {
            zone,
            key: KeySpec {
                headers: c
                    .key
                    .headers
                    .iter()
                    .map(|h| h.to_ascii_lowercase())
                    .collect(),
                cookies: c.key.cookies,
                query_params: c.key.query_params,
                sort_query: c.key.sort_query,
                consumer: keyed_by_consumer,
            },
            normalize_accept_encoding: c.key.normalize_accept_encoding,
            rules: StoreRules {
                ttl_by_status,
                ignore_origin: c.ignore_origin,
                share_set_cookie: c.share_set_cookie,
            },
            bypass_cookies: c.bypass.cookies,
            bypass_headers: c
                .bypass
                .headers
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            bypass_get,
            bypass_head,
            max_object_size: max_object_size.min(usize::MAX as u64) as usize,
            lock_timeout: c.lock_timeout.0,
            hit_for_miss: c.hit_for_miss.0.as_secs(),
            x_cache: c.x_cache,
            shared_across_consumers: authenticates && !keyed_by_consumer,
            store_post_responses: c.store_post_responses,
            purge_from,
            slice,
        })
    }

    /// Whether a peer may PURGE (loopback always may).
    /// Whether client `ip` may PURGE: it is in `purge_from` (loopback when unset; nobody when
    /// `[]`).
    pub fn may_purge(&self, ip: std::net::IpAddr) -> bool {
        self.purge_from.iter().any(|n| n.contains(&ip))
    }
}
