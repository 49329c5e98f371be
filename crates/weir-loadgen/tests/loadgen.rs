//! weir bench against in-process servers: counts, duration, latency, every error class, open-loop
//! rate, and reports that parse back to the numbers.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_loadgen::options::Stop;
use weir_loadgen::{report, run, Options, Target};

/// A keep-alive server: `handle(request_number)` returns the raw response, or None to hang up.
fn server(
    handle: impl Fn(usize) -> Option<Vec<u8>> + Send + Sync + 'static,
) -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let handle = Arc::new(handle);
    let c = count.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let (h, c) = (handle.clone(), c.clone());
            std::thread::spawn(move || {
                let mut w = conn.try_clone().unwrap();
                let mut r = BufReader::new(conn);
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut len = 0;
                    loop {
                        let mut hl = String::new();
                        r.read_line(&mut hl).unwrap();
                        if hl.trim().is_empty() {
                            break;
                        }
                        if let Some(v) = hl.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; len];
                    r.read_exact(&mut body).unwrap();
                    let n = c.fetch_add(1, Ordering::SeqCst) + 1;
                    match h(n) {
                        Some(resp) => {
                            if w.write_all(&resp).is_err() {
                                return;
                            }
                        }
                        None => return,
                    }
                }
            });
        }
    });
    (addr, count)
}

fn ok() -> Option<Vec<u8>> {
    Some(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec())
}

fn opts(addr: SocketAddr, conns: usize, stop: Stop) -> Options {
    Options {
        target: Target::parse("t", &format!("http://{addr}/x")).unwrap(),
        connections: conns,
        threads: 2,
        stop,
        rate: None,
        method: "GET".into(),
        headers: vec![("X-Test".into(), "1".into())],
        body: Bytes::new(),
        close: false,
        pipeline: 1,
        timeout: Duration::from_secs(2),
        h2: false,
        h3: false,
        streams: 1,
        tls_resume: false,
    }
}

#[test]
fn exact_request_counts() {
    let (addr, served) = server(|_| ok());
    let r = run(&opts(addr, 7, Stop::Requests(1000))).unwrap();
    assert_eq!(r.stats.responses, 1000);
    assert_eq!(served.load(Ordering::SeqCst), 1000);
    assert_eq!(r.stats.errors.total(), 0);
    assert_eq!(r.stats.bytes, 1000 * 43);
    // Pipelined and one-connection-per-request modes count exactly too.
    let (addr, served) = server(|_| ok());
    let mut o = opts(addr, 3, Stop::Requests(300));
    o.pipeline = 4;
    assert_eq!(run(&o).unwrap().stats.responses, 300);
    assert_eq!(served.load(Ordering::SeqCst), 300);
    let (addr, served) = server(|_| {
        Some(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_vec())
    });
    let mut o = opts(addr, 4, Stop::Requests(200));
    o.close = true;
    let r = run(&o).unwrap();
    assert_eq!(
        (r.stats.responses, served.load(Ordering::SeqCst)),
        (200, 200)
    );
}

#[test]
fn duration_is_honoured() {
    let (addr, _) = server(|_| ok());
    let t = Instant::now();
    let r = run(&opts(addr, 4, Stop::After(Duration::from_millis(700)))).unwrap();
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_millis(1500),
        "{took:?}"
    );
    assert!(r.stats.responses > 100);
}

#[test]
fn latency_percentiles_reflect_server_delay() {
    let (addr, _) = server(|n| {
        // Every tenth response takes 50 ms, the others 5 ms.
        std::thread::sleep(Duration::from_millis(if n % 10 == 0 { 50 } else { 5 }));
        ok()
    });
    let mut o = opts(addr, 1, Stop::Requests(100));
    o.threads = 1;
    let r = run(&o).unwrap();
    let h = &r.stats.latency;
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    assert!((5.0..8.0).contains(&ms(0.5)), "p50 {}", ms(0.5));
    assert!((50.0..58.0).contains(&ms(0.95)), "p95 {}", ms(0.95));
    assert!((50.0..58.0).contains(&(h.max() as f64 / 1000.0)));
}

