//! Three nodes of `examples/cluster/node.yaml` on loopback with a real etcd: one sharded cache
//! (the origin sees each key once, whichever node is asked), config from etcd live on every
//! node within a second, a purge applied and confirmed by every node within a second, the last
//! config kept while etcd is down and caught up after, a
//! cluster-wide rate limit, a killed node costing the survivors' clients no error, and a
//! stopped node leaving at once.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::member::start_member;
use common::origin::counting_cacheable_origin;
use common::process::*;
use common::*;

struct Node {
    name: &'static str,
    addr: SocketAddr,
    admin: SocketAddr,
    proc: Option<Running>,
}

fn start_node(name: &'static str, etcd: SocketAddr, origin: SocketAddr) -> Node {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut cmd = Command::new(WEIR);
    cmd.current_dir(root)
        .args(["run", "-c", "examples/cluster/node.yaml"]);
    let (proc, addr, admin) = start_member(cmd, name, etcd, origin);
    Node {
        name,
        addr,
        admin,
        proc: Some(proc),
    }
}

/// A node of a config file of this test's own, as [`start_node`] starts the example's.
fn start_from(
    config: &std::path::Path,
    name: &'static str,
    etcd: SocketAddr,
    origin: SocketAddr,
) -> Node {
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c"]).arg(config);
    let (proc, addr, admin) = start_member(cmd, name, etcd, origin);
    Node {
        name,
        addr,
        admin,
        proc: Some(proc),
    }
}

fn members(n: &Node) -> usize {
    let r = get(n.admin, "/cluster");
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
    v["members"].as_array().map_or(0, Vec::len)
}

/// The members `n` lists and the members on its zone `shared`'s ring. `/cluster` lists a member
/// as soon as etcd says so; the ring that places keys comes with the config that change
/// reloads, a moment later: keys asked before then are placed by the old ring (a key fetched
/// by a node that did not know its owner yet is fetched again by the owner).
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

fn body(addr: SocketAddr, path: &str) -> String {
    String::from_utf8_lossy(&get(addr, path).body).into_owned()
}

/// `POST /purge?QUERY` on an admin API: the status and the JSON answer.
fn purge(admin: SocketAddr, query: &str) -> (u16, serde_json::Value) {
    let mut s = connect(admin);
    let raw =
        format!("POST /purge?{query} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n");
    let r = roundtrip(&mut s, raw.as_bytes());
    (r.status, serde_json::from_slice(&r.body).unwrap())
}

fn version_fragment(text: &str) -> String {
    format!(
        "listeners:\n  - address: ${{WEIR_LISTEN}}\n    routes:\n      - name: version\n        match: {{ path: /version }}\n        respond: {{ body: \"{text}\\n\" }}\n"
    )
}

