//! `respond`: a response fixed in config. Everything but `Date` and the connection field is
//! encoded at load time (a `Reply` over the encoded head), so a request costs three `memcpy`s
//! into the output buffer.
//!
//! A response whose status, fields or body use request variables (`vars.rs`) keeps the literal
//! part encoded and renders the rest per request ([`Dynamic`]); `redirect` is such a response.

use bytes::{BufMut, Bytes, BytesMut};

use crate::config::{check_header_name, check_header_value, model, BaseDir, CompileError};
use crate::vars::{Env, Template};

/// Headers weir manages itself and config may not set.
const MANAGED: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "date",
    "keep-alive",
    "upgrade",
];

/// A compiled fixed response.
#[derive(Debug)]
pub struct Respond {
    /// Status line, `Server`, configured fields and `Content-Length`.
    head: Bytes,
    body: Bytes,
    pub status: u16,
    /// The parts rendered per request, when some use variables.
    pub dynamic: Option<Box<Dynamic>>,
}

/// The per-request part of a response that uses variables.
#[derive(Debug)]
pub struct Dynamic {
    /// A status template (else `Respond::status`).
    status: Option<Template>,
    /// `Server` and the literal fields, encoded.
    lines: Bytes,
    fields: Vec<(Bytes, Template)>,
    /// The body template (else `Respond::body`).
    body: Option<Template>,
}

/// One rendered response.
#[derive(Debug)]
pub struct Rendered {
    pub status: u16,
    /// Field lines (without framing).
    pub lines: Vec<u8>,
    pub body: Bytes,
}

impl Respond {
    pub(crate) fn compile(
        r: model::Respond,
        path: &str,
        base: &BaseDir,
        server: Option<&Bytes>,
    ) -> Result<Respond, CompileError> {
        let template = |key: String, v: &str| Template::parse(v).map_err(|m| (key, m));
        let (status, status_template) = match &r.status {
            model::Status::Code(c) => (*c, None),
            model::Status::Template(t) => {
                let t = template(format!("{path}.status"), t)?;
                match t
                    .literal()
                    .map(|l| std::str::from_utf8(l).unwrap_or("").trim().parse())
                {
                    Some(Ok(c)) => (c, None),
                    Some(Err(_)) => {
                        return Err((
                            format!("{path}.status"),
                            "not a status code or a template of variables".into(),
                        ))
                    }
                    None => (200, Some(t)),
                }
            }
        };
        if !(200..=599).contains(&status) {
            return Err((
                format!("{path}.status"),
                format!("{status} is not a final status code (200-599)"),
            ));
        }
        let inline_body = r.body.is_some();
        let body = match (r.body, r.body_file) {
            (Some(_), Some(_)) => {
                return Err((path.to_string(), "give body or body_file, not both".into()))
            }
            (Some(b), None) => Bytes::from(b),
            (None, Some(f)) => {
                let p = base.0.join(&f);
                Bytes::from(std::fs::read(&p).map_err(|e| {
                    (
                        format!("{path}.body_file"),
                        format!("cannot read {}: {e}", p.display()),
                    )
                })?)
            }
            (None, None) => Bytes::new(),
        };
        let bodyless = status == 204 || status == 304;
        if bodyless && !body.is_empty() {
            return Err((path.to_string(), format!("a {status} response has no body")));
        }
        let body_template = match std::str::from_utf8(&body) {
            Ok(text) if inline_body => {
                Some(template(format!("{path}.body"), text)?).filter(|t| t.literal().is_none())
            }
            _ => None,
        };
        let mut head = BytesMut::with_capacity(256);
        weir_http::response::put_status_line(&mut head, status);
        let status_line_len = head.len();
        if let Some(s) = server {
            weir_http::response::put_header(&mut head, b"Server", s);
        }
        let mut fields = Vec::new();
        let mut has_type = false;
        for (name, value) in &r.headers {
            let key = format!("{path}.headers.{name}");
            check_header_name(name).map_err(|e| (key.clone(), e))?;
            check_header_value(value).map_err(|e| (key.clone(), e))?;
            let lower = name.to_ascii_lowercase();
            if MANAGED.contains(&lower.as_str()) {
                return Err((
                    key,
                    format!("{name} is set by weir and cannot be configured"),
                ));
            }
            has_type |= lower == "content-type";
            let t = template(key, value)?;
            match t.literal() {
                Some(_) => {
                    weir_http::response::put_header(&mut head, name.as_bytes(), value.as_bytes())
                }
                None => fields.push((Bytes::from(name.clone()), t)),
            }
        }
        if !has_type && !body.is_empty() {
            head.put_slice(b"Content-Type: text/plain; charset=utf-8\r\n");
        }
        let dynamic = (status_template.is_some() || !fields.is_empty() || body_template.is_some())
            .then(|| {
                Box::new(Dynamic {
                    status: status_template,
                    lines: Bytes::copy_from_slice(&head[status_line_len..]),
                    fields,
                    body: body_template,
                })
            });
        if !bodyless {
            weir_http::response::put_content_length(&mut head, body.len() as u64);
        }
        Ok(Respond {
            head: head.freeze(),
            body,
            status,
            dynamic,
        })
    }

