//! Hot copies of a sharded zone (`cluster.local_hot`, issue 34), from the outsider review of
//! that change: a copy is the owner's raw answer, so a hit from it gets the route's response
//! filters once; what the route keeps out of the store stays out of the copies; and an
//! invalidation or a `PURGE` made at the owner reaches the copies within `local_hot_ttl`.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::etcd::Etcd;
use common::member::start_member;
use common::origin::{http_origin, SeenRequest};
use common::process::*;
use common::*;

struct Node {
    addr: SocketAddr,
    admin: SocketAddr,
    _proc: Running,
}

fn start_from(config: &std::path::Path, name: &str, etcd: SocketAddr, origin: SocketAddr) -> Node {
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c"]).arg(config);
    let (proc, addr, admin) = start_member(cmd, name, etcd, origin);
    Node {
        addr,
        admin,
        _proc: proc,
    }
}

/// The members `n` lists and the members on its zone `shared`'s ring (which comes with the
/// config a membership change reloads, a moment after `/cluster` lists the member).
fn members_placed(n: &Node) -> (usize, usize) {
    let r = get(n.admin, "/cluster");
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
    (
        v["members"].as_array().map_or(0, Vec::len),
        v["sharded_zones"]["shared"]["shares"]
            .as_object()
            .map_or(0, serde_json::Map::len),
    )
}

fn counter(n: &Node, name: &str) -> u64 {
    let s: serde_json::Value = serde_json::from_slice(&get(n.admin, "/cluster").body).unwrap();
    s[name].as_u64().unwrap()
}

fn count_fields(r: &Response, name: &str) -> usize {
    r.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .count()
}

