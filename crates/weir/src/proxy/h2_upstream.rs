//! HTTP/2 to upstreams (`protocol: h2`), for gRPC-style backends: h2 with prior knowledge over
//! TCP, ALPN `h2` over TLS, on weir's own client (`h2_client/`): a few connections per worker
//! and server, shared by all requests.
//!
//! Each request is bridged: the upstream phase writes an HTTP/1.1 request into an in-memory
//! pipe (`tokio::io::duplex`) and reads an HTTP/1.1 response back, while a task ([`bridge`])
//! carries it over one stream. Retries, the cache, passive health and the logs then work as
//! for any upstream. Trailers cross both ways as chunked trailer fields (gRPC's `grpc-status`
//! arrives that way), and the response says `Connection: close`, so the pipe is never pooled.
//!
//! A stream the server did not process (GOAWAY above it, REFUSED_STREAM) goes again, on
//! another connection, while what was sent of its body is still held (the first 64 KiB):
//! RFC 9113 §8.7 makes that safe for any method.
//!
//! The cost is an HTTP/1.1 encode and parse per message on each side of the pipe (issue 55
//! §2 asks for none: not yet).

use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use weir_http::{parse_request, BodyDecoder, BodyEvent, BodyKind};

use super::grpc_web;
use super::h2_client::{ClientStream, Failure, Incoming, SendError};
use super::per_worker::WorkerUpstream;
use super::upstream::Upstream;

/// Buffer of each direction of a request's pipe.
const PIPE: usize = 64 * 1024;

/// What is kept of a request body for sending it again on another connection.
const REPLAY: usize = 64 * 1024;

/// Most times a request the server did not process is sent again.
const RESENDS: u32 = 2;

/// A stream to `server` of `up` over the worker's HTTP/2 connections (one is made, when none
/// has room, before this returns: a server that cannot be reached is a connect failure), as a
/// pipe that speaks HTTP/1.1.
pub async fn open(
    per_worker: &Rc<WorkerUpstream>,
    up: &Arc<Upstream>,
    server: usize,
) -> io::Result<DuplexStream> {
    super::h2_client::ready(&per_worker.pool, up, server).await?;
    let (ours, theirs) = tokio::io::duplex(PIPE);
    let (per_worker, up) = (per_worker.clone(), up.clone());
    tokio::task::spawn_local(async move {
        if let Err(e) = bridge(theirs, &per_worker, &up, server).await {
            tracing::debug!(error = %e, "HTTP/2 upstream stream failed");
        }
    });
    Ok(ours)
}

/// The request body as it goes out: decoded from the pipe, and what was sent of it kept for
/// a resend.
struct Body {
    decoder: BodyDecoder,
    text: Option<grpc_web::TextDecoder>,
    /// What was sent so far, while under [`REPLAY`]; `None` past it (no resend then).
    sent: Option<Vec<u8>>,
    /// The body ended (with these trailers, if any).
    ended: Option<Vec<(Vec<u8>, Vec<u8>)>>,
}

/// Why an exchange ended without relaying an answer.
enum Ended {
    /// The server did not process the stream: it may go again.
    Unprocessed,
    /// The exchange failed (the pipe is dropped: the phase sees the upstream gone).
    Failed(io::Error),
    /// The client's body was bad: answered 400 here.
    Bad(io::Error),
}

