//! Filters: the policy steps of a route, compiled at config load and run in config order: the
//! listener's `filters`, then the route's, then the proxy's own (forwarding fields, header edits,
//! `Via`). A filter is named once at the top level (`filters: {limit: {rate_limit: ...}}`) and
//! referenced from many routes, which then share it and its state (one rate limiter, one
//! breaker), or written inline in a route's list.
//!
//! ```text
//! request ─→ Filter::request ─→ [cache lookup] ─→ upstream request: drops_upstream / upstream_fields
//!              │ Respond: answer now                   │
//!              │ Wait(future): resume after it         ▼
//!              ▼                            upstream response ─→ Filter::before_store (may refuse to store)
//!          response (every answer of the route, hits included) ─→ Filter::response ─→ write head
//!          body pieces of a claimed response ─→ Filter::body ─→ write ─→ Filter::log
//! ```
//!
//! What we took, and from where:
//! * Pingora's phases (`request_filter`, `upstream_request_filter`, `response_filter`,
//!   `logging`) and its per-request module context: each filter gets one [`State`] slot per
//!   request, `None` until the filter puts something there. A chain whose filters keep no
//!   state allocates nothing (the slots live in the context's boxed `Extra`, made only when a
//!   stateful filter runs).
//! * Envoy's `StopIteration` and `continueDecoding()`: a request filter that must wait on IO
//!   returns [`Flow::Wait`] with a future; the pipeline awaits it and resumes the chain after
//!   that filter. Routes whose filters never wait run no async machinery: the request phase
//!   is a plain loop of calls, and the pipeline boxes a future only when one is returned.
//! * Not tower's `Layer`: a stack of nested services fixes the order in types and makes every
//!   filter async; ours is a list read from config and mostly synchronous.
//!
//! [`Chain`] keeps a bit per phase so that a route whose filters do not use one skips it with
//! one test: [`Filter::phases`] is how a filter says which hooks it implements, and
//! [`Filter::caps`] what else it does or needs (a state slot, subrequests, an upstream choice);
//! two bit sets ([`phases`]).
//!
//! Shipped filters: [`header_edit`], [`forwarded`], [`via`] (proxy settings), and the
//! traffic-control filters [`rate_limit`], [`concurrency`], [`ip_filter`], [`breaker`] and
//! [`split`] (traffic split and canary), [`sticky`], [`mirror`], [`no_store`] (before-store) and
//! [`replace`] (response body), [`basic_auth`], [`api_key`], [`jwt`], [`forward_auth`], [`cors`],
//! [`compress`] and [`shape`]: compiled from config by [`compile`], each by its own code found
//! through the [`registry`] (which says what adding a filter touches).

pub mod aliases;
pub mod api_key;
pub mod basic_auth;
pub mod breaker;
pub mod codec;
pub mod compile;
pub mod compress;
pub mod concurrency;
pub mod cors;
pub mod forward_auth;
pub mod forwarded;
pub mod header_edit;
pub mod htpasswd;
pub mod ip_filter;
pub mod jwt;
pub mod jwt_keys;
pub use crate::shield::keyed;
pub mod mirror;
pub mod no_store;
pub mod phases;
pub mod rate_limit;
pub mod rate_limit_redis;
pub mod registry;
pub mod remember;
pub mod replace;
pub mod request_id;
pub mod shape;
pub mod split;
pub mod state;
pub mod sticky;
pub mod via;

use std::any::Any;
use std::fmt::Debug;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use weir_http::{Reply, RequestHead, ResponseHead};

pub use crate::vars::Identity;
pub use phases::{Caps, Phases};

/// A filter's per-request state: `None` until it stores something.
pub type State = Option<Box<dyn Any>>;

/// An answer made by a filter (`text/plain` unless its fields say otherwise).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub fields: Vec<(Bytes, Bytes)>,
    pub body: Bytes,
}

