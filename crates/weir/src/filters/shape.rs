//! `shape`: what a request may look like on a listener or route, Tempesta FW's frang request
//! checks: header count (431), one field's length (431), target length (414), body length (413,
//! declared here; read bodies are held to it by the connection, `pipeline` passes the cap on),
//! methods (405 with `Allow`), body media types (415), method-override fields (400), and strict
//! agreement of `Host` with an absolute target (400; HTTP/2's `:authority` against `Host` is
//! always checked, `server/h2/head.rs`).
//!
//! A violation is answered, counted in the shield's actions (`limit="shape"`) when there is a
//! `shield:` section, and with `block: true` also blocks the client for the shield's
//! `block_for`.

use std::sync::Arc;

use bytes::Bytes;
use weir_http::{BodyKind, RequestHead};

use super::registry::{plain, Build, Built, Cx};
use super::{Answer, Flow, Phases, Req, State};
use crate::config::{model, CompileError};
use crate::shield::{Action, Limit, Shield};

#[derive(Debug)]
pub struct Shape {
    max_headers: usize,
    max_header_bytes: usize,
    max_uri_bytes: usize,
    /// The body cap (0: none), also enforced while the body is read.
    pub max_body_bytes: u64,
    /// Upper-case method names; empty: any.
    methods: Vec<Bytes>,
    /// `Allow: GET, HEAD` for the 405.
    allow: Bytes,
    /// Lower-case media types (`type/subtype` or `type/*`); empty: any.
    content_types: Vec<String>,
    refuse_override: bool,
    strict_host: bool,
    block: bool,
    shield: Option<Arc<Shield>>,
}

const OVERRIDES: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

impl Build<&Cx<'_>> for model::Shape {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        plain(Shape::compile(self, cx.path, cx.shield.cloned())?)
    }
}

impl Shape {
    pub(crate) fn compile(
        m: model::Shape,
        path: &str,
        shield: Option<Arc<Shield>>,
    ) -> Result<Shape, CompileError> {
        if m.block && shield.is_none() {
            return Err((
                format!("{path}.block"),
                "blocking needs a shield: section (its block_for and table of clients)".into(),
            ));
        }
        let mut methods = Vec::new();
        for (i, name) in m.methods.iter().enumerate() {
            let up = name.trim().to_ascii_uppercase();
            if up.is_empty() || !up.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') {
                return Err((
                    format!("{path}.methods[{i}]"),
                    format!("{name:?} is not a method"),
                ));
            }
            methods.push(Bytes::from(up));
        }
        let mut content_types = Vec::new();
        for (i, t) in m.content_types.iter().enumerate() {
            let t = t.trim().to_ascii_lowercase();
            if t.split('/').count() != 2 || t.contains(';') {
                return Err((
                    format!("{path}.content_types[{i}]"),
                    format!("{t:?}: write type/subtype or type/*"),
                ));
            }
            content_types.push(t);
        }
        let allow = methods
            .iter()
            .map(|m| String::from_utf8_lossy(m).into_owned())
            .collect::<Vec<_>>()
            .join(", ");
        Ok(Shape {
            max_headers: m.max_headers,
            max_header_bytes: m.max_header_bytes.0 as usize,
            max_uri_bytes: m.max_uri_bytes.0 as usize,
            max_body_bytes: m.max_body_bytes.0,
            methods,
            allow: Bytes::from(allow),
            content_types,
            refuse_override: m.refuse_method_override,
            strict_host: m.strict_host,
            block: m.block,
            shield,
        })
    }

    /// The first check `head` fails: status and reason.
    pub fn check(&self, head: &RequestHead) -> Option<(u16, &'static str)> {
        if self.max_headers > 0 && head.fields().len() > self.max_headers {
            return Some((431, "too many header fields"));
        }
        if self.max_header_bytes > 0
            && head
                .headers()
                .iter()
                .any(|h| h.name.len() + h.value.len() > self.max_header_bytes)
        {
            return Some((431, "header field too long"));
        }
        if self.max_uri_bytes > 0 && head.target.len() > self.max_uri_bytes {
            return Some((414, "request target too long"));
        }
        if !self.methods.is_empty()
            && !self
                .methods
                .iter()
                .any(|m| m[..] == *head.method.as_str().as_bytes())
        {
            return Some((405, "method not allowed"));
        }
        if self.max_body_bytes > 0 {
            if let BodyKind::Length(n) = head.body {
                if n > self.max_body_bytes {
                    return Some((413, "body too large"));
                }
            }
        }
        if !self.content_types.is_empty() && head.body != BodyKind::Empty {
            let ct = head.header("content-type").map(media_type);
            if !ct.is_some_and(|t| self.content_types.iter().any(|a| type_matches(a, &t))) {
                return Some((415, "content type not allowed"));
            }
        }
        if self.refuse_override && OVERRIDES.iter().any(|n| head.header(n).is_some()) {
            return Some((400, "method override refused"));
        }
        if self.strict_host && !host_agrees(head) {
            return Some((400, "Host does not agree with the target"));
        }
        None
    }
}

