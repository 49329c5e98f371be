//! The zone's byte limit bounds the process (issue 9, item 7): under sustained churn, every
//! request a miss that stores a new 4 KiB object into a 32 MiB zone, the process grows by no
//! more than 1.2 × max_size plus a 16 MiB allowance (buffers, pools, allocator slack, and the
//! test's own client and origin threads). Before
//! stored objects stopped pinning the upstream's read buffers and the store counted their real
//! size, it grew by about 2.5× max_size.
//! A file of its own: RSS is per process, so no other test may run beside it.
#![allow(clippy::unwrap_used)]

mod common;

use common::cachekit::cache;
use common::origin::http_origin;
use common::*;

#[test]
fn churn_keeps_rss_within_the_zone_limit() {
    let body = "x".repeat(4096);
    let origin = http_origin(move |_| {
        format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Type: text/plain\r\nETag: \"abc\"\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    let c = cache(&origin, "", "32m");
    let addr = c.srv.addr;
    let run = |from, to| churn(addr, 4, "/obj", from..to, 4096);
    // Warm up connections, buffers and pools, then measure the growth under churn.
    run(0, 400);
    let before = proc_status_bytes(std::process::id(), "VmRSS:");
    run(400, 30_400);
    let growth = proc_status_bytes(std::process::id(), "VmRSS:").saturating_sub(before);
    eprintln!("RSS growth under churn: {} KiB", growth / 1024);
    let limit = 32 * 1024 * 1024;
    let stats = c
        .zone
        .store
        .stats
        .evictions
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(stats > 1000, "the churn evicted ({stats} evictions)");
    assert!(
        growth <= limit * 12 / 10 + 16 * 1024 * 1024,
        "RSS grew by {} KiB for a 32 MiB zone",
        growth / 1024
    );
}
