//! `request_headers` / `response_headers`: remove, then set (replace), then add fields, on the
//! upstream request and on every response of the route (hits included).

use bytes::{Bytes, BytesMut};
use weir_http::reply::DropFields;
use weir_http::{Reply, RequestHead};

use super::{Client, Filter};
use crate::config::{check_header_name, check_header_value, model, CompileError};

/// Compiled header edits: remove, then set (replace), then add.
#[derive(Debug, Default)]
pub struct HeaderEdits {
    pub remove: Vec<String>,
    pub set: Vec<(Bytes, Bytes)>,
    pub add: Vec<(Bytes, Bytes)>,
    /// `set` then `add`, encoded as field lines once at load: one copy per message.
    lines: Bytes,
}

impl HeaderEdits {
    pub(crate) fn compile(ops: model::HeaderOps, path: &str) -> Result<HeaderEdits, CompileError> {
        let check = |k: &str, n: &str, v: Option<&str>| -> Result<(), CompileError> {
            check_header_name(n).map_err(|m| (format!("{path}.{k}.{n}"), m))?;
            if let Some(v) = v {
                check_header_value(v).map_err(|m| (format!("{path}.{k}.{n}"), m))?;
            }
            Ok(())
        };
        let mut e = HeaderEdits::default();
        for n in ops.remove {
            check("remove", &n, None)?;
            e.remove.push(n.to_ascii_lowercase());
        }
        for (n, v) in ops.set {
            check("set", &n, Some(&v))?;
            e.remove.push(n.to_ascii_lowercase());
            e.set.push((Bytes::from(n), Bytes::from(v)));
        }
        for (n, v) in ops.add {
            check("add", &n, Some(&v))?;
            e.add.push((Bytes::from(n), Bytes::from(v)));
        }
        let mut lines = BytesMut::new();
        for (n, v) in e.added() {
            weir_http::response::put_header(&mut lines, n, v);
        }
        e.lines = lines.freeze();
        Ok(e)
    }

    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.add.is_empty()
    }

    /// The fields these edits add.
    pub fn added(&self) -> impl Iterator<Item = &(Bytes, Bytes)> {
        self.set.iter().chain(self.add.iter())
    }

    /// The fields these edits add, as encoded field lines.
    pub fn lines(&self) -> &[u8] {
        &self.lines
    }
}

impl DropFields for HeaderEdits {
    /// Whether a field is removed (or replaced) by these edits.
    fn drops(&self, name: &[u8]) -> bool {
        self.remove
            .iter()
            .any(|r| name.eq_ignore_ascii_case(r.as_bytes()))
    }
}

/// A route's edits, both ways.
#[derive(Debug)]
pub struct HeaderEdit {
    pub request: HeaderEdits,
    pub response: HeaderEdits,
}

impl Filter for HeaderEdit {
    fn drops_upstream(&self, _: &Client, name: &[u8]) -> bool {
        self.request.drops(name)
    }

    fn upstream_fields(&self, _: &Client, _: &RequestHead, out: &mut BytesMut) {
        out.extend_from_slice(self.request.lines());
    }

    fn response<'a>(&'a self, reply: &mut Reply<'a>) {
        if !self.response.remove.is_empty() {
            reply.drop = Some(&self.response);
        }
        reply.add_lines(self.response.lines());
    }
}
