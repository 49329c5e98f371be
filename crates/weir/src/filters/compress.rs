//! `compress`: gzip, brotli and zstd for responses whose content type is listed and that are
//! long enough, on every action. A client's `Accept-Encoding` is reduced to one of four
//! buckets (`br`, `zstd`, `gzip`, identity: `weir_cache::key::normalize_accept_encoding`), so
//! a cache keeps at most four representations of a URL however clients spell the field.
//!
//! Two places compress, and never a cache hit:
//! * a response that is not a stored one (relayed, `respond`, `echo`, static files, the miss
//!   that fills the cache) is claimed in the response phase and streamed through an encoder
//!   in the body phase (`Content-Length` goes, the response is chunked);
//! * on a cached route, the first request for a coding makes that coding's variant from the
//!   stored identity body, once, and stores it beside it under `Vary: Accept-Encoding`
//!   (`pipeline/cache/encode.rs`); later requests for that coding are plain hits.
//!
//! The upstream is asked for identity (`Accept-Encoding` is not forwarded), so one origin
//! response serves every coding. A transformed response gets a weak `ETag` and `Vary:
//! Accept-Encoding` merged into the origin's `Vary`; identity answers of a compressible
//! response get the `Vary` too. Never compressed: a body already encoded, a 206, a response
//! with `Cache-Control: no-transform`, anything but a 200.

use std::sync::Arc;

use bytes::BytesMut;
use weir_http::reply::DropFields;
use weir_http::{Framing, Method, Reply};

use weir_cache::stored::{merged_vary, weak_etag};

use super::codec::{Coding, Encoder, Levels};
use super::registry::{plain, Build, Built, Cx};
use super::{Caps, Client, Flow, Phases, Req, State};
use crate::config::{model, CompileError};

/// The fields compression looks at, read in one walk.
#[derive(Debug, Default, Clone, Copy)]
pub struct Seen<'f> {
    pub encoding: Option<&'f [u8]>,
    pub range: Option<&'f [u8]>,
    pub cache_control: Option<&'f [u8]>,
    pub content_type: Option<&'f [u8]>,
}

impl<'f> Seen<'f> {
    /// From a field lookup (a stored object's, a response head's).
    pub fn by(field: impl Fn(&str) -> Option<&'f [u8]>) -> Seen<'f> {
        Seen {
            encoding: field("content-encoding"),
            range: field("content-range"),
            cache_control: field("cache-control"),
            content_type: field("content-type"),
        }
    }
}

/// What the cache phase needs to know of a route's compression.
#[derive(Debug)]
pub struct Settings {
    /// Content types (lowercase essence), `text/*` style wildcards allowed.
    types: Vec<String>,
    pub min_length: u64,
    pub levels: Levels,
    /// Serve `file.br` / `file.zst` / `file.gz` beside a static file.
    pub precompressed: bool,
}

#[derive(Debug)]
pub struct Compress {
    settings: Arc<Settings>,
}

/// The coding a request asked for, kept from the request phase to the response phase
/// (zero-sized: no allocation).
#[derive(Debug)]
struct WantBr;
#[derive(Debug)]
struct WantZstd;
#[derive(Debug)]
struct WantGzip;
/// A HEAD that would be answered in this coding: its fields, no encoder.
#[derive(Debug)]
struct HeadOnly(Coding);

/// Fields a compressed response loses (length, validator, and `Vary` when it is merged).
#[derive(Debug)]
struct Drops {
    vary: bool,
    length_and_tag: bool,
}

impl DropFields for Drops {
    fn drops(&self, name: &[u8]) -> bool {
        (self.vary && name.eq_ignore_ascii_case(b"vary"))
            || (self.length_and_tag
                && (name.eq_ignore_ascii_case(b"content-length")
                    || name.eq_ignore_ascii_case(b"etag")))
    }
}

static DROP_VARY: Drops = Drops {
    vary: true,
    length_and_tag: false,
};
static DROP_ALL: Drops = Drops {
    vary: true,
    length_and_tag: true,
};
static DROP_LENGTH_AND_TAG: Drops = Drops {
    vary: false,
    length_and_tag: true,
};

impl Settings {
    /// Whether a response with these fields may be compressed.
    pub fn compressible(&self, status: u16, seen: &Seen<'_>, length: Option<u64>) -> bool {
        if status != 200 || seen.encoding.is_some() || seen.range.is_some() {
            return false;
        }
        if seen.cache_control.is_some_and(|v| {
            v.split(|b| *b == b',')
                .any(|d| d.trim_ascii().eq_ignore_ascii_case(b"no-transform"))
        }) {
            return false;
        }
        if length.is_some_and(|n| n < self.min_length) {
            return false;
        }
        let Some(ct) = seen.content_type else {
            return false;
        };
        let essence = ct.split(|b| *b == b';').next().unwrap_or(b"").trim_ascii();
        self.types.iter().any(|t| match t.strip_suffix("/*") {
            Some(major) => essence
                .split(|b| *b == b'/')
                .next()
                .is_some_and(|m| m.eq_ignore_ascii_case(major.as_bytes())),
            None => essence.eq_ignore_ascii_case(t.as_bytes()),
        })
    }
}

fn line(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

impl Build<&Cx<'_>> for model::CompressRule {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        plain(Compress::compile(self, cx.path)?)
    }
}