#[test]
fn three_nodes_share_one_cache_config_and_limit_and_survive_a_node_and_etcd_going() {
    let Some(mut etcd) = Etcd::start("cluster") else {
        return;
    };
    let (origin, fetched) = counting_cacheable_origin();
    let mut nodes: Vec<Node> = ["a", "b", "c"]
        .into_iter()
        .map(|n| start_node(n, etcd.addr, origin.addr))
        .collect();
    for n in &nodes {
        until(
            &format!("{} sees 3 members, on its ring", n.name),
            Duration::from_secs(10),
            || members_placed(n) == (3, 3),
        );
    }

    // 300 keys round-robin through the three nodes, twice: one origin fetch per key.
    for pass in 0..2 {
        for k in 0..300 {
            let n = &nodes[k % 3];
            let r = get(n.addr, &format!("/obj/{k}"));
            assert_eq!(r.status, 200, "pass {pass} key {k} via {}", n.name);
            if pass == 1 {
                let status = r.header("cache-status").unwrap_or_default();
                assert!(status.contains("hit"), "key {k} via {}: {status}", n.name);
            }
        }
    }
    assert_eq!(
        fetched.load(Ordering::SeqCst),
        300,
        "the origin saw each key once"
    );

    // A purge taken by one node is applied by all three, and its answer says so, within 1 s.
    let start = Instant::now();
    let (status, v) = purge(nodes[1].admin, "regex=/obj/");
    let took = start.elapsed();
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["confirmed"], serde_json::json!(["a", "b", "c"]), "{v}");
    assert_eq!(v["purged"], 300, "each node purged the keys it owned: {v}");
    for n in ["a", "b", "c"] {
        let each = v["nodes"][n]["purged"].as_u64().unwrap();
        assert!((50..=150).contains(&each), "{n} owned about a third: {v}");
    }
    assert!(took < Duration::from_secs(1), "confirmed after {took:?}");
    for k in 0..300 {
        let r = get(nodes[k % 3].addr, &format!("/obj/{k}"));
        let status = r.header("cache-status").unwrap_or_default();
        assert!(!status.contains("hit"), "key {k} after the purge: {status}");
    }
    assert_eq!(
        fetched.load(Ordering::SeqCst),
        600,
        "every key fetched again"
    );

    // A config change written to etcd is live on all three within 1 s.
    for n in &nodes {
        assert_eq!(body(n.addr, "/version"), "file\n");
    }
    etcd.ctl(&["put", "/weir/config/version", &version_fragment("etcd-1")])
        .unwrap();
    let start = Instant::now();
    for n in &nodes {
        until("etcd-1 live", Duration::from_secs(3), || {
            body(n.addr, "/version") == "etcd-1\n"
        });
    }
    let live = start.elapsed();
    assert!(
        live < Duration::from_secs(1),
        "live on all three after {live:?}"
    );
    let rev: serde_json::Value =
        serde_json::from_slice(&get(nodes[0].admin, "/cluster").body).unwrap();
    assert!(rev["revision"].as_i64().unwrap() > 0, "{rev}");
    // Each member's share of the sharded zone is stated, and even (the ring's points).
    let shares = || -> serde_json::Value {
        let s: serde_json::Value =
            serde_json::from_slice(&get(nodes[0].admin, "/cluster").body).unwrap();
        s["sharded_zones"]["shared"]["shares"].clone()
    };
    until("three members on the ring", Duration::from_secs(5), || {
        shares().as_object().is_some_and(|m| m.len() == 3)
    });
    for (node, share) in shares().as_object().unwrap() {
        let share = share.as_f64().unwrap();
        assert!((share - 1.0 / 3.0).abs() < 0.02, "{node}: {share}");
    }

    // The cluster-wide limit: 300 r/s across the three, whatever node a client uses.
    // Three clients per node: the offered load must stay above each node's share even on a
    // busy machine (connection per request, debug build). The bound that matters is the upper
    // one (nodes each admitting their own 300 would give ~900); below, a loaded 2-core machine
    // offered 284 r/s once (issue 33 §6), so the floor is 0.8 of the limit.
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();
    let rate = admitted_rate(&addrs, 9, "/limited", Duration::from_secs(2));
    assert!(
        (240.0..=318.0).contains(&rate),
        "admitted {rate} r/s for 300"
    );

    // etcd stops: every node keeps its last config; it comes back: they catch up.
    etcd.stop();
    for n in &nodes {
        until(
            &format!("{} saw etcd go", n.name),
            Duration::from_secs(10),
            || {
                let v: serde_json::Value =
                    serde_json::from_slice(&get(n.admin, "/cluster").body).unwrap_or_default();
                v["etcd_up"] == serde_json::json!(false)
            },
        );
    }
    for n in &nodes {
        assert_eq!(
            body(n.addr, "/version"),
            "etcd-1\n",
            "{} kept its config",
            n.name
        );
        assert_eq!(get(n.addr, "/obj/7").status, 200);
    }
    etcd.resume();
    etcd.ctl(&["put", "/weir/config/version", &version_fragment("etcd-2")])
        .unwrap();
    for n in &nodes {
        until(
            "caught up after etcd came back",
            Duration::from_secs(8),
            || body(n.addr, "/version") == "etcd-2\n",
        );
    }

    // Kill c: the clients of a and b see no error, for every key (c's move to a and b).
    let c = nodes.pop().unwrap();
    drop(c.proc);
    // Until its lease expires c is still a member: a purge says c did not confirm.
    let (status, v) = purge(nodes[0].admin, "url=127.0.0.1:1/nothing");
    assert_eq!(status, 502, "{v}");
    assert_eq!(v["confirmed"], serde_json::json!(["a", "b"]), "{v}");
    assert_eq!(v["unconfirmed"], serde_json::json!(["c"]), "{v}");
    assert!(v["nodes"]["c"]["error"].as_str().is_some(), "{v}");
    let before = fetched.load(Ordering::SeqCst);
    for k in 0..300 {
        let n = &nodes[k % 2];
        let r = get(n.addr, &format!("/obj/{k}"));
        assert_eq!(r.status, 200, "key {k} via {} after c died", n.name);
    }
    let refetched = fetched.load(Ordering::SeqCst) - before;
    assert!(
        (50..=150).contains(&refetched),
        "only c's keys (about a third) go to the origin again: {refetched}"
    );
    for n in &nodes {
        until("c's lease expired", Duration::from_secs(10), || {
            members(n) == 2
        });
    }

    // b stops gracefully: it revokes its lease, and a sees it leave at once, not a lease later.
    let b = nodes.pop().unwrap();
    signal(b.proc.as_ref().unwrap(), "-TERM");
    let left = until("b left", Duration::from_secs(5), || members(&nodes[0]) == 1);
    assert!(left < Duration::from_secs(1), "b left after {left:?}");
}

