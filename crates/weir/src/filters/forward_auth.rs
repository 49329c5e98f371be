//! `forward_auth`: asks an authentication service before the request goes on (nginx
//! `auth_request`, Traefik's ForwardAuth). The subrequest is a `GET` of `path` to `upstream`
//! (through the one upstream phase: [`super::Fetcher`]) carrying the client's credential fields
//! (`request_headers`) and what it asked: `X-Forwarded-Method`, `-Proto`, `-Host`, `-Uri` and
//! `-For`. A 2xx lets the request go on, with `copy_headers` of that answer added to the
//! upstream request and `consumer_header` naming the consumer; any other answer is the
//! client's (its status, body and end-to-end fields: a 401's `WWW-Authenticate`, a 302's
//! `Location`). A service that cannot be reached gets the client a 503, logged at most 5 times
//! a second.
//!
//! The client's own fields named in `copy_headers` or `consumer_header`, under any spelling that
//! CGI-style applications fold together (`X_User_Id`, `aliases.rs`), never reach the upstream:
//! what it gets under those names is the service's, or nothing.
//!
//! With `cache`, answers (2xx, 401 and 403) are remembered per credential, the keyed hash of
//! the `request_headers` values, for that long: use it when the service's answer does not
//! depend on the path asked.

use std::sync::Arc;
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use weir_http::hop::{is_hop_by_hop, ConnectionTokens};

use super::registry::{plain, Build, Built, Cx};
use super::remember::Remembered;
use super::{Answer, Caps, Fetched, Flow, Identity, Phases, Req, State};
use crate::config::{model_auth, CompileError};

static FAILED_LOG: crate::logs::Limited = crate::logs::Limited::new();

#[derive(Debug)]
pub struct ForwardAuth {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    upstream: usize,
    path: String,
    request_headers: Vec<String>,
    copy_headers: Vec<String>,
    consumer_header: Option<String>,
    max_body: usize,
    answers: Remembered<Decision>,
}

/// What the service said.
#[derive(Debug, Clone)]
enum Decision {
    Allow(Arc<Identity>),
    Deny(Answer),
}

impl Build<&Cx<'_>> for model_auth::ForwardAuth {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        plain(ForwardAuth::compile(self, cx.path, cx.upstreams)?)
    }
}

/// Fields an auth service's answer never sets on the request: its framing
/// (`Content-Length` on a GET desynchronises a kept upstream connection), hop-by-hop fields,
/// and `Host` (which routes it).
pub fn not_copied(name: &str) -> bool {
    [
        "content-length",
        "transfer-encoding",
        "host",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
        "expect",
    ]
    .iter()
    .any(|f| name.eq_ignore_ascii_case(f))
}

impl ForwardAuth {
    pub(crate) fn compile(
        f: model_auth::ForwardAuth,
        path: &str,
        upstreams: &std::collections::HashMap<String, usize>,
    ) -> Result<ForwardAuth, CompileError> {
        let upstream = super::split::upstream(&f.upstream, format!("{path}.upstream"), upstreams)?;
        if !f.path.starts_with('/') || !f.path.bytes().all(|b| b.is_ascii_graphic()) {
            return Err((format!("{path}.path"), "a path starting with /".into()));
        }
        let names = |key: &str, v: Vec<String>| -> Result<Vec<String>, CompileError> {
            v.into_iter()
                .enumerate()
                .map(|(i, n)| {
                    crate::config::check_header_name(&n)
                        .map(|_| n.to_ascii_lowercase())
                        .map_err(|e| (format!("{path}.{key}[{i}]"), e))
                })
                .collect()
        };
        let copy_headers = names("copy_headers", f.copy_headers)?;
        if let Some(i) = copy_headers.iter().position(|n| not_copied(n)) {
            return Err((
                format!("{path}.copy_headers[{i}]"),
                format!(
                    "{} frames or routes the request and is never copied from the auth service's answer",
                    copy_headers[i]
                ),
            ));
        }
        Ok(ForwardAuth {
            inner: Arc::new(Inner {
                upstream,
                path: f.path,
                request_headers: names("request_headers", f.request_headers)?,
                copy_headers,
                consumer_header: f.consumer_header.map(|h| h.to_ascii_lowercase()),
                max_body: f.max_body,
                answers: Remembered::new(f.cache.0, f.cache_size),
            }),
        })
    }
}

impl Inner {
    /// The subrequest's head.
    fn subrequest(&self, req: &Req<'_>) -> Option<weir_http::RequestHead> {
        let head = req.head;
        let mut b = BytesMut::with_capacity(512);
        b.put_slice(b"GET ");
        b.put_slice(self.path.as_bytes());
        b.put_slice(b" HTTP/1.1\r\nHost: ");
        b.put_slice(head.host().unwrap_or(b"localhost"));
        b.put_slice(b"\r\nX-Forwarded-Method: ");
        b.put_slice(head.method.as_str().as_bytes());
        b.put_slice(b"\r\nX-Forwarded-Proto: ");
        b.put_slice(req.client.scheme.as_bytes());
        b.put_slice(b"\r\nX-Forwarded-Host: ");
        b.put_slice(head.host().unwrap_or(b""));
        b.put_slice(b"\r\nX-Forwarded-Uri: ");
        b.put_slice(head.path());
        if let Some(q) = head.query() {
            b.put_u8(b'?');
            b.put_slice(q);
        }
        b.put_slice(b"\r\nX-Forwarded-For: ");
        let mut ip = [0u8; 64];
        b.put_slice(crate::vars::format_ip(req.client.ip, &mut ip));
        b.put_slice(b"\r\n");
        for h in head.headers() {
            if self
                .request_headers
                .iter()
                .any(|n| h.name.eq_ignore_ascii_case(n.as_bytes()))
            {
                b.put_slice(&h.name);
                b.put_slice(b": ");
                b.put_slice(&h.value);
                b.put_slice(b"\r\n");
            }
        }
        b.put_slice(b"\r\n");
        weir_http::parse_request(&mut b, &Default::default())
            .ok()
            .flatten()
    }

