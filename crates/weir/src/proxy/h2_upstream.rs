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
use futures_util::FutureExt;
use h2::client::SendRequest;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use weir_http::{header_map, parse_request, BodyDecoder, BodyEvent, BodyKind};

use super::grpc_web;
use super::pool::Pool;
use super::upstream::Upstream;

/// Buffer of each direction of a request's pipe.
const PIPE: usize = 64 * 1024;

/// The receive window of a shared upstream connection: 128 streams' 64 KiB.
const CONNECTION_WINDOW: u32 = 8 * 1024 * 1024;

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
    // The connection's receive window is many streams' (each keeps HTTP/2's 64 KiB): the
    // connection is shared by every client of the worker, and with the default 64 KiB one
    // client that stops reading a streamed answer held the whole window, and every other
    // call on the connection stalled (the review of issue 55). Now 128 such streams would.
    let handshake = h2::client::Builder::new()
        .initial_connection_window_size(CONNECTION_WINDOW)
        // An answer's head or trailers are held to 64 KiB (the h2 crate's default is 16 MiB;
        // a gRPC-Web answer carries its trailers in the body).
        .max_header_list_size(64 * 1024)
        .handshake(stream);
    let (send, conn) = tokio::time::timeout(up.connect_timeout, handshake)
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
    // A gRPC-Web call is asked in gRPC (`grpc_web.rs`).
    let web = match head.method {
        weir_http::Method::Post => head.header("content-type").and_then(grpc_web::mode),
        _ => None,
    };
    let mut req = http::Request::builder()
        .method(head.method.as_str())
        .uri(format!("{scheme}://{host}{target}"))
        .body(())
        .map_err(io::Error::other)?;
    for h in head.headers() {
        if h.name.eq_ignore_ascii_case(b"host") || forbidden(&h.name) {
            continue;
        }
        if web.is_some()
            && (h.name.eq_ignore_ascii_case(b"content-type")
                || h.name.eq_ignore_ascii_case(b"content-length"))
        {
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
    if let Some((_, codec)) = web {
        if let Ok(v) = http::HeaderValue::from_bytes(&grpc_web::upstream_type(codec)) {
            req.headers_mut().insert(http::header::CONTENT_TYPE, v);
        }
    }
    let web = web.map(|(mode, _)| mode);
    let has_body = head.body != BodyKind::Empty;
    let mut send = send;
    let (response, stream) = send
        .send_request(req, !has_body)
        .map_err(io::Error::other)?;
    // Both ways at once (issue 55 §3): a bidirectional gRPC call answers each message before
    // the client sends the next, so the response is relayed while the request body still
    // flows. The pipe is split: the request side reads it, the response side writes it.
    let (mut from_phase, mut to_phase) = tokio::io::split(pipe);
    // Whether the answer's head went to the upstream phase (after it, nothing else may).
    let head_sent = std::cell::Cell::new(false);
    let upload = async {
        if has_body {
            let text = (web == Some(grpc_web::Mode::Text)).then(grpc_web::TextDecoder::default);
            match upload(&mut from_phase, &mut buf, (head.body, text), stream).await {
                Ok(()) => {}
                // A body that is not one (bad base64, a cut group): the stream was reset, the
                // exchange ends (a stream held open until `response_header` ran out, by any
                // client: the review of issue 55).
                Err(Upload::Bad(e)) => return Err(e),
                // A server that answers before the whole body (an error, a call it ends
                // early) closes its side: the answer is still relayed.
                Err(Upload::Closed(e)) => {
                    tracing::debug!(error = %e, "HTTP/2 upstream stream: request body not sent whole");
                }
            }
        }
        // Until the answer is relayed the pipe is watched: the upstream phase dropping it (its
        // client gone, `timeouts.response_header`, the call's deadline) ends the exchange, and
        // the stream is reset (the `h2` crate sends RST_STREAM CANCEL when an open stream's
        // last handle goes). Before, the bridge waited for an answer nobody would read,
        // holding one of the server's concurrent streams: enough such calls and every other
        // client's call hung (review of issue 55's first part).
        abandoned(&mut from_phase).await;
        Ok::<(), io::Error>(())
    };
    let download = async {
        let response = response.await.map_err(io::Error::other)?;
        let status = response.status().as_u16();
        let bodyless = head.method == weir_http::Method::Head || matches!(status, 204 | 304);
        let mut out = BytesMut::with_capacity(1024);
        out.put_slice(format!("HTTP/1.1 {status} \r\n").as_bytes());
        // A gRPC answer is relabelled; another (an HTML 404) goes back as it came.
        let upstream_type = response.headers().get(http::header::CONTENT_TYPE);
        let web = web.filter(|_| grpc_web::is_grpc_answer(upstream_type.map(|v| v.as_bytes())));
        if let Some(mode) = web {
            // The call's gRPC-Web family; the length (if any) is the gRPC body's.
            let upstream = response.headers().get(http::header::CONTENT_TYPE);
            let ct = grpc_web::client_type(mode, upstream.map(|v| v.as_bytes()));
            out.put_slice(b"content-type: ");
            out.put_slice(&ct);
            out.put_slice(b"\r\n");
            for (n, v) in response.headers() {
                if n != http::header::CONTENT_TYPE && n != http::header::CONTENT_LENGTH {
                    put_field(&mut out, n, v);
                }
            }
            if !bodyless {
                out.put_slice(b"transfer-encoding: chunked\r\n");
            }
        } else if bodyless {
            put_fields(&mut out, response.headers());
        } else {
            // Re-framed as chunks (trailers may follow): the server's `content-length` is
            // left out, or the phase refuses a head with both (every answer with a length
            // was a 502 until issue 55's bench).
            put_fields_except(&mut out, response.headers(), "content-length");
            out.put_slice(b"transfer-encoding: chunked\r\n");
        }
        out.put_slice(b"connection: close\r\n\r\n");
        head_sent.set(true);
        let mut body = response.into_body();
        if !bodyless {
            // What has arrived goes on in one write, and a wait for more writes what is held
            // first: a streamed answer's messages go on as they come (they were held until
            // 32 KiB had gathered), and a unary answer (head, DATA and trailers in one read
            // of the connection) is still one write.
            loop {
                let next = match body.data().now_or_never() {
                    Some(next) => next,
                    None => {
                        flush(&mut to_phase, &mut out).await?;
                        body.data().await
                    }
                };
                let Some(chunk) = next else { break };
                let chunk = chunk.map_err(io::Error::other)?;
                let _ = body.flow_control().release_capacity(chunk.len());
                match web {
                    Some(grpc_web::Mode::Text) => {
                        weir_http::reply::put_chunk(&mut out, &grpc_web::encode_text(&chunk))
                    }
                    _ => weir_http::reply::put_chunk(&mut out, &chunk),
                }
                if out.len() >= PIPE / 2 {
                    flush(&mut to_phase, &mut out).await?;
                }
            }
            let trailers = match body.trailers().now_or_never() {
                Some(t) => t,
                None => {
                    flush(&mut to_phase, &mut out).await?;
                    body.trailers().await
                }
            };
            let trailers = trailers.map_err(io::Error::other)?;
            match (web, trailers) {
                // gRPC-Web: the trailers are the body's last frame.
                (Some(mode), Some(trailers)) => {
                    let mut frame = BytesMut::new();
                    grpc_web::trailer_frame(&trailers, &mut frame);
                    match mode {
                        grpc_web::Mode::Text => {
                            weir_http::reply::put_chunk(&mut out, &grpc_web::encode_text(&frame))
                        }
                        grpc_web::Mode::Binary => weir_http::reply::put_chunk(&mut out, &frame),
                    }
                    out.put_slice(b"0\r\n");
                }
                (None, Some(trailers)) => {
                    out.put_slice(b"0\r\n");
                    put_fields(&mut out, &trailers);
                }
                (_, None) => out.put_slice(b"0\r\n"),
            }
            out.put_slice(b"\r\n");
        }
        to_phase.write_all(&out).await?;
        to_phase.shutdown().await
    };
    let bad_body = tokio::select! {
        biased;
        r = download => return r,
        // The request side ends first when the upstream phase dropped the pipe, or its body
        // was bad.
        r = upload => match r {
            Ok(()) => return Ok(()),
            Err(e) => e,
        },
    };
    // The client's own error, answered as one (not a failed upstream: no passive-health mark).
    if !head_sent.get() {
        to_phase
            .write_all(b"HTTP/1.1 400 \r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await?;
        to_phase.shutdown().await?;
    }
    Err(bad_body)
}

/// Why a request body did not reach the upstream whole.
enum Upload {
    /// The body is not one (bad gRPC-Web base64, a cut group, a bad framing): the stream is
    /// reset.
    Bad(io::Error),
    /// The upstream stopped taking it (it answered, or reset the stream).
    Closed(io::Error),
}

/// Writes what `out` holds to the upstream phase's end of the pipe.
async fn flush(
    to_phase: &mut tokio::io::WriteHalf<DuplexStream>,
    out: &mut BytesMut,
) -> io::Result<()> {
    if !out.is_empty() {
        to_phase.write_all(out).await?;
        out.clear();
    }
    Ok(())
}

/// Carries the request body from the pipe to `stream` as the upstream's window allows (not
/// buffered past it: `send_data` alone queues without bound), then its trailers or its end.
async fn upload(
    pipe: &mut tokio::io::ReadHalf<DuplexStream>,
    buf: &mut BytesMut,
    (kind, mut text): (BodyKind, Option<grpc_web::TextDecoder>),
    mut stream: h2::SendStream<Bytes>,
) -> Result<(), Upload> {
    let mut decoder = BodyDecoder::new(kind);
    let bad = |stream: &mut h2::SendStream<Bytes>, e: String| {
        stream.send_reset(h2::Reason::CANCEL);
        Upload::Bad(io::Error::other(e))
    };
    let closed = |e: h2::Error| Upload::Closed(io::Error::other(e));
    loop {
        let event = match decoder.decode(buf) {
            Ok(event) => event,
            Err(e) => return Err(bad(&mut stream, e.to_string())),
        };
        match event {
            BodyEvent::Data(mut d) => {
                // A gRPC-Web text body: the upstream is sent what it encodes.
                if let Some(t) = text.as_mut() {
                    d = t.push(&d).map_err(|e| bad(&mut stream, e))?;
                }
                while !d.is_empty() {
                    stream.reserve_capacity(d.len());
                    let room = match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
                        Some(room) => room.map_err(closed)?,
                        None => return Err(Upload::Closed(io::Error::other("stream closed"))),
                    };
                    let part = d.split_to(room.min(d.len()));
                    stream.send_data(part, false).map_err(closed)?;
                }
            }
            BodyEvent::NeedMore => match pipe.read_buf(buf).await {
                Ok(0) => return Err(bad(&mut stream, "the request ended mid-body".into())),
                Ok(_) => {}
                Err(e) => return Err(bad(&mut stream, e.to_string())),
            },
            BodyEvent::Done(_) if text.as_ref().is_some_and(|t| t.finish().is_err()) => {
                return Err(bad(
                    &mut stream,
                    "gRPC-Web text body: a cut base64 group".into(),
                ));
            }
            BodyEvent::Done(trailers) if trailers.is_empty() => {
                return stream.send_data(Bytes::new(), true).map_err(closed);
            }
            BodyEvent::Done(trailers) => {
                return stream.send_trailers(header_map(&trailers)).map_err(closed);
            }
        }
    }
}

/// Ready when the upstream phase dropped its end of `pipe` (it writes nothing more once its
/// request is written, and never half-closes).
async fn abandoned(pipe: &mut tokio::io::ReadHalf<DuplexStream>) {
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
    put_fields_except(out, fields, "");
}

fn put_field(out: &mut BytesMut, n: &http::HeaderName, v: &http::HeaderValue) {
    out.put_slice(n.as_str().as_bytes());
    out.put_slice(b": ");
    out.put_slice(v.as_bytes());
    out.put_slice(b"\r\n");
}

fn put_fields_except(out: &mut BytesMut, fields: &http::HeaderMap, except: &str) {
    for (n, v) in fields {
        if n.as_str() != except {
            put_field(out, n, v);
        }
    }
}

/// A health check's own HTTP/2 connection to `server` (driven by a local task, aborted by the
/// caller when done), ready for a request, and the URI prefix of its requests
/// (`http://authority`).
pub(crate) async fn open_check(
    up: &Upstream,
    server: usize,
    within: Duration,
) -> Result<
    (
        h2::client::SendRequest<Bytes>,
        tokio::task::JoinHandle<()>,
        String,
    ),
    String,
> {
    let s = &up.servers[server];
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
    let send = send.ready().await.map_err(|e| e.to_string())?;
    Ok((send, driver, format!("{scheme}://{}", s.authority())))
}

/// One health check over HTTP/2: `GET path`, its status.
pub async fn check(
    up: &Upstream,
    server: usize,
    path: &str,
    within: Duration,
) -> Result<u16, String> {
    let run = async {
        let (mut send, driver, base) = open_check(up, server, within).await?;
        let req = http::Request::builder()
            .uri(format!("{base}{path}"))
            .header("user-agent", "weir-health-check")
            .body(())
            .map_err(|e| e.to_string())?;
        let (response, _) = send.send_request(req, true).map_err(|e| e.to_string())?;
        let status = response.await.map_err(|e| e.to_string())?.status().as_u16();
        driver.abort();
        Ok(status)
    };
    tokio::time::timeout(within, run)
        .await
        .map_err(|_| "timeout".to_string())?
}
