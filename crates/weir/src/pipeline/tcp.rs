//! A connection on a TCP listener (`tcp:`, see `crate::tcp`): which upstream (by the server
//! name in the ClientHello, peeked at, when the listener routes by name; by the handshake's name
//! when it terminates TLS), a server of it, the relay, then one access log line and the
//! upstream server's counters for the whole connection.
//!
//! The access log line uses the listener's format with nginx `stream`'s meanings: `$protocol`
//! is `TCP` (or `TLS` when weir terminated it), `$status` 200 for a relay that ended normally,
//! 502 when no server could be connected, 503 when none is up or a cap refused it, 504 for a
//! relay closed idle, 500 when a side failed mid-relay; `$bytes_received` from the client,
//! `$bytes_sent` to it, `$request_time` the connection's duration, `$upstream_addr`, and
//! `$route` the TCP route's name.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use crate::client_socket::ClientStream;
use tokio::time::Instant;

use crate::access_log::Entry;
use crate::client_socket::RawClient;
use crate::error::ErrorKind;
use crate::metrics::CloseReason;
use crate::runtime::WorkerRuntime;
use crate::tcp::relay::{self, End, Relayed};
use crate::tls::hello::{self as sni, Hello};
use crate::tls::TlsInfo;

/// A client connection: plain, or TLS that weir terminated.
pub(crate) enum Client {
    Plain(ClientStream),
    Tls(Box<crate::tls::stream::ServerTls>),
}

/// Serves a connection accepted on TCP listener `listener`.
pub(crate) async fn serve_plain(
    stream: RawClient,
    peer: SocketAddr,
    rt: Rc<WorkerRuntime>,
    listener: usize,
) -> CloseReason {
    match stream.register() {
        Ok(tcp) => serve(Client::Plain(tcp), None, peer, rt, listener).await,
        Err(_) => CloseReason::ClientError,
    }
}

/// Serves a client connection on TCP listener `listener` after what came first (a PROXY
/// header, a TLS handshake); `info`: what its TLS handshake settled.
pub(crate) async fn serve(
    client: Client,
    info: Option<Box<TlsInfo>>,
    peer: SocketAddr,
    rt: Rc<WorkerRuntime>,
    listener: usize,
) -> CloseReason {
    let started = Instant::now();
    let l = &rt.cfg.listeners[listener];
    let Some(cfg) = l.tcp.clone() else {
        return CloseReason::Done;
    };
    let tls = info.as_deref();
    let tcp = match &client {
        Client::Plain(t) => t,
        Client::Tls(s) => s.tcp(),
    };
    let local = tcp.local_addr().unwrap_or(l.address);
    let _ = tcp.set_nodelay(true);
    let name: Option<String> = match tls {
        Some(info) => info.sni.as_deref().map(str::to_string),
        None if cfg.routes_by_name() => peek_name(tcp, rt.cfg.timeouts.header).await,
        None => None,
    };
    let mut outcome = Outcome {
        peer,
        started,
        listener,
        route: "-",
        upstream: None,
        status: 200,
        relayed: Relayed::default(),
    };
    let Some((route, u)) = cfg.route(name.as_deref()) else {
        outcome.status = 503;
        static NO_ROUTE: crate::logs::Limited = crate::logs::Limited::new();
        if let Some(suppressed) = NO_ROUTE.admit() {
            tracing::info!(%peer, name = name.as_deref().unwrap_or("-"), suppressed, "TCP: no route for this server name, closed");
        }
        outcome.log(&rt, tls);
        return CloseReason::Done;
    };
    outcome.route = route;
    let up = &rt.cfg.upstreams[u];
    let connected = crate::tcp::connect::connect(&cfg, up, &rt.upstreams[u], peer, local).await;
    let connected = match connected {
        Ok(c) => c,
        Err(e) => {
            outcome.status = match e.kind {
                ErrorKind::NoServer | ErrorKind::Overflow => 503,
                _ => 502,
            };
            static FAILED: crate::logs::Limited = crate::logs::Limited::new();
            if let Some(suppressed) = FAILED.admit() {
                tracing::warn!(%peer, upstream = %up.name, reason = %e, suppressed, "TCP: no upstream connection, closed");
            }
            outcome.log(&rt, tls);
            return CloseReason::UpstreamError;
        }
    };
    outcome.upstream = Some((u, connected.server));
    // Counted for least_conn and p2c (and the server's in-flight gauge) while it lasts.
    let active = rt.upstreams[u].track_active(
        connected.server,
        Some(&rt.server_metrics[u][connected.server].in_flight),
    );
    let idle = cfg.idle_timeout;
    let relayed = relay_all(client, connected.socket, idle).await;
    drop(active);
    drop(connected.slot);
    outcome.relayed = relayed;
    outcome.status = match relayed.end {
        End::Closed => 200,
        End::Idle => 504,
        End::Error => 500,
    };
    outcome.log(&rt, tls);
    match relayed.end {
        End::Closed => CloseReason::Done,
        End::Idle => CloseReason::Idle,
        End::Error => CloseReason::ClientError,
    }
}

/// Relays until the connection ends: `splice` between plain sockets, copies otherwise.
async fn relay_all(client: Client, server: crate::proxy::tls::Socket, idle: Duration) -> Relayed {
    use crate::proxy::socket::Socket;
    match (client, server) {
        (Client::Plain(c), Socket::Tcp(s)) => relay::splice_both(&c, &s, idle).await,
        (Client::Plain(mut c), mut s) => relay::copy_both(&mut c, &mut s, idle).await,
        (Client::Tls(mut c), mut s) => relay::copy_both(&mut *c, &mut s, idle).await,
    }
}