/// Issue 33 §3: a member frozen past its lease missed the purges made meanwhile (answered 200
/// with nobody unconfirmed) and came back serving the purged objects. Now a member that lost
/// its lease empties its zones before it registers again.
#[test]
fn a_member_back_from_a_lost_lease_serves_nothing_purged_meanwhile() {
    let Some(etcd) = Etcd::start("cluster-rejoin") else {
        return;
    };
    let (origin, fetched) = counting_cacheable_origin();
    let config = write_config(
        "cluster-rejoin",
        "workers: 1\ncluster:\n  node: ${WEIR_NODE}\n  etcd: ['${WEIR_ETCD}']\n  lease_ttl: 2s\nadmin: { address: '${WEIR_ADMIN}' }\ncache_zones:\n  shared: { max_size: 16m, cluster: { replicas: 67 } }\nupstreams: { origin: { servers: ['${WEIR_ORIGIN}'] } }\nlisteners:\n  - address: ${WEIR_LISTEN}\n    routes:\n      - proxy: { upstream: origin }\n        cache: { zone: shared }\n",
    );
    let start = |name| start_from(&config, name, etcd.addr, origin.addr);
    let a = start("a");
    let b = start("b");
    for n in [&a, &b] {
        until("two members, on the ring", Duration::from_secs(10), || {
            members_placed(n) == (2, 2)
        });
    }
    // 60 keys, about half owned by b: all cached, each fetched once.
    let keys: Vec<String> = (0..60).map(|i| format!("/rejoin/{i}")).collect();
    for k in &keys {
        assert_eq!(get(a.addr, k).status, 200);
    }
    assert_eq!(fetched.load(Ordering::SeqCst), 60);
    // b freezes past its lease; a alone is the cluster and the purge reaches only a.
    let b_pid = b.proc.as_ref().unwrap().id().to_string();
    Command::new("kill")
        .args(["-STOP", &b_pid])
        .status()
        .unwrap();
    until("b dropped", Duration::from_secs(10), || members(&a) == 1);
    let (status, answer) = purge(a.admin, "prefix=localhost/rejoin/");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["confirmed"], serde_json::json!(["a"]));
    Command::new("kill")
        .args(["-CONT", &b_pid])
        .status()
        .unwrap();
    until("b back, on the ring", Duration::from_secs(10), || {
        members_placed(&a) == (2, 2) && members_placed(&b) == (2, 2)
    });
    let before = fetched.load(Ordering::SeqCst);
    for k in &keys {
        let r = get(a.addr, k);
        assert_eq!(r.status, 200);
        assert!(
            !r.header("cache-status").is_some_and(|s| s.contains("hit")),
            "{k} purged while b was away, served from b's copy: {:?}",
            r.header("cache-status")
        );
    }
    assert_eq!(
        fetched.load(Ordering::SeqCst),
        before + 60,
        "every key fetched again"
    );
    let _ = a.admin.ip();
    let _ = b.name;
}

