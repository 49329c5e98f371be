//! `mirror`: a copy of matching requests to a shadow upstream (Envoy's request mirroring,
//! nginx `mirror`), its response discarded. The copy is the request exactly as the real
//! upstream receives it (head and body, same framing), taken as it is written and sent when it
//! is complete by a task of its own: the real request never waits for the shadow, and a shadow
//! that fails or hangs fails only its copy.
//!
//! Bounded: `percent` of requests are sampled; a body beyond `max_body` is not mirrored (the
//! copy stops growing and is dropped); at most `max_in_flight` copies are on their way at once
//! per filter (more are skipped). The shadow's answer is read whole and dropped, so that its
//! connection can carry the next copy: each worker keeps up to 32 idle connections per shadow
//! server (a connection per copy, opened and closed, cost 3.7× the CPU of the real request in
//! `bench/gateway.sh`). Counted in /metrics: `weir_mirror_{sent,skipped,failed}_total`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::time::Instant;

use bytes::BytesMut;
use weir_http::{BodyDecoder, BodyEvent, BodyKind};

use super::{phase, Flow, Req, State};
use crate::config::{model, CompileError};
use crate::proxy::pool::UpstreamConn;
use crate::proxy::upstream::Upstream;

/// Idle connections to shadow servers kept per worker thread and server.
const IDLE_PER_SERVER: usize = 32;
/// A shadow's answer larger than this is not read to its end: the connection is dropped.
const MAX_DRAIN: usize = 1 << 20;

thread_local! {
    /// This worker's idle connections to shadow servers, by `upstream/server`.
    static IDLE: RefCell<HashMap<String, Vec<UpstreamConn>>> = RefCell::new(HashMap::new());
}

/// One copy's trip: a pooled or new connection, the bytes, the answer read whole; the
/// connection goes back to the pool when it can carry another.
async fn deliver(up: &Upstream, server: usize, bytes: &[u8]) -> Option<()> {
    let key = format!("{}/{}", up.name, up.servers[server].name);
    let idle = IDLE.with_borrow_mut(|m| m.get_mut(&key).and_then(Vec::pop));
    let mut conn = match idle {
        Some(c) => c,
        None => crate::proxy::exchange::connect(up, server).await.ok()?,
    };
    crate::proxy::exchange::send(&mut conn.stream, bytes)
        .await
        .ok()?;
    let head_request = bytes.starts_with(b"HEAD ");
    let resp = crate::proxy::exchange::read_response_head(
        &mut conn,
        head_request,
        up,
        None,
        crate::proxy::exchange::Interim::Skip,
    )
    .await
    .ok()?;
    let mut decoder = BodyDecoder::new(resp.body);
    let mut read = 0usize;
    loop {
        match decoder.decode(&mut conn.buf).ok()? {
            BodyEvent::Data(d) => {
                read += d.len();
                if read > MAX_DRAIN {
                    return Some(());
                }
            }
            BodyEvent::Done(_) => break,
            BodyEvent::NeedMore => {
                let deadline = Instant::now() + up.idle_read_timeout;
                match conn.read_by(deadline).await {
                    Ok(Ok(0)) | Ok(Err(_)) | Err(()) => return Some(()),
                    Ok(Ok(_)) => {}
                }
            }
        }
    }
    if resp.keep_alive && resp.body != BodyKind::CloseDelimited && conn.buf.is_empty() {
        IDLE.with_borrow_mut(|m| {
            let list = m.entry(key).or_default();
            if list.len() < IDLE_PER_SERVER {
                list.push(conn);
            }
        });
    }
    Some(())
}

#[derive(Debug)]
pub struct Mirror {
    pub name: String,
    upstream: Arc<Upstream>,
    /// Out of 1,000,000.
    share: u32,
    max_body: usize,
    max_in_flight: usize,
    next: AtomicUsize,
    pub counts: Arc<Counts>,
}

