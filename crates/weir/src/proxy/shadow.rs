//! The shadow side of request mirroring (`filters/mirror.rs`): delivers a copy to an
//! upstream's server (round robin over those up) and reads the answer whole, so that the
//! connection can carry the next copy. Each worker keeps up to 32 idle connections per shadow
//! server: a connection per copy, opened and closed, cost 3.7× the CPU of the real request in
//! `bench/gateway.sh`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use tokio::time::Instant;
use weir_http::{BodyDecoder, BodyEvent, BodyKind};

use super::pool::UpstreamConn;
use super::upstream::Upstream;
use crate::filters::mirror::Shadow;

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
    if up.fastcgi.is_some() {
        // Copies go as HTTP/1.1 on a connection of their own, which a FastCGI application
        // would read as garbage: none are sent (docs/limitations.md).
        return None;
    }
    let key = format!("{}/{}", up.name, up.servers[server].name);
    let idle = IDLE.with_borrow_mut(|m| m.get_mut(&key).and_then(Vec::pop));
    let mut conn = match idle {
        Some(c) => c,
        None => super::exchange::connect(up, server).await.ok()?,
    };
    // Bounded as a request body's writes are (`timeouts.send`): a shadow that stops reading
    // held its slot under `max_in_flight` for good.
    super::exchange::send_paced(&mut conn.stream, bytes, up.send_timeout)
        .await
        .ok()?;
    let head_request = bytes.starts_with(b"HEAD ");
    let resp = super::exchange::read_response_head(
        &mut conn,
        head_request,
        super::exchange::response_deadline(up, None),
        super::exchange::Interim::Skip,
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

/// An upstream as a mirror's shadow.
#[derive(Debug)]
pub struct ShadowUpstream {
    up: Arc<Upstream>,
    next: AtomicUsize,
}

impl ShadowUpstream {
    /// `None` for an HTTP/2 upstream (copies are HTTP/1.1 bytes).
    pub fn of(up: &Arc<Upstream>) -> Option<Arc<dyn Shadow>> {
        (!up.h2).then(|| {
            Arc::new(ShadowUpstream {
                up: up.clone(),
                next: AtomicUsize::new(0),
            }) as Arc<dyn Shadow>
        })
    }
}

impl Shadow for ShadowUpstream {
    fn deliver(&self, bytes: BytesMut) -> Pin<Box<dyn Future<Output = bool>>> {
        let up = self.up.clone();
        let now = super::upstream::now_ms();
        let n = up.servers.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let server = (0..n)
            .map(|k| (start + k) % n)
            .find(|s| up.is_up(*s, now))
            .unwrap_or(start % n);
        Box::pin(async move { deliver(&up, server, &bytes).await.is_some() })
    }
}
