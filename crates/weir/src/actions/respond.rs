//! `respond`: a response fixed in config. Everything but `Date` and the connection field is
//! encoded at load time (a `Reply` over the encoded head), so a request costs three `memcpy`s
//! into the output buffer.

use bytes::{BufMut, Bytes, BytesMut};

use crate::config::{check_header_name, check_header_value, model, BaseDir, CompileError};

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
}

impl Respond {
    pub(crate) fn compile(
        r: model::Respond,
        path: &str,
        base: &BaseDir,
        server: Option<&Bytes>,
    ) -> Result<Respond, CompileError> {
        if !(200..=599).contains(&r.status) {
            return Err((
                format!("{path}.status"),
                format!("{} is not a final status code (200-599)", r.status),
            ));
        }
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
        let bodyless = r.status == 204 || r.status == 304;
        if bodyless && !body.is_empty() {
            return Err((
                path.to_string(),
                format!("a {} response has no body", r.status),
            ));
        }
        let mut head = BytesMut::with_capacity(256);
        weir_http::response::put_status_line(&mut head, r.status);
        if let Some(s) = server {
            weir_http::response::put_header(&mut head, b"Server", s);
        }
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
            weir_http::response::put_header(&mut head, name.as_bytes(), value.as_bytes());
        }
        if !has_type && !body.is_empty() {
            head.put_slice(b"Content-Type: text/plain; charset=utf-8\r\n");
        }
        if !bodyless {
            weir_http::response::put_content_length(&mut head, body.len() as u64);
        }
        Ok(Respond {
            head: head.freeze(),
            body,
            status: r.status,
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