/// What /metrics reports.
#[derive(Debug, Default)]
pub struct Counts {
    pub sent: AtomicU64,
    pub skipped: AtomicU64,
    pub failed: AtomicU64,
    in_flight: AtomicUsize,
}

/// The copy being taken of one request.
#[derive(Debug)]
struct Copy {
    bytes: BytesMut,
    /// The request head's length, so that the body's size can be checked.
    head_len: usize,
    too_big: bool,
}

impl Mirror {
    pub(crate) fn compile(
        name: &str,
        m: model::MirrorRule,
        path: &str,
        upstreams: &std::collections::HashMap<String, usize>,
        compiled: &[Arc<Upstream>],
    ) -> Result<Mirror, CompileError> {
        let i = *upstreams.get(&m.upstream).ok_or_else(|| {
            (
                format!("{path}.upstream"),
                format!("no upstream named {:?}", m.upstream),
            )
        })?;
        if !(0.0..=100.0).contains(&m.percent) {
            return Err((format!("{path}.percent"), "must be 0-100".into()));
        }
        if compiled[i].h2 {
            return Err((
                format!("{path}.upstream"),
                "mirroring to an HTTP/2 upstream is not supported".into(),
            ));
        }
        Ok(Mirror {
            name: name.to_string(),
            upstream: compiled[i].clone(),
            share: (m.percent * 10_000.0).round() as u32,
            max_body: m.max_body.0 as usize,
            max_in_flight: m.max_in_flight.max(1),
            next: AtomicUsize::new(0),
            counts: Arc::default(),
        })
    }

    /// Sends a finished copy on its way, on a task of its own.
    fn launch(&self, bytes: BytesMut) {
        let counts = self.counts.clone();
        if counts.in_flight.fetch_add(1, Ordering::Relaxed) >= self.max_in_flight {
            counts.in_flight.fetch_sub(1, Ordering::Relaxed);
            counts.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let up = self.upstream.clone();
        let now = crate::proxy::upstream::now_ms();
        let n = up.servers.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let server = (0..n)
            .map(|k| (start + k) % n)
            .find(|s| up.is_up(*s, now))
            .unwrap_or(start % n);
        tokio::task::spawn_local(async move {
            let ok = deliver(&up, server, &bytes).await.is_some();
            let c = if ok { &counts.sent } else { &counts.failed };
            c.fetch_add(1, Ordering::Relaxed);
            counts.in_flight.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

impl super::Filter for Mirror {
    fn phases(&self) -> u16 {
        phase::REQUEST | phase::STATE | phase::TEE | phase::UPSTREAM_CHOICE
    }

    fn request(&self, _: &Req<'_>, state: &mut State, _: &mut Option<usize>) -> Flow {
        if self.share >= 1_000_000 || fastrand::u32(0..1_000_000) < self.share {
            *state = Some(Box::new(Copy {
                bytes: BytesMut::new(),
                head_len: usize::MAX,
                too_big: false,
            }));
        }
        Flow::Continue
    }

    fn tee(&self, state: &mut State, bytes: &[u8], end: bool) {
        let Some(copy) = state.as_mut().and_then(|s| s.downcast_mut::<Copy>()) else {
            return;
        };
        if !copy.too_big {
            copy.bytes.extend_from_slice(bytes);
            if copy.head_len == usize::MAX {
                // The first write holds the whole head (and maybe some body).
                copy.head_len = memchr::memmem::find(&copy.bytes, b"\r\n\r\n").map_or(0, |i| i + 4);
            }
            if copy.bytes.len() - copy.head_len.min(copy.bytes.len()) > self.max_body {
                copy.too_big = true;
                copy.bytes = BytesMut::new();
            }
        }
        if end {
            if let Some(s) = state.take() {
                if let Ok(copy) = s.downcast::<Copy>() {
                    if copy.too_big {
                        self.counts.skipped.fetch_add(1, Ordering::Relaxed);
                    } else {
                        self.launch(copy.bytes);
                    }
                }
            }
        }
    }
}