    /// A `redirect` to `to` (a template): with the query appended unless `to` places it.
    pub(crate) fn redirect(
        to: &str,
        status: u16,
        path: &str,
        server: Option<&Bytes>,
    ) -> Result<Respond, CompileError> {
        if !matches!(status, 300..=308) {
            return Err((
                format!("{path}.status"),
                format!("{status} is not a redirect status (300-308)"),
            ));
        }
        let places_query = to.contains('?')
            || ["$args", "$request_uri", "$is_args", "$query_string"]
                .iter()
                .any(|v| to.contains(v));
        let to = if places_query {
            to.to_string()
        } else {
            format!("{to}$is_args$args")
        };
        let r = model::Respond {
            status: model::Status::Code(status),
            headers: [("Location".to_string(), to)].into(),
            body: None,
            body_file: None,
        };
        Respond::compile(r, path, &BaseDir(Default::default()), server)
    }

    /// The largest `$N` capture the response uses.
    pub fn captures(&self) -> usize {
        self.dynamic.as_ref().map_or(0, |d| {
            d.fields
                .iter()
                .map(|(_, t)| t.captures())
                .chain(d.status.iter().map(Template::captures))
                .chain(d.body.iter().map(Template::captures))
                .max()
                .unwrap_or(0)
        })
    }

    /// The response for one request, when it uses variables.
    pub fn render(&self, d: &Dynamic, env: &Env<'_>) -> Result<Rendered, String> {
        let status = match &d.status {
            None => self.status,
            Some(t) => {
                let text = t.to_vec(env);
                match std::str::from_utf8(&text)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                {
                    Some(c @ 200..=599) => c,
                    _ => {
                        return Err(format!(
                            "status {:?} is not a final status code",
                            String::from_utf8_lossy(&text)
                        ))
                    }
                }
            }
        };
        let mut lines = d.lines.to_vec();
        let mut value = Vec::new();
        for (n, t) in &d.fields {
            value.clear();
            t.render(env, &mut value);
            if !crate::vars::field_safe(&value) {
                return Err(format!(
                    "field {} would hold control bytes",
                    String::from_utf8_lossy(n)
                ));
            }
            let mut line = BytesMut::new();
            weir_http::response::put_header(&mut line, n, &value);
            lines.extend_from_slice(&line);
        }
        let body = match &d.body {
            Some(t) => Bytes::from(t.to_vec(env)),
            None => self.body.clone(),
        };
        Ok(Rendered {
            status,
            lines,
            body,
        })
    }

    /// Status line, `Server`, configured fields and `Content-Length`, encoded.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    pub fn body(&self) -> &Bytes {
        &self.body
    }
}
