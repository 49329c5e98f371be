//! HTTP/2 to upstreams (`protocol: h2`), for gRPC-style backends: h2 with prior knowledge over
//! TCP, ALPN `h2` over TLS, one connection per worker and server shared by all requests (kept in
//! the worker's [`super::pool::Pool`]).
//!
//! Each request is bridged, not re-implemented: the upstream phase writes an HTTP/1.1 request
//! into an in-memory pipe (`tokio::io::duplex`) and reads an HTTP/1.1 response back, while a
//! task ([`bridge`]) carries it over one stream of the shared connection. Retries, the cache,
//! passive health and the logs then work as for any upstream. Trailers cross both ways as
//! chunked trailer fields (gRPC's `grpc-status` arrives that way), and the response says
//! `Connection: close`, so the pipe is never pooled.
//!
//! The cost is an HTTP/1.1 encode and parse per message on each side of the pipe: small next
//! to what a gRPC backend does per call, and it keeps one upstream phase for both protocols.

use std::cell::RefCell;
use std::io;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use weir_http::{header_map, parse_request, BodyDecoder, BodyEvent, BodyKind};

use super::pool::Pool;
use super::upstream::Upstream;

/// Buffer of each direction of a request's pipe.
const PIPE: usize = 64 * 1024;

/// A stream to `server` of `up` over the worker's shared HTTP/2 connection (made on first use
/// and again after it failed), as a pipe that speaks HTTP/1.1.
pub async fn open(pool: &RefCell<Pool>, up: &Upstream, server: usize) -> io::Result<DuplexStream> {
    let existing = pool.borrow().h2(server);
    let send = match existing {
        Some(s) => match s.ready().await {
            Ok(s) => s,
            Err(_) => connect(pool, up, server).await?,
        },
        None => connect(pool, up, server).await?,
    };
    let s = &up.servers[server];
    let scheme = if s.tls_name.is_some() {
        "https"
    } else {
        "http"
    };
    let authority = s.authority();
    let (ours, theirs) = tokio::io::duplex(PIPE);
    tokio::task::spawn_local(async move {
        if let Err(e) = bridge(theirs, send, scheme, &authority).await {
            tracing::debug!(error = %e, "HTTP/2 upstream stream failed");
        }
    });
    Ok(ours)
}

/// Connects to `server` and keeps the connection in the pool.
async fn connect(
    pool: &RefCell<Pool>,
    up: &Upstream,
    server: usize,
) -> io::Result<SendRequest<Bytes>> {
    let s = &up.servers[server];
    let stream = super::socket::connect(s, up.tls.as_ref(), up.connect_timeout).await?;
    let (send, conn) = tokio::time::timeout(up.connect_timeout, h2::client::handshake(stream))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "HTTP/2 handshake timed out"))?
        .map_err(io::Error::other)?;
    tokio::task::spawn_local(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "HTTP/2 upstream connection ended");
        }
    });
    let send = send.ready().await.map_err(io::Error::other)?;
    pool.borrow_mut().set_h2(server, send.clone());
    Ok(send)
}

