//! `echo`: answers with the request it received — request line, header fields and body — as
//! plain text, or as JSON when configured or asked for with `Accept: application/json`. This is
//! the echo backend of seed experiment 003 and a handy target for tests and demos.

use weir_http::RequestHead;

use crate::config::model::{self, EchoFormat};

/// A compiled echo action.
#[derive(Debug)]
pub struct Echo {
    format: EchoFormat,
}

impl Echo {
    pub(crate) fn compile(e: model::Echo) -> Echo {
        Echo { format: e.format }
    }

    /// The response echoing `req` and its `body`: the `Content-Type` field line and the body.
    pub fn render(&self, req: &RequestHead, body: &[u8]) -> (&'static [u8], Vec<u8>) {
        let json = match self.format {
            EchoFormat::Json => true,
            EchoFormat::Text => false,
            EchoFormat::Auto => req
                .header("accept")
                .is_some_and(|a| memchr::memmem::find(a, b"application/json").is_some()),
        };
        if json {
            (
                b"Content-Type: application/json\r\n",
                render_json(req, body),
            )
        } else {
            (
                b"Content-Type: text/plain; charset=utf-8\r\n",
                render_text(req, body),
            )
        }
    }
}

fn render_text(req: &RequestHead, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(256 + body.len());
    v.extend_from_slice(req.method.as_str().as_bytes());
    v.push(b' ');
    v.extend_from_slice(&req.target);
    v.push(b' ');
    v.extend_from_slice(req.version.as_str().as_bytes());
    v.push(b'\n');
    for h in req.headers() {
        v.extend_from_slice(&h.name);
        v.extend_from_slice(b": ");
        v.extend_from_slice(&h.value);
        v.push(b'\n');
    }
    v.push(b'\n');
    v.extend_from_slice(body);
    v
}

fn render_json(req: &RequestHead, body: &[u8]) -> Vec<u8> {
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let headers: Vec<serde_json::Value> = req
        .headers()
        .iter()
        .map(|h| serde_json::json!([s(&h.name), s(&h.value)]))
        .collect();
    let value = serde_json::json!({
        "method": req.method.as_str(),
        "target": s(&req.target),
        "path": s(req.path()),
        "query": req.query().map(s),
        "version": req.version.as_str(),
        "headers": headers,
        "body": s(body),
        "body_length": body.len(),
    });
    serde_json::to_vec(&value).unwrap_or_default()
}