/// Two members, `local_hot` on; the route adds a response field and keeps `X-Debug` answers
/// out of the cache (`no_store`). Keys owned by b, asked twice at a.
fn two_nodes(
    tag: &str,
    ttl: &str,
) -> Option<(Etcd, common::origin::Origin, Arc<AtomicUsize>, Node, Node)> {
    let etcd = Etcd::start(tag)?;
    let fetched = Arc::new(AtomicUsize::new(0));
    let f2 = fetched.clone();
    let origin = http_origin(move |req: &SeenRequest| {
        f2.fetch_add(1, Ordering::SeqCst);
        let n = f2.load(Ordering::SeqCst);
        let body = format!("object {} v{n}", req.line);
        let debug = if req.line.contains("/nostore/") {
            "X-Debug: 1\r\n"
        } else {
            ""
        };
        format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=3600\r\n{debug}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    let config = write_config(
        tag,
        &
        "workers: 1\ncluster:\n  node: ${WEIR_NODE}\n  etcd: ['${WEIR_ETCD}']\nadmin: { address: '${WEIR_ADMIN}' }\ncache_zones:\n  shared: { max_size: 16m, cluster: { local_hot: 1m, local_hot_ttl: TTL } }\nupstreams: { origin: { servers: ['${WEIR_ORIGIN}'] } }\nlisteners:\n  - address: ${WEIR_LISTEN}\n    routes:\n      - filters:\n          - no_store: { response_fields: [x-debug] }\n          - headers: { response: { add: { x-added: one } } }\n        proxy: { upstream: origin }\n        cache: { zone: shared }\n"
            .replace("TTL", ttl),
    );
    let a = start_from(&config, &format!("{tag}-a"), etcd.addr, origin.addr);
    let b = start_from(&config, &format!("{tag}-b"), etcd.addr, origin.addr);
    for n in [&a, &b] {
        until("two members, on the ring", Duration::from_secs(10), || {
            members_placed(n) == (2, 2)
        });
    }
    Some((etcd, origin, fetched, a, b))
}

/// The paths among `candidates` that node a sends to b (a peer fill on the first GET).
fn owned_by_b(a: &Node, candidates: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for k in candidates {
        let before = counter(a, "peer_fills");
        let r = get(a.addr, k);
        assert_eq!(r.status, 200);
        // A peer fill or a local answer alike: the route's filters ran once.
        assert_eq!(count_fields(&r, "x-added"), 1, "{k}: {:?}", r.headers);
        assert_eq!(count_fields(&r, "via"), 1, "{k}: {:?}", r.headers);
        if counter(a, "peer_fills") > before {
            out.push(k.clone());
        }
    }
    out
}

/// The review found a hot-copy hit carrying the route's response filters twice (once at the
/// owner, in what was kept, once here). The owner now answers peers raw: a peer fill, a hot hit
/// and the owner's own hit all carry `X-Added` once.
#[test]
fn hot_copy_hits_get_the_route_response_filters_once() {
    let Some((_etcd, _origin, _fetched, a, b)) = two_nodes("hot-filters", "60s") else {
        return;
    };
    let keys: Vec<String> = (0..30).map(|i| format!("/hot/{i}")).collect();
    let remote = owned_by_b(&a, &keys);
    assert!(!remote.is_empty(), "no key owned by b");
    // The owner's own hit: one X-Added.
    let own = get(b.addr, &remote[0]);
    assert_eq!(count_fields(&own, "x-added"), 1, "{:?}", own.headers);
    let hot_before = counter(&a, "local_hot_hits");
    let r = get(a.addr, &remote[0]);
    assert!(counter(&a, "local_hot_hits") > hot_before, "not a hot hit");
    assert_eq!(
        count_fields(&r, "x-added"),
        1,
        "a hot-copy hit carries the added field more than once: {:?}",
        r.headers
    );
}

/// A response the route's `no_store` filter keeps out of the cache was kept as a hot copy and
/// served from it (the review): now every request for it reaches the origin.
#[test]
fn hot_copies_keep_out_what_the_route_does_not_store() {
    let Some((_etcd, _origin, fetched, a, _b)) = two_nodes("hot-nostore", "60s") else {
        return;
    };
    let keys: Vec<String> = (0..30).map(|i| format!("/nostore/{i}")).collect();
    let remote = owned_by_b(&a, &keys);
    assert!(!remote.is_empty(), "no key owned by b");
    let k = &remote[0];
    let before = fetched.load(Ordering::SeqCst);
    let r = get(a.addr, k);
    assert_eq!(r.status, 200);
    assert_eq!(
        fetched.load(Ordering::SeqCst),
        before + 1,
        "a no_store answer was served from a hot copy: {:?}",
        r.headers
    );
}

fn send(addr: SocketAddr, method: &str, path: &str) -> Response {
    let mut s = connect(addr);
    let raw = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n");
    roundtrip(&mut s, raw.as_bytes())
}

/// After an invalidation at the owner (`method`: a POST, RFC 9111 §4.4, or an in-band PURGE),
/// node a answers what the owner holds now once its copy is older than `local_hot_ttl` (3 s
/// here): before hot copies a GET at a always reached the owner (the review found a serving the
/// old answer for the object's whole TTL).
fn owner_invalidation_reaches_hot_copy(tag: &str, method: &str) {
    let Some((_etcd, _origin, _fetched, a, b)) = two_nodes(tag, "3s") else {
        return;
    };
    let keys: Vec<String> = (0..30).map(|i| format!("/hot/{i}")).collect();
    let remote = owned_by_b(&a, &keys);
    assert!(!remote.is_empty(), "no key owned by b");
    let k = &remote[0];
    // A fresh copy (the first may have outlived its TTL while the others were asked), then a
    // hit from it.
    get(a.addr, k);
    let hot_before = counter(&a, "local_hot_hits");
    let old = get(a.addr, k);
    assert!(counter(&a, "local_hot_hits") > hot_before, "not a hot hit");
    let r = send(b.addr, method, k);
    assert!(r.status < 300, "{method} at the owner: {}", r.status);
    let at_owner = get(b.addr, k);
    assert_ne!(
        at_owner.text(),
        old.text(),
        "the owner refetched after the {method}"
    );
    let start = std::time::Instant::now();
    let took = until(
        "node a answers the owner's new object",
        Duration::from_secs(8),
        || get(a.addr, k).text() == at_owner.text(),
    );
    assert!(
        took <= Duration::from_secs(5),
        "after a {method} at the owner, node a served its old copy for {:?}",
        start.elapsed()
    );
}

#[test]
fn a_post_at_the_owner_reaches_hot_copies_within_their_ttl() {
    owner_invalidation_reaches_hot_copy("hot-post", "POST");
}

#[test]
fn a_purge_request_at_the_owner_reaches_hot_copies_within_their_ttl() {
    owner_invalidation_reaches_hot_copy("hot-purge", "PURGE");
}
