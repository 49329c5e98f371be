//! HTTP/2 load (h2load's role): each connection runs `streams` request loops at once over one
//! `h2` client connection, closed loop, each timing its own requests. Over TLS the protocol is
//! settled by ALPN; over TCP the client speaks h2 with prior knowledge (h2c).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use tokio::time::{timeout_at, Instant};

use crate::client::{open, Control, Stats};
use crate::options::Options;
use crate::transport::Tls;

/// Runs one HTTP/2 connection (reopened after failures) until the run is over.
pub async fn connection(
    opts: Rc<Options>,
    ctl: Arc<Control>,
    stats: Rc<RefCell<Stats>>,
    tls: Option<Tls>,
) {
    let scheme = if opts.target.tls { "https" } else { "http" };
    let uri = format!("{scheme}://{}{}", opts.target.host, opts.target.path);
    while !ctl.over() {
        let Some(stream) = open(&opts, tls.as_ref(), &ctl, &stats).await else {
            continue;
        };
        let (client, conn) = match h2::client::handshake(stream).await {
            Ok(pair) => pair,
            Err(_) => {
                stats.borrow_mut().errors.connect += 1;
                continue;
            }
        };
        let driver = tokio::task::spawn_local(async move {
            let _ = conn.await;
        });
        let loops: Vec<_> = (0..opts.streams.max(1))
            .map(|_| {
                tokio::task::spawn_local(stream_loop(
                    client.clone(),
                    opts.clone(),
                    uri.clone(),
                    ctl.clone(),
                    stats.clone(),
                ))
            })
            .collect();
        drop(client);
        for l in loops {
            let _ = l.await;
        }
        driver.abort();
    }
}

/// Sends requests one after another on streams of `client` until the run is over or the
/// connection fails.
async fn stream_loop(
    client: h2::client::SendRequest<Bytes>,
    opts: Rc<Options>,
    uri: String,
    ctl: Arc<Control>,
    stats: Rc<RefCell<Stats>>,
) {
    let head_request = opts.method.eq_ignore_ascii_case("HEAD");
    while ctl.take() {
        let t0 = Instant::now();
        let mut deadline = t0 + opts.timeout;
        if let Some(end) = ctl.hard_end() {
            deadline = deadline.min(end + opts.timeout);
        }
        match timeout_at(deadline, one(&client, &opts, &uri, head_request)).await {
            Ok(Ok((status, bytes))) => {
                let mut s = stats.borrow_mut();
                s.body_bytes += bytes;
                s.bytes += bytes;
                s.record(ctl.start, t0, status);
            }
            Ok(Err(())) => {
                stats.borrow_mut().errors.read += 1;
                return;
            }
            Err(_) => {
                if ctl.hard_end().is_some_and(|e| Instant::now() >= e) {
                    return;
                }
                stats.borrow_mut().errors.timeout += 1;
                return;
            }
        }
    }
}

/// One request and its whole response: (status, body bytes).
async fn one(
    client: &h2::client::SendRequest<Bytes>,
    opts: &Options,
    uri: &str,
    head_request: bool,
) -> Result<(u16, u64), ()> {
    let req = opts.request_head(uri).map_err(|_| ())?;
    let mut sender = client.clone().ready().await.map_err(|_| ())?;
    let no_body = opts.body.is_empty();
    let (response, mut send) = sender.send_request(req, no_body).map_err(|_| ())?;
    if !no_body {
        send.send_data(opts.body.clone(), true).map_err(|_| ())?;
    }
    let response = response.await.map_err(|_| ())?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut n = 0u64;
    if !head_request {
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|_| ())?;
            n += chunk.len() as u64;
            let _ = body.flow_control().release_capacity(chunk.len());
        }
    }
    Ok((status, n))
}