/// What a request filter decided.
pub enum Flow {
    /// Go on with the next filter, then the route's action.
    Continue,
    /// Answer now.
    Respond(Answer),
    /// Wait for this future (IO: a key server, a store), then decide. The chain resumes with
    /// what it returns, as if the filter had returned that.
    Wait(Pin<Box<dyn Future<Output = Flow>>>),
    /// Go on: the client is this consumer (an authentication filter accepted it). Later
    /// filters, the upstream request's templates and the log see it as `$consumer` and
    /// `$jwt_claim_NAME`.
    Authenticated(Arc<Identity>),
}

impl Debug for dyn Fetcher + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fetcher")
    }
}

impl Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Flow::Continue => f.write_str("Continue"),
            Flow::Respond(a) => write!(f, "Respond({})", a.status),
            Flow::Wait(_) => f.write_str("Wait"),
            Flow::Authenticated(id) => write!(f, "Authenticated({})", id.consumer),
        }
    }
}

/// What filters know about the client.
#[derive(Debug, Clone, Copy)]
pub struct Client {
    pub ip: IpAddr,
    /// `http` or `https`: the listener's scheme.
    pub scheme: &'static str,
    /// The protocol version the client spoke, as `Via` names it: `1.0`, `1.1` or `2`.
    pub version: &'static str,
    /// The request is a peer fill from another cluster member: its client was counted by
    /// that member's limits already (per-client limits let it through).
    pub member: bool,
}

/// The request, as the request phase sees it.
#[derive(Debug, Clone, Copy)]
pub struct Req<'a> {
    pub client: &'a Client,
    pub head: &'a RequestHead,
    /// The route's name.
    pub route: &'a str,
    /// The route's `path_regex`, for `$1`..`$9`.
    pub regex: Option<&'a regex::bytes::Regex>,
    /// Who the client is, once an authentication filter before this one said so.
    pub identity: Option<&'a Identity>,
    /// Requests of the filter's own through an upstream (given when a filter of the chain
    /// has the [`Caps::FETCH`] bit).
    pub fetch: Option<&'a dyn Fetcher>,
}

/// A subrequest's answer: the response head and its body (cut at the size asked).
pub type Fetched = Result<(ResponseHead, Bytes), String>;

/// Requests a filter sends through an upstream of the config (a JWKS, an auth service), with
/// the upstream's servers, balancing, TLS, timeouts and retries: the pipeline implements it.
pub trait Fetcher {
    /// Sends `head` (no body) to `upstream`; the future owns what it needs.
    fn fetch(
        &self,
        upstream: usize,
        head: RequestHead,
        max_body: usize,
    ) -> Pin<Box<dyn Future<Output = Fetched>>>;
}

/// The upstream request, as the upstream phase sees it.
#[derive(Debug, Clone, Copy)]
pub struct Upward<'a> {
    pub client: &'a Client,
    pub head: &'a RequestHead,
    pub identity: Option<&'a Identity>,
}

impl<'a> Req<'a> {
    /// The variables' view of the request.
    pub fn env(&self) -> crate::vars::Env<'a> {
        crate::vars::Env {
            head: self.head,
            scheme: self.client.scheme,
            client: self.client.ip,
            route: self.route,
            regex: self.regex,
            identity: self.identity,
        }
    }
}

/// What the log phase is told about a finished request.
#[derive(Debug, Clone, Copy)]
pub struct Done {
    /// The status sent (0: none was, the connection failed first).
    pub status: u16,
    /// Whether weir answered for an upstream that failed (502/503/504 of its own).
    pub upstream_failed: bool,
    /// The client's own limit ended it (a gRPC call's deadline, its 504 weir's): not an
    /// outcome of the upstream's.
    pub client_ended: bool,
    pub bytes_sent: u64,
    /// From the start of the request to now, when the clock was read.
    pub elapsed: Option<Duration>,
    /// Until the upstream's response head, when there was one.
    pub upstream_time: Option<Duration>,
}