/// Carries one HTTP/1.1 exchange from `pipe` over a stream of `send`.
async fn bridge(
    mut pipe: DuplexStream,
    send: SendRequest<Bytes>,
    scheme: &str,
    authority: &str,
) -> io::Result<()> {
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let limits = pipe_limits(PIPE);
    let head = loop {
        if let Some(h) = parse_request(&mut buf, &limits).map_err(io::Error::other)? {
            break h;
        }
        if pipe.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    };
    let host = head
        .host()
        .map(|h| String::from_utf8_lossy(h).into_owned())
        .unwrap_or_else(|| authority.to_string());
    let target = String::from_utf8_lossy(&head.target).into_owned();
    let mut req = http::Request::builder()
        .method(head.method.as_str())
        .uri(format!("{scheme}://{host}{target}"))
        .body(())
        .map_err(io::Error::other)?;
    for h in head.headers() {
        if h.name.eq_ignore_ascii_case(b"host") || forbidden(&h.name) {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(&h.name),
            http::HeaderValue::from_bytes(&h.value),
        ) {
            req.headers_mut().append(n, v);
        }
    }
    // gRPC servers want to know trailers are understood; a proxy that relays them does.
    req.headers_mut()
        .insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    let has_body = head.body != BodyKind::Empty;
    let mut send = send;
    let (response, mut stream) = send
        .send_request(req, !has_body)
        .map_err(io::Error::other)?;
    if has_body {
        let mut decoder = BodyDecoder::new(head.body);
        loop {
            match decoder.decode(&mut buf).map_err(io::Error::other)? {
                BodyEvent::Data(d) => stream.send_data(d, false).map_err(io::Error::other)?,
                BodyEvent::NeedMore => {
                    if pipe.read_buf(&mut buf).await? == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                }
                BodyEvent::Done(trailers) if trailers.is_empty() => {
                    stream
                        .send_data(Bytes::new(), true)
                        .map_err(io::Error::other)?;
                    break;
                }
                BodyEvent::Done(trailers) => {
                    stream
                        .send_trailers(header_map(&trailers))
                        .map_err(io::Error::other)?;
                    break;
                }
            }
        }
    }
    // Until the answer comes the pipe is watched: the upstream phase dropping it (its client
    // gone, `timeouts.response_header`) ends the wait, and the stream is reset (the `h2` crate
    // sends RST_STREAM CANCEL when an open stream's last handle goes). Before, the bridge
    // waited for an answer nobody would read, holding one of the server's concurrent streams:
    // enough such calls and every other client's call hung (review of issue 55's first part).
    let response = tokio::select! {
        r = response => r.map_err(io::Error::other)?,
        () = abandoned(&mut pipe) => return Ok(()),
    };
    let status = response.status().as_u16();
    let bodyless = head.method == weir_http::Method::Head || matches!(status, 204 | 304);
    let mut out = BytesMut::with_capacity(1024);
    out.put_slice(format!("HTTP/1.1 {status} \r\n").as_bytes());
    put_fields(&mut out, response.headers());
    if !bodyless {
        out.put_slice(b"transfer-encoding: chunked\r\n");
    }
    out.put_slice(b"connection: close\r\n\r\n");
    let mut body = response.into_body();
    if !bodyless {
        loop {
            // A stalled body is watched as the head was: a dropped pipe resets the stream.
            let chunk = tokio::select! {
                c = body.data() => c,
                () = abandoned(&mut pipe) => return Ok(()),
            };
            let Some(chunk) = chunk else { break };
            let chunk = chunk.map_err(io::Error::other)?;
            let _ = body.flow_control().release_capacity(chunk.len());
            weir_http::reply::put_chunk(&mut out, &chunk);
            if out.len() >= PIPE / 2 {
                pipe.write_all(&out).await?;
                out.clear();
            }
        }
        out.put_slice(b"0\r\n");
        if let Some(trailers) = body.trailers().await.map_err(io::Error::other)? {
            put_fields(&mut out, &trailers);
        }
        out.put_slice(b"\r\n");
    }
    pipe.write_all(&out).await?;
    pipe.shutdown().await
}

/// Ready when the upstream phase dropped its end of `pipe` (it writes nothing more once its
/// request is written, and never half-closes).
async fn abandoned(pipe: &mut DuplexStream) {
    let mut scratch = [0u8; 64];
    while let Ok(n) = pipe.read(&mut scratch).await {
        if n == 0 {
            return;
        }
    }
}

/// How a bridge (this one, `fastcgi/`) parses the request the upstream phase wrote into its
/// pipe, heads up to `max` bytes: the pipeline's own request, its path normalised already when
/// the client's was read, so taken as it is.
pub(crate) fn pipe_limits(max: usize) -> weir_http::Limits {
    weir_http::Limits {
        max_head_bytes: max,
        max_uri_bytes: max,
        normalize_path: false,
        keep_encoded_slashes: true,
        keep_semicolons: true,
        keep_utf8: true,
        underscores: weir_http::Underscores::Allow,
    }
}

/// Fields HTTP/2 forbids (RFC 9113 §8.2.2), and `te`, which the bridge sets itself.
fn forbidden(name: &[u8]) -> bool {
    weir_http::hop::not_in_h2(name) || name.eq_ignore_ascii_case(b"te")
}

fn put_fields(out: &mut BytesMut, fields: &http::HeaderMap) {
    for (n, v) in fields {
        out.put_slice(n.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(v.as_bytes());
        out.put_slice(b"\r\n");
    }
}

/// One health check over HTTP/2: `GET path`, its status.
pub async fn check(
    up: &Upstream,
    server: usize,
    path: &str,
    within: Duration,
) -> Result<u16, String> {
    let s = &up.servers[server];
    let run = async {
        let stream = super::socket::connect(s, up.tls.as_ref(), within)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let (send, conn) = h2::client::handshake(stream)
            .await
            .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
        let driver = tokio::task::spawn_local(async move {
            let _ = conn.await;
        });
        let scheme = if s.tls_name.is_some() {
            "https"
        } else {
            "http"
        };
        let req = http::Request::builder()
            .uri(format!("{scheme}://{}{path}", s.authority()))
            .header("user-agent", "weir-health-check")
            .body(())
            .map_err(|e| e.to_string())?;
        let mut send = send.ready().await.map_err(|e| e.to_string())?;
        let (response, _) = send.send_request(req, true).map_err(|e| e.to_string())?;
        let status = response.await.map_err(|e| e.to_string())?.status().as_u16();
        driver.abort();
        Ok(status)
    };
    tokio::time::timeout(within, run)
        .await
        .map_err(|_| "timeout".to_string())?
}
