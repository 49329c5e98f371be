//! `static`: files under a root directory, like nginx's `root`/`alias` with `index`,
//! `try_files` (a single-page app's fallback), `autoindex` (`autoindex.rs`) and `expires` by
//! file name (`static_caching.rs`).
//!
//! * A path segment starting with `.` (`/.git/config`, `/.env`) is answered 404, whatever
//!   `try_files` candidate or index reaches it, except `.well-known`; `dotfiles: allow` opts out.
//! * The request path is percent-decoded and split into segments; `..` is answered 404 and a
//!   resolved path (symlinks followed) that leaves the canonical root is answered 403, so neither
//!   traversal nor a symlink can reach outside the root.
//! * Validators: a strong `ETag` from mtime and size (as nginx), `Last-Modified`; `If-None-Match`
//!   (weak comparison) and `If-Modified-Since` answer 304.
//! * One byte range (`bytes=a-b`, `a-`, `-n`) answers 206, an unsatisfiable one 416; `If-Range`
//!   is honoured; several ranges are answered with the whole file (allowed by RFC 9110 §14.2).
//!   The rules are `weir_http::conditional`, shared with cache hits.
//!
//! File IO is blocking, on the worker thread, as nginx does without `aio`: small files are read
//! whole, larger ones are streamed in 64 KiB steps by the pipeline so memory stays bounded. No
//! open-file cache yet: each request opens the file. [`StaticFiles::serve`] returns what to
//! answer ([`StaticReply`]); the pipeline sends it.

use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use weir_http::conditional::{self, Precondition, RangeSpec, Validators};
use weir_http::response::put_header;
use weir_http::{Framing, Method, RequestHead};

use crate::config::{model, BaseDir, CompileError};
use crate::filters::codec::Coding;

/// Bodies up to this size are read into the output buffer in one go.
pub const INLINE_BODY: u64 = 64 * 1024;

/// A compiled static action.
#[derive(Debug)]
pub struct StaticFiles {
    /// Canonical root directory.
    root: PathBuf,
    /// Index files, tried in order.
    index: Vec<String>,
    /// Prefix removed from the request path first (the route's `path_prefix`), if any.
    prefix: Option<Bytes>,
    /// `try_files`: candidates, then the fallback (empty: the path alone).
    try_files: Vec<TryFile>,
    autoindex: Option<super::autoindex::Format>,
    caching: Vec<super::static_caching::CacheRule>,
    /// Serve names starting with `.` (`static.dotfiles: allow`); by default they are 404.
    dotfiles: bool,
    /// Where a request goes when no `try_files` candidate exists (`@app`).
    app: Option<Box<crate::proxy::route::ProxyRoute>>,
}

/// One `try_files` entry.
#[derive(Debug)]
enum TryFile {
    /// A path, with `$uri` (the request's path, after the prefix) at these byte offsets
    /// replaced: the text before, and after each `$uri`.
    Path(Vec<String>),
    /// `=404`: answer this status (last entry only).
    Status(u16),
    /// `@app`: hand the request to the `app` proxy (last entry only).
    App,
}

impl TryFile {
    fn expand(parts: &[String], uri: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(uri);
            }
            out.extend_from_slice(p.as_bytes());
        }
        out
    }
}

/// Where a request path leads under the root.
enum Located {
    /// A regular file, with its metadata.
    File(PathBuf, std::fs::Metadata),
    /// A directory without its index file (`autoindex` may list it).
    Directory(PathBuf),
}

/// What to answer.
#[derive(Debug)]
pub enum StaticReply {
    /// A canned error (or redirect) with extra field lines (`Location`, `Content-Range`).
    Canned { status: u16, lines: BytesMut },
    /// A response: status, field lines, framing, and the body.
    File {
        status: u16,
        lines: BytesMut,
        framing: Framing,
        body: StaticBody,
    },
}

/// The body of a [`StaticReply::File`].
#[derive(Debug)]
pub enum StaticBody {
    None,
    /// Read already (small files).
    Inline(Bytes),
    /// `len` bytes of a file from `offset`, to stream.
    Stream(FileBody),
}

