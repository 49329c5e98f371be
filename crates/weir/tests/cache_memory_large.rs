//! Large objects under churn (issue 9, item 7): 16 clients miss 1 MiB objects into an 8 MiB
//! zone at once. Responses being captured for storing are charged to the zone (at most half of
//! it in flight, and stored objects make room), so weir's peak RSS stays within 1.2 × max_size
//! plus a 10 MiB allowance (connection and upstream buffers). Measured: 16.7 MiB of growth;
//! 29 MiB before, when every in-flight miss held its whole body twice (the copy to
//! store and the chunks queued for coalesced followers) on top of a full zone.
//! weir runs as its own process here, so that its memory is measured apart from the test's
//! clients and origin.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::origin::http_origin;
use common::*;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

struct Weir(Child);
impl Drop for Weir {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn concurrent_large_misses_stay_within_the_zone_limit() {
    let body = std::sync::Arc::new(vec![b'x'; 1 << 20]);
    let origin = http_origin(move |_| {
        let mut out = format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        out
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = std::env::temp_dir().join(format!("weir-large-{}.yaml", std::process::id()));
    std::fs::write(
        &cfg,
        format!(
            "workers: 1\ncache_zones:\n  main: {{ max_size: 8m, shards: 2 }}\nupstreams:\n  o:\n    servers: ['{}']\nlisteners:\n  - address: 127.0.0.1:{port}\n    routes:\n      - proxy: {{ upstream: o }}\n        cache: {{ zone: main, max_object_size: 2m }}\n",
            origin.addr
        ),
    )
    .unwrap();
    let weir = Weir(
        Command::new(WEIR)
            .args(["run", "-c"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    common::until("weir listening", Duration::from_secs(15), || {
        std::net::TcpStream::connect(addr).is_ok()
    });
    let run = |from, to| churn(addr, 16, "/big", from..to, 1 << 20);
    let pid = weir.0.id();
    // From the idle process to its peak: in-flight memory is gone once the requests end, and
    // memory the allocator keeps after a first burst would hide a later one.
    let idle = proc_status_bytes(pid, "VmRSS:");
    run(0, 16 * 16);
    let growth = proc_status_bytes(pid, "VmHWM:").saturating_sub(idle);
    eprintln!(
        "weir's peak RSS growth with 16 concurrent 1 MiB misses into 8 MiB: {} KiB",
        growth / 1024
    );
    let _ = std::fs::remove_file(&cfg);
    let limit = 8 * 1024 * 1024;
    assert!(
        growth <= limit * 12 / 10 + 10 * 1024 * 1024,
        "weir's peak RSS grew by {} KiB for an 8 MiB zone",
        growth / 1024
    );
}

/// Issue 33 §3: coalesced followers were cut off mid-body when the leader's copy was dropped
/// for lack of room (12–22 of 64 responses cut short with a 256 MiB zone and 8 MiB objects, the
/// origin healthy). A body of known length is now paid for up front or not captured at all,
/// and one of unknown length keeps feeding its followers when the copy stops: 48 clients over
/// 6 keys of 8 MiB into a 64 MiB zone (32 MiB in flight at most: room for two), every response
/// whole, with Content-Length and chunked.
#[test]
fn coalesced_followers_get_whole_bodies_when_the_zone_has_no_room() {
    use std::io::Write;
    const SIZE: usize = 8 << 20;
    for chunked in [false, true] {
        let origin = common::origin::origin(move |conn| {
            let mut w = conn.try_clone().unwrap();
            let mut r = std::io::BufReader::new(conn);
            let piece = vec![b'x'; 256 << 10];
            while common::origin::read_request(&mut r).is_some() {
                let head = if chunked {
                    "HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nTransfer-Encoding: chunked\r\n\r\n".to_string()
                } else {
                    format!("HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: {SIZE}\r\n\r\n")
                };
                if w.write_all(head.as_bytes()).is_err() {
                    return;
                }
                // Slowly enough that the fetches overlap.
                for _ in 0..SIZE / piece.len() {
                    let sent = if chunked {
                        w.write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                            .and_then(|()| w.write_all(&piece))
                            .and_then(|()| w.write_all(b"\r\n"))
                    } else {
                        w.write_all(&piece)
                    };
                    if sent.is_err() {
                        return;
                    }
                    // paces: the body comes in pieces 5 ms apart.
                    std::thread::sleep(Duration::from_millis(5));
                }
                if chunked && w.write_all(b"0\r\n\r\n").is_err() {
                    return;
                }
            }
        });
        let srv = start_config(&format!(
            "workers: 1\ncache_zones:\n  main: {{ max_size: 64m, shards: 2 }}\nupstreams:\n  o:\n    servers: ['{}']\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: o }}\n        cache: {{ zone: main, max_object_size: 16m, lock_timeout: 30s }}\n",
            origin.addr
        ));
        let addr = srv.addr;
        let lengths: Vec<usize> = std::thread::scope(|sc| {
            let clients: Vec<_> = (0..48)
                .map(|i| {
                    sc.spawn(move || {
                        let mut s = common::connect(addr);
                        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                        let raw = format!("GET /big/{} HTTP/1.1\r\nHost: t\r\n\r\n", i % 6);
                        s.write_all(raw.as_bytes()).unwrap();
                        read_response(&mut s).body.len()
                    })
                })
                .collect();
            clients.into_iter().map(|c| c.join().unwrap()).collect()
        });
        let short = lengths.iter().filter(|n| **n != SIZE).count();
        assert_eq!(
            short, 0,
            "chunked={chunked}: responses cut short: {lengths:?}"
        );
    }
}