impl Compress {
    pub(crate) fn compile(c: model::CompressRule, path: &str) -> Result<Compress, CompileError> {
        if !(1..=9).contains(&c.gzip_level) {
            return Err((format!("{path}.gzip_level"), "1-9".into()));
        }
        if c.br_level > 11 {
            return Err((format!("{path}.br_level"), "0-11".into()));
        }
        if !(1..=19).contains(&c.zstd_level) {
            return Err((format!("{path}.zstd_level"), "1-19".into()));
        }
        if c.types.is_empty() {
            return Err((format!("{path}.types"), "list the content types".into()));
        }
        Ok(Compress {
            settings: Arc::new(Settings {
                types: c
                    .types
                    .iter()
                    .map(|t| t.trim().to_ascii_lowercase())
                    .collect(),
                min_length: c.min_length.0,
                levels: Levels {
                    gzip: c.gzip_level,
                    br: c.br_level,
                    zstd: c.zstd_level,
                },
                precompressed: c.precompressed,
            }),
        })
    }
}

/// The coding a client's request asks for (`None`: identity).
pub fn wanted(head: &weir_http::RequestHead) -> Option<Coding> {
    let ae = head.header("accept-encoding");
    Coding::of_bucket(weir_cache::key::normalize_accept_encoding(ae))
}

impl super::Filter for Compress {
    fn phases(&self) -> Phases {
        Phases::REQUEST | Phases::RESPONSE | Phases::BODY | Phases::DROPS_UPSTREAM
    }

    fn caps(&self) -> Caps {
        Caps::STATE | Caps::ENCODES
    }

    fn request(&self, req: &Req<'_>, state: &mut State, _: &mut Option<usize>) -> Flow {
        // A HEAD is answered with the fields its GET would get (Content-Encoding included),
        // not the identity ones (issue 33 §5); it has no body to encode.
        *state = match wanted(req.head) {
            Some(c) if req.head.method == Method::Head => Some(Box::new(HeadOnly(c))),
            Some(Coding::Br) => Some(Box::new(WantBr)),
            Some(Coding::Zstd) => Some(Box::new(WantZstd)),
            Some(Coding::Gzip) => Some(Box::new(WantGzip)),
            None => None,
        };
        Flow::Continue
    }

    fn drops_upstream(&self, _: &Client, name: &[u8]) -> bool {
        name.eq_ignore_ascii_case(b"accept-encoding")
    }

