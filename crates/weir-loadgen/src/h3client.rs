//! HTTP/3 load (`--h3`): each connection is a QUIC connection of its own (its own UDP socket,
//! as h2load's and a browser's are, so a server's SO_REUSEPORT spreads them), running
//! `streams` request loops at once, closed loop, each timing its own requests. With `--close`
//! every request gets a new connection and a full handshake (handshakes/s). QUIC is quinn's,
//! HTTP/3 the `h3` crate's, on the same rustls config as TLS over TCP (ALPN `h3`, TLS 1.3).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::time::{timeout_at, Instant};

use crate::client::{Control, Stats};
use crate::options::Options;

type SendRequest = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// The QUIC client config of a run: ALPN `h3`, certificates not verified (test servers),
/// handshake signatures verified, resumption as `--tls-resume` says.
pub fn client_config(opts: &Options) -> Result<quinn::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(crate::transport::SignaturesOnly::new(provider)))
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h3".to_vec()];
    if !opts.tls_resume {
        cfg.resumption = rustls::client::Resumption::disabled();
    }
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(cfg)
        .map_err(|e| format!("QUIC client config: {e}"))?;
    let mut c = quinn::ClientConfig::new(Arc::new(quic));
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(Some(
        quinn::IdleTimeout::try_from(Duration::from_secs(30)).map_err(|e| e.to_string())?,
    ));
    c.transport_config(Arc::new(t));
    Ok(c)
}

/// Runs one HTTP/3 connection (reopened after failures, and after every request with
/// `--close`) until the run is over.
pub async fn connection(
    opts: Rc<Options>,
    ctl: Arc<Control>,
    stats: Rc<RefCell<Stats>>,
    config: quinn::ClientConfig,
) {
    let uri = format!("https://{}{}", opts.target.host, opts.target.path);
    while !ctl.over() {
        let Some((endpoint, conn, client, driver)) = open(&opts, &config, &ctl, &stats).await
        else {
            continue;
        };
        if opts.close {
            // One request, then the connection goes.
            if ctl.take() {
                run_one(&client, &opts, &uri, &ctl, &stats).await;
            }
        } else {
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
            for l in loops {
                let _ = l.await;
            }
        }
        drop(client);
        conn.close(quinn::VarInt::from_u32(0x100), b"");
        driver.abort();
        // The endpoint's driver task sends the CONNECTION_CLOSE and ends after the draining
        // period; the next connection does not wait for it.
        drop(endpoint);
    }
}

/// Opens a QUIC connection and its HTTP/3 session.
async fn open(
    opts: &Options,
    config: &quinn::ClientConfig,
    ctl: &Control,
    stats: &RefCell<Stats>,
) -> Option<(
    quinn::Endpoint,
    quinn::Connection,
    SendRequest,
    tokio::task::JoinHandle<()>,
)> {
    let attempt = async {
        let local: SocketAddr = if opts.target.addr.is_ipv6() {
            "[::]:0".parse().map_err(|_| "bad address".to_string())?
        } else {
            "0.0.0.0:0".parse().map_err(|_| "bad address".to_string())?
        };
        let mut endpoint = quinn::Endpoint::client(local).map_err(|e| e.to_string())?;
        endpoint.set_default_client_config(config.clone());
        let conn = endpoint
            .connect(opts.target.addr, &opts.target.server_name)
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())?;
        let (mut driver, client) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
            .await
            .map_err(|e| e.to_string())?;
        let driver = tokio::task::spawn_local(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        Ok::<_, String>((endpoint, conn, client, driver))
    };
    match timeout_at(Instant::now() + opts.timeout, attempt).await {
        Ok(Ok(opened)) => {
            ctl.connected();
            stats.borrow_mut().handshakes += 1;
            Some(opened)
        }
        failed => {
            let why = match failed {
                Ok(Err(e)) => e,
                _ => format!("no answer within {:?}", opts.timeout),
            };
            stats.borrow_mut().errors.connect += 1;
            ctl.connect_failed(format!(
                "cannot connect to {} over QUIC: {why}",
                opts.target.addr
            ));
            tokio::time::sleep(Duration::from_millis(10)).await;
            None
        }
    }
}

/// Sends requests one after another on `client` until the run is over or the connection
/// fails.
async fn stream_loop(
    client: SendRequest,
    opts: Rc<Options>,
    uri: String,
    ctl: Arc<Control>,
    stats: Rc<RefCell<Stats>>,
) {
    while ctl.take() {
        if !run_one(&client, &opts, &uri, &ctl, &stats).await {
            return;
        }
    }
}

/// One timed request; `false` when the connection should be given up.
async fn run_one(
    client: &SendRequest,
    opts: &Options,
    uri: &str,
    ctl: &Control,
    stats: &RefCell<Stats>,
) -> bool {
    let t0 = Instant::now();
    let mut deadline = t0 + opts.timeout;
    if let Some(end) = ctl.hard_end() {
        deadline = deadline.min(end + opts.timeout);
    }
    let head_request = opts.method.eq_ignore_ascii_case("HEAD");
    match timeout_at(deadline, one(client.clone(), opts, uri, head_request)).await {
        Ok(Ok((status, bytes))) => {
            let mut s = stats.borrow_mut();
            s.body_bytes += bytes;
            s.bytes += bytes;
            s.record(ctl.start, t0, status);
            true
        }
        Ok(Err(())) => {
            stats.borrow_mut().errors.read += 1;
            false
        }
        Err(_) => {
            if ctl.hard_end().is_none_or(|e| Instant::now() < e) {
                stats.borrow_mut().errors.timeout += 1;
            }
            false
        }
    }
}

/// One request and its whole response: (status, body bytes).
async fn one(
    mut client: SendRequest,
    opts: &Options,
    uri: &str,
    head_request: bool,
) -> Result<(u16, u64), ()> {
    let req = opts.request_head(uri).map_err(|_| ())?;
    let mut stream = client.send_request(req).await.map_err(|_| ())?;
    if !opts.body.is_empty() {
        stream.send_data(opts.body.clone()).await.map_err(|_| ())?;
    }
    stream.finish().await.map_err(|_| ())?;
    let response = stream.recv_response().await.map_err(|_| ())?;
    let status = response.status().as_u16();
    let mut n = 0u64;
    if !head_request {
        while let Some(mut chunk) = stream.recv_data().await.map_err(|_| ())? {
            n += chunk.remaining() as u64;
            chunk.advance(chunk.remaining());
        }
    }
    Ok((status, n))
}
