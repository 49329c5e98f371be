//! `static`: files under a root directory, like nginx's `root`/`alias` with `index`.
//!
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
    index: String,
    /// Prefix removed from the request path first (the route's `path_prefix`), if any.
    prefix: Option<Bytes>,
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
        if s.index.is_empty() || s.index.contains('/') {
            return Err((format!("{path}.index"), "must be a file name".into()));
        }
        Ok(StaticFiles {
            root,
            index: s.index,
            prefix,
        })
    }

    /// What to answer `req` with.
    /// Answers `req`; `precompressed` is the coding the client asked for when the route serves
    /// precompressed siblings (`file.br`, `file.zst`, `file.gz`, as nginx `gzip_static`).
    pub fn serve(&self, req: &RequestHead, precompressed: Option<Coding>) -> StaticReply {
        let head_only = req.method == Method::Head;
        let mut rel = req.path();
        if let Some(p) = &self.prefix {
            rel = rel.strip_prefix(&p[..]).unwrap_or(rel);
        }
        let decoded: Vec<u8> = percent_encoding::percent_decode(rel).collect();
        if decoded.contains(&0) {
            return canned(400);
        }
        let mut path = self.root.clone();
        for seg in decoded.split(|b| *b == b'/') {
            match seg {
                b"" | b"." => {}
                b".." => return canned(404),
                // No file name is longer (NAME_MAX): 404 without asking the filesystem.
                s if s.len() > 255 => return canned(404),
                s => path.push(std::ffi::OsStr::from_bytes(s)),
            }
        }
        let mut meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) => return canned(io_status(&e)),
        };
        let meta_was_dir = meta.is_dir();
        if meta_was_dir {
            if !req.path().ends_with(b"/") {
                return redirect_to_dir(req);
            }
            path.push(&self.index);
            meta = match std::fs::metadata(&path) {
                Ok(m) if m.is_file() => m,
                Ok(_) => return canned(403),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return canned(403),
                Err(e) => return canned(io_status(&e)),
            };
        }
        if !meta.is_file() {
            return canned(403);
        }
        if req.path().ends_with(b"/") && !meta_was_dir {
            // `/file.txt/` names a directory that is not there (nginx answers 404 too).
            return canned(404);
        }
        match std::fs::canonicalize(&path) {
            Ok(real) if real.starts_with(&self.root) => {}
            Ok(_) => return canned(403),
            Err(e) => return canned(io_status(&e)),
        }
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