/// `type/subtype` of a Content-Type value, lower case, parameters dropped.
fn media_type(v: &[u8]) -> String {
    let end = v.iter().position(|b| *b == b';').unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end])
        .trim()
        .to_ascii_lowercase()
}

fn type_matches(allowed: &str, t: &str) -> bool {
    match allowed.strip_suffix("/*") {
        Some(main) => t.split('/').next() == Some(main),
        None => allowed == t,
    }
}

/// A Host field is there, and names the host the target does (an absolute target's authority
/// wins over Host in the parser; here they must be the same).
fn host_agrees(head: &RequestHead) -> bool {
    let Some(field) = head.header("host") else {
        return false;
    };
    let Some(host) = head.host() else {
        return false;
    };
    let f = field;
    let name = if f.first() == Some(&b'[') {
        f.iter().position(|b| *b == b']').map_or(f, |i| &f[..=i])
    } else {
        f.iter().position(|b| *b == b':').map_or(f, |i| &f[..i])
    };
    let name = name.strip_suffix(b".").unwrap_or(name);
    name.eq_ignore_ascii_case(host)
}

impl super::Filter for Shape {
    fn phases(&self) -> Phases {
        Phases::REQUEST
    }

    fn body_cap(&self) -> Option<u64> {
        (self.max_body_bytes > 0).then_some(self.max_body_bytes)
    }

    fn request(&self, req: &Req<'_>, _: &mut State, _: &mut Option<usize>) -> Flow {
        let Some((status, why)) = self.check(req.head) else {
            return Flow::Continue;
        };
        if let Some(shield) = &self.shield {
            if self.block {
                shield.block_now(req.client.ip, Limit::Shape);
            } else {
                shield.violation(req.client.ip, Limit::Shape, Action::Reply);
            }
        }
        let mut fields = Vec::new();
        if status == 405 {
            fields.push((Bytes::from_static(b"Allow"), self.allow.clone()));
        }
        Flow::Respond(Answer {
            status,
            fields,
            body: Bytes::from(format!("{why}\n")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &str) -> RequestHead {
        let mut b = bytes::BytesMut::from(raw);
        weir_http::parse_request(&mut b, &weir_http::Limits::default())
            .unwrap()
            .unwrap()
    }

    #[test]
    fn each_check_with_its_status() {
        let m: model::Shape = serde_yaml::from_str(
            "{max_headers: 4, max_header_bytes: 40, max_uri_bytes: 20, max_body_bytes: 10, \
              methods: [get, post], content_types: [application/json, 'text/*'], \
              refuse_method_override: true, strict_host: true}",
        )
        .unwrap();
        let s = Shape::compile(m, "f", None).unwrap();
        let cases: &[(&str, Option<u16>)] = &[
            ("GET / HTTP/1.1\r\nHost: a\r\n\r\n", None),
            ("GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", Some(431)),
            (&format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "v".repeat(40)), Some(431)),
            ("GET /aaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\nHost: a\r\n\r\n", Some(414)),
            ("DELETE / HTTP/1.1\r\nHost: a\r\n\r\n", Some(405)),
            ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\nContent-Type: text/plain\r\n\r\n", Some(413)),
            ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n", None),
            ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Type: Application/JSON\r\n\r\n", None),
            ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Type: image/png\r\n\r\n", Some(415)),
            ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n", Some(415)),
            ("POST / HTTP/1.1\r\nHost: a\r\nX-HTTP-Method-Override: DELETE\r\n\r\n", Some(400)),
            ("GET http://b/ HTTP/1.1\r\nHost: a\r\n\r\n", Some(400)),
            ("GET http://a:8080/ HTTP/1.1\r\nHost: A.:8080\r\n\r\n", None),
            ("GET / HTTP/1.0\r\n\r\n", Some(400)),
        ];
        for (raw, want) in cases {
            assert_eq!(s.check(&head(raw)).map(|c| c.0), *want, "{raw:?}");
        }
    }

    #[test]
    fn bad_settings_name_their_key() {
        for (yaml, key) in [
            ("{methods: ['G T']}", "f.methods[0]"),
            ("{content_types: [json]}", "f.content_types[0]"),
            ("{block: true}", "f.block"),
        ] {
            let m: model::Shape = serde_yaml::from_str(yaml).unwrap();
            assert_eq!(Shape::compile(m, "f", None).unwrap_err().0, key, "{yaml}");
        }
    }
}