/// Carries one HTTP/1.1 exchange from `pipe` over a stream to `server`.
async fn bridge(
    pipe: DuplexStream,
    per_worker: &WorkerUpstream,
    up: &Upstream,
    server: usize,
) -> io::Result<()> {
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let limits = pipe_limits(PIPE);
    let (mut from_phase, mut to_phase) = tokio::io::split(pipe);
    let head = loop {
        if let Some(h) = parse_request(&mut buf, &limits).map_err(io::Error::other)? {
            break h;
        }
        if from_phase.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    };
    let s = &up.servers[server];
    let scheme: &[u8] = if s.tls_name.is_some() {
        b"https"
    } else {
        b"http"
    };
    let authority = s.authority();
    let host = head.host().unwrap_or(authority.as_bytes());
    // A gRPC-Web call is asked in gRPC (`grpc_web.rs`).
    let web = match head.method {
        weir_http::Method::Post => head.header("content-type").and_then(grpc_web::mode),
        _ => None,
    };
    let web_type = web.map(|(_, codec)| grpc_web::upstream_type(codec));
    let mut fields: Vec<(&[u8], &[u8])> = Vec::with_capacity(16);
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
        fields.push((&h.name, &h.value));
    }
    // gRPC servers want to know trailers are understood; a proxy that relays them does.
    fields.push((b"te", b"trailers"));
    if let Some(t) = &web_type {
        fields.push((b"content-type", t));
    }
    let web = web.map(|(mode, _)| mode);
    let has_body = head.body != BodyKind::Empty;
    let request = super::h2_client::Head {
        pseudo: (head.method.as_str().as_bytes(), scheme, host, &head.target),
        fields: &fields,
        end_stream: !has_body,
    };
    let mut body = Body {
        decoder: BodyDecoder::new(head.body),
        text: (web == Some(grpc_web::Mode::Text)).then(grpc_web::TextDecoder::default),
        sent: Some(Vec::new()),
        ended: None,
    };
    let bodyless = head.method == weir_http::Method::Head;
    let mut resends = 0;
    let bad = loop {
        let stream = super::h2_client::open(&per_worker.pool, up, server, &request).await?;
        let ended = exchange(
            &stream,
            (&mut from_phase, &mut to_phase, &mut buf),
            (has_body, &mut body),
            (web, bodyless, up.send_timeout),
        )
        .await;
        match ended {
            Ok(()) => return Ok(()),
            Err(Ended::Unprocessed) if resends < RESENDS && body.sent.is_some() => {
                resends += 1;
                tracing::debug!(server = %s.name, "HTTP/2 stream not processed: sent again");
            }
            Err(Ended::Unprocessed) => {
                return Err(io::Error::other(Failure::Unprocessed.to_string()))
            }
            Err(Ended::Failed(e)) => return Err(e),
            Err(Ended::Bad(e)) => break e,
        }
    };
    // The client's own error, answered as one (not a failed upstream: no passive-health mark).
    to_phase
        .write_all(b"HTTP/1.1 400 \r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        .await?;
    to_phase.shutdown().await?;
    Err(bad)
}

/// One try of the exchange on `stream`: the body out while the answer comes back (a
/// bidirectional gRPC call answers each message before the client sends the next).
async fn exchange(
    stream: &ClientStream,
    (from_phase, to_phase, buf): (
        &mut tokio::io::ReadHalf<DuplexStream>,
        &mut tokio::io::WriteHalf<DuplexStream>,
        &mut BytesMut,
    ),
    (has_body, body): (bool, &mut Body),
    (web, bodyless, pause): (Option<grpc_web::Mode>, bool, Duration),
) -> Result<(), Ended> {
    // Whether the answer's head went to the upstream phase (after it, nothing else may).
    let head_sent = std::cell::Cell::new(false);
    let upload = async {
        if has_body {
            match upload(stream, from_phase, buf, body, pause).await {
                Ok(()) => {}
                Err(e @ (Ended::Bad(_) | Ended::Unprocessed)) => return Err(e),
                // A server that answers before the whole body (an error, a call it ends
                // early) closes its side: the answer is still relayed.
                Err(Ended::Failed(e)) => {
                    tracing::debug!(error = %e, "HTTP/2 upstream stream: request body not sent whole");
                }
            }
        }
        // Until the answer is relayed the pipe is watched: the upstream phase dropping it (its
        // client gone, `timeouts.response_header`, the call's deadline) ends the exchange, and
        // the stream is reset (RST_STREAM CANCEL when the stream is dropped). Before, the
        // bridge waited for an answer nobody would read, holding one of the server's
        // concurrent streams (review of issue 55's first part).
        abandoned(from_phase).await;
        Ok(())
    };
    let download = download(stream, to_phase, (web, bodyless), &head_sent);
    tokio::select! {
        biased;
        r = download => r,
        // The request side ends first when the upstream phase dropped the pipe, or its body
        // was bad, or the server did not process the stream.
        r = upload => match r {
            Ok(()) => Ok(()),
            Err(Ended::Unprocessed) if head_sent.get() => {
                Err(Ended::Failed(io::Error::other("the stream was refused mid-answer")))
            }
            Err(Ended::Bad(e)) if head_sent.get() => Err(Ended::Failed(e)),
            Err(e) => Err(e),
        },
    }
}