#[test]
fn every_error_class() {
    // Refused: connect errors.
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = run(&opts(dead, 2, Stop::After(Duration::from_millis(200)))).unwrap_err();
    assert!(
        e.contains("refused"),
        "nothing listening ends the run with the error: {e}"
    );
    // Closes mid-response: read errors.
    let (addr2, _) = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                let _ = c.read(&mut [0u8; 1024]);
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort");
            }
        });
        (a, ())
    };
    let r = run(&opts(addr2, 1, Stop::Requests(5))).unwrap();
    assert!(r.stats.errors.read >= 1, "{:?}", r.stats.errors);
    // Stalls: timeouts.
    let stall = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut keep = Vec::new();
            for c in l.incoming().flatten() {
                keep.push(c);
            }
        });
        a
    };
    let mut o = opts(stall, 1, Stop::Requests(2));
    o.timeout = Duration::from_millis(150);
    let r = run(&o).unwrap();
    assert_eq!(r.stats.errors.timeout, 2);
    // 500s: status errors, still responses.
    let (addr, _) = server(|_| {
        Some(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n".to_vec())
    });
    let r = run(&opts(addr, 2, Stop::Requests(50))).unwrap();
    assert_eq!((r.stats.responses, r.stats.errors.status), (50, 50));
    assert_eq!(r.stats.statuses.get(&500), Some(&50));
    let text = report::wrk::render(&r);
    assert!(text.contains("Non-2xx or 3xx responses: 50"), "{text}");
}

#[test]
fn open_loop_rate_is_accurate_and_corrects_for_stalls() {
    let (addr, served) = server(|_| ok());
    let mut o = opts(addr, 4, Stop::After(Duration::from_secs(1)));
    o.rate = Some(400.0);
    run(&o).unwrap();
    let n = served.load(Ordering::SeqCst) as f64;
    assert!(
        (360.0..=440.0).contains(&n),
        "{n} requests at 400/s for 1 s"
    );
    // A server that stalls 200 ms once: at 100/s on one connection, the requests scheduled during
    // the stall are timed from their intended send time, so they show the stall.
    let (addr, _) = server(|n| {
        if n == 10 {
            std::thread::sleep(Duration::from_millis(200));
        }
        ok()
    });
    let mut o = opts(addr, 1, Stop::After(Duration::from_secs(1)));
    o.threads = 1;
    o.rate = Some(100.0);
    let r = run(&o).unwrap();
    let over_100ms = r
        .stats
        .latency
        .iter_recorded()
        .filter(|v| v.value_iterated_to() > 100_000)
        .map(|v| v.count_at_value())
        .sum::<u64>();
    assert!(
        over_100ms >= 5,
        "coordinated omission not corrected: only {over_100ms} slow samples"
    );
}

#[test]
fn table_and_json_parse_back() {
    let (addr, _) = server(|_| ok());
    let runs: Vec<_> = [1usize, 3]
        .iter()
        .map(|&c| run(&opts(addr, c, Stop::Requests(120))).unwrap())
        .collect();
    let table = report::table::render(&runs);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[1].starts_with("connections")
            && lines[1].contains("percent")
            && lines[2].contains("below average")
            && lines[2].contains("per second"),
        "{table}"
    );
    for (line, r) in lines[4..6].iter().zip(&runs) {
        let cells: Vec<f64> = line
            .split_whitespace()
            .map(|c| c.parse().unwrap())
            .collect();
        assert_eq!(cells.len(), 23);
        assert_eq!(cells[0], r.options.connections as f64);
        assert_eq!(cells[1], 120.0);
        assert_eq!(cells[17..22].iter().sum::<f64>(), 0.0, "no errors");
        assert!((cells[3] - r.requests_per_sec()).abs() / r.requests_per_sec() < 0.01);
    }
    let text = report::json::render(&runs);
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json[1]["connections"], 3);
    assert_eq!(json[1]["requests"], 120, "counts are integers");
    assert_eq!(json[1]["threads"], 2);
    assert_eq!(json[1]["rate_per_second"], serde_json::Value::Null);
    assert_eq!(json[0]["statuses"]["200"], 120);
    assert_eq!(json[0]["errors"]["connect"], 0);
    assert_eq!(json[0]["body_bytes"], 5 * 120);
    assert!(json[0]["duration_seconds"].as_f64().unwrap() > 0.0);
    let ts = json[0]["timestamp"].as_str().unwrap();
    assert!(
        ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
        "{ts}"
    );
    let lat = &json[0]["latency_ms"];
    assert!(lat["p99"].as_f64().unwrap() >= lat["p50"].as_f64().unwrap());
    // No key twice anywhere in an object (serde_json keeps the last one silently).
    let keys = |obj: &str| {
        let mut k: Vec<&str> = obj
            .split("\":")
            .filter_map(|p| p.rsplit('"').next())
            .collect();
        let n = k.len();
        k.sort_unstable();
        k.dedup();
        n - k.len()
    };
    let first = &text[..text.find("},{").unwrap_or(text.len())];
    assert_eq!(
        keys(first.split("\"latency_ms\"").next().unwrap()),
        0,
        "{first}"
    );
}