/// The server name in the client's ClientHello, peeked at within `within` (the bytes stay in
/// the socket for the upstream server); `None` for no name, not TLS, or too slow.
///
/// A ClientHello split over segments is waited for without polling: `SO_RCVLOWAT` is set one
/// byte past what is there, so the socket becomes readable again only when more arrived (a
/// client that sends part of one and stalls costs no CPU until `timeouts.header`). The buffer
/// starts small and grows only while a hello fills it.
async fn peek_name(tcp: &ClientStream, within: Duration) -> Option<String> {
    let deadline = Instant::now() + within;
    let mut buf = vec![0u8; 2048];
    let limit = sni::MAX_HELLO + 5 * 4;
    // Urgent (out-of-band) data counts towards SO_RCVLOWAT's readiness but is skipped by a
    // peek: inline, it is peeked like any byte (it made the wait below spin until the header
    // timeout: review of issue 52). A relay carries it inline either way.
    let _ = socket2::SockRef::from(tcp).set_out_of_band_inline(true);
    // Wakes that bring nothing new end the wait (whatever else makes a socket readable).
    let mut empty_wakes = 0u32;
    let mut last = 0;
    let found = async {
        loop {
            let n = tokio::time::timeout_at(deadline, tcp.peek(&mut buf))
                .await
                .ok()?
                .ok()?;
            if n == 0 {
                return None;
            }
            match sni::parse(&buf[..n]) {
                Hello::Done(name) => return name,
                Hello::NotTls => return None,
                Hello::Incomplete if n == buf.len() => {
                    if buf.len() >= limit {
                        return None;
                    }
                    let grown = (buf.len() * 2).min(limit);
                    buf.resize(grown, 0);
                }
                Hello::Incomplete => {
                    if n > last {
                        empty_wakes = 0;
                        last = n;
                    }
                    set_rcvlowat(tcp, n + 1).ok()?;
                    // Forget the readiness the peek left, then look once more: bytes that came
                    // between the peek and now raised no new event.
                    let _ = tcp.try_io(tokio::io::Interest::READABLE, || {
                        Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
                    });
                    let mut probe = vec![std::mem::MaybeUninit::<u8>::uninit(); n + 1];
                    let queued = socket2::SockRef::from(tcp).peek(&mut probe).unwrap_or(0);
                    if queued <= n {
                        empty_wakes += 1;
                        if empty_wakes > 16 {
                            return None;
                        }
                        let ready = tokio::time::timeout_at(
                            deadline,
                            tcp.ready(tokio::io::Interest::READABLE),
                        )
                        .await
                        .ok()?
                        .ok()?;
                        // The client finished sending (FIN) with the hello incomplete: nothing
                        // more can come, and an end of stream stays readable whatever
                        // SO_RCVLOWAT says, so waiting again would spin (issue 52: 10 bytes and
                        // a FIN took 8.6 s of CPU in 12 s). One last look at what is queued,
                        // then route as a connection without a name.
                        if ready.is_read_closed() {
                            let n = tcp.peek(&mut buf).await.ok()?;
                            return match sni::parse(&buf[..n]) {
                                Hello::Done(name) => name,
                                _ => None,
                            };
                        }
                    }
                }
            }
        }
    }
    .await;
    let _ = set_rcvlowat(tcp, 1);
    found
}

/// Sets `SO_RCVLOWAT`: the socket reads as readable once `bytes` are queued.
#[allow(unsafe_code)]
fn set_rcvlowat(tcp: &ClientStream, bytes: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor is the live socket `tcp` borrows, and `v` is a c_int that
    // outlives the call, whose size is passed.
    let r = unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// What the access log line and the server's counters report.
struct Outcome<'a> {
    peer: SocketAddr,
    started: Instant,
    listener: usize,
    route: &'a str,
    upstream: Option<(usize, usize)>,
    status: u16,
    relayed: Relayed,
}

impl Outcome<'_> {
    fn log(&self, rt: &WorkerRuntime, tls: Option<&TlsInfo>) {
        let elapsed = self.started.elapsed();
        if let Some((u, s)) = self.upstream {
            if let Some(m) = rt.server_metrics.get(u).and_then(|v| v.get(s)) {
                m.record(
                    self.status,
                    elapsed.as_nanos() as u64,
                    self.relayed.down,
                    self.relayed.up,
                );
            }
        }
        let Some(slot) = rt.cfg.listeners[self.listener].access_log else {
            return;
        };
        let log = &rt.cfg.access_logs[slot];
        let upstream_addr = self
            .upstream
            .and_then(|(u, s)| rt.cfg.upstreams[u].servers[s].log_addr());
        let none = |_: &str| None;
        let now = crate::clock::Mono::now();
        let time = crate::access_log::wall_at(now);
        let entry = Entry {
            time,
            client: self.peer,
            method: "-",
            path: b"-",
            query: None,
            protocol: if tls.is_some() { "TLS" } else { "TCP" },
            status: self.status,
            bytes_sent: self.relayed.down,
            bytes_received: self.relayed.up,
            request_time: Some(elapsed),
            upstream_time: None,
            upstream_addr,
            cache: "-",
            route: self.route,
            tls,
            request_id: None,
            grpc_status: None,
            trace: None,
            identity: None,
            request_field: &none,
            response_field: &none,
        };
        rt.logs[slot].append(time.0, |time_local, out| {
            log.format.render(&entry, time_local, out)
        });
    }
}