/// A file being streamed: the open file, and its path to open it again after a wait for the
/// A name `static` keeps hidden unless `dotfiles: allow`: it starts with `.`, and is not
/// RFC 8615's `.well-known`.
fn hidden(name: &std::ffi::OsStr) -> bool {
    let b = name.as_bytes();
    b.first() == Some(&b'.') && b != b".well-known" && b != b"." && b != b".."
}

/// client (a stalled HTTP/2 stream holds no descriptor: `pipeline::stream_file`).
#[derive(Debug)]
pub struct FileBody {
    pub file: Option<File>,
    pub path: PathBuf,
    /// Device and inode of `file`: a file opened again must be the same one.
    pub id: (u64, u64),
    pub offset: u64,
    pub len: u64,
}

fn canned(status: u16) -> StaticReply {
    StaticReply::Canned {
        status,
        lines: BytesMut::new(),
    }
}

impl StaticFiles {
    /// `root` resolves against the config file's directory when relative, like `body_file`
    /// (before, it resolved against the working directory weir was started from).
    pub(crate) fn compile(
        s: model::Static,
        prefix: Option<Bytes>,
        path: &str,
        base: &BaseDir,
        app: Option<crate::proxy::route::ProxyRoute>,
    ) -> Result<StaticFiles, CompileError> {
        let root = std::fs::canonicalize(base.0.join(&s.root)).map_err(|e| {
            (
                format!("{path}.root"),
                format!("cannot open directory {:?}: {e}", s.root),
            )
        })?;
        if !root.is_dir() {
            return Err((
                format!("{path}.root"),
                format!("{:?} is not a directory", s.root),
            ));
        }
        // `index: []`: no index file (a directory is listed, or 403 without `autoindex`).
        let index = s.index.into_vec();
        if index.iter().any(|i| i.is_empty() || i.contains('/')) {
            return Err((format!("{path}.index"), "must be file names".into()));
        }
        let mut try_files = Vec::new();
        for (i, t) in s.try_files.iter().enumerate() {
            let key = format!("{path}.try_files[{i}]");
            let last = i + 1 == s.try_files.len();
            if t.starts_with('@') {
                if !last || app.is_none() {
                    return Err((
                        key,
                        format!("{t:?}: an application fallback is the last entry, with `app:` (a proxy action) on the static action"),
                    ));
                }
                try_files.push(TryFile::App);
                continue;
            }
            if let Some(code) = t.strip_prefix('=') {
                match code.parse::<u16>() {
                    Ok(c) if last && (400..600).contains(&c) => try_files.push(TryFile::Status(c)),
                    _ => {
                        return Err((
                            key,
                            format!("{t:?}: a status (=404) only as the last entry, 400-599"),
                        ))
                    }
                }
                continue;
            }
            if !t.starts_with('/') && !t.starts_with("$uri") {
                return Err((
                    key,
                    format!("{t:?}: an entry is $uri, $uri/, or a path starting with /"),
                ));
            }
            try_files.push(TryFile::Path(t.split("$uri").map(String::from).collect()));
        }
        if app.is_some() && !matches!(try_files.last(), Some(TryFile::App)) {
            return Err((
                format!("{path}.app"),
                "an application is reached through `try_files`: end it with \"@app\"".into(),
            ));
        }
        if try_files.len() == 1 {
            return Err((
                format!("{path}.try_files"),
                "give the candidates and a fallback: [$uri, $uri/, /index.html] or [$uri, =404]"
                    .into(),
            ));
        }
        let autoindex = match s.autoindex.as_str() {
            "off" => None,
            "html" => Some(super::autoindex::Format::Html),
            "json" => Some(super::autoindex::Format::Json),
            other => {
                return Err((
                    format!("{path}.autoindex"),
                    format!("{other:?}: give off, html or json"),
                ))
            }
        };
        let caching = s
            .cache_control
            .iter()
            .enumerate()
            .map(|(i, r)| {
                super::static_caching::CacheRule::compile(r, &format!("{path}.cache_control[{i}]"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StaticFiles {
            root,
            index,
            prefix,
            try_files,
            autoindex,
            caching,
            dotfiles: s.dotfiles == model::Dotfiles::Allow,
            app: app.map(Box::new),
        })
    }

    /// Whether requests no candidate answers go to an application (`try_files ... @app`).
    pub fn has_app(&self) -> bool {
        self.app.is_some()
    }

    /// The application `req` goes to: `app`, when no `try_files` candidate exists for it. A
    /// directory named without its `/` is the files' (redirected to it, as nginx's `$uri/`).
    pub fn app_for(&self, req: &RequestHead) -> Option<&crate::proxy::route::ProxyRoute> {
        let app = self.app.as_deref()?;
        let (_, candidates) = self.try_files.split_last()?;
        let uri = self.uri_of(req);
        let found = candidates.iter().any(|c| match c {
            TryFile::Path(parts) => {
                let p = TryFile::expand(parts, &uri);
                self.locate(&p, None).is_ok() || self.slash_redirect(req, &uri, &p)
            }
            _ => false,
        });
        (!found).then_some(app)
    }

    /// Whether candidate `p` is `$uri/` naming a directory the request named without its
    /// slash (with an application behind: nginx redirects to the directory, whose index may be
    /// a script).
    fn slash_redirect(&self, req: &RequestHead, uri: &[u8], p: &[u8]) -> bool {
        self.app.is_some()
            && !req.path().ends_with(b"/")
            && p == [uri, b"/"].concat()
            && self.is_dir(p)
    }

    /// Whether `p` (percent-encoded, from the root) names a directory under the root that
    /// `static` may show (no dot segment unless `dotfiles: allow`).
    fn is_dir(&self, p: &[u8]) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let decoded: Vec<u8> = percent_encoding::percent_decode(p).collect();
        let rel = decoded.strip_prefix(b"/").unwrap_or(&decoded);
        if rel.split(|b| *b == b'/').any(|s| {
            s == b".." || (!self.dotfiles && s.first() == Some(&b'.') && s != b".well-known")
        }) {
            return false;
        }
        match std::fs::canonicalize(self.root.join(std::ffi::OsStr::from_bytes(rel))) {
            Ok(real) => real.starts_with(&self.root) && real.is_dir(),
            Err(_) => false,
        }
    }

    /// `$uri`: the request's path after the prefix, starting with `/` as nginx's does.
    fn uri_of(&self, req: &RequestHead) -> Vec<u8> {
        let mut rel = req.path();
        if let Some(p) = &self.prefix {
            rel = rel.strip_prefix(&p[..]).unwrap_or(rel);
        }
        if rel.starts_with(b"/") {
            rel.to_vec()
        } else {
            [b"/", rel].concat()
        }
    }

    /// What to answer `req` with.
    /// Answers `req`; `precompressed` is the coding the client asked for when the route serves
    /// precompressed siblings (`file.br`, `file.zst`, `file.gz`, as nginx `gzip_static`).
    pub fn serve(&self, req: &RequestHead, precompressed: Option<Coding>) -> StaticReply {
        let mut rel = req.path();
        if let Some(p) = &self.prefix {
            rel = rel.strip_prefix(&p[..]).unwrap_or(rel);
        }
        // `$uri` always starts with `/`, as nginx's does (a stripped prefix may take it).
        let slashed;
        let uri: &[u8] = if rel.starts_with(b"/") {
            rel
        } else {
            slashed = [b"/", rel].concat();
            &slashed
        };
        let Some((last, candidates)) = self.try_files.split_last() else {
            return match self.locate(rel, Some(req)) {
                Ok(found) => self.answer(req, found, precompressed),
                Err(reply) => reply,
            };
        };
        for c in candidates {
            let TryFile::Path(parts) = c else { continue };
            let p = TryFile::expand(parts, uri);
            // A candidate is taken only when it names a file (or, ending in `/`, a directory
            // with its index or a listing); anything else tries the next.
            if self.slash_redirect(req, uri, &p) {
                return redirect_to_dir(req);
            }
            let found = self.locate(&p, None);
            // `$uri/` naming a directory without an index (nor a listing) is nginx's 403, not
            // the next candidate (the corpus of issue 53: a SPA's fallback page answered 200
            // where nginx refused): without an application behind, the files decide.
            if let Err(refused) = &found {
                if self.app.is_none()
                    && req.path().ends_with(b"/")
                    && p == [uri, b"/"].concat()
                    && self.is_dir(&p)
                {
                    return match refused {
                        StaticReply::Canned { status, .. } => canned(*status),
                        _ => canned(403),
                    };
                }
            }
            if let Ok(found) = found {
                // `$uri/` took a directory the request named without its slash: redirected
                // to it, as nginx's internal redirect ends.
                if !req.path().ends_with(b"/") && p == [uri, b"/"].concat() {
                    return redirect_to_dir(req);
                }
                return self.answer(req, found, precompressed);
            }
        }
        match last {
            TryFile::Status(s) => canned(*s),
            // Dispatched before (`app_for`); a file that vanished since is not found.
            TryFile::App => canned(404),
            TryFile::Path(parts) => {
                let p = TryFile::expand(parts, uri);
                match self.locate(&p, None) {
                    Ok(found) => self.answer(req, found, precompressed),
                    Err(reply) => reply,
                }
            }
        }
    }

    /// The file (or listable directory) request path `rel` names under the root. `req`: the
    /// request itself, when `rel` is its path (a directory without `/` then redirects to one);
    /// `None` for a `try_files` candidate, where a directory needs the `/`.
    fn locate(&self, rel: &[u8], req: Option<&RequestHead>) -> Result<Located, StaticReply> {
        // An escaped slash (`limits.encoded_slashes: keep`) names no file: decoded, it would
        // be a separator no route saw (`/private%2Ffile.txt` passed the route that guards
        // `/private/`; the review of issue 53).
        if rel
            .windows(3)
            .any(|w| w[0] == b'%' && w[1] == b'2' && (w[2] == b'f' || w[2] == b'F'))
        {
            return Err(canned(404));
        }
        let decoded: Vec<u8> = percent_encoding::percent_decode(rel).collect();
        if decoded.contains(&0) {
            return Err(canned(400));
        }
        let mut path = self.root.clone();
        for seg in decoded.split(|b| *b == b'/') {
            match seg {
                b"" | b"." => {}
                b".." => return Err(canned(404)),
                // `.git`, `.env`, `.htpasswd`: hidden unless the route allows them; only
                // RFC 8615's `.well-known` is public by default (issue 52).
                s if !self.dotfiles && hidden(std::ffi::OsStr::from_bytes(s)) => {
                    return Err(canned(404))
                }
                // No file name is longer (NAME_MAX): 404 without asking the filesystem.
                s if s.len() > 255 => return Err(canned(404)),
                s => path.push(std::ffi::OsStr::from_bytes(s)),
            }
        }
        let inside = |p: &std::path::Path| match std::fs::canonicalize(p) {
            // A link without a dot may lead to a name with one (`envlink -> .env`): what the
            // path resolves to is held to the same rule (review of issue 52).
            Ok(real) if real.starts_with(&self.root) => match real.strip_prefix(&self.root) {
                Ok(rel) if !self.dotfiles && rel.components().any(|c| hidden(c.as_os_str())) => {
                    Err(canned(404))
                }
                _ => Ok(()),
            },
            Ok(_) => Err(canned(403)),
            Err(e) => Err(canned(io_status(&e))),
        };
        let mut meta = std::fs::metadata(&path).map_err(|e| canned(io_status(&e)))?;
        // The request's own path says whether it named a directory (with a route prefix, `rel`
        // may be empty for the prefix itself).
        let slash = req.map_or(rel, |r| r.path()).ends_with(b"/");
        if meta.is_dir() {
            if !slash {
                return Err(match req {
                    Some(req) => redirect_to_dir(req),
                    None => canned(404),
                });
            }
            let dir = path.clone();
            let mut found = None;
            for name in &self.index {
                let candidate = dir.join(name);
                match std::fs::metadata(&candidate) {
                    Ok(m) if m.is_file() => {
                        found = Some((candidate, m));
                        break;
                    }
                    Ok(_) => return Err(canned(403)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(canned(io_status(&e))),
                }
            }
            match found {
                Some((p, m)) => {
                    path = p;
                    meta = m;
                }
                None => {
                    inside(&dir)?;
                    return match self.autoindex {
                        Some(_) => Ok(Located::Directory(dir)),
                        None => Err(canned(403)),
                    };
                }
            }
        } else if slash {
            // `/file.txt/` names a directory that is not there (nginx answers 404 too).
            return Err(canned(404));
        }
        if !meta.is_file() {
            return Err(canned(403));
        }
        inside(&path)?;
        Ok(Located::File(path, meta))
    }

    /// The answer for what [`Self::locate`] found.
    fn answer(
        &self,
        req: &RequestHead,
        found: Located,
        precompressed: Option<Coding>,
    ) -> StaticReply {
        let head_only = req.method == Method::Head;
        let (mut path, mut meta) = match found {
            Located::File(p, m) => (p, m),
            Located::Directory(dir) => return self.listing(&dir, req),
        };
        let name = path
            .file_name()
            .map(|n| n.as_bytes().to_vec())
            .unwrap_or_default();
        // The type is the original's; the bytes may be a precompressed sibling's (never for a
        // range: its offsets are the original's).
        let ctype = mime_guess::from_path(&path)
            .first_raw()
            .unwrap_or("application/octet-stream");
        let mut encoding = None;
        if let (Some(c), None) = (precompressed, req.header("range")) {
            let mut sibling = path.clone().into_os_string();
            sibling.push(c.suffix());
            let sibling = PathBuf::from(sibling);
            if let Ok(m) = std::fs::metadata(&sibling) {
                let inside =
                    std::fs::canonicalize(&sibling).is_ok_and(|real| real.starts_with(&self.root));
                if m.is_file() && inside {
                    path = sibling;
                    meta = m;
                    encoding = Some(c);
                }
            }
        }
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) => return canned(io_status(&e)),
        };
        let size = meta.len();
        let mtime = meta.modified().unwrap_or(UNIX_EPOCH);
        let mtime_secs = mtime
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let etag = format!("\"{mtime_secs:x}-{size:x}\"");
        let last_modified = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(mtime_secs));

        let validators = Validators {
            etag: Some(etag.as_bytes()),
            last_modified_text: Some(last_modified.as_bytes()),
            modified: Some(mtime_secs),
        };
        let mut lines = BytesMut::with_capacity(256);
        super::static_caching::add_fields(&self.caching, &name, &mut lines);
        if let Some(c) = encoding {
            put_header(&mut lines, b"Content-Encoding", c.as_str().as_bytes());
        }
        if precompressed.is_some() || encoding.is_some() {
            put_header(&mut lines, b"Vary", b"Accept-Encoding");
        }
        let verdict = conditional::evaluate(req, &validators);
        if verdict == Precondition::Failed {
            return canned(412);
        }
        if verdict == Precondition::NotModified {
            put_header(&mut lines, b"ETag", etag.as_bytes());
            put_header(&mut lines, b"Last-Modified", last_modified.as_bytes());
            return StaticReply::File {
                status: 304,
                lines,
                framing: Framing::Given,
                body: StaticBody::None,
            };
        }

        let range = conditional::range(req, size, &validators);
        let (status, offset, len) = match range {
            RangeSpec::Whole => (200, 0, size),
            RangeSpec::Bytes(start, end) => (206, start, end - start + 1),
            RangeSpec::Unsatisfiable => {
                let cr = format!("bytes */{size}");
                put_header(&mut lines, b"Content-Range", cr.as_bytes());
                return StaticReply::Canned { status: 416, lines };
            }
        };
        put_header(&mut lines, b"Content-Type", ctype.as_bytes());
        put_header(&mut lines, b"Last-Modified", last_modified.as_bytes());
        put_header(&mut lines, b"ETag", etag.as_bytes());
        put_header(&mut lines, b"Accept-Ranges", b"bytes");
        if status == 206 {
            let cr = format!("bytes {}-{}/{}", offset, offset + len - 1, size);
            put_header(&mut lines, b"Content-Range", cr.as_bytes());
        }
        let body = if head_only || len == 0 {
            StaticBody::None
        } else if len <= INLINE_BODY {
            let mut data = BytesMut::zeroed(len as usize);
            match file.read_exact_at(&mut data, offset) {
                Ok(()) => StaticBody::Inline(data.freeze()),
                // The file shrank since its size was read: stream what is there, and the
                // stream cuts the connection when it runs short of the promised length.
                Err(_) => StaticBody::Stream(FileBody::new(file, path, offset, len)),
            }
        } else {
            StaticBody::Stream(FileBody::new(file, path, offset, len))
        };
        StaticReply::File {
            status,
            lines,
            framing: Framing::Length(len),
            body,
        }
    }
}