/// Issue 34: a member keeps hot copies of keys others own (`cluster.local_hot`): a key asked
/// again is answered without the hop to its owner, and a purge reaches the copies.
#[test]
fn hot_copies_spare_the_hop_and_purges_reach_them() {
    let Some(etcd) = Etcd::start("cluster-hot") else {
        return;
    };
    let (origin, fetched) = counting_cacheable_origin();
    let config = write_config(
        "cluster-hot",
        "workers: 1\ncluster:\n  node: ${WEIR_NODE}\n  etcd: ['${WEIR_ETCD}']\nadmin: { address: '${WEIR_ADMIN}' }\ncache_zones:\n  shared: { max_size: 16m, cluster: { local_hot: 1m, local_hot_ttl: 60s } }\nupstreams: { origin: { servers: ['${WEIR_ORIGIN}'] } }\nlisteners:\n  - address: ${WEIR_LISTEN}\n    routes:\n      - proxy: { upstream: origin }\n        cache: { zone: shared }\n",
    );
    let start = |name| start_from(&config, name, etcd.addr, origin.addr);
    let a = start("a");
    let b = start("b");
    for n in [&a, &b] {
        until("two members, on the ring", Duration::from_secs(10), || {
            members_placed(n) == (2, 2)
        });
    }
    let counter = |name: &str| -> u64 {
        let s: serde_json::Value = serde_json::from_slice(&get(a.admin, "/cluster").body).unwrap();
        s[name].as_u64().unwrap()
    };
    let keys: Vec<String> = (0..40).map(|i| format!("/hot/{i}")).collect();
    for k in &keys {
        let r = get(a.addr, k);
        assert_eq!(
            (r.status, r.text()),
            (200, format!("object GET {k} HTTP/1.1"))
        );
    }
    let owned_by_b = counter("peer_fills");
    assert!(
        owned_by_b > 5 && owned_by_b < 35,
        "{owned_by_b} of 40 owned by b"
    );
    assert_eq!(counter("local_hot_hits"), 0);
    // Asked again: b's keys are a's hot copies now, one Cache-Status (a's), the same body.
    for k in &keys {
        let r = get(a.addr, k);
        assert_eq!(
            (r.status, r.text()),
            (200, format!("object GET {k} HTTP/1.1"))
        );
        let status: Vec<_> = r
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("cache-status"))
            .collect();
        assert_eq!(status.len(), 1, "{k}: {status:?}");
        assert!(status[0].1.contains("hit"), "{k}: {status:?}");
    }
    assert_eq!(counter("peer_fills"), owned_by_b, "no hop for a hot key");
    assert_eq!(counter("local_hot_hits"), owned_by_b);
    assert_eq!(fetched.load(Ordering::SeqCst), 40);
    // A purge (sent to every member) reaches the hot copies: every key from the origin again.
    let (status, answer) = purge(a.admin, "prefix=localhost/hot/");
    assert_eq!(status, 200, "{answer}");
    for k in &keys {
        let r = get(a.addr, k);
        assert_eq!(r.status, 200);
        assert!(
            !r.header("cache-status").is_some_and(|s| s.contains("hit")),
            "{k} served after its purge: {:?}",
            r.header("cache-status")
        );
    }
    assert_eq!(counter("local_hot_hits"), owned_by_b);
    assert_eq!(fetched.load(Ordering::SeqCst), 80);
    let _ = (a.name, b.name);
}

/// A GET of `path` from source address `from` (a 127.0.0.0/8 alias), with `extra` fields.
fn get_from(from: [u8; 4], to: SocketAddr, path: &str, extra: &str) -> Response {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from((from, 0)).into()).unwrap();
    s.connect(&to.into()).unwrap();
    let mut s: std::net::TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    roundtrip(
        &mut s,
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n").as_bytes(),
    )
}

