//! Idle keep-alive connections parked outside their task (`server/park.rs`, issue 35 §1): a
//! plain HTTP/1.1 connection idle at two sweeps in a row gives up its task and its reactor
//! registration and waits in the worker's idle epoll; its next request is served as if nothing
//! happened, its request count and idle deadline still hold, and it closes at the idle timeout,
//! when its client leaves, and at shutdown. An idle connection then costs ≤ 0.5 KiB of RSS.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::parked::{self, metric, two_listeners, wait_parked, GET};
use common::{assert_closed, read_response, roundtrip, until, TestServer, BASIC_ROUTES};

fn server(extra: &str) -> (TestServer, SocketAddr) {
    parked::server(extra, "", BASIC_ROUTES)
}

#[test]
fn parked_connections_are_served_again_on_the_same_connection() {
    let (srv, admin) = server("timeouts: { header: 400ms, keepalive: 30s }");
    let mut conns: Vec<TcpStream> = (0..3).map(|_| srv.connect()).collect();
    for s in &mut conns {
        assert_eq!(roundtrip(s, GET).status, 200);
    }
    wait_parked(admin, 3.0);
    // A whole request on one, a request in two pieces on another (the first piece unparks it;
    // the rest arrives in its new task), two pipelined on the third.
    assert_eq!(roundtrip(&mut conns[0], GET).text(), "Hello, World\n");
    conns[1].write_all(b"GET /json HTTP/1.1\r\nHo").unwrap();
    // paces: the rest of the head 50 ms later.
    std::thread::sleep(Duration::from_millis(50));
    let r = roundtrip(&mut conns[1], b"st: t\r\n\r\n");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("Hello, World!"), "{}", r.text());
    conns[2]
        .write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\nGET /json HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut conns[2]).text(), "Hello, World\n");
    assert!(read_response(&mut conns[2])
        .text()
        .contains("Hello, World!"));
    for s in &mut conns {
        assert_eq!(
            roundtrip(s, GET).header("connection"),
            None,
            "still keep-alive"
        );
    }
    // And they park again.
    wait_parked(admin, 3.0);
    assert_eq!(
        metric(admin, "weir_connections_closed_total{reason=\"idle\"}"),
        0.0
    );
}

#[test]
fn a_parked_connection_keeps_its_request_count() {
    let (srv, admin) = server(
        "timeouts: { header: 400ms, keepalive: 30s }\nlimits: { max_requests_per_connection: 2 }",
    );
    let mut s = srv.connect();
    assert_eq!(roundtrip(&mut s, GET).header("connection"), None);
    wait_parked(admin, 1.0);
    assert_eq!(roundtrip(&mut s, GET).header("connection"), Some("close"));
    assert_closed(&mut s);
}

#[test]
fn parked_connections_close_at_the_idle_timeout_and_when_their_client_leaves() {
    let (srv, admin) = server("timeouts: { header: 400ms, keepalive: 1500ms }");
    let mut stays = srv.connect();
    let mut leaves = srv.connect();
    assert_eq!(roundtrip(&mut stays, GET).status, 200);
    assert_eq!(roundtrip(&mut leaves, GET).status, 200);
    let idle_since = Instant::now();
    wait_parked(admin, 2.0);
    let done_before = metric(admin, "weir_connections_closed_total{reason=\"done\"}");
    drop(leaves);
    until(
        "the parked connection whose client left is closed",
        Duration::from_secs(5),
        || metric(admin, "weir_connections_parked ") == 1.0,
    );
    assert!(metric(admin, "weir_connections_closed_total{reason=\"done\"}") > done_before);
    // The idle timeout still holds: silent close, between the timeout and a few ticks after.
    stays
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    stays.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "no 408 for an idle connection");
    let waited = idle_since.elapsed();
    assert!(
        waited >= Duration::from_millis(1400),
        "closed before its idle timeout: {waited:?}"
    );
    assert_eq!(metric(admin, "weir_connections_parked "), 0.0);
    assert_eq!(
        metric(admin, "weir_connections_closed_total{reason=\"idle\"}"),
        1.0
    );
}

