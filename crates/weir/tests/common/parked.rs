//! What the parking tests share (`tests/parking.rs`, `tests/parking_edges.rs`): a server with an
//! admin listener, its `/metrics` samples, waiting for connections to park, and two listeners
//! of which a reload keeps one.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use weir::server::ServerHandle;

use super::{start_config, until, Response, TestServer};

pub const GET: &[u8] = b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";

/// One worker with an admin listener, `extra` top-level YAML (the timeouts set the sweeper's
/// tick: a quarter of the shorter of `header` and `keepalive`), `listener_extra` under the
/// listener and `routes` (indented by 6 spaces).
pub fn server(extra: &str, listener_extra: &str, routes: &str) -> (TestServer, SocketAddr) {
    let srv = start_config(&format!(
        "workers: 1\n{extra}\nadmin: {{ address: 127.0.0.1:0 }}\nlisteners:\n  - address: 127.0.0.1:0\n{listener_extra}    routes:\n{routes}\n"
    ));
    let admin = srv.handle.as_ref().unwrap().admin_addr().unwrap();
    (srv, admin)
}

/// A sample of the admin listener's `/metrics` (its line prefix), 0 when absent. Asked with
/// `Connection: close`: weir closes it as it answers, so it neither parks (and counts in the
/// next sample) nor holds one of the admin budget's places while weir waits to see the
/// client go, which a busy machine makes long.
pub fn metric(admin: SocketAddr, sample: &str) -> f64 {
    let mut s = super::connect(admin);
    let m = super::roundtrip(
        &mut s,
        b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(m.status, 200);
    m.text()
        .lines()
        .find(|l| l.starts_with(sample))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

pub fn wait_parked(admin: SocketAddr, n: f64) {
    until(
        &format!("{n} connections parked"),
        Duration::from_secs(10),
        || metric(admin, "weir_connections_parked ") == n,
    );
}

/// The next response on `s`, or `None` when it closes (or resets) first.
pub fn reply_or_close(s: &mut TcpStream) -> Option<Response> {
    let mut first = [0u8; 1];
    match s.read(&mut first) {
        Ok(1) => {}
        _ => return None,
    }
    let mut rest = std::io::Cursor::new(first.to_vec()).chain(s);
    Some(super::read_response_to(&mut rest, false))
}

/// A server with listeners `a` (answering `a1`) and `b` (`b1`), one worker, `timeouts`, and
/// an admin listener; `only_a` is the config a reload moves to: `b` removed, `a` answering `a2`.
pub struct TwoListeners {
    pub handle: ServerHandle,
    pub admin: SocketAddr,
    pub a: SocketAddr,
    pub b: SocketAddr,
    pub only_a: weir::runtime::RuntimeConfig,
}

pub fn two_listeners(timeouts: &str) -> TwoListeners {
    let free = || super::process::free_port();
    let (a, b) = (free(), free());
    let listener = |port: u16, body: &str| {
        format!("  - address: 127.0.0.1:{port}\n    routes:\n      - respond: {{ body: {body} }}\n")
    };
    let cfg = |listeners: &str| {
        format!("workers: 1\ntimeouts: {timeouts}\nadmin: {{ address: 127.0.0.1:0 }}\nlisteners:\n{listeners}")
    };
    let both = format!("{}{}", listener(a, "a1"), listener(b, "b1"));
    let handle = weir::server::start(
        weir::runtime::load_str(&cfg(&both), Path::new("."), |_| None).unwrap(),
    )
    .unwrap();
    let only_a = weir::runtime::compile_str(
        &cfg(&listener(a, "a2")),
        Path::new("."),
        |_| None,
        &handle.registry(),
    )
    .unwrap();
    TwoListeners {
        admin: handle.admin_addr().unwrap(),
        handle,
        a: format!("127.0.0.1:{a}").parse().unwrap(),
        b: format!("127.0.0.1:{b}").parse().unwrap(),
        only_a,
    }
}
