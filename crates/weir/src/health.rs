//! Active health checks, a thread beside the workers: HTTP (and HTTP/2), gRPC
//! (`grpc.health.v1`) and connect checks with rise/fall,
//! and periodic DNS re-resolution of upstream servers given by name. It only writes the shared atomics the
//! workers read (`Health`, `Server::addr`), so the request path never waits for it.
//!
//! It follows reloads: when the server publishes a new config it stops its checks and starts
//! those of the new upstreams. Health and addresses are shared by name across configs
//! (`runtime/registry.rs`), so a check's verdict carries over.

use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

use crate::proxy::upstream::{ActivePolicy, Server, Upstream};

/// Starts the thread; it ends when `shutdown` turns true, and restarts its checks on the
/// `upstreams()` of the published config each time `reloaded` changes.
pub fn spawn(
    upstreams: impl Fn() -> Vec<Arc<Upstream>> + Send + 'static,
    mut reloaded: watch::Receiver<u64>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("weir-health".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the health-check thread");
                    return;
                }
            };
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move {
                loop {
                    let tasks = start_checks(&upstreams());
                    let stop = tokio::select! {
                        _ = shutdown.wait_for(|s| *s) => true,
                        changed = reloaded.changed() => changed.is_err(),
                    };
                    for t in tasks {
                        t.abort();
                    }
                    if stop {
                        return;
                    }
                }
            });
        })
}

/// Starts the check and re-resolve loops `upstreams` need.
fn start_checks(upstreams: &[Arc<Upstream>]) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for u in upstreams {
        for i in 0..u.servers.len() {
            if let Some(policy) = u.active.clone() {
                tasks.push(tokio::task::spawn_local(check_loop(u.clone(), i, policy)));
            }
            let s = &u.servers[i];
            if s.unix.is_none() && s.host.parse::<std::net::IpAddr>().is_err() {
                tasks.push(tokio::task::spawn_local(resolve_loop(u.clone(), i)));
            }
        }
    }
    tasks
}

async fn check_loop(u: Arc<Upstream>, i: usize, p: ActivePolicy) {
    let server = &u.servers[i];
    let (mut ok_run, mut fail_run) = (0u32, 0u32);
    loop {
        let verdict = if p.tcp {
            crate::proxy::socket::connect(server, u.tls.as_ref(), p.timeout)
                .await
                .map(drop)
                .map_err(|e| format!("connect: {e}"))
        } else if let Some(service) = &p.grpc_service {
            crate::proxy::grpc_health::check(&u, i, service, p.timeout).await
        } else if u.h2 {
            match crate::proxy::h2_upstream::check(&u, i, &p.path, p.timeout).await {
                Ok(status)
                    if p.expect_status
                        .map_or((200..300).contains(&status), |w| w == status) =>
                {
                    Ok(())
                }
                Ok(status) => Err(format!("status {status}")),
                Err(e) => Err(e),
            }
        } else {
            check_once(server, u.tls.as_ref(), &p).await
        };
        match &verdict {
            Ok(()) => {
                ok_run += 1;
                fail_run = 0;
                if ok_run >= p.rise && !server.health.active_up() {
                    server.health.set_active_up(true);
                    tracing::warn!(upstream = %u.name, server = %server.name, "health check passed {ok_run} times: server up");
                }
            }
            Err(reason) => {
                fail_run += 1;
                ok_run = 0;
                if fail_run >= p.fall && server.health.active_up() {
                    server.health.set_active_up(false);
                    tracing::warn!(upstream = %u.name, server = %server.name, reason = %reason, "health check failed {fail_run} times: server down");
                }
            }
        }
        tokio::time::sleep(p.interval).await;
    }
}

/// One `GET path` with `Connection: close`; healthy if the status is as expected.
async fn check_once(
    server: &Server,
    tls: Option<&crate::proxy::tls::UpstreamTls>,
    p: &ActivePolicy,
) -> Result<(), String> {
    let exchange = async {
        let mut s = crate::proxy::socket::connect(server, tls, p.timeout)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let req = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: weir-health-check\r\nConnection: close\r\n\r\n",
            p.path,
            server.authority()
        );
        crate::proxy::exchange::send(&mut s, req.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut buf = BytesMut::with_capacity(4096);
        loop {
            if let Some(head) = weir_http::parse_response(&mut buf, 32 * 1024, false)
                .map_err(|e| format!("bad response: {e}"))?
            {
                let ok = match p.expect_status {
                    Some(want) => head.status == want,
                    None => (200..300).contains(&head.status),
                };
                return if ok {
                    Ok(())
                } else {
                    Err(format!("status {}", head.status))
                };
            }
            if s.read_buf(&mut buf)
                .await
                .map_err(|e| format!("read: {e}"))?
                == 0
            {
                return Err("closed before a response".into());
            }
        }
    };
    tokio::time::timeout(p.timeout, exchange)
        .await
        .map_err(|_| "timeout".to_string())?
}

async fn resolve_loop(u: Arc<Upstream>, i: usize) {
    loop {
        tokio::time::sleep(u.resolve_every).await;
        let (host, port) = (u.servers[i].host.clone(), u.servers[i].port);
        let resolved =
            tokio::task::spawn_blocking(move || crate::proxy::upstream::resolve(&host, port)).await;
        match resolved {
            Ok(Ok(addr)) => {
                let server = &u.servers[i];
                if **server.addr.load() != addr {
                    tracing::info!(upstream = %u.name, server = %server.name, %addr, "server re-resolved");
                    server.addr.store(Arc::new(addr));
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(upstream = %u.name, server = %u.servers[i].name, error = %e, "re-resolve failed, keeping the old address")
            }
            Err(_) => {}
        }
    }
}
