//! Swapping the config in-process under live traffic: no request fails, requests after the
//! swap see the new routes, and state kept by name (cache zone and its objects, upstream health)
//! is the same object after every swap.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::origin::counting_cacheable_origin;
use common::*;

fn config(origin: std::net::SocketAddr, version: usize) -> String {
    format!(
        "workers: 2\ncache_zones:\n  main: {{ max_size: 4m }}\nupstreams:\n  o:\n    servers: ['{origin}']\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - match: {{ path: /version }}\n        respond: {{ status: 200, body: 'v{version}' }}\n      - proxy: {{ upstream: o }}\n        cache: {{ zone: main, x_cache: true }}\n"
    )
}

#[test]
fn swapping_the_config_under_traffic_fails_no_request_and_keeps_cache_hits() {
    let (origin, fetched) = counting_cacheable_origin();
    let cfg = weir::runtime::load_str(&config(origin.addr, 0), Path::new("."), |_| None).unwrap();
    let zone = cfg.cache_zones[0].clone();
    let health = cfg.upstreams[0].servers[0].health.clone();
    let handle = weir::server::start(cfg).unwrap();
    let addr = handle.local_addrs()[0];

    // Warm the cache: 8 objects, fetched once each.
    for i in 0..8 {
        assert_eq!(get(addr, &format!("/obj{i}")).status, 200);
    }
    assert_eq!(fetched.load(Ordering::SeqCst), 8);

    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed, hits) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let clients: Vec<_> = (0..4)
        .map(|t| {
            let (stop, ok, failed, hits) = (stop.clone(), ok.clone(), failed.clone(), hits.clone());
            std::thread::spawn(move || {
                let mut s = connect(addr);
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    // Keep-alive connections that live across swaps, plus a new one now and then.
                    if n.is_multiple_of(50) {
                        s = connect(addr);
                    }
                    let path = if n.is_multiple_of(3) {
                        "/version".to_string()
                    } else {
                        format!("/obj{}", (n + t) % 8)
                    };
                    let raw = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
                    if s.write_all(raw.as_bytes()).is_err() {
                        failed.fetch_add(1, Ordering::Relaxed);
                        s = connect(addr);
                        continue;
                    }
                    let r = read_response(&mut s);
                    if r.status != 200 {
                        failed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    ok.fetch_add(1, Ordering::Relaxed);
                    if r.header("x-cache") == Some("HIT") {
                        hits.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();

    let registry = handle.registry();
    for version in 1..=20 {
        // paces: a reload every 50 ms while the clients run.
        std::thread::sleep(Duration::from_millis(50));
        let next = weir::runtime::compile_str(
            &config(origin.addr, version),
            Path::new("."),
            |_| None,
            &registry,
        )
        .unwrap();
        handle.reload(next).unwrap();
        let running = handle.config();
        assert!(Arc::ptr_eq(&running.cache_zones[0], &zone), "same zone");
        assert!(
            Arc::ptr_eq(&running.upstreams[0].servers[0].health, &health),
            "same health"
        );
    }
    // paces: the clients run 100 ms on the last config.
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let (ok, failed, hits) = (
        ok.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        hits.load(Ordering::Relaxed),
    );
    assert_eq!(failed, 0, "{failed} failed of {}", ok + failed);
    assert!(ok > 200, "traffic ran through the swaps: {ok}");
    assert!(hits > ok / 2, "the cache kept its hits: {hits} of {ok}");
    assert_eq!(
        fetched.load(Ordering::SeqCst),
        8,
        "no stored object was lost across 20 swaps"
    );
    // Requests after the last swap run on it, on old and new connections alike.
    assert_eq!(get(addr, "/version").text(), "v20");
    handle.shutdown();
    handle.join();
}

#[test]
fn a_reload_adds_and_removes_listeners_and_refuses_what_it_cannot_do() {
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (a, b) = (free(), free());
    let listener = |addr: std::net::SocketAddr, body: &str| {
        format!(
            "  - address: {addr}\n    routes:\n      - respond: {{ status: 200, body: {body} }}\n"
        )
    };
    let cfg =
        |workers: usize, listeners: &str| format!("workers: {workers}\nlisteners:\n{listeners}");
    let handle = weir::server::start(
        weir::runtime::load_str(&cfg(2, &listener(a, "a")), Path::new("."), |_| None).unwrap(),
    )
    .unwrap();
    let reg = handle.registry();
    let compile =
        |text: &str| weir::runtime::compile_str(text, Path::new("."), |_| None, &reg).unwrap();

    // A keep-alive connection on `a`, open across the reload that removes `a`.
    let mut kept = common::connect(a);
    assert_eq!(
        roundtrip(&mut kept, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").text(),
        "a"
    );

    // Add `b` and drop `a`.
    handle.reload(compile(&cfg(2, &listener(b, "b")))).unwrap();
    assert_eq!(handle.local_addrs(), vec![b]);
    for _ in 0..20 {
        assert_eq!(
            get(b, "/").text(),
            "b",
            "every worker accepts on the new listener"
        );
    }
    common::until(
        "the removed listener closed",
        std::time::Duration::from_secs(10),
        || std::net::TcpStream::connect(a).is_err(),
    );
    // The connection on the removed listener answers on its old routes, then closes.
    let r = roundtrip(&mut kept, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(
        (r.text().as_str(), r.header("connection")),
        ("a", Some("close"))
    );

    // A new listener that cannot be bound refuses the whole reload; nothing changes.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap();
    let both = format!("{}{}", listener(b, "b2"), listener(busy, "busy"));
    let e = handle.reload(compile(&cfg(2, &both))).unwrap_err();
    assert!(
        e.to_string().contains("listeners[1].address") && e.to_string().contains("in use"),
        "{e}"
    );
    assert_eq!(get(b, "/").text(), "b", "the running config stays");

    let e = handle
        .reload(compile(&cfg(1, &listener(b, "b"))))
        .unwrap_err();
    assert!(e.to_string().contains("workers"), "{e}");
    let foreign =
        weir::runtime::load_str(&cfg(2, &listener(b, "b")), Path::new("."), |_| None).unwrap();
    assert!(handle.reload(foreign).is_err(), "another registry's config");
    handle.shutdown();
    handle.join();
}