impl StaticFiles {
    /// A directory's listing (`autoindex`), as a file answer with no validators.
    fn listing(&self, dir: &std::path::Path, req: &RequestHead) -> StaticReply {
        let Some(format) = self.autoindex else {
            return canned(403);
        };
        // Shown as the client asked for it (with the route's prefix), not as mapped.
        let Some((body, ctype)) = super::autoindex::listing(dir, req.path(), format) else {
            return canned(403);
        };
        let mut lines = BytesMut::with_capacity(64);
        put_header(&mut lines, b"Content-Type", ctype.as_bytes());
        let len = body.len() as u64;
        StaticReply::File {
            status: 200,
            lines,
            framing: Framing::Length(len),
            body: if req.method == Method::Head {
                StaticBody::None
            } else {
                StaticBody::Inline(Bytes::from(body))
            },
        }
    }
}

impl FileBody {
    fn new(file: File, path: PathBuf, offset: u64, len: u64) -> FileBody {
        use std::os::unix::fs::MetadataExt;
        let id = file.metadata().map_or((0, 0), |m| (m.dev(), m.ino()));
        FileBody {
            file: Some(file),
            path,
            id,
            offset,
            len,
        }
    }

    /// The open file, opened again if it was closed; an error if the path now names another
    /// file (replaced while the client stalled: the promised bytes cannot be sent).
    pub fn open(&mut self) -> std::io::Result<&File> {
        use std::os::unix::fs::MetadataExt;
        if self.file.is_none() {
            let f = File::open(&self.path)?;
            let m = f.metadata()?;
            if (m.dev(), m.ino()) != self.id {
                return Err(std::io::Error::other("file replaced while sending"));
            }
            self.file = Some(f);
        }
        self.file
            .as_ref()
            .ok_or_else(|| std::io::Error::other("file not open"))
    }
}

fn io_status(e: &std::io::Error) -> u16 {
    match e.kind() {
        std::io::ErrorKind::NotFound => 404,
        std::io::ErrorKind::PermissionDenied => 403,
        _ if e.raw_os_error() == Some(libc::ENOTDIR) => 404,
        // A segment longer than a file name can be names no file.
        _ if e.raw_os_error() == Some(libc::ENAMETOOLONG) => 404,
        _ => 500,
    }
}

fn redirect_to_dir(req: &RequestHead) -> StaticReply {
    // `//evil.com` + `/` would be a network-path reference (an open redirect): the Location
    // starts with one slash, whatever the request had.
    let path = req.path();
    let from = path
        .iter()
        .take_while(|b| **b == b'/')
        .count()
        .saturating_sub(1);
    let mut location = path[from..].to_vec();
    location.push(b'/');
    if let Some(q) = req.query() {
        location.push(b'?');
        location.extend_from_slice(q);
    }
    let mut lines = BytesMut::new();
    put_header(&mut lines, b"Location", &location);
    StaticReply::Canned { status: 301, lines }
}