/// Issue 33 §2: any client's `Weir-Peer` made a node serve and store keys it does not own, and
/// the owner's per-client limits counted every peer fill of a node as one client (most fills
/// fell back to the origin or got 429). `Weir-Peer` now counts only from a member's address,
/// and a member's fills pass the owner's per-client limits (their clients were counted where
/// they asked).
#[test]
fn only_members_are_peers_and_their_fills_pass_per_client_limits() {
    let Some(etcd) = Etcd::start("cluster-peers") else {
        return;
    };
    let (origin, fetched) = counting_cacheable_origin();
    let config = write_config(
        "cluster-peers",
        "workers: 1\ncluster:\n  node: ${WEIR_NODE}\n  etcd: ['${WEIR_ETCD}']\nadmin: { address: '${WEIR_ADMIN}' }\ncache_zones:\n  shared: { max_size: 16m, cluster: { replicas: 67 } }\nupstreams: { origin: { servers: ['${WEIR_ORIGIN}'] } }\nfilters:\n  per_client: { rate_limit: { rate: 5, burst: 5, key: $remote_addr } }\nlisteners:\n  - address: ${WEIR_LISTEN}\n    routes:\n      - match: { path_prefix: /rl/ }\n        filters: [per_client]\n        proxy: { upstream: origin }\n        cache: { zone: shared }\n      - proxy: { upstream: origin }\n        cache: { zone: shared }\n",
    );
    let start = |name| start_from(&config, name, etcd.addr, origin.addr);
    let (a, b) = (start("a"), start("b"));
    for n in [&a, &b] {
        until("two members, on the ring", Duration::from_secs(10), || {
            members_placed(n) == (2, 2)
        });
    }
    // A client (not a member's address) claiming to be a peer: a still sends b's keys to b.
    for i in 0..60 {
        let r = get_from(
            [127, 0, 0, 9],
            a.addr,
            &format!("/k/{i}"),
            "Weir-Peer: b\r\n",
        );
        assert_eq!(r.status, 200);
    }
    // A peer fill that failed over to the origin would fetch a key twice too: say so.
    let fallbacks = |n: &Node| {
        let v: serde_json::Value = serde_json::from_slice(&get(n.admin, "/cluster").body).unwrap();
        v["peer_fallbacks"].as_u64().unwrap()
    };
    assert_eq!(
        fetched.load(Ordering::SeqCst),
        60,
        "peer fallbacks on a: {}",
        fallbacks(&a)
    );
    // Through b now: every key is where its owner stored it, nothing is fetched again.
    for i in 0..60 {
        assert_eq!(get(b.addr, &format!("/k/{i}")).status, 200);
    }
    assert_eq!(
        fetched.load(Ordering::SeqCst),
        60,
        "a stored keys b owns for a client's Weir-Peer (peer fallbacks on a: {}, on b: {})",
        fallbacks(&a),
        fallbacks(&b)
    );
    // 20 clients, 2 requests each to a (within their own limit of 5): a's fills from b all
    // come from a's address, and pass b's per-client limit.
    let mut statuses = Vec::new();
    for c in 0..20u8 {
        for j in 0..2 {
            let path = format!("/rl/{c}-{j}");
            statuses.push(get_from([127, 0, 0, 10 + c], a.addr, &path, "").status);
        }
    }
    let refused = statuses.iter().filter(|s| **s != 200).count();
    assert_eq!(refused, 0, "{statuses:?}");
    // From a member's address (127.0.0.1) but naming no member: an ordinary client, limited
    // by b's per-client rate (5 r/s, burst 5) like any other.
    let named: Vec<u16> = (0..20)
        .map(|i| get(b.addr, &format!("/rl/zzz-{i}")).status)
        .collect();
    let plain = named.iter().filter(|s| **s == 200).count();
    let forged: Vec<u16> = (0..20)
        .map(|i| {
            let mut c = connect(b.addr);
            roundtrip(
                &mut c,
                format!("GET /rl/forged-{i} HTTP/1.1\r\nHost: localhost\r\nWeir-Peer: zzz\r\n\r\n")
                    .as_bytes(),
            )
            .status
        })
        .collect();
    assert!(plain < 20, "{named:?}");
    assert!(
        forged.iter().filter(|s| **s == 200).count() < 20,
        "Weir-Peer: zzz passed the per-client limit: {forged:?}"
    );
    let m = get(a.admin, "/metrics").text();
    let fallbacks: f64 = m
        .lines()
        .find(|l| l.starts_with("weir_cluster_peer_fallbacks"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0);
    assert_eq!(fallbacks, 0.0, "{m}");
    let _ = (a.name, b.name);
}
