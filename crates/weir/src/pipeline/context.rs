//! What the pipeline knows about one request while it runs, and what a log line or a metric
//! would report when it ends: the route, the cache state, the upstream and server, the status,
//! bytes and timings.

use crate::clock::Mono;
use std::net::IpAddr;
use std::rc::Rc;

use bytes::Bytes;
use weir_http::{Reply, RequestHead};

use crate::filters::request_id::RequestId;
use crate::runtime::WorkerRuntime;

/// What the cache did with a request (RFC 9211's facts, by name). The `Cache-Status` field is
/// rendered from the richer `cache::CacheStatus`; this is the summary the pipeline keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheState {
    /// The route has no cache.
    NotCached,
    /// Served from the store, fresh (or stale as the request allowed).
    Hit,
    /// Served stale while a background fetch refreshes it.
    StaleWhileRevalidate,
    /// Served stale because the upstream failed (`stale-if-error`).
    StaleIfError,
    /// Stale, validated with the upstream (304) and served from the store.
    Revalidated,
    /// Fetched from the upstream (stored or not).
    Miss,
    /// Streamed from another request's fetch of the same key.
    Collapsed,
    /// Not looked up: a rule, the method, or a recent uncacheable answer said so.
    Bypass(&'static str),
    /// Answered by the cache itself: a purge, or a 504 for `only-if-cached`.
    Answered,
}

impl CacheState {
    /// The name used in logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            CacheState::NotCached => "-",
            CacheState::Hit => "hit",
            CacheState::StaleWhileRevalidate => "stale-while-revalidate",
            CacheState::StaleIfError => "stale-if-error",
            CacheState::Revalidated => "revalidated",
            CacheState::Miss => "miss",
            CacheState::Collapsed => "collapsed",
            CacheState::Bypass(_) => "bypass",
            CacheState::Answered => "answered",
        }
    }
}

/// One request's state.
#[derive(Debug)]
pub(crate) struct RequestCtx {
    /// The config the request runs on, held to its end (a reload never changes it halfway).
    pub rt: Rc<WorkerRuntime>,
    /// The listener the request came in on (its index in `rt.cfg.listeners`).
    pub listener: usize,
    /// Index of the route in its listener's table (`None`: no route matched). Indices are
    /// `u32` here: the context lives in the pipeline's future, which every idle connection
    /// pays for (see `Extra`).
    pub route: Option<u32>,
    pub cache: CacheState,
    /// The upstream server answering, as `upstream/server`, once one was picked.
    pub upstream: Option<(u32, u32)>,
    /// The final status sent, once the head was queued.
    pub status: u16,
    /// Body bytes queued for the client.
    pub bytes_sent: u64,
    /// When the request started, read only when something will report it (the `trace` log
    /// now, the access log later): a clock read is ~1% of a keep-alive hello.
    pub started: Option<Mono>,
    /// When the upstream's response head arrived.
    pub upstream_head_at: Option<Mono>,
    /// Request body bytes read from the client.
    pub bytes_received: u64,
    /// The access log the request is written to (its slot in `cfg.access_logs`).
    pub log: Option<u32>,
    /// The phases the route's filters use (none until routed).
    pub phases: crate::filters::Phases,
    /// The number of the id made for this request (`filters::request_id::Generator`), 0
    /// until one is made.
    made_id: u64,
    /// What only some requests need, boxed: the context lives in the pipeline's future, whose
    /// size every idle connection pays (`server/http1/`), while these are set only for
    /// proxied requests and logs that report them.
    pub extra: Option<Box<Extra>>,
    /// With `tracing`: the request's place in a trace, made on first use. Inline (36 bytes
    /// of a busy connection's future; a parked one holds no context): boxed, in `extra` or
    /// apart, its allocation was most of tracing's cost on a request not sampled
    /// (`bench/ab_weir.sh`'s trace rows, 2026-11-29).
    pub trace: Option<crate::trace::context::TraceContext>,
}

/// The rarely used part of a [`RequestCtx`].
#[derive(Debug, Default)]
pub(crate) struct Extra {
    /// Response fields the access log reports, captured as the head is sent: each is
    /// `(index in the log's response_fields, value)`.
    pub sent_fields: Vec<(usize, Bytes)>,
    /// The id a trusted peer sent, once something asked for it ([`RequestCtx::request_id`]).
    pub request_id: Option<Bytes>,
    /// The filters' per-request state and choices.
    pub filters: crate::filters::Run,
    /// Whether weir answered for an upstream that failed (its own 502/503/504).
    pub upstream_failed: bool,
    /// The client's or the route's own limit ended the exchange (a gRPC call's `grpc-timeout`,
    /// the route's `stream_idle`): neither the upstream's failure nor its success (the circuit
    /// breaker counts neither).
    pub client_ended: bool,
    /// A gRPC call's status: the upstream's `grpc-status` (in the head of a trailers-only
    /// answer, or in the trailers), or the one weir answered a refusal with. The access log's
    /// `$grpc_status` and `weir_grpc_responses_total`.
    pub grpc_status: Option<u8>,
    /// The request is a peer fill from a cluster member: `Weir-Peer` from a member's address
    /// (`cluster::is_peer_fill`).
    pub peer_fill: bool,
    /// The upstream tries of a request whose spans are exported (`trace_spans.rs`).
    pub tries: smallvec::SmallVec<[super::trace_spans::Try; 2]>,
}

