//! Route actions: what a matched route does with the request. Each action is compiled at config
//! load into a form that leaves as little as possible for request time.
//!
//! * [`respond`]: a fixed response from config (nginx `return`, Easegress Mock); the head is
//!   pre-encoded, so serving it is three buffer copies and a `Date`.
//! * [`static_files`]: files under a root directory, with validators, conditionals and ranges.
//! * [`echo`]: the request itself back, as text or JSON (the echo backend of seed 003).

pub mod echo;
pub mod respond;
pub mod static_files;

use bytes::Bytes;
use weir_http::Method;

use crate::config::{model, BaseDir, CompileError};
use crate::routes::Matcher;

/// A compiled action.
#[derive(Debug)]
pub enum Action {
    Respond(respond::Respond),
    Static(static_files::StaticFiles),
    Echo(echo::Echo),
}

impl Action {
    pub(crate) fn compile(
        respond: Option<model::Respond>,
        static_files: Option<model::Static>,
        echo: Option<model::Echo>,
        matcher: &Matcher,
        path: &str,
        base: &BaseDir,
        server: Option<&Bytes>,
    ) -> Result<Action, CompileError> {
        let given = [respond.is_some(), static_files.is_some(), echo.is_some()];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err((
                path.to_string(),
                "a route needs exactly one action: respond, static or echo".into(),
            ));
        }
        if let Some(r) = respond {
            return respond::Respond::compile(r, &format!("{path}.respond"), base, server)
                .map(Action::Respond);
        }
        if let Some(s) = static_files {
            let prefix = if s.strip_prefix {
                matcher.prefix().map(Bytes::copy_from_slice)
            } else {
                None
            };
            return static_files::StaticFiles::compile(s, prefix, &format!("{path}.static"))
                .map(Action::Static);
        }
        Ok(Action::Echo(echo::Echo::compile(echo.unwrap_or_default())))
    }

    /// Methods the action itself can answer (`None` = any).
    pub fn methods(&self) -> Option<&'static [Method]> {
        match self {
            Action::Static(_) => Some(&[Method::Get, Method::Head]),
            Action::Respond(_) | Action::Echo(_) => None,
        }
    }

    /// Whether the action needs the request body (others discard it).
    pub fn wants_body(&self) -> bool {
        matches!(self, Action::Echo(_))
    }
}