/// One filter. Methods default to doing nothing; [`Filter::phases`] says which are implemented.
pub trait Filter: Debug + Send + Sync {
    /// The hooks this filter implements.
    fn phases(&self) -> Phases;

    /// What it does or needs beyond its hooks (none by default).
    fn caps(&self) -> Caps {
        Caps::NONE
    }

    /// Before the cache lookup and the action: may answer or wait. `upstream` is the choice of
    /// upstream so far (an index into the config's upstreams), for filters that choose one.
    fn request(&self, _req: &Req<'_>, _state: &mut State, _upstream: &mut Option<usize>) -> Flow {
        Flow::Continue
    }

    /// Whether a field of the client's request is left out of the upstream request.
    fn drops_upstream(&self, _client: &Client, _name: &[u8]) -> bool {
        false
    }

    /// Fields added to the upstream request, as `Name: value\r\n` lines.
    fn upstream_fields(&self, _up: &Upward<'_>, _out: &mut BytesMut) {}

    /// Whether a query parameter of the client's request is left out of the upstream
    /// request's target (an API key given as a parameter).
    fn drops_arg(&self, _name: &[u8]) -> bool {
        false
    }

    /// An upstream response the cache would store: `false` keeps it out of the store (it is
    /// still relayed).
    fn before_store(&self, _resp: &ResponseHead) -> bool {
        true
    }

    /// Shapes a response (hits and weir's own answers included) before it is encoded: fields
    /// the filter owns go on `reply`, per-request lines into `lines`.
    fn response<'a>(&'a self, _reply: &mut Reply<'a>, _state: &mut State, _lines: &mut BytesMut) {}

    /// After the response: the final status, bytes and timings. Changes nothing.
    fn log(&self, _done: &Done, _state: &mut State) {}

    /// Transforms a piece of the response body into `out` (`end`: the last piece, maybe
    /// empty). Called only when the filter claimed the response in its response phase.
    fn body(&self, _state: &mut State, _data: &[u8], _end: bool, _out: &mut BytesMut) {}

    /// The upstream request's bytes as they are written (head first), `end` on the last
    /// write: a mirror's copy.
    fn tee(&self, _state: &mut State, _bytes: &[u8], _end: bool) {}

    /// The server of upstream `upstream` this request should go to, if it is up.
    fn prefer(&self, _state: &State, _upstream: usize) -> Option<usize> {
        None
    }

    /// In the response phase, when a server answered: `server` of `upstream`. Field lines go
    /// into `lines`.
    fn served(&self, _state: &mut State, _upstream: usize, _server: usize, _lines: &mut BytesMut) {}

    /// How this filter compresses, for the cache's variants and precompressed static files.
    fn compression(&self) -> Option<&Arc<compress::Settings>> {
        None
    }

    /// The most body bytes a request may send (the `shape` filter), held while it is read.
    fn body_cap(&self) -> Option<u64> {
        None
    }
}

/// What the request phase of a chain decided.
pub enum Step {
    Continue,
    Respond(Answer),
    /// Filter `at` waits: await the future, then [`Chain::resume`] with `at`.
    Wait(usize, Pin<Box<dyn Future<Output = Flow>>>),
}

impl Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Continue => f.write_str("Continue"),
            Step::Respond(a) => write!(f, "Respond({})", a.status),
            Step::Wait(at, _) => write!(f, "Wait({at})"),
        }
    }
}

/// The per-request part of a chain's run: each filter's state slot and the upstream chosen.
#[derive(Debug, Default)]
pub struct Run {
    /// Inline for up to four stateful filters: a second allocation per request saved.
    states: smallvec::SmallVec<[State; 4]>,
    pub upstream: Option<usize>,
    /// Who the client is, once an authentication filter said so.
    pub identity: Option<Arc<Identity>>,
    /// The upstream and server that answered, once one did (for [`Filter::served`]).
    pub served: Option<(usize, usize)>,
    /// Whether a body filter claimed the response: its body goes through [`Chain::body`].
    pub transforming: bool,
}

