//! Rate limits counted in Redis (`cluster: redis`), against a real `redis-server`: every
//! node's requests counted once (the RateLimit remaining reaches 0 across two nodes), the key's
//! TTL is exactly the time its TAT is ahead, a reload does not count anything twice, Redis
//! going away fails open with a counter, and three nodes of `examples/cluster/node.yaml` admit
//! 300 ± 5% r/s for a quota of 300 — Kong's known bugs, tested.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::process::*;
use common::redis::Redis;
use common::*;

const SYNC: Duration = Duration::from_millis(150);

fn config(redis: SocketAddr, node: &str, listen: u16, admin: u16) -> String {
    format!(
        "cluster:
  node: {node}
  redis: {redis}
admin: {{ address: 127.0.0.1:{admin} }}
filters:
  ten:
    rate_limit: {{ rate: 10, per: 1m, burst: 9, key: fixed, cluster: redis }}
  short:
    rate_limit: {{ rate: 10, per: 1s, burst: 9, key: short, cluster: redis }}
listeners:
  - address: 127.0.0.1:{listen}
    routes:
      - name: limited
        match: {{ path: /limited }}
        filters: [ten]
        respond: {{ body: \"ok\\n\" }}
      - name: short
        match: {{ path: /short }}
        filters: [short]
        respond: {{ body: \"ok\\n\" }}
"
    )
}

struct Solo {
    addr: SocketAddr,
    admin: SocketAddr,
    _dir: tempdir::Dir,
    _proc: Running,
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn solo(redis: SocketAddr, node: &str) -> Solo {
    let (listen, admin) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("weir-rl-{node}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("weir.yaml");
    std::fs::write(&file, config(redis, node, listen, admin)).unwrap();
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c"]).arg(&file);
    let (proc, addr) = spawn_serving(cmd);
    Solo {
        addr,
        admin: format!("127.0.0.1:{admin}").parse().unwrap(),
        _dir: tempdir::Dir(dir),
        _proc: proc,
    }
}

/// The status and the RateLimit remaining (`r=`) of one GET.
fn limited(addr: SocketAddr, path: &str) -> (u16, Option<u64>) {
    let r = get(addr, path);
    let remaining = r
        .header("ratelimit")
        .and_then(|v| v.split(";r=").nth(1).map(str::to_string))
        .and_then(|v| v.split(';').next().and_then(|n| n.parse().ok()));
    (r.status, remaining)
}

fn pttl(redis: &Redis, key: &str) -> i64 {
    redis.cli(&["PTTL", key]).unwrap().parse().unwrap()
}

fn redis_errors(admin: SocketAddr) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(&get(admin, "/cluster").body).unwrap();
    v["redis_errors"].as_u64().unwrap()
}

#[test]
fn two_nodes_count_once_in_redis_through_a_reload_and_fail_open_without_it() {
    let Some(mut redis) = Redis::start("rl") else {
        return;
    };
    let (a, b) = (solo(redis.addr, "a"), solo(redis.addr, "b"));
    const KEY: &str = "weir:rl:ten:fixed";

    // a admits 5 of the 10: remaining 9..5, and Redis's key lives as long as its TAT is ahead
    // (5 × 6 s) and the 200 ms a late report may need (10 syncs), not a fixed window.
    for want in (5..=9).rev() {
        assert_eq!(limited(a.addr, "/limited"), (200, Some(want)));
    }
    let ttl = until_value(
        "a's five counted in Redis",
        Duration::from_secs(10),
        || pttl(&redis, KEY),
        |ttl| *ttl >= 29_000,
    );
    assert!(
        (29_000..=30_200).contains(&ttl),
        "PTTL {ttl} for 30 s ahead"
    );

    // b's first request is decided before b has synced that key; from then on b sees a's
    // five: the remaining reaches 0 at the tenth request of the cluster, then 429.
    let (t0, ttl0) = (Instant::now(), pttl(&redis, KEY));
    assert_eq!(limited(b.addr, "/limited").0, 200);
    // Its one request reached Redis (6 s more, whatever time passed meanwhile), in the sync
    // that brought b the TAT of a's five.
    until(
        "b's request counted in Redis",
        Duration::from_secs(10),
        || pttl(&redis, KEY) + t0.elapsed().as_millis() as i64 >= ttl0 + 5_000,
    );
    // paces: b applies that sync's answer (no counter shows it).
    std::thread::sleep(SYNC);
    for want in (0..=3).rev() {
        assert_eq!(limited(b.addr, "/limited"), (200, Some(want)), "on b");
    }
    assert_eq!(limited(b.addr, "/limited"), (429, Some(0)));
    until_value(
        "b's five counted in Redis",
        Duration::from_secs(10),
        || pttl(&redis, KEY),
        |ttl| *ttl >= 58_000,
    );
    // paces: a's next sync reads them (no counter shows it).
    std::thread::sleep(SYNC);
    // a, which admitted nothing since, learnt of b's five and refuses too.
    assert_eq!(limited(a.addr, "/limited"), (429, Some(0)));
    let ttl = pttl(&redis, KEY);
    assert!((58_000..=60_200).contains(&ttl), "PTTL {ttl} for 10 × 6 s");

    // A reload keeps the counts and sends none twice (Kong counted twice after a reload).
    let mut s = connect(a.admin);
    let r = roundtrip(
        &mut s,
        b"POST /reload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    // paces: a count sent twice after the reload would have reached Redis by now.
    std::thread::sleep(SYNC);
    assert_eq!(limited(a.addr, "/limited"), (429, Some(0)));
    let ttl = pttl(&redis, KEY);
    assert!(
        (57_000..=60_200).contains(&ttl),
        "PTTL {ttl} after the reload"
    );

    // A short period: the key is gone from Redis when its TAT has passed.
    for _ in 0..3 {
        assert_eq!(limited(a.addr, "/short").0, 200);
    }
    // -2: no such key (yet).
    let ttl = until_value(
        "the short key in Redis",
        Duration::from_secs(10),
        || pttl(&redis, "weir:rl:short:short"),
        |ttl| *ttl != -2,
    );
    assert!(
        (0..=500).contains(&ttl),
        "PTTL {ttl} for 3 × 100 ms + 200 ms"
    );
    until("the short key expired", Duration::from_secs(10), || {
        redis.cli(&["EXISTS", "weir:rl:short:short"]).unwrap() == "0"
    });

    // Redis goes: a keeps deciding alone (its share: the whole quota, no members known) and
    // counts the failed syncs; Redis comes back: counts reach it again.
    redis.stop();
    assert_eq!(limited(a.addr, "/short").0, 200);
    until("failed syncs counted", Duration::from_secs(10), || {
        redis_errors(a.admin) > 0
    });
    assert_eq!(limited(a.addr, "/short").0, 200, "fails open");
    assert_eq!(
        limited(a.addr, "/limited").0,
        429,
        "its own view still counts"
    );
    let errors = redis_errors(a.admin);
    assert!(errors > 0, "failed syncs counted");
    let metrics = String::from_utf8_lossy(&get(a.admin, "/metrics").body).into_owned();
    let counted: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("weir_cluster_redis_errors_total{node=\"a\"} "))
        .unwrap_or_else(|| panic!("no redis errors counter in {metrics}"))
        .parse()
        .unwrap();
    assert!(counted >= errors, "/metrics {counted}, /cluster {errors}");
    redis.resume();
    until("Redis used again", Duration::from_secs(10), || {
        limited(a.addr, "/short");
        redis.cli(&["EXISTS", "weir:rl:short:short"]).unwrap() == "1"
    });
    let after = redis_errors(a.admin);
    // paces: a failed sync after Redis came back would be counted by now.
    std::thread::sleep(SYNC);
    assert_eq!(redis_errors(a.admin), after, "no more failed syncs");
}

#[test]
fn three_nodes_of_the_example_admit_the_quota_counted_in_redis() {
    let Some(etcd) = Etcd::start("cluster-redis") else {
        return;
    };
    let Some(redis) = Redis::start("cluster") else {
        return;
    };
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let nodes: Vec<(SocketAddr, Running)> = ["a", "b", "c"]
        .into_iter()
        .map(|name| {
            let mut cmd = Command::new(WEIR);
            cmd.current_dir(root)
                .args(["run", "-c", "examples/cluster/node.yaml"])
                .env("WEIR_NODE", name)
                .env("WEIR_LISTEN", format!("127.0.0.1:{}", free_port()))
                .env("WEIR_ADMIN", format!("127.0.0.1:{}", free_port()))
                .env("WEIR_ETCD", etcd.addr.to_string())
                .env("WEIR_ORIGIN", "127.0.0.1:9")
                .env("WEIR_CLUSTER_LIMIT", "redis")
                .env("WEIR_REDIS", redis.addr.to_string());
            let (proc, addr) = spawn_serving(cmd);
            (addr, proc)
        })
        .collect();
    let addrs: Vec<SocketAddr> = nodes.iter().map(|(a, _)| *a).collect();
    let rate = admitted_rate(&addrs, 9, "/limited", Duration::from_secs(3));
    assert!(
        (285.0..=315.0).contains(&rate),
        "admitted {rate} r/s for 300"
    );
    let ttl: i64 = redis
        .cli(&["PTTL", "weir:rl:cluster_limit:limited"])
        .unwrap()
        .parse()
        .unwrap();
    assert!(ttl > 0, "the cluster's count is in Redis: PTTL {ttl}");
}

#[test]
fn a_redis_limit_needs_redis_and_says_so() {
    let limit = "filters:\n  f:\n    rate_limit: { rate: 1, cluster: redis }\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - filters: [f]\n        respond: { body: x }\n";
    let e = config_error(&format!(
        "cluster: {{ node: a, advertise: '127.0.0.1:1' }}\n{limit}"
    ));
    assert!(
        e.contains("filters.f.rate_limit.cluster") && e.contains("cluster.redis"),
        "{e}"
    );
    let e = config_error(limit);
    assert!(e.contains("needs a `cluster:` section"), "{e}");
    let e = config_error(&format!(
        "cluster: {{ node: a, advertise: '127.0.0.1:1', redis: 'redis://[bad' }}\n{limit}"
    ));
    assert!(e.contains("cluster.redis"), "{e}");
    let e = config_error(&format!(
        "cluster: {{ node: a, advertise: '127.0.0.1:1', redis: '127.0.0.1:1', redis_sync: 1ms }}\n{limit}"
    ));
    assert!(e.contains("cluster.redis_sync"), "{e}");
}
