//! Large objects under churn (issue 9, item 7): 16 clients miss 1 MiB objects into an 8 MiB
//! zone at once. Responses being captured for storing are charged to the zone (at most half of
//! it in flight, and stored objects make room), so weir's peak RSS stays within 1.2 × max_size
//! plus a 10 MiB allowance (connection and upstream buffers). Measured: 16.7 MiB of growth;
//! 29 MiB before, when every in-flight miss held its whole body twice (the copy to
//! store and the chunks queued for coalesced followers) on top of a full zone.
//! weir runs as its own process here, so that its memory is measured apart from the test's
//! clients and origin.
#![allow(clippy::unwrap_used)]

mod common;

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
    for _ in 0..200 {
        if std::net::TcpStream::connect(addr).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
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