#[test]
fn shutdown_closes_parked_connections() {
    let (mut srv, admin) = server("timeouts: { header: 400ms, keepalive: 30s, shutdown: 10s }");
    let mut s = srv.connect();
    assert_eq!(roundtrip(&mut s, GET).status, 200);
    wait_parked(admin, 1.0);
    let handle = srv.handle.take().unwrap();
    let started = Instant::now();
    handle.shutdown();
    assert_closed(&mut s);
    handle.join();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown waited for a parked connection: {:?}",
        started.elapsed()
    );
}

/// The figure of issue 35 §1 on a real process: RSS per idle keep-alive connection ≤ 0.5 KiB
/// (it was 1.56 with a task per idle connection; nginx 0.55).
#[test]
fn an_idle_connection_costs_under_half_a_kibibyte() {
    const N: usize = 2000;
    raise_nofile(2 * N as u64 + 200);
    let admin_port = common::process::free_port();
    let cfg = common::process::write_config(
        "parking-rss",
        &format!(
            "workers: 1\ntimeouts: {{ header: 2s, keepalive: 60s }}\nadmin: {{ address: 127.0.0.1:{admin_port} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {{ body: hi }}\n"
        ),
    );
    let (child, addr) = common::process::spawn_run(&cfg);
    let admin: SocketAddr = format!("127.0.0.1:{admin_port}").parse().unwrap();
    let pid = child.id();
    // Warm up what every connection shares (buffer pool, slab, first allocations).
    let mut warm: Vec<TcpStream> = (0..50).map(|_| common::connect(addr)).collect();
    for s in &mut warm {
        assert_eq!(roundtrip(s, GET).status, 200);
    }
    wait_parked(admin, 50.0);
    drop(warm);
    until(
        "warm-up connections closed",
        Duration::from_secs(10),
        || metric(admin, "weir_connections_parked ") == 0.0,
    );
    // paces: the process idles 2 s before its baseline RSS is read.
    std::thread::sleep(Duration::from_secs(2));
    let before = common::proc_status_bytes(pid, "VmRSS:");
    let mut conns = Vec::with_capacity(N);
    for _ in 0..N {
        let mut s = common::connect(addr);
        s.write_all(GET).unwrap();
        conns.push(s);
    }
    for s in &mut conns {
        assert_eq!(read_response(s).status, 200);
    }
    wait_parked(admin, N as f64);
    // The sweeper gives the freed task cells back on its next tick or two.
    let mut per_conn = f64::MAX;
    until(
        "RSS per idle connection ≤ 0.5 KiB",
        Duration::from_secs(10),
        || {
            let after = common::proc_status_bytes(pid, "VmRSS:");
            per_conn = after.saturating_sub(before) as f64 / N as f64;
            per_conn <= 512.0
        },
    );
    eprintln!("RSS per idle connection: {per_conn:.0} bytes");
    // Still served.
    assert_eq!(roundtrip(&mut conns[N / 2], GET).status, 200);
    drop(child);
}

fn raise_nofile(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit the call fills or reads.
    #[allow(unsafe_code)]
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < want {
            assert!(
                lim.rlim_max >= want,
                "the descriptor limit ({}) is below the {want} this test needs",
                lim.rlim_max
            );
            lim.rlim_cur = want;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
}

#[test]
fn a_reload_moves_parked_connections_to_the_new_config_or_answers_once_on_the_old_one() {
    let rig = two_listeners("{ header: 400ms, keepalive: 30s }");
    let mut on_a = common::connect(rig.a);
    let mut on_b = common::connect(rig.b);
    assert_eq!(roundtrip(&mut on_a, GET).text(), "a1");
    assert_eq!(roundtrip(&mut on_b, GET).text(), "b1");
    wait_parked(rig.admin, 2.0);
    // `a` gets new routes, `b` goes away: as for a connection waiting in its task, the parked
    // one on `b` answers its next request on its old routes and closes.
    rig.handle.reload(rig.only_a).unwrap();
    assert_eq!(roundtrip(&mut on_a, GET).text(), "a2");
    let r = roundtrip(&mut on_b, GET);
    assert_eq!(
        (r.text().as_str(), r.header("connection")),
        ("b1", Some("close"))
    );
    assert_closed(&mut on_b);
    rig.handle.shutdown();
    rig.handle.join();
}