/// The answer, from `stream` to the upstream phase as HTTP/1.1.
async fn download(
    stream: &ClientStream,
    to_phase: &mut tokio::io::WriteHalf<DuplexStream>,
    (web, bodyless): (Option<grpc_web::Mode>, bool),
    head_sent: &std::cell::Cell<bool>,
) -> Result<(), Ended> {
    let failed = |f: Failure| match f {
        Failure::Unprocessed if !head_sent.get() => Ended::Unprocessed,
        f => Ended::Failed(io::Error::other(f.to_string())),
    };
    let io_failed = Ended::Failed;
    let (status, fields, end_stream) = loop {
        match stream.next().await.map_err(failed)? {
            Incoming::Head(status, fields, end) => break (status, fields, end),
            // Interim answers are not relayed through the pipe.
            Incoming::Interim => {}
            _ => return Err(Ended::Failed(io::Error::other("a body before the head"))),
        }
    };
    let bodyless = bodyless || matches!(status, 204 | 304);
    let mut out = BytesMut::with_capacity(1024);
    out.put_slice(format!("HTTP/1.1 {status} \r\n").as_bytes());
    // A gRPC answer is relabelled; another (an HTML 404) goes back as it came.
    let upstream_type = field(&fields, b"content-type");
    let web = web.filter(|_| grpc_web::is_grpc_answer(upstream_type));
    if let Some(mode) = web {
        // The call's gRPC-Web family; the length (if any) is the gRPC body's.
        let ct = grpc_web::client_type(mode, upstream_type);
        out.put_slice(b"content-type: ");
        out.put_slice(&ct);
        out.put_slice(b"\r\n");
        put_fields_except(&mut out, &fields, &[b"content-type", b"content-length"]);
        if !bodyless {
            out.put_slice(b"transfer-encoding: chunked\r\n");
        }
    } else if bodyless {
        put_fields_except(&mut out, &fields, &[]);
    } else {
        // Re-framed as chunks (trailers may follow): the server's `content-length` is left
        // out, or the phase refuses a head with both (every answer with a length was a 502
        // until issue 55's bench).
        put_fields_except(&mut out, &fields, &[b"content-length"]);
        out.put_slice(b"transfer-encoding: chunked\r\n");
    }
    out.put_slice(b"connection: close\r\n\r\n");
    head_sent.set(true);
    if !bodyless {
        let mut trailers = None;
        let mut ended = end_stream;
        // What has arrived goes on in one write, and a wait for more writes what is held
        // first: a streamed answer's messages go on as they come, and a unary answer (head,
        // DATA and trailers in one read of the connection) is still one write.
        while !ended {
            let next = match stream.try_next() {
                Some(next) => next,
                None => {
                    flush(to_phase, &mut out).await.map_err(io_failed)?;
                    stream.next().await
                }
            };
            match next.map_err(failed)? {
                Incoming::Data(chunk, end) => {
                    stream.release(chunk.len());
                    if !chunk.is_empty() {
                        match web {
                            Some(grpc_web::Mode::Text) => weir_http::reply::put_chunk(
                                &mut out,
                                &grpc_web::encode_text(&chunk),
                            ),
                            _ => weir_http::reply::put_chunk(&mut out, &chunk),
                        }
                    }
                    ended = end;
                }
                Incoming::Trailers(t) => {
                    trailers = Some(t);
                    ended = true;
                }
                _ => return Err(Ended::Failed(io::Error::other("a second head"))),
            }
            if out.len() >= PIPE / 2 {
                flush(to_phase, &mut out).await.map_err(io_failed)?;
            }
        }
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
                put_fields_except(&mut out, &trailers, &[]);
            }
            (_, None) => out.put_slice(b"0\r\n"),
        }
        out.put_slice(b"\r\n");
    }
    to_phase.write_all(&out).await.map_err(io_failed)?;
    to_phase.shutdown().await.map_err(io_failed)
}

