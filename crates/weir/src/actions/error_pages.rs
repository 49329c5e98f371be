//! Custom error pages (nginx `error_page`, Caddy `handle_errors`): a listener's or a route's
//! `error_pages` map a status (`404`) or a class (`5xx`) to a file whose bytes answer instead of
//! weir's one-line body, with the file's type. They apply to every answer weir makes itself with
//! an error status: no route (404), a method not allowed (405), static files (403, 404),
//! the proxy's failures (502, 503, 504), the key-value store, the cache's (504 for
//! `only-if-cached`), and filters' refusals (401, 403, 429); the fields those carry (`Allow`,
//! `Retry-After`, `WWW-Authenticate`) are kept. An upstream's own error responses are relayed
//! as they are. Files are read when the config loads (at most [`MAX_PAGE`] bytes each), so an
//! error costs no file IO.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::config::{BaseDir, CompileError};

/// The largest error page file.
pub const MAX_PAGE: u64 = 1024 * 1024;

/// One page: its bytes and type.
#[derive(Debug)]
pub struct Page {
    pub body: Bytes,
    /// The `Content-Type` line, ready to send.
    pub type_line: Bytes,
}

/// A compiled `error_pages` map (a route's holds its listener's too, asked after its own).
#[derive(Debug, Default)]
pub struct ErrorPages {
    exact: Vec<(u16, Arc<Page>)>,
    /// By class: index 4 for `4xx`, 5 for `5xx`.
    class: [Option<Arc<Page>>; 6],
    /// The listener's, for a route's.
    parent: Option<Arc<ErrorPages>>,
}

impl ErrorPages {
    /// Compiles `map` at key path `key`, `inherited` (the listener's) filling what it does not
    /// name; `None` when neither has a page.
    pub(crate) fn compile(
        map: &BTreeMap<String, String>,
        key: &str,
        base: &BaseDir,
        inherited: Option<&Arc<ErrorPages>>,
    ) -> Result<Option<Arc<ErrorPages>>, CompileError> {
        if map.is_empty() {
            return Ok(inherited.cloned());
        }
        let mut out = ErrorPages::default();
        for (status, file) in map {
            let at = format!("{key}.{status}");
            let page = Arc::new(read_page(file, &at, base)?);
            match status.as_bytes() {
                [c @ (b'4' | b'5'), b'x', b'x'] => out.class[usize::from(c - b'0')] = Some(page),
                _ => match status.parse::<u16>() {
                    Ok(s) if (400..600).contains(&s) => out.exact.push((s, page)),
                    _ => {
                        return Err((
                            at,
                            format!("{status:?}: an error status (400-599) or a class (4xx, 5xx)"),
                        ))
                    }
                },
            }
        }
        out.parent = inherited.cloned();
        Ok(Some(Arc::new(out)))
    }

    /// The page for `status`: its own, else its class's. A route's own class page wins over its
    /// listener's exact page (the route said what its errors look like).
    pub fn page(&self, status: u16) -> Option<&Page> {
        self.exact
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, p)| &**p)
            .or_else(|| {
                self.class
                    .get(usize::from(status / 100))
                    .and_then(|p| p.as_deref())
            })
            .or_else(|| self.parent.as_ref().and_then(|p| p.page(status)))
    }
}

fn read_page(file: &str, key: &str, base: &BaseDir) -> Result<Page, CompileError> {
    let path = base.0.join(file);
    let meta = std::fs::metadata(&path)
        .map_err(|e| (key.to_string(), format!("cannot read {file:?}: {e}")))?;
    if !meta.is_file() || meta.len() > MAX_PAGE {
        return Err((
            key.to_string(),
            format!("{file:?}: an error page is a file of at most 1 MiB"),
        ));
    }
    let body = std::fs::read(&path)
        .map_err(|e| (key.to_string(), format!("cannot read {file:?}: {e}")))?;
    let ctype = mime_guess::from_path(&path)
        .first_raw()
        .unwrap_or("application/octet-stream");
    let ctype = match ctype {
        "text/html" | "text/plain" => format!("{ctype}; charset=utf-8"),
        other => other.to_string(),
    };
    Ok(Page {
        body: Bytes::from(body),
        type_line: Bytes::from(format!("Content-Type: {ctype}\r\n")),
    })
}
