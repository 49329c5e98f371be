//! The io_uring transport of issue 35 §6's experiment (`server/uring.rs`), over real sockets:
//! the `weir` binary built with `--features uring`, run with `WEIR_URING=1`. Each test checks
//! that the worker did start on its ring, then drives it as a client would: keep-alive,
//! pipelining, `Connection: close`, a large body to a slow reader (short sends and the send
//! queue's limit), a large upload (receives paused and resumed), the idle and header timeouts,
//! many connections at once, and that every socket is closed once its client is gone.
//! `.ci/run` runs them: `cargo test -p weir --features uring --test uring`.
#![cfg(feature = "uring")]
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::process::{write_config, Running, WEIR};
use common::{closed_within, connect, read_response, roundtrip, until};

const GET_HELLO: &[u8] = b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";

/// Runs `weir run` with WEIR_URING=1 on `config` (one worker, a listener on port 0); returns
/// it once it says it serves, and that its worker runs on io_uring.
fn start(name: &str, extra: &str, routes: &str) -> (Running, SocketAddr) {
    let cfg = write_config(
        &format!("uring-{name}"),
        &format!(
            "workers: 1\n{extra}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - name: hello\n        match: {{ path: /hello }}\n        respond: {{ body: \"Hello, World\\n\" }}\n{routes}\n"
        ),
    );
    let mut child = Command::new(WEIR)
        .args(["run", "-c"])
        .arg(&cfg)
        .env("WEIR_URING", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (mut addr, mut on_ring) = (None, false);
    for _ in 0..20 {
        let Some(Ok(line)) = lines.next() else { break };
        if let Some(i) = line.find("http://") {
            let rest = &line[i + 7..];
            addr = Some(rest[..rest.find('/').unwrap()].parse().unwrap());
        }
        assert!(!line.contains("io_uring unavailable"), "{line}");
        on_ring |= line.contains("on io_uring");
        if addr.is_some() && on_ring {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    assert!(on_ring, "the worker did not say it runs on io_uring");
    (
        Running(child),
        addr.expect("weir run should say where it listens"),
    )
}

/// Whether process `pid` still holds the server side of the connection from `client` to
/// `server` (its socket's inode, from /proc/net/tcp, among the process's descriptors).
fn holds_socket(pid: u32, server: SocketAddr, client: SocketAddr) -> bool {
    let want = (
        format!(":{:04X}", server.port()),
        format!(":{:04X}", client.port()),
    );
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let Some(inode) = table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f[1].ends_with(&want.0) && f[2].ends_with(&want.1)).then(|| f[9].to_string())
    }) else {
        return false;
    };
    let link = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .any(|l| l.to_string_lossy() == link)
}

/// How many client connections to `server` process `pid` still holds a socket for.
fn held_conns(pid: u32, server: SocketAddr) -> usize {
    let held: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let port = format!(":{:04X}", server.port());
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f[1].ends_with(&port) && f[3] != "0A" && held.contains(f[9])
        })
        .count()
}

#[test]
fn keep_alive_and_pipelined_requests_are_answered_in_order() {
    let (_w, addr) = start("keepalive", "", "");
    let mut s = connect(addr);
    for _ in 0..200 {
        let r = roundtrip(&mut s, GET_HELLO);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"Hello, World\n");
    }
    // 50 requests in one write, then 50 written a byte at a time: answered in order.
    let batch: Vec<u8> = (0..50)
        .flat_map(|i| format!("GET /hello?n={i} HTTP/1.1\r\nHost: t\r\n\r\n").into_bytes())
        .collect();
    s.write_all(&batch).unwrap();
    for _ in 0..50 {
        assert_eq!(read_response(&mut s).status, 200);
    }
    for b in batch {
        s.write_all(&[b]).unwrap();
    }
    for _ in 0..50 {
        assert_eq!(read_response(&mut s).status, 200);
    }
    // A request for a route that does not exist: 404, and the connection goes on.
    assert_eq!(
        roundtrip(&mut s, b"GET /nope HTTP/1.1\r\nHost: t\r\n\r\n").status,
        404
    );
    assert_eq!(roundtrip(&mut s, GET_HELLO).status, 200);
}

#[test]
fn connection_close_gets_the_response_then_the_end() {
    let (_w, addr) = start("close", "", "");
    for _ in 0..50 {
        let mut s = connect(addr);
        s.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        let text = String::from_utf8_lossy(&all);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(text.ends_with("Hello, World\n"), "{text}");
    }
    // A malformed request: 400, then the connection closes.
    let mut s = connect(addr);
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s).status, 400);
    assert!(closed_within(&mut s, Duration::from_secs(5)));
}

