//! HTTP/2 clients that never open their window hold bounded memory and no files (issue 18,
//! item 4): 100 connections × 128 streams each ask for a 10 MiB static file with an initial
//! window of 0. weir reads a file only as the window opens, holds no descriptor while a stream
//! waits, and resets a stream stalled past `timeouts.write`. Measured on `weir run`
//! (RSS and descriptors from /proc); the figures are printed for the note. Asserted:
//! at most 9 KiB per stalled stream, no descriptor beyond the sockets, and the RSS back within
//! 10% of where it started within 30 s of the clients leaving (issue 35 §1). (The bound was
//! 8 KiB until issue 19: see `measure`.)
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::h2raw::{frame, get, END_HEADERS, END_STREAM, HEADERS, SETTINGS};
use common::process::{free_port, spawn_serving, write_config, WEIR};

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap()
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

const CONNS: usize = 100;
const STREAMS: u32 = 128;

/// Opens `CONNS` connections of `STREAMS` streams, each asking for `path` with an initial
/// window of 0; returns the connections (to keep them open) once weir has taken them in.
fn stall(addr: std::net::SocketAddr, path: &[u8]) -> Vec<TcpStream> {
    let mut conns = Vec::new();
    let request = get("http", b"a", path);
    for _ in 0..CONNS {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
        // SETTINGS_INITIAL_WINDOW_SIZE = 0: no stream may receive a byte of DATA.
        s.write_all(&frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]))
            .unwrap();
        let mut burst = Vec::new();
        for i in 0..STREAMS {
            burst.extend(frame(
                HEADERS,
                END_STREAM | END_HEADERS,
                2 * i + 1,
                &request,
            ));
        }
        s.write_all(&burst).unwrap();
        conns.push(s);
    }
    // paces: the streams stall for 1.5 s before what they hold is measured.
    std::thread::sleep(Duration::from_millis(1500));
    conns
}

/// RSS after the clients left: waits up to 30 s (the bound) for it to come within 10%
/// of `rss0`; the value.
fn settles(pid: u32, rss0: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut rss = rss_kib(pid);
    while rss > rss0 + rss0 / 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        rss = rss_kib(pid);
    }
    rss
}

/// Stalls `CONNS` × `STREAMS` streams on `path` of the `weir run` process `pid` and checks
/// what they hold: at most 9 KiB each, no descriptor beyond the sockets, and the memory given
/// back once the clients leave. (Until 2026-11-26 the return was printed only: one run in four
/// stayed at its peak for 30 s in the hardening issue's note. On 2026-11-26 it came back within
/// a second in 14 runs of 14, at 2–7% above the start; asserted since.)
fn measure(label: &str, pid: u32, addr: std::net::SocketAddr, path: &[u8]) {
    // paces: the process idles 300 ms before its baseline is read.
    std::thread::sleep(Duration::from_millis(300));
    let (rss0, fds0) = (rss_kib(pid), fds(pid));
    let conns = stall(addr, path);
    let (rss1, fds1) = (rss_kib(pid), fds(pid));
    let streams = CONNS as u64 * u64::from(STREAMS);
    let per_stream = (rss1.saturating_sub(rss0)) * 1024 / streams;
    eprintln!(
        "slow readers ({label}): RSS {rss0} KiB -> {rss1} KiB with {streams} stalled streams ({per_stream} B each); descriptors {fds0} -> {fds1}"
    );
    // One socket per connection, and no file held by a stalled stream.
    assert!(fds1 <= fds0 + CONNS + 4, "{label}: {fds0} -> {fds1}");
    // Cache hits measured 7,876 B per stalled stream before the filter seam (issue 19) and
    // 8,229 B after (debug build, this machine): the bound allows 9 KiB.
    assert!(
        per_stream <= 9 * 1024,
        "{label}: {per_stream} bytes per stalled stream"
    );
    drop(conns);
    let rss2 = settles(pid, rss0);
    eprintln!("slow readers ({label}): RSS {rss2} KiB after the clients left (start {rss0} KiB)");
    assert!(
        rss2 <= rss0 + rss0 / 10,
        "{label}: RSS {rss2} KiB 30 s after the clients left, against {rss0} KiB before"
    );
    assert!(fds(pid) <= fds0 + 1, "{label}: descriptors left open");
}

/// Run after the static-file case by [`stalled_streams_hold_bounded_memory_and_no_files`]: the
/// two at once (two processes with 12,800 streams each on two cores) starve each other's
/// sweeper, and the measurement is of that, not of weir.
fn stalled_streams_on_a_cached_object_hold_bounded_memory() {
    let body = vec![b'c'; 1 << 20];
    let origin = common::origin::http_origin(move |_| {
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(&body);
        r
    });
    let port = free_port();
    let cfg = write_config(
        "slow-readers-cache",
        &format!(
            "workers: 1\ntimeouts: {{ write: 4s }}\ncache_zones: {{ z: {{ max_size: 64m }} }}\nupstreams: {{ o: {{ servers: ['{}'] }} }}\nlisteners:\n  - address: 127.0.0.1:{port}\n    h2c: true\n    routes:\n      - proxy: {{ upstream: o }}\n        cache: {{ zone: z }}\n",
            origin.addr
        ),
    );
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c"]).arg(&cfg);
    let (child, addr) = spawn_serving(cmd);
    let pid = child.id();
    assert_eq!(common::get(addr, "/obj").body.len(), 1 << 20);
    let hit = common::get(addr, "/obj");
    let status = hit.header("cache-status").unwrap_or("").to_string();
    assert!(status.contains("hit"), "stored: {status}");
    measure("cache hits", pid, addr, b"/obj");
    drop(origin);
}

#[test]
fn stalled_streams_hold_bounded_memory_and_no_files() {
    let root = std::env::temp_dir().join(format!("weir-slow-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("big.bin"), vec![7u8; 10 << 20]).unwrap();
    let port = free_port();
    let cfg = write_config(
        "slow-readers",
        &format!(
            "workers: 1\ntimeouts: {{ write: 4s }}\nlisteners:\n  - address: 127.0.0.1:{port}\n    h2c: true\n    routes:\n      - static: {{ root: '{}' }}\n",
            root.display()
        ),
    );
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c"]).arg(&cfg);
    let (child, addr) = spawn_serving(cmd);
    let pid = child.id();
    // Warm up: one whole download.
    let r = common::get(addr, "/hello-missing");
    assert_eq!(r.status, 404);
    // paces: the process idles 300 ms after the warm-up.
    std::thread::sleep(Duration::from_millis(300));
    measure("static file", pid, addr, b"/big.bin");
    stalled_streams_on_a_cached_object_hold_bounded_memory();
}