    fn response<'a>(&'a self, reply: &mut Reply<'a>, state: &mut State, lines: &mut BytesMut) {
        let taken = state.take();
        let head_only = taken
            .as_ref()
            .and_then(|s| s.downcast_ref::<HeadOnly>())
            .map(|h| h.0);
        let want = match taken {
            _ if head_only.is_some() => head_only,
            Some(s) if s.is::<WantBr>() => Some(Coding::Br),
            Some(s) if s.is::<WantZstd>() => Some(Coding::Zstd),
            Some(s) if s.is::<WantGzip>() => Some(Coding::Gzip),
            _ => None,
        };
        let head_only = head_only.is_some();
        if want.is_none() {
            // Identity for this client: the only change is `Vary: Accept-Encoding`, which a
            // response that says so already (every hit stored on this route) does not need.
            // One field, not seven: an identity hit of 16 KiB cost 1.20x the instructions of the
            // same hit without the filter, 1.13x with this (callgrind, issue 34).
            let [vary] = reply.fields_of(["vary"]);
            if vary.is_some() && merged_vary(vary).is_none() {
                return;
            }
        }
        let [encoding, range, cache_control, content_type, content_length, vary, etag] = reply
            .fields_of([
                "content-encoding",
                "content-range",
                "cache-control",
                "content-type",
                "content-length",
                "vary",
                "etag",
            ]);
        let seen = Seen {
            encoding,
            range,
            cache_control,
            content_type,
        };
        let length = match reply.framing {
            Framing::Length(n) => Some(n),
            _ => content_length.and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok()),
        };
        if !self.settings.compressible(reply.status, &seen, length) {
            return;
        }
        let vary = merged_vary(vary);
        let Some(coding) = want else {
            // Identity for this client; the representation still depends on the field.
            if let Some(v) = vary {
                reply.drop_fields(&DROP_VARY);
                line(lines, b"Vary", &v);
            }
            return;
        };
        let Ok(encoder) = Encoder::new(coding, &self.settings.levels) else {
            return;
        };
        let etag = etag.map(weak_etag);
        reply.framing = Framing::Unknown;
        reply.drop_fields(if vary.is_some() {
            &DROP_ALL
        } else {
            &DROP_LENGTH_AND_TAG
        });
        line(lines, b"Content-Encoding", coding.as_str().as_bytes());
        if let Some(v) = vary {
            line(lines, b"Vary", &v);
        }
        if let Some(e) = etag {
            line(lines, b"ETag", &e);
        }
        if !head_only {
            *state = Some(Box::new(encoder));
        }
    }

    fn body(&self, state: &mut State, data: &[u8], end: bool, out: &mut BytesMut) {
        let Some(enc) = state.as_mut().and_then(|s| s.downcast_mut::<Encoder>()) else {
            out.extend_from_slice(data);
            return;
        };
        let mut failed = enc.write(data, out).is_err();
        if end {
            if let Some(enc) = state.take().and_then(|s| s.downcast::<Encoder>().ok()) {
                failed |= enc.finish(out).is_err();
            }
        }
        if failed {
            // Encoders write to memory: this does not happen; say so if it ever does.
            tracing::error!("compress: the encoder failed");
        }
    }

    fn compression(&self) -> Option<&Arc<Settings>> {
        Some(&self.settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_compressible() {
        let m: model::CompressRule =
            serde_yaml::from_str("{types: [text/*, application/json], min_length: 100}").unwrap();
        let c = Compress::compile(m, "f").unwrap();
        let s = &c.settings;
        let ok = |status: u16, fields: &[(&str, &'static [u8])], len: Option<u64>| {
            let f = |n: &str| fields.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
            s.compressible(status, &Seen::by(f), len)
        };
        let html: &[(&str, &'static [u8])] = &[("content-type", b"text/html; charset=utf-8")];
        assert!(ok(200, html, Some(1000)));
        assert!(ok(200, html, None), "length unknown");
        assert!(!ok(200, html, Some(99)), "too short");
        assert!(!ok(206, html, Some(1000)));
        assert!(!ok(404, html, Some(1000)));
        assert!(ok(
            200,
            &[("content-type", b"application/json")],
            Some(1000)
        ));
        assert!(!ok(200, &[("content-type", b"image/png")], Some(1000)));
        assert!(!ok(
            200,
            &[("content-type", b"text/css"), ("content-encoding", b"gzip")],
            Some(1000)
        ));
        assert!(!ok(
            200,
            &[
                ("content-type", b"text/css"),
                ("cache-control", b"public, no-transform")
            ],
            Some(1000)
        ));
    }
}