    /// The credential's key: every copy of each of its fields, in config order and in the
    /// order received (what the subrequest carries). Keyed on the first copy alone, an empty
    /// `Cookie:` before `Cookie: session=bob` let anyone in as bob once bob had been seen.
    fn key(&self, req: &Req<'_>) -> u64 {
        let mut parts: Vec<&[u8]> = Vec::with_capacity(self.request_headers.len() * 2);
        for n in &self.request_headers {
            // A field value cannot hold a line feed: the groups cannot run into each other.
            parts.push(b"\n");
            parts.extend(
                req.head
                    .headers()
                    .iter()
                    .filter(|h| h.name.eq_ignore_ascii_case(n.as_bytes()))
                    .map(|h| &h.value[..]),
            );
        }
        self.answers.key(&parts)
    }

    fn decide(&self, got: Fetched) -> Result<Decision, String> {
        let (resp, body) = got?;
        let tokens = ConnectionTokens::of(resp.headers());
        if (200..300).contains(&resp.status) {
            let mut lines = BytesMut::new();
            for h in resp.headers() {
                if self
                    .copy_headers
                    .iter()
                    .any(|n| h.name.eq_ignore_ascii_case(n.as_bytes()))
                {
                    lines.put_slice(&h.name);
                    lines.put_slice(b": ");
                    lines.put_slice(&h.value);
                    lines.put_slice(b"\r\n");
                }
            }
            let consumer = self
                .consumer_header
                .as_ref()
                .and_then(|n| resp.header(n))
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            return Ok(Decision::Allow(Arc::new(Identity {
                consumer,
                upstream_fields: lines.freeze(),
                ..Default::default()
            })));
        }
        let fields = resp
            .headers()
            .iter()
            .filter(|h| {
                !is_hop_by_hop(&h.name, &tokens)
                    && !h.name.eq_ignore_ascii_case(b"content-length")
                    && !h.name.eq_ignore_ascii_case(b"date")
                    && !h.name.eq_ignore_ascii_case(b"server")
            })
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        let status = if (300..600).contains(&resp.status) {
            resp.status
        } else {
            403
        };
        Ok(Decision::Deny(Answer {
            status,
            fields,
            body: body.slice(..body.len().min(self.max_body)),
        }))
    }
}

fn flow(d: Decision) -> Flow {
    match d {
        Decision::Allow(id) => Flow::Authenticated(id),
        Decision::Deny(a) => Flow::Respond(a),
    }
}

fn unavailable(why: &str) -> Flow {
    if let Some(suppressed) = FAILED_LOG.admit() {
        tracing::warn!(suppressed, "forward_auth: the auth service failed: {why}");
    }
    Flow::Respond(Answer {
        status: 503,
        fields: Vec::new(),
        body: Bytes::from_static(b"the authentication service is unavailable\n"),
    })
}

impl super::Filter for ForwardAuth {
    fn phases(&self) -> Phases {
        Phases::REQUEST | Phases::DROPS_UPSTREAM
    }

    fn caps(&self) -> Caps {
        Caps::FETCH | Caps::IDENTITY
    }

    fn drops_upstream(&self, _: &super::Client, name: &[u8]) -> bool {
        let inner = &self.inner;
        inner
            .copy_headers
            .iter()
            .chain(inner.consumer_header.iter())
            .any(|n| super::aliases::folds_to(name, n.as_bytes()))
    }

    fn request(&self, req: &Req<'_>, _: &mut State, _: &mut Option<usize>) -> Flow {
        let inner = &self.inner;
        let now = Instant::now();
        let key = inner.answers.enabled().then(|| inner.key(req));
        if let Some(d) = key.and_then(|k| inner.answers.get(k, now)) {
            return flow(d);
        }
        let (Some(fetch), Some(head)) = (req.fetch, inner.subrequest(req)) else {
            return unavailable("no subrequest could be made");
        };
        let pending = fetch.fetch(inner.upstream, head, inner.max_body);
        let me = inner.clone();
        Flow::Wait(Box::pin(async move {
            match me.decide(pending.await) {
                Ok(d) => {
                    let keep = match &d {
                        Decision::Allow(_) => true,
                        Decision::Deny(a) => matches!(a.status, 401 | 403),
                    };
                    if let (Some(k), true) = (key, keep) {
                        me.answers.put(k, d.clone(), Instant::now());
                    }
                    flow(d)
                }
                Err(why) => unavailable(&why),
            }
        }))
    }
}
