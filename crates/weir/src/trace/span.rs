//! What a sampled request hands the exporter: weir's server span for the request and a client
//! span for each upstream attempt (retries visible), as plain values made on the worker, turned
//! into OTLP on the exporter's thread (`otlp.rs`).
//!
//! Made only for sampled requests with `tracing.otlp` set, and cheap to make: names (route,
//! upstream, server) stay indices into the exporter's table of them ([`Names`], one reference
//! count; not the config itself, which a queue of records would keep alive), and
//! the client's values (path, query, host, user agent, `tracestate`) are copied, each cut to
//! [`MAX_VALUE`] bytes, into one buffer. The first version owned a `String` per value and
//! built `prost` messages: 4.05× a proxied request's instructions at 100% sampling
//! (`bench/ab_weir.sh`, 2026-11-29), most of it `malloc`, `free` and `prost`'s nested length
//! computations.

use std::net::SocketAddr;
use std::sync::Arc;

use super::context::TraceContext;

/// The names a config gives its routes, upstreams and servers, for spans.
#[derive(Debug, Default)]
pub struct Names {
    /// Per listener, its routes' names.
    routes: Vec<Vec<String>>,
    /// Per upstream, its name and its servers'.
    upstreams: Vec<(String, Vec<String>)>,
}

impl Names {
    /// Per listener its routes' names; per upstream its name and its servers' (made from the
    /// config by `pipeline/trace_spans.rs`: `trace/` does not reach into the runtime).
    pub fn new(routes: Vec<Vec<String>>, upstreams: Vec<(String, Vec<String>)>) -> Names {
        Names { routes, upstreams }
    }
}

/// The most bytes of a client-chosen value kept in a span: a full queue's memory is bounded
/// (`queue` × ~3 KiB), whatever the requests carried.
pub const MAX_VALUE: usize = 512;

/// The client's values a record keeps, in [`Record::text`]'s order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Text {
    Path,
    Query,
    Host,
    UserAgent,
    TraceState,
}

/// One request's spans: its fields, and the client's values.
#[derive(Debug)]
pub struct Record {
    pub fields: Fields,
    /// The client's values, one after another.
    text: Vec<u8>,
    /// Each [`Text`]'s end in `text`, when present.
    ends: [Option<u16>; 5],
}

/// A record's fields are read through it (`r.trace`, `r.status`).
impl std::ops::Deref for Record {
    type Target = Fields;
    fn deref(&self) -> &Fields {
        &self.fields
    }
}

impl std::ops::DerefMut for Record {
    fn deref_mut(&mut self) -> &mut Fields {
        &mut self.fields
    }
}

/// One try of an upstream server (`pipeline/forward.rs`).
#[derive(Debug, Clone, Copy)]
pub struct Attempt {
    pub span_id: [u8; 8],
    /// Unix nanoseconds; `end` 0 until it is known (the last try ends with the request).
    pub start: u64,
    pub end: u64,
    pub upstream: u32,
    pub server: u32,
    /// The server's address then.
    pub addr: Option<SocketAddr>,
    /// The answer's status (0: none came).
    pub status: u16,
    pub error: Option<&'static str>,
}

/// A record's fields, less its client values (set with [`Record::set_text`]).
#[derive(Debug)]
pub struct Fields {
    /// The names the indices below stand for.
    pub names: Arc<Names>,
    pub trace: TraceContext,
    /// Unix nanoseconds.
    pub start: u64,
    pub end: u64,
    pub method: &'static str,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// `1.0`, `1.1`, `2` or `3`.
    pub protocol: &'static str,
    pub client: SocketAddr,
    /// The status sent (0: none, the connection ended first).
    pub status: u16,
    pub listener: u32,
    /// The route's index in its listener's table.
    pub route: Option<u32>,
    /// `HIT`, `MISS`, … (`-` when the route does not cache).
    pub cache: &'static str,
    /// The upstream and server that answered.
    pub upstream: Option<(u32, u32)>,
    pub grpc_status: Option<u8>,
    /// Why the request failed, when it did.
    pub error: Option<&'static str>,
    pub attempts: smallvec::SmallVec<[Attempt; 2]>,
}

impl Record {
    /// A record with room for `text_len` bytes of client values.
    pub fn new(fields: Fields, text_len: usize) -> Record {
        Record {
            fields,
            text: Vec::with_capacity(text_len.min(5 * MAX_VALUE)),
            ends: [None; 5],
        }
    }

    /// Keeps `value` (cut to [`MAX_VALUE`]) as `which`; each at most once, in [`Text`]'s order.
    pub fn set_text(&mut self, which: Text, value: &[u8]) {
        self.text
            .extend_from_slice(&value[..value.len().min(MAX_VALUE)]);
        self.ends[which as usize] = Some(self.text.len() as u16);
    }

    /// A client value, as text (bytes that are not UTF-8 replaced).
    pub fn text(&self, which: Text) -> Option<std::borrow::Cow<'_, str>> {
        let end = usize::from(self.ends[which as usize]?);
        let start = self.ends[..which as usize]
            .iter()
            .rev()
            .find_map(|e| *e)
            .map_or(0, usize::from);
        let bytes = &self.text[start..end];
        // Checked once; the replacing walk only for bytes that are not UTF-8.
        Some(match std::str::from_utf8(bytes) {
            Ok(s) => std::borrow::Cow::Borrowed(s),
            Err(_) => String::from_utf8_lossy(bytes),
        })
    }

    /// How many spans the record carries (the server's and one per attempt).
    pub fn spans(&self) -> u64 {
        1 + self.attempts.len() as u64
    }

    /// The route's name.
    pub fn route_name(&self) -> Option<&str> {
        let routes = self.names.routes.get(self.listener as usize)?;
        routes.get(self.route? as usize).map(String::as_str)
    }

    /// An upstream's and its server's names.
    pub fn server(&self, (upstream, server): (u32, u32)) -> (&str, &str) {
        match self.names.upstreams.get(upstream as usize) {
            Some((up, servers)) => (up, servers.get(server as usize).map_or("-", String::as_str)),
            None => ("-", "-"),
        }
    }
}
