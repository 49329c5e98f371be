//! `request_headers` / `response_headers` (and the `headers` filter): remove, then set (replace),
//! then add fields, on the upstream request and on every response of the route (hits included).
//!
//! Values may use request variables (`X-Client: $remote_addr`, `vars.rs`). Values without one
//! are encoded once at load; those with one are rendered per request: upstream ones as the
//! request is written, response ones in the request phase into the filter's state (the
//! response phase does not see the request), so a route with only literal edits keeps no
//! state and allocates nothing.

use bytes::{Bytes, BytesMut};
use weir_http::reply::DropFields;
use weir_http::Reply;

use super::registry::{plain, Build, Built, Cx};
use super::{Caps, Client, Filter, Phases, Req, State, Upward};
use crate::config::{check_header_name, check_header_value, model, CompileError};
use crate::vars::{Env, Template};

/// Compiled header edits: remove, then set (replace), then add.
#[derive(Debug, Default)]
pub struct HeaderEdits {
    pub remove: Vec<String>,
    pub set: Vec<(Bytes, Bytes)>,
    pub add: Vec<(Bytes, Bytes)>,
    /// `set` then `add`, encoded as field lines once at load: one copy per message.
    lines: Bytes,
    /// Fields whose values use variables, rendered per request.
    dynamic: Vec<(Bytes, Template)>,
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
        let template = |k: &str, n: &str, v: &str| {
            Template::parse(v).map_err(|m| (format!("{path}.{k}.{n}"), m))
        };
        for (n, v) in ops.set {
            check("set", &n, Some(&v))?;
            e.remove.push(n.to_ascii_lowercase());
            let t = template("set", &n, &v)?;
            match t.literal() {
                Some(_) => e.set.push((Bytes::from(n), Bytes::from(v))),
                None => e.dynamic.push((Bytes::from(n), t)),
            }
        }
        for (n, v) in ops.add {
            check("add", &n, Some(&v))?;
            let t = template("add", &n, &v)?;
            match t.literal() {
                Some(_) => e.add.push((Bytes::from(n), Bytes::from(v))),
                None => e.dynamic.push((Bytes::from(n), t)),
            }
        }
        let mut lines = BytesMut::new();
        for (n, v) in e.added() {
            weir_http::response::put_header(&mut lines, n, v);
        }
        e.lines = lines.freeze();
        Ok(e)
    }

    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.add.is_empty() && self.dynamic.is_empty()
    }

    /// Renders the fields whose values use variables, as field lines.
    fn render(&self, env: &Env<'_>, out: &mut BytesMut) {
        let mut value = Vec::new();
        for (n, t) in &self.dynamic {
            value.clear();
            t.render(env, &mut value);
            // A value from the request may hold what a field must not: left out, not sent.
            if crate::vars::field_safe(&value) {
                weir_http::response::put_header(out, n, &value);
            }
        }
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

/// The `headers` filter: a route's values may use its name and path regex.
impl Build<&Cx<'_>> for model::Headers {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        plain(HeaderEdit {
            request: HeaderEdits::compile(self.request, &format!("{}.request", cx.path))?,
            response: HeaderEdits::compile(self.response, &format!("{}.response", cx.path))?,
            route: cx.route.map_or_else(String::new, |r| r.0.to_string()),
            regex: cx.route.and_then(|r| r.1.cloned()),
        })
    }
}

/// A route's edits, both ways.
#[derive(Debug)]
pub struct HeaderEdit {
    pub request: HeaderEdits,
    pub response: HeaderEdits,
    /// The route's name and path regex, for `$route` and `$1`..`$9` in upstream values.
    pub route: String,
    pub regex: Option<regex::bytes::Regex>,
}

impl Filter for HeaderEdit {
    fn phases(&self) -> Phases {
        let mut p = Phases::NONE;
        if !self.request.is_empty() {
            p |= Phases::UPSTREAM;
        }
        if !self.request.remove.is_empty() {
            p |= Phases::DROPS_UPSTREAM;
        }
        if !self.response.is_empty() {
            p |= Phases::RESPONSE;
        }
        if !self.response.dynamic.is_empty() {
            p |= Phases::REQUEST;
        }
        p
    }

    fn caps(&self) -> Caps {
        match self.response.dynamic.is_empty() {
            true => Caps::NONE,
            false => Caps::STATE,
        }
    }

    fn request(&self, req: &Req<'_>, state: &mut State, _: &mut Option<usize>) -> super::Flow {
        let mut lines = BytesMut::new();
        self.response.render(&req.env(), &mut lines);
        *state = Some(Box::new(lines));
        super::Flow::Continue
    }

    fn drops_upstream(&self, _: &Client, name: &[u8]) -> bool {
        // Every spelling an application folds into the same variable (`aliases.rs`).
        self.request
            .remove
            .iter()
            .any(|r| super::aliases::folds_to(name, r.as_bytes()))
    }

    fn upstream_fields(&self, up: &Upward<'_>, out: &mut BytesMut) {
        out.extend_from_slice(self.request.lines());
        if !self.request.dynamic.is_empty() {
            let env = Env {
                head: up.head,
                scheme: up.client.scheme,
                client: up.client.ip,
                route: &self.route,
                regex: self.regex.as_ref(),
                identity: up.identity,
            };
            self.request.render(&env, out);
        }
    }

    fn response<'a>(&'a self, reply: &mut Reply<'a>, state: &mut State, lines: &mut BytesMut) {
        if !self.response.remove.is_empty() {
            reply.drop_fields(&self.response);
        }
        reply.add_lines(self.response.lines());
        if let Some(rendered) = state.as_ref().and_then(|s| s.downcast_ref::<BytesMut>()) {
            lines.extend_from_slice(rendered);
        }
    }
}