/// The value of the first field named `name`.
fn field<'f>(fields: &'f [(Vec<u8>, Vec<u8>)], name: &[u8]) -> Option<&'f [u8]> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_slice())
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

/// Carries the request body to `stream` as the server's windows allow (each wait bounded by
/// `pause`): first what an earlier try sent (a resend), then the rest from the pipe, then its
/// trailers or its end.
async fn upload(
    stream: &ClientStream,
    pipe: &mut tokio::io::ReadHalf<DuplexStream>,
    buf: &mut BytesMut,
    body: &mut Body,
    pause: Duration,
) -> Result<(), Ended> {
    let bad = |e: String| {
        stream.cancel();
        Ended::Bad(io::Error::other(e))
    };
    let sent = |e: SendError| match e {
        SendError::Failed(Failure::Unprocessed) => Ended::Unprocessed,
        e => Ended::Failed(io::Error::other(e.to_string())),
    };
    if let Some(earlier) = body.sent.as_deref().filter(|b| !b.is_empty()) {
        stream
            .send_data(earlier, false, pause)
            .await
            .map_err(sent)?;
    }
    loop {
        if let Some(trailers) = &body.ended {
            return match trailers.is_empty() {
                true => stream.send_data(&[], true, pause).await.map_err(sent),
                false => {
                    stream.send_trailers(trailers.iter().map(|(n, v)| (&n[..], &v[..])));
                    Ok(())
                }
            };
        }
        let event = body.decoder.decode(buf).map_err(|e| bad(e.to_string()))?;
        match event {
            BodyEvent::Data(mut d) => {
                // A gRPC-Web text body: the upstream is sent what it encodes.
                if let Some(t) = body.text.as_mut() {
                    d = t.push(&d).map_err(bad)?;
                }
                stream.send_data(&d, false, pause).await.map_err(sent)?;
                // Kept for a resend while small; past that the request cannot go again.
                if let Some(kept) = body.sent.as_mut() {
                    if kept.len() + d.len() <= REPLAY {
                        kept.extend_from_slice(&d);
                    } else {
                        body.sent = None;
                    }
                }
            }
            BodyEvent::NeedMore => match pipe.read_buf(buf).await {
                Ok(0) => return Err(bad("the request ended mid-body".into())),
                Ok(_) => {}
                Err(e) => return Err(bad(e.to_string())),
            },
            BodyEvent::Done(_) if body.text.as_ref().is_some_and(|t| t.finish().is_err()) => {
                return Err(bad("gRPC-Web text body: a cut base64 group".into()));
            }
            BodyEvent::Done(trailers) => {
                let fields = trailers
                    .iter()
                    .filter(|h| !forbidden(&h.name))
                    .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
                    .collect();
                body.ended = Some(fields);
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

/// Writes `fields` as HTTP/1.1 field lines, less those named in `except`.
fn put_fields_except(out: &mut BytesMut, fields: &[(Vec<u8>, Vec<u8>)], except: &[&[u8]]) {
    for (n, v) in fields {
        if !except.contains(&n.as_slice()) {
            out.put_slice(n);
            out.put_slice(b": ");
            out.put_slice(v);
            out.put_slice(b"\r\n");
        }
    }
}

/// One health check over HTTP/2: `GET path`, its status.
pub async fn check(
    up: &Upstream,
    server: usize,
    path: &str,
    within: Duration,
) -> Result<u16, String> {
    let fields: [(&[u8], &[u8]); 1] = [(b"user-agent", b"weir-health-check")];
    let answer =
        super::h2_client::check::call(up, server, (b"GET", path.as_bytes()), &fields, None, within)
            .await?;
    Ok(answer.status)
}
