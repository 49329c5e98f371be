//! Filters: per-route steps of the pipeline, compiled at config load. A filter implements the
//! phases it cares about; the others default to doing nothing.
//!
//! ```text
//! request ──→ Filter::request (may answer: Flow::Respond) ──→ cache lookup ──→ upstream
//!                                upstream request: Filter::drops_upstream / upstream_fields
//! response (after lookup: hits included, and relayed responses) ──→ Filter::response
//! ```
//!
//! Response filters run after the cache lookup, on every response a route sends, hits included.
//! They never shape what is stored: the store keeps the upstream's response (minus hop-by-hop
//! fields), so a changed edit applies to stored objects at once.
//!
//! Shipped filters: [`header_edit`] (remove/set/add fields each way), [`forwarded`]
//! (X-Forwarded-* and RFC 7239 `Forwarded`, with trusted proxies) and [`via`].

pub mod forwarded;
pub mod header_edit;
pub mod request_id;
pub mod via;

use std::fmt::Debug;
use std::net::IpAddr;

use bytes::{Bytes, BytesMut};
use weir_http::{Reply, RequestHead};

/// What a request filter decided.
#[derive(Debug)]
pub enum Flow {
    /// Go on with the next filter, then the route's action.
    Continue,
    /// Answer now with this status, extra fields and body (`text/plain`).
    Respond {
        status: u16,
        fields: Vec<(Bytes, Bytes)>,
        body: Bytes,
    },
}

/// What filters know about the client.
#[derive(Debug, Clone, Copy)]
pub struct Client {
    pub ip: IpAddr,
    /// `http` or `https`: the listener's scheme.
    pub scheme: &'static str,
    /// The protocol version the client spoke, as `Via` names it: `1.0`, `1.1` or `2`.
    pub version: &'static str,
}

/// One filter. Methods default to doing nothing.
pub trait Filter: Debug + Send + Sync {
    /// Before the cache lookup.
    fn request(&self, _client: &Client, _head: &RequestHead) -> Flow {
        Flow::Continue
    }

    /// Whether a field of the client's request is left out of the upstream request.
    fn drops_upstream(&self, _client: &Client, _name: &[u8]) -> bool {
        false
    }

    /// Fields added to the upstream request, as `Name: value\r\n` lines.
    fn upstream_fields(&self, _client: &Client, _head: &RequestHead, _out: &mut BytesMut) {}

    /// Shapes a response (hits included) before it is encoded.
    fn response<'a>(&'a self, _reply: &mut Reply<'a>) {}
}

/// A route's filters, in config order.
#[derive(Debug, Default)]
pub struct Chain {
    filters: Vec<Box<dyn Filter>>,
    /// Whether any filter drops upstream fields (skips a call per field when none does).
    drops_upstream: bool,
    /// Whether any filter has a request phase (skips building the `Client` when none does).
    has_request: bool,
}

impl Chain {
    /// A chain of `filters`; `drops_upstream` and `has_request` say whether any of them
    /// implements those phases (the shipped filters know; both `true` is always correct).
    pub fn new(filters: Vec<Box<dyn Filter>>, drops_upstream: bool, has_request: bool) -> Chain {
        Chain {
            filters,
            drops_upstream,
            has_request,
        }
    }

    /// Whether any filter has a request phase.
    #[inline]
    pub fn has_request(&self) -> bool {
        self.has_request
    }

    pub fn request(&self, client: &Client, head: &RequestHead) -> Flow {
        for f in &self.filters {
            if let flow @ Flow::Respond { .. } = f.request(client, head) {
                return flow;
            }
        }
        Flow::Continue
    }

    pub fn drops_upstream(&self, client: &Client, name: &[u8]) -> bool {
        self.drops_upstream && self.filters.iter().any(|f| f.drops_upstream(client, name))
    }

    pub fn upstream_fields(&self, client: &Client, head: &RequestHead, out: &mut BytesMut) {
        for f in &self.filters {
            f.upstream_fields(client, head, out);
        }
    }

    pub fn response<'a>(&'a self, reply: &mut Reply<'a>) {
        for f in &self.filters {
            f.response(reply);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A filter that answers requests carrying a field: the seam can end a request early.
    #[derive(Debug)]
    struct Deny;

    impl Filter for Deny {
        fn request(&self, _: &Client, head: &RequestHead) -> Flow {
            match head.header("x-deny") {
                Some(_) => Flow::Respond {
                    status: 403,
                    fields: Vec::new(),
                    body: Bytes::from_static(b"denied\n"),
                },
                None => Flow::Continue,
            }
        }
    }

    #[test]
    fn the_first_filter_that_answers_ends_the_chain() {
        let chain = Chain::new(vec![Box::new(Deny)], false, true);
        let client = Client {
            ip: "127.0.0.1".parse().unwrap(),
            scheme: "http",
            version: "1.1",
        };
        let mut b = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: a\r\nX-Deny: 1\r\n\r\n"[..]);
        let head = weir_http::parse_request(&mut b, &Default::default())
            .unwrap()
            .unwrap();
        assert!(matches!(
            chain.request(&client, &head),
            Flow::Respond { status: 403, .. }
        ));
        assert!(!chain.drops_upstream(&client, b"x-deny"));
    }
}