impl RequestCtx {
    pub fn new(rt: Rc<WorkerRuntime>, listener: usize) -> RequestCtx {
        RequestCtx {
            route: None,
            cache: CacheState::NotCached,
            upstream: None,
            status: 0,
            bytes_sent: 0,
            started: (rt.cfg.metrics
                || !rt.cfg.access_logs.is_empty()
                || rt.cfg.tracing.is_some()
                || tracing::enabled!(tracing::Level::TRACE))
            .then(Mono::now),
            upstream_head_at: None,
            bytes_received: 0,
            log: rt.cfg.listeners[listener].access_log.map(|s| s as u32),
            extra: None,
            trace: None,
            phases: crate::filters::Phases::NONE,
            made_id: 0,
            rt,
            listener,
        }
    }

    /// The request's id (made once, on first use): see `filters/request_id.rs`. A made id is
    /// kept as its number (`made_id`), so a proxied request allocates nothing for it.
    pub fn request_id(&mut self, head: &RequestHead, peer: IpAddr) -> RequestId {
        if let Some(id) = self.known_request_id() {
            return id;
        }
        match self.rt.cfg.request_id.received(head, peer) {
            Some(v) => {
                self.extra.get_or_insert_with(Default::default).request_id = Some(v.clone());
                RequestId::Received(v)
            }
            None => {
                self.made_id = self.rt.ids.next();
                self.rt.ids.render(self.made_id)
            }
        }
    }

    /// The request's trace context, made on first use; `None` without `tracing`.
    pub fn trace(
        &mut self,
        head: &RequestHead,
        peer: IpAddr,
    ) -> Option<crate::trace::context::TraceContext> {
        let settings = self.rt.cfg.tracing.as_ref()?;
        Some(
            *self
                .trace
                .get_or_insert_with(|| settings.context(head, peer)),
        )
    }

    /// The request's id if something already asked for it.
    pub fn known_request_id(&self) -> Option<RequestId> {
        if self.made_id != 0 {
            return Some(self.rt.ids.render(self.made_id));
        }
        self.extra
            .as_ref()
            .and_then(|e| e.request_id.clone())
            .map(RequestId::Received)
    }

    /// The filters' run, made on first use.
    pub fn run(&mut self) -> &mut crate::filters::Run {
        &mut self.extra.get_or_insert_with(Default::default).filters
    }

    /// The run the response phase uses: made now when a body filter may claim the response
    /// (it keeps state from the head to the body), else only if one was made.
    #[inline]
    pub fn response_run(&mut self) -> Option<&mut crate::filters::Run> {
        if self.phases.has(crate::filters::Phases::BODY) {
            Some(self.run())
        } else {
            self.run_if_any()
        }
    }

    /// The filters' run, if one was made.
    pub fn run_if_any(&mut self) -> Option<&mut crate::filters::Run> {
        self.extra.as_mut().map(|e| &mut e.filters)
    }

    /// Whether the request is a verified peer fill from another member.
    #[inline]
    pub fn peer_fill(&self) -> bool {
        self.extra.as_ref().is_some_and(|e| e.peer_fill)
    }

    /// Marks the request as a verified peer fill.
    pub fn mark_peer_fill(&mut self) {
        self.extra.get_or_insert_with(Default::default).peer_fill = true;
    }

    /// Who an authentication filter said the client is, if one did.
    #[inline]
    pub fn identity(&self) -> Option<std::sync::Arc<crate::vars::Identity>> {
        self.extra.as_ref().and_then(|e| e.filters.identity.clone())
    }

    /// The upstream a filter chose, if one did.
    #[inline]
    pub fn chosen_upstream(&self) -> Option<usize> {
        self.extra.as_ref().and_then(|e| e.filters.upstream)
    }

    /// Notes what the access log reports of a response head about to be sent.
    #[inline]
    pub fn sent(&mut self, reply: &Reply<'_>) {
        self.status = reply.status;
        if let Some(slot) = self.log {
            if self.rt.cfg.access_logs[slot as usize]
                .response_fields
                .is_empty()
            {
                return;
            }
            let rt = self.rt.clone();
            for (i, name) in rt.cfg.access_logs[slot as usize]
                .response_fields
                .iter()
                .enumerate()
            {
                if let Some(v) = reply.field(name) {
                    let extra = self.extra.get_or_insert_with(Default::default);
                    extra.sent_fields.push((i, Bytes::copy_from_slice(v)));
                }
            }
        }
    }
}