#[test]
fn nothing_listening_ends_the_run_at_once_with_the_os_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for stop in [Stop::Requests(100), Stop::After(Duration::from_secs(30))] {
        let started = Instant::now();
        let e = run(&opts(port, 4, stop)).unwrap_err();
        assert!(e.contains("cannot connect") && e.contains("refused"), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn hey_size_per_request_counts_body_bytes() {
    let (addr, _) = server(|_| ok());
    let r = run(&opts(addr, 1, Stop::Requests(10))).unwrap();
    let hey = report::hey::render(&r);
    assert!(hey.contains("Total data:\t50 bytes"), "{hey}");
    assert!(hey.contains("Size/request:\t5 bytes"), "{hey}");
}

#[test]
fn open_loop_at_a_low_rate_times_the_server_not_the_timer() {
    let (addr, _) = server(|_| ok());
    let mut closed = opts(addr, 1, Stop::Requests(300));
    closed.threads = 1;
    let closed = run(&closed).unwrap();
    let mut open = opts(addr, 1, Stop::After(Duration::from_secs(3)));
    open.threads = 1;
    open.rate = Some(100.0);
    let open = run(&open).unwrap();
    let p50 = |r: &weir_loadgen::RunResult| r.stats.latency.value_at_quantile(0.5) as f64;
    let (c, o) = (p50(&closed), p50(&open));
    eprintln!("closed-loop p50 {c} µs, open-loop p50 at 100/s {o} µs");
    assert!(
        open.stats.responses >= 250,
        "{} responses",
        open.stats.responses
    );
    // The timer's lateness (tokio's timer has a millisecond's resolution) must not show: it made
    // the open-loop p50 about 1.1 ms where the closed loop measured 44 µs. What remains over the
    // closed loop is real: a server idle for 10 ms between requests takes longer to wake up than
    // one kept busy (measured here: closed 79 µs, open 114 µs), and on a loaded machine more
    // (339 µs against closed 78 µs once, in the full suite: issue 52). The bound is what the
    // test proves: below the timer's millisecond, with room for a slow wake-up.
    assert!(o < c + 600.0 && o < 800.0, "open {o} µs vs closed {c} µs");
}

#[test]
fn chart_has_axes_labels_and_every_series() {
    let (addr, _) = server(|_| ok());
    let a: Vec<_> = [1usize, 2]
        .iter()
        .map(|&c| run(&opts(addr, c, Stop::Requests(50))).unwrap())
        .collect();
    let b: Vec<_> = [1usize, 2]
        .iter()
        .map(|&c| run(&opts(addr, c, Stop::Requests(50))).unwrap())
        .collect();
    let svg = weir_loadgen::chart::render("t", &[("alpha".into(), a), ("beta".into(), b)]);
    for want in [
        "<svg",
        "Requests per second",
        "p99 latency",
        "connections",
        "requests/s",
        "p99 (ms)",
        "alpha",
        "beta",
        "<polyline",
    ] {
        assert!(svg.contains(want), "missing {want}");
    }
    assert_eq!(
        svg.matches("<polyline").count(),
        4,
        "two series in two panels"
    );
}
