//! `mirror`: a copy of matching requests to a shadow upstream (Envoy's request mirroring,
//! nginx `mirror`), its response discarded. The copy is the request exactly as the real
//! upstream receives it (head and body, same framing), taken as it is written and sent when it
//! is complete by a task of its own: the real request never waits for the shadow, and a shadow
//! that fails or hangs fails only its copy.
//!
//! Bounded: `percent` of requests are sampled; a body beyond `max_body` is not mirrored (the
//! copy stops growing and is dropped); at most `max_in_flight` copies are on their way at once
//! per filter (more are skipped). The trip itself is the proxy's (`proxy/shadow.rs`: pooled
//! connections, the answer read whole and dropped). Counted in /metrics:
//! `weir_mirror_{sent,skipped,failed}_total`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::BytesMut;

use super::compile::{Compiled, Kind};
use super::registry::{Build, Built, Cx};
use super::{Caps, Flow, Phases, Req, State};
use crate::config::{model, CompileError};

/// Where a mirror's copies go: an upstream as the proxy reaches it (`proxy/shadow.rs`; a
/// trait so that filters stay below the proxy in the module graph).
pub trait Shadow: std::fmt::Debug + Send + Sync {
    /// Delivers one copy on a task of the current worker; resolves to whether the shadow
    /// answered.
    fn deliver(&self, bytes: BytesMut) -> Pin<Box<dyn Future<Output = bool>>>;
}

#[derive(Debug)]
pub struct Mirror {
    pub name: String,
    shadow: Arc<dyn Shadow>,
    /// Out of 1,000,000.
    share: u32,
    max_body: usize,
    max_in_flight: usize,
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

/// Copies go to the upstreams that can be shadows; `/metrics` reads its counts.
impl Build<&Cx<'_>> for model::MirrorRule {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        let shadows: Vec<_> = cx.upstream_info.iter().map(|u| u.shadow.clone()).collect();
        let f = Arc::new(Mirror::compile(
            cx.name,
            self,
            cx.path,
            cx.upstreams,
            &shadows,
        )?);
        Ok(Compiled {
            filter: f.clone(),
            kind: Kind::Mirror(f),
            state_key: None,
        })
    }
}

impl Mirror {
    pub(crate) fn compile(
        name: &str,
        m: model::MirrorRule,
        path: &str,
        upstreams: &std::collections::HashMap<String, usize>,
        shadows: &[Option<Arc<dyn Shadow>>],
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
        let Some(shadow) = shadows.get(i).cloned().flatten() else {
            return Err((
                format!("{path}.upstream"),
                "mirroring to an HTTP/2 upstream is not supported".into(),
            ));
        };
        Ok(Mirror {
            name: name.to_string(),
            shadow,
            share: (m.percent * 10_000.0).round() as u32,
            max_body: m.max_body.0 as usize,
            max_in_flight: m.max_in_flight.max(1),
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
        let trip = self.shadow.deliver(bytes);
        tokio::task::spawn_local(async move {
            let ok = trip.await;
            let c = if ok { &counts.sent } else { &counts.failed };
            c.fetch_add(1, Ordering::Relaxed);
            counts.in_flight.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

impl super::Filter for Mirror {
    fn phases(&self) -> Phases {
        Phases::REQUEST | Phases::TEE
    }

    fn caps(&self) -> Caps {
        Caps::STATE | Caps::UPSTREAM_CHOICE
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