#[test]
fn a_large_body_reaches_a_slow_reader_whole() {
    // 8 MiB from a static file to a client with a small receive buffer: more than the send
    // queue holds (256 KiB) and than the sockets take while it does not read, so sends are
    // short and writes wait.
    let dir = std::env::temp_dir().join(format!("weir-uring-static-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let body: Vec<u8> = (0..8 * 1024 * 1024u32)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    std::fs::write(dir.join("big.bin"), &body).unwrap();
    let routes = format!(
        "      - name: static\n        match: {{ path_prefix: /static/ }}\n        static: {{ root: \"{}\" }}\n",
        dir.display()
    );
    let (_w, addr) = start("large", "", &routes);
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(8 * 1024).unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    for _ in 0..2 {
        s.write_all(b"GET /static/big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        // Not reading for a moment: the server's sends fill the socket and wait.
        std::thread::sleep(Duration::from_millis(300));
        let mut r = BufReader::new(&mut s);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let mut got = vec![0u8; body.len()];
        let mut at = 0;
        while at < got.len() {
            let step = (got.len() - at).min(64 * 1024);
            r.read_exact(&mut got[at..at + step]).unwrap();
            at += step;
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(got == body, "the body arrived changed");
    }
    assert_eq!(roundtrip(&mut s, GET_HELLO).status, 200);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_large_upload_is_read_through_paused_receives() {
    // 2 MiB of body on a route that does not read it: the receive pauses when the connection
    // holds 16 buffers and resumes as they are read; the server answers and closes (unread
    // body), and another client is served meanwhile.
    let (_w, addr) = start("upload", "limits: { max_body_bytes: 4MiB }", "");
    let mut s = connect(addr);
    s.write_all(b"POST /hello HTTP/1.1\r\nHost: t\r\nContent-Length: 2097152\r\n\r\n")
        .unwrap();
    let writer = {
        let mut s = s.try_clone().unwrap();
        std::thread::spawn(move || {
            let chunk = vec![b'x'; 64 * 1024];
            for _ in 0..32 {
                if s.write_all(&chunk).is_err() {
                    break;
                }
            }
        })
    };
    let other = roundtrip(&mut connect(addr), GET_HELLO);
    assert_eq!(other.status, 200);
    let r = read_response(&mut s);
    assert!(r.status == 200 || r.status == 413, "{}", r.status);
    writer.join().unwrap();
    assert_eq!(roundtrip(&mut connect(addr), GET_HELLO).status, 200);
}

#[test]
fn idle_and_slow_clients_are_timed_out() {
    let (_w, addr) = start("timeouts", "timeouts: { keepalive: 1s, header: 1s }", "");
    // Idle after a request: closed once the keep-alive timeout passes.
    let mut idle = connect(addr);
    assert_eq!(roundtrip(&mut idle, GET_HELLO).status, 200);
    let t = Instant::now();
    assert!(closed_within(&mut idle, Duration::from_secs(8)));
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    // Half a head, then nothing: 408 within the header timeout (and some sweeps).
    let mut slow = connect(addr);
    slow.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    slow.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\n")
        .unwrap();
    assert_eq!(read_response(&mut slow).status, 408);
    // Nothing at all after connecting: closed too.
    let mut silent = connect(addr);
    assert!(closed_within(&mut silent, Duration::from_secs(8)));
}

#[test]
fn many_connections_at_once_are_all_served_and_all_closed() {
    let (w, addr) = start("many", "", "");
    let pid = w.id();
    let mut conns: Vec<TcpStream> = (0..400).map(|_| connect(addr)).collect();
    for round in 0..3 {
        for s in &mut conns {
            s.write_all(GET_HELLO).unwrap();
        }
        for s in &mut conns {
            assert_eq!(read_response(s).status, 200, "round {round}");
        }
    }
    // Half close abruptly (a reset), half mid-request; every socket must be closed after.
    for (i, s) in conns.iter_mut().enumerate() {
        if i % 2 == 0 {
            s.write_all(b"GET /hel").unwrap();
        }
    }
    drop(conns);
    until(
        "the server closed every client socket",
        Duration::from_secs(10),
        || held_conns(pid, addr) == 0,
    );
    assert_eq!(roundtrip(&mut connect(addr), GET_HELLO).status, 200);
}

/// Raises this process's descriptor limit to `want` (its children inherit it).
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
                "descriptor limit {} < {want}",
                lim.rlim_max
            );
            lim.rlim_cur = want;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
}

/// user+sys CPU seconds of process `pid`.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // Fields 14 and 15 of stat(5), counted from the state (field 3) here.
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz
}

#[test]
fn connections_left_without_buffers_wait_their_turn_without_spinning() {
    raise_nofile(4096);
    // An origin that answers after 3 s: while 600 connections wait on it, each holds the
    // buffers the 28 KiB head it pipelined meanwhile filled (at least 4: 2,400 wanted, the
    // ring has 2,048).
    let o = common::origin::origin(|conn| {
        let mut w = conn.try_clone().unwrap();
        let mut r = BufReader::new(conn);
        while common::origin::read_request(&mut r).is_some() {
            std::thread::sleep(Duration::from_secs(3));
            if w.write_all(&common::origin::ok("slow")).is_err() {
                break;
            }
        }
    });
    let (w, addr) = start(
        "starved",
        &format!("upstreams: {{ o: {{ servers: ['{}'] }} }}", o.addr),
        "      - name: slow\n        match: { path: /slow }\n        proxy: { upstream: o }\n",
    );
    let pid = w.id();
    let second = format!(
        "GET /hello HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n",
        "x".repeat(28 * 1024)
    );
    let mut conns = Vec::new();
    for _ in 0..600 {
        let mut s = connect(addr);
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        // One exchange first: from then on the connection's receive is armed on the ring.
        assert_eq!(roundtrip(&mut s, GET_HELLO).status, 200);
        s.write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        conns.push(s);
    }
    // Sent once each request waits on the origin, so the task is not there to read it.
    std::thread::sleep(Duration::from_millis(200));
    for s in &mut conns {
        s.write_all(second.as_bytes()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    // A new client now finds no buffer: it is served once the slow answers return some, and
    // the worker does not spin meanwhile.
    let cpu0 = cpu_secs(pid);
    let t0 = Instant::now();
    let mut late = connect(addr);
    late.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // Its own first exchange arms its receive; the second one waits for a buffer.
    assert_eq!(roundtrip(&mut late, GET_HELLO).status, 200);
    assert_eq!(roundtrip(&mut late, GET_HELLO).status, 200);
    let waited = t0.elapsed();
    let spent = cpu_secs(pid) - cpu0;
    for s in &mut conns {
        let r = read_response(s);
        assert_eq!((r.status, r.body.as_slice()), (200, b"slow".as_slice()));
        assert_eq!(read_response(s).status, 200);
    }
    assert!(
        waited >= Duration::from_millis(500),
        "the late client was served at once ({waited:?}): the ring's buffers were not all held, so this test did not starve it"
    );
    assert!(
        spent < waited.as_secs_f64() * 0.5 + 0.3,
        "the worker used {spent:.2} s of CPU while a starved client waited {waited:?}"
    );
}

#[test]
fn a_client_that_never_reads_is_closed_after_the_write_timeout_and_the_grace() {
    // 8 MiB to a client that reads nothing: the write stalls, `timeouts.write` ends the
    // connection, and its last send, still in flight, is cancelled after the 10 s grace, so the
    // socket is closed rather than held for as long as the client stays silent.
    let dir = std::env::temp_dir().join(format!("weir-uring-stall-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("big.bin"), vec![7u8; 8 * 1024 * 1024]).unwrap();
    let routes = format!(
        "      - name: static\n        match: {{ path_prefix: /static/ }}\n        static: {{ root: \"{}\" }}\n",
        dir.display()
    );
    let (w, addr) = start("stall", "timeouts: { write: 1s }", &routes);
    let pid = w.id();
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4 * 1024).unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut s: TcpStream = sock.into();
    let me = s.local_addr().unwrap();
    s.write_all(b"GET /static/big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    until(
        "the server took the connection",
        Duration::from_secs(5),
        || holds_socket(pid, addr, me),
    );
    let t = Instant::now();
    until(
        "the server closed the silent client's socket",
        Duration::from_secs(25),
        || !holds_socket(pid, addr, me),
    );
    assert!(t.elapsed() >= Duration::from_secs(5), "{:?}", t.elapsed());
    // The client is still connected and silent throughout; others are served meanwhile.
    assert_eq!(roundtrip(&mut connect(addr), GET_HELLO).status, 200);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