/// A filter of a chain with its phases and capabilities (read once: a virtual call per filter
/// and phase saved).
#[derive(Debug, Clone)]
struct Entry {
    phases: Phases,
    caps: Caps,
    filter: Arc<dyn Filter>,
}

/// A route's filters, in config order.
#[derive(Debug, Default, Clone)]
pub struct Chain {
    filters: Vec<Entry>,
    /// The union of the filters' phases.
    phases: Phases,
    /// The union of their capabilities.
    caps: Caps,
}

impl Chain {
    pub fn new(filters: Vec<Arc<dyn Filter>>) -> Chain {
        let filters: Vec<Entry> = filters
            .into_iter()
            .map(|filter| Entry {
                phases: filter.phases(),
                caps: filter.caps(),
                filter,
            })
            .collect();
        let phases = filters.iter().fold(Phases::NONE, |p, e| p | e.phases);
        let caps = filters.iter().fold(Caps::NONE, |c, e| c | e.caps);
        Chain {
            filters,
            phases,
            caps,
        }
    }

    /// The union of the filters' phases.
    #[inline(always)]
    pub fn phases(&self) -> Phases {
        self.phases
    }

    /// Whether any filter implements one of `phases`.
    #[inline(always)]
    pub fn has(&self, phases: Phases) -> bool {
        self.phases.has(phases)
    }

    /// Whether any filter has one of `caps`.
    #[inline(always)]
    pub fn can(&self, caps: Caps) -> bool {
        self.caps.has(caps)
    }

    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }

    fn slot<'r>(&self, states: &'r mut smallvec::SmallVec<[State; 4]>, i: usize) -> &'r mut State {
        if states.len() < self.filters.len() {
            states.resize_with(self.filters.len(), || None);
        }
        &mut states[i]
    }

    /// Runs the request phase from filter `from` on.
    pub fn request(&self, req: &Req<'_>, run: &mut Run, from: usize) -> Step {
        // Who the client is, as the filters after an authentication filter see it: the
        // request view is made once per call, and again only after a filter authenticates.
        match run.identity.clone() {
            None => self.request_as(req, run, from),
            Some(id) => {
                let seen = Req {
                    identity: Some(&id),
                    ..*req
                };
                self.request_as(&seen, run, from)
            }
        }
    }

    fn request_as(&self, req: &Req<'_>, run: &mut Run, from: usize) -> Step {
        let mut none: State = None;
        for (i, e) in self.filters.iter().enumerate().skip(from) {
            if !e.phases.has(Phases::REQUEST) {
                continue;
            }
            let state = if e.caps.has(Caps::STATE) {
                self.slot(&mut run.states, i)
            } else {
                &mut none
            };
            match e.filter.request(req, state, &mut run.upstream) {
                Flow::Continue => {}
                Flow::Respond(a) => return Step::Respond(a),
                Flow::Wait(fut) => return Step::Wait(i, fut),
                Flow::Authenticated(id) => {
                    run.identity = Some(id);
                    return self.request(req, run, i + 1);
                }
            }
        }
        Step::Continue
    }

    /// Goes on after filter `at`'s wait ended with `flow`.
    pub fn resume(&self, req: &Req<'_>, run: &mut Run, at: usize, flow: Flow) -> Step {
        match flow {
            Flow::Continue => self.request(req, run, at + 1),
            Flow::Authenticated(id) => {
                run.identity = Some(id);
                self.request(req, run, at + 1)
            }
            Flow::Respond(a) => Step::Respond(a),
            Flow::Wait(fut) => Step::Wait(at, fut),
        }
    }

    /// Runs the whole request phase, awaiting any filter that waits.
    pub async fn request_async(&self, req: &Req<'_>, run: &mut Run, first: Step) -> Option<Answer> {
        let mut step = first;
        loop {
            match step {
                Step::Continue => return None,
                Step::Respond(a) => return Some(a),
                Step::Wait(at, fut) => {
                    let flow = fut.await;
                    step = self.resume(req, run, at, flow);
                }
            }
        }
    }

    pub fn drops_upstream(&self, client: &Client, name: &[u8]) -> bool {
        self.has(Phases::DROPS_UPSTREAM)
            && self.filters.iter().any(|e| {
                e.phases.has(Phases::DROPS_UPSTREAM) && e.filter.drops_upstream(client, name)
            })
    }

    pub fn upstream_fields(&self, up: &Upward<'_>, out: &mut BytesMut) {
        if !self.has(Phases::UPSTREAM) {
            return;
        }
        for e in &self.filters {
            if e.phases.has(Phases::UPSTREAM) {
                e.filter.upstream_fields(up, out);
            }
        }
    }

    /// Whether a query parameter is left out of the upstream target.
    pub fn drops_arg(&self, name: &[u8]) -> bool {
        self.has(Phases::DROPS_ARG)
            && self
                .filters
                .iter()
                .any(|e| e.phases.has(Phases::DROPS_ARG) && e.filter.drops_arg(name))
    }

    /// Whether every filter lets the cache store `resp`.
    pub fn before_store(&self, resp: &ResponseHead) -> bool {
        !self.has(Phases::BEFORE_STORE)
            || self
                .filters
                .iter()
                .all(|e| !e.phases.has(Phases::BEFORE_STORE) || e.filter.before_store(resp))
    }

    /// The response phase: each filter's fields on `reply`, then the per-request `lines` they
    /// wrote (declare `lines` before the reply that borrows it; it allocates only if written).
    pub fn response<'a>(
        &'a self,
        reply: &mut Reply<'a>,
        run: Option<&mut Run>,
        lines: &'a mut BytesMut,
    ) {
        if !self.has(Phases::RESPONSE) {
            return;
        }
        let mut none: State = None;
        let mut run = run;
        let served = run.as_ref().and_then(|r| r.served);
        for (i, e) in self.filters.iter().enumerate() {
            if !e.phases.has(Phases::RESPONSE) {
                continue;
            }
            let state = match (&mut run, e.caps.has(Caps::STATE)) {
                (Some(run), true) => self.slot(&mut run.states, i),
                _ => &mut none,
            };
            e.filter.response(reply, state, lines);
            let claimed = e.phases.has(Phases::BODY) && state.is_some();
            if e.caps.has(Caps::SERVER_CHOICE) {
                if let Some((u, s)) = served {
                    e.filter.served(state, u, s, lines);
                }
            }
            if claimed {
                if let Some(run) = run.as_deref_mut() {
                    run.transforming = true;
                }
            }
        }
        let lines: &'a BytesMut = lines;
        reply.add_lines(lines);
    }

    /// A piece of a claimed response's body through the body filters that claimed it, in order.
    pub fn body(&self, run: &mut Run, data: &[u8], end: bool) -> Bytes {
        let mut piece = BytesMut::from(data);
        for (i, e) in self.filters.iter().enumerate() {
            if !e.phases.has(Phases::BODY) {
                continue;
            }
            if let Some(state) = run.states.get_mut(i).filter(|s| s.is_some()) {
                let mut out = BytesMut::with_capacity(piece.len() + 64);
                e.filter.body(state, &piece, end, &mut out);
                piece = out;
            }
        }
        piece.freeze()
    }

    /// Hands the upstream request's bytes to the filters that copy them.
    pub fn tee(&self, run: &mut Run, bytes: &[u8], end: bool) {
        for (i, e) in self.filters.iter().enumerate() {
            if e.phases.has(Phases::TEE) {
                if let Some(state) = run.states.get_mut(i) {
                    e.filter.tee(state, bytes, end);
                }
            }
        }
    }

    /// The route's compression settings, if a filter compresses.
    pub fn compression(&self) -> Option<&Arc<compress::Settings>> {
        if !self.can(Caps::ENCODES) {
            return None;
        }
        self.filters.iter().find_map(|e| e.filter.compression())
    }

    /// The smallest body cap of the chain's filters (asked only for bodies of unknown length:
    /// a declared length is checked by the filter itself).
    pub fn body_cap(&self) -> Option<u64> {
        self.filters
            .iter()
            .filter_map(|e| e.filter.body_cap())
            .min()
    }

    /// The server a filter prefers for this request, of upstream `upstream`.
    pub fn prefer(&self, run: Option<&Run>, upstream: usize) -> Option<usize> {
        if !self.can(Caps::SERVER_CHOICE) {
            return None;
        }
        let run = run?;
        self.filters.iter().enumerate().find_map(|(i, e)| {
            if !e.caps.has(Caps::SERVER_CHOICE) {
                return None;
            }
            e.filter.prefer(run.states.get(i)?, upstream)
        })
    }

    /// The log phase.
    pub fn log(&self, done: &Done, run: Option<&mut Run>) {
        if !self.has(Phases::LOG) {
            return;
        }
        let mut none: State = None;
        let mut run = run;
        for (i, e) in self.filters.iter().enumerate() {
            if !e.phases.has(Phases::LOG) {
                continue;
            }
            let state = match (&mut run, e.caps.has(Caps::STATE)) {
                (Some(run), true) => self.slot(&mut run.states, i),
                _ => &mut none,
            };
            e.filter.log(done, state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A filter that answers requests carrying a field.
    #[derive(Debug)]
    struct Deny;

    impl Filter for Deny {
        fn phases(&self) -> Phases {
            Phases::REQUEST
        }
        fn request(&self, req: &Req<'_>, _: &mut State, _: &mut Option<usize>) -> Flow {
            match req.head.header("x-deny") {
                Some(_) => Flow::Respond(Answer {
                    status: 403,
                    fields: Vec::new(),
                    body: Bytes::from_static(b"denied\n"),
                }),
                None => Flow::Continue,
            }
        }
    }

    /// A filter that waits once, then counts in its state.
    #[derive(Debug)]
    struct WaitThenCount;

    impl Filter for WaitThenCount {
        fn phases(&self) -> Phases {
            Phases::REQUEST
        }
        fn caps(&self) -> Caps {
            Caps::STATE
        }
        fn request(&self, _: &Req<'_>, state: &mut State, _: &mut Option<usize>) -> Flow {
            *state = Some(Box::new(7u32));
            Flow::Wait(Box::pin(async { Flow::Continue }))
        }
    }

    fn head(raw: &str) -> RequestHead {
        let mut b = BytesMut::from(raw.as_bytes());
        weir_http::parse_request(&mut b, &Default::default())
            .unwrap()
            .unwrap()
    }

    #[test]
    fn the_first_filter_that_answers_ends_the_chain_and_waits_resume_after_the_waiter() {
        let chain = Chain::new(vec![Arc::new(WaitThenCount), Arc::new(Deny)]);
        assert!(chain.can(Caps::STATE) && !chain.has(Phases::LOG));
        let client = Client {
            ip: "127.0.0.1".parse().unwrap(),
            scheme: "http",
            version: "1.1",
            member: false,
        };
        let h = head("GET / HTTP/1.1\r\nHost: a\r\nX-Deny: 1\r\n\r\n");
        let req = Req {
            client: &client,
            head: &h,
            route: "r",
            regex: None,
            identity: None,
            fetch: None,
        };
        let mut run = Run::default();
        let step = chain.request(&req, &mut run, 0);
        assert!(matches!(step, Step::Wait(0, _)));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let answer = rt.block_on(chain.request_async(&req, &mut run, step));
        assert_eq!(answer.map(|a| a.status), Some(403));
        assert_eq!(
            run.states[0].as_ref().and_then(|s| s.downcast_ref::<u32>()),
            Some(&7)
        );
        assert!(!chain.drops_upstream(&client, b"x-deny"));
    }
}
