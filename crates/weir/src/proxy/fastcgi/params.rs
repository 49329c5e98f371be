//! The CGI/1.1 environment of one request (RFC 3875 §4.1), as nginx's `fastcgi_params` and
//! `fastcgi_split_path_info` give it: which script runs, and what it learns of the request.
//!
//! The script is found from the path the pipeline normalised (the path the route matched and
//! the origin would see), percent-decoded once; a decoded path with a dot segment, a NUL or a
//! backslash names no script. Request fields become `HTTP_*` (`-` to `_`, upper case); a field
//! whose name has `_` is left out, as nginx does by default, so that `X_Forwarded_For` cannot
//! pose as `X-Forwarded-For`, and `Proxy` is never passed (`HTTP_PROXY`, "httpoxy").

use std::net::SocketAddr;

use bytes::{BufMut, BytesMut};
use weir_http::RequestHead;

use super::config::FastCgi;

/// What the request itself does not carry: who sent it and how, and the target it asked for
/// before a route rewrote it (`REQUEST_URI`, nginx's `$request_uri`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer<'a> {
    pub addr: SocketAddr,
    pub https: bool,
    pub request_uri: &'a [u8],
}

/// The request as the application is to see it, which the CGI environment is made from: a
/// parsed head (the bridge's), or the head the upstream phase built for it ([`Built`]).
pub trait Upward {
    fn method(&self) -> &[u8];
    fn authority(&self) -> Option<&[u8]>;
    fn query(&self) -> Option<&[u8]>;
    fn has_body(&self) -> bool;
    /// `(name, value)` of each field, in order.
    fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone + '_;
}

impl Upward for RequestHead {
    fn method(&self) -> &[u8] {
        self.method.as_str().as_bytes()
    }
    fn authority(&self) -> Option<&[u8]> {
        RequestHead::authority(self)
    }
    fn query(&self) -> Option<&[u8]> {
        RequestHead::query(self)
    }
    fn has_body(&self) -> bool {
        self.body != weir_http::BodyKind::Empty
    }
    fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone + '_ {
        RequestHead::fields(self).iter()
    }
}

/// An HTTP/1.1 request head weir wrote itself (`exchange::build_request`: the route's target,
/// the Host it chose, the fields its filters keep and add), read back without a parser: every
/// line is weir's own, one `Name: value` each.
#[derive(Debug)]
pub struct Built<'a> {
    method: &'a [u8],
    /// The target's path, as the route rewrote it.
    pub path: &'a [u8],
    query: Option<&'a [u8]>,
    /// The field lines, each ending in CRLF.
    lines: &'a [u8],
    has_body: bool,
}

impl<'a> Built<'a> {
    /// `head` from its request line to its empty line; `None` if it is not one weir writes.
    pub fn read(head: &'a [u8], has_body: bool) -> Option<Built<'a>> {
        let end = memchr::memmem::find(head, b"\r\n")?;
        let line = &head[..end];
        let sp = memchr::memchr(b' ', line)?;
        let method = &line[..sp];
        let target = line[sp + 1..].strip_suffix(b" HTTP/1.1")?;
        let (path, query) = match memchr::memchr(b'?', target) {
            Some(q) => (&target[..q], Some(&target[q + 1..])),
            None => (target, None),
        };
        let lines = head[end + 2..].strip_suffix(b"\r\n")?;
        Some(Built {
            method,
            path,
            query,
            lines,
            has_body,
        })
    }
}

impl Upward for Built<'_> {
    fn method(&self) -> &[u8] {
        self.method
    }
    fn authority(&self) -> Option<&[u8]> {
        self.fields()
            .find(|(n, _)| n.eq_ignore_ascii_case(b"host"))
            .map(|(_, v)| v)
    }
    fn query(&self) -> Option<&[u8]> {
        self.query
    }
    fn has_body(&self) -> bool {
        self.has_body
    }
    fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone + '_ {
        self.lines.split(|b| *b == b'\n').filter_map(|l| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            let colon = memchr::memchr(b':', l)?;
            let v = &l[colon + 1..];
            let start = v
                .iter()
                .position(|b| *b != b' ' && *b != b'\t')
                .unwrap_or(v.len());
            Some((&l[..colon], &v[start..]))
        })
    }
}

/// Where a path leads: the script's name, the rest (`PATH_INFO`) and the script's file.
#[derive(Debug, PartialEq, Eq)]
pub struct Script {
    pub name: Vec<u8>,
    pub path_info: Vec<u8>,
    pub filename: Vec<u8>,
}

/// The script `path` (as received, percent-encoded) names under `cfg`, or `None` when the
/// decoded path is not one a file can have.
pub fn script(cfg: &FastCgi, path: &[u8]) -> Option<Script> {
    let mut decoded = decoded_path(path)?;
    if decoded.ends_with(b"/") {
        decoded.extend_from_slice(&cfg.index);
    }
    let (name, path_info) = match cfg.split.captures(&decoded) {
        Some(c) => (
            c.get(1).map_or(&b""[..], |m| m.as_bytes()).to_vec(),
            c.get(2).map_or(&b""[..], |m| m.as_bytes()).to_vec(),
        ),
        None => (decoded.clone(), Vec::new()),
    };
    // php-fpm's `security.limit_extensions`, here: a name with another ending is no script.
    if !cfg.extensions.iter().any(|e| name.ends_with(e)) {
        return None;
    }
    let mut filename = cfg.root_bytes.to_vec();
    filename.extend_from_slice(&name);
    Some(Script {
        name,
        path_info,
        filename,
    })
}

/// The fallback script (`fastcgi.fallback`), if any.
pub fn fallback(cfg: &FastCgi) -> Option<Script> {
    let name = cfg.fallback.as_ref()?.to_vec();
    let mut filename = cfg.root_bytes.to_vec();
    filename.extend_from_slice(&name);
    Some(Script {
        name,
        path_info: Vec::new(),
        filename,
    })
}

/// `path` percent-decoded once, when it is one a file can have: absolute, no dot segment, no
/// NUL or backslash, no `%2F` (an escaped slash is never a separator: with
/// `limits.encoded_slashes: keep`, `/uploads%2Fevil.php` passed no `/uploads/` route and ran;
/// the review of issue 53), and no segment starting with `.` but `.well-known` (hidden as
/// `static` hides them).
pub fn decoded_path(path: &[u8]) -> Option<Vec<u8>> {
    if path
        .windows(3)
        .any(|w| w[0] == b'%' && w[1] == b'2' && (w[2] == b'f' || w[2] == b'F'))
    {
        return None;
    }
    let decoded = percent_decode(path)?;
    if decoded.first() != Some(&b'/')
        || decoded.contains(&0)
        || decoded.contains(&b'\\')
        || decoded.split(|b| *b == b'/').any(|seg| {
            seg == b"." || seg == b".." || (seg.first() == Some(&b'.') && seg != b".well-known")
        })
    {
        return None;
    }
    Some(decoded)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `%XX` decoded once; `None` for a malformed escape.
fn percent_decode(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            let h = hex(*s.get(i + 1)?)?;
            let l = hex(*s.get(i + 2)?)?;
            out.push(h << 4 | l);
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Appends one name-value pair (FastCGI's encoding: lengths of 1 or 4 bytes, then both).
fn pair(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    for n in [name.len(), value.len()] {
        if n < 128 {
            out.put_u8(n as u8);
        } else {
            out.put_u32(n as u32 | 0x8000_0000);
        }
    }
    out.put_slice(name);
    out.put_slice(value);
}

/// A number in decimal, without an allocation.
pub fn decimal(n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// Encodes the parameters for `head` running `script` into `out` (the PARAMS stream's body,
/// written straight, no pair kept apart: callgrind counted 16k instructions a request for the
/// list of pairs this replaced); `length` is the body's length (`CONTENT_LENGTH`), known before
/// the parameters are sent. `params` of the config replace weir's of the same name.
pub fn put(
    cfg: &FastCgi,
    head: &impl Upward,
    script: &Script,
    peer: &Peer,
    length: Option<u64>,
    out: &mut BytesMut,
) {
    let mut set = |name: &'static str, value: &[u8]| {
        if !cfg.params.iter().any(|(n, _)| n == name.as_bytes()) {
            pair(out, name.as_bytes(), value);
        }
    };
    let (host, port) = split_host(head.authority().unwrap_or(b""), peer.https);
    let mut digits = [0u8; 20];
    let mut ip = [0u8; 64];
    set("GATEWAY_INTERFACE", b"CGI/1.1");
    set("SERVER_SOFTWARE", b"weir");
    set("SERVER_PROTOCOL", b"HTTP/1.1");
    set("REQUEST_METHOD", head.method());
    set(
        "REQUEST_SCHEME",
        if peer.https { b"https" } else { b"http" },
    );
    if peer.https {
        set("HTTPS", b"on");
    }
    set("REQUEST_URI", peer.request_uri);
    // The script and its path info, as nginx's `$document_uri` after its internal redirect
    // (the client's path stays in `REQUEST_URI`).
    let mut document_uri = Vec::with_capacity(script.name.len() + script.path_info.len());
    document_uri.extend_from_slice(&script.name);
    document_uri.extend_from_slice(&script.path_info);
    set("DOCUMENT_URI", &document_uri);
    set("QUERY_STRING", head.query().unwrap_or(b""));
    set("DOCUMENT_ROOT", &cfg.root_bytes);
    set("SCRIPT_NAME", &script.name);
    set("SCRIPT_FILENAME", &script.filename);
    // As Debian's `snippets/fastcgi-php.conf` passes it (empty without path info), unless
    // `path_info: false` (nginx's bare `fastcgi.conf` passes none).
    if cfg.path_info {
        set("PATH_INFO", &script.path_info);
    }
    set("SERVER_NAME", host);
    set("SERVER_PORT", port);
    set(
        "REMOTE_ADDR",
        crate::vars::format_ip(peer.addr.ip(), &mut ip),
    );
    set(
        "REMOTE_PORT",
        decimal(u64::from(peer.addr.port()), &mut digits),
    );
    // php-cgi built with force-cgi-redirect asks for it; nginx's fastcgi_params sends it.
    set("REDIRECT_STATUS", b"200");
    // As nginx's `fastcgi_params` pass them: empty without a body or a type.
    match length {
        Some(n) if n > 0 || head.has_body() => set("CONTENT_LENGTH", decimal(n, &mut digits)),
        _ => set("CONTENT_LENGTH", b""),
    }
    let ctype = head
        .fields()
        .find(|(n, _)| n.eq_ignore_ascii_case(b"content-type"))
        .map(|(_, v)| v);
    set("CONTENT_TYPE", ctype.unwrap_or(b""));
    // The fields as spans of the head (no list of them made: `headers()` cost ~1.6k
    // instructions a request here, callgrind 2026-11-29).
    // Gathered once: the checks below look back and ahead (a `Built` head's lines are split
    // by `memchr`, ~25k instructions a request when walked per field, callgrind 2026-11-29).
    let list: Vec<(&[u8], &[u8])> = head.fields().collect();
    let fields = || list.iter().copied();
    let mut key = Vec::with_capacity(64);
    let mut joined = Vec::new();
    for (i, (name, value)) in fields().enumerate() {
        if name.contains(&b'_')
            || name.eq_ignore_ascii_case(b"proxy")
            || name.eq_ignore_ascii_case(b"content-type")
            || name.eq_ignore_ascii_case(b"content-length")
            || weir_http::hop::not_in_h2(name)
            // A repeated field was joined at its first occurrence.
            || fields().take(i).any(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            continue;
        }
        key.clear();
        key.extend_from_slice(b"HTTP_");
        key.extend(name.iter().map(|b| match b {
            b'-' => b'_',
            b => b.to_ascii_uppercase(),
        }));
        let mut rest = fields()
            .skip(i + 1)
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .peekable();
        if rest.peek().is_none() {
            pair(out, &key, value);
            continue;
        }
        // Repeated fields join as one (RFC 9110 §5.3); cookies with `; `.
        let sep: &[u8] = if name.eq_ignore_ascii_case(b"cookie") {
            b"; "
        } else {
            b", "
        };
        joined.clear();
        joined.extend_from_slice(value);
        for (_, v) in rest {
            joined.extend_from_slice(sep);
            joined.extend_from_slice(v);
        }
        pair(out, &key, &joined);
    }
    for (name, value) in &cfg.params {
        pair(out, name, value);
    }
}

/// `Host`'s name and port (the scheme's default when it names none).
fn split_host(host: &[u8], https: bool) -> (&[u8], &[u8]) {
    let default: &[u8] = if https { b"443" } else { b"80" };
    // An IPv6 literal keeps its brackets; its port follows `]:`.
    let colon = match host.iter().rposition(|b| *b == b':') {
        Some(i) if !host[i..].contains(&b']') => Some(i),
        _ => None,
    };
    match colon {
        Some(i) => (&host[..i], &host[i + 1..]),
        None => (host, default),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use bytes::Bytes;

    fn cfg() -> FastCgi {
        FastCgi {
            root: "/srv/www".into(),
            root_bytes: Bytes::from_static(b"/srv/www"),
            index: Bytes::from_static(b"index.php"),
            split: regex::bytes::Regex::new(r"^(.+?\.php)(/.*)$").unwrap(),
            require_file: true,
            fallback: None,
            directory_fallback: false,
            keep_conn: true,
            path_info: true,
            extensions: vec![Bytes::from_static(b".php")],
            params: vec![],
        }
    }

    #[test]
    fn paths_split_into_script_and_path_info() {
        let s = script(&cfg(), b"/app/index.php/users/7").unwrap();
        assert_eq!(s.name, b"/app/index.php");
        assert_eq!(s.path_info, b"/users/7");
        assert_eq!(s.filename, b"/srv/www/app/index.php");
        let s = script(&cfg(), b"/blog/").unwrap();
        assert_eq!(s.name, b"/blog/index.php");
        assert_eq!(s.path_info, b"");
        // The upload is the script's directory, not the script.
        let s = script(&cfg(), b"/uploads/x.jpg/index.php").unwrap();
        assert_eq!(s.name, b"/uploads/x.jpg/index.php");
        // A name without a script's ending is none (`.htaccess`, an upload).
        assert_eq!(script(&cfg(), b"/.htaccess"), None);
        assert_eq!(script(&cfg(), b"/uploads/x.jpg"), None);
    }

    #[test]
    fn a_decoded_dot_segment_or_nul_names_no_script() {
        assert_eq!(script(&cfg(), b"/a/..%2F..%2Fetc/passwd.php"), None);
        assert_eq!(script(&cfg(), b"/a%00.php"), None);
        assert_eq!(script(&cfg(), b"/a%5c..%5cb.php"), None);
        assert_eq!(script(&cfg(), b"/bad%zz.php"), None);
        assert_eq!(
            script(&cfg(), b"/caf%C3%A9.php").unwrap().name,
            "/café.php".as_bytes()
        );
        // An escaped slash is no separator; hidden segments are hidden.
        assert_eq!(script(&cfg(), b"/uploads%2Fevil.php"), None);
        assert_eq!(script(&cfg(), b"/uploads%2fevil.php"), None);
        assert_eq!(script(&cfg(), b"/.hidden/x.php"), None);
        assert_eq!(script(&cfg(), b"/uploads/.x.php"), None);
        assert!(script(&cfg(), b"/.well-known/x.php").is_some());
    }

    #[test]
    fn hosts_give_name_and_port() {
        assert_eq!(
            split_host(b"example.com:8080", false),
            (&b"example.com"[..], &b"8080"[..])
        );
        assert_eq!(
            split_host(b"example.com", true),
            (&b"example.com"[..], &b"443"[..])
        );
        assert_eq!(split_host(b"[::1]", false), (&b"[::1]"[..], &b"80"[..]));
        assert_eq!(split_host(b"[::1]:81", false), (&b"[::1]"[..], &b"81"[..]));
    }

    /// The head weir builds for the application reads back as its CGI environment: the
    /// route's path and query, the Host weir chose, repeated fields joined, a field with `_`
    /// and `Proxy` left out, the request target as the client sent it in `REQUEST_URI`.
    #[test]
    fn a_built_head_reads_back_as_the_environment() {
        let raw = b"POST /app/index.php/x?a=1 HTTP/1.1\r\nHost: example.test:8080\r\nX-A: 1\r\nCookie: a=1\r\nX_A: spoof\r\nProxy: evil\r\nCookie: b=2\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\n";
        let b = Built::read(raw, true).unwrap();
        assert_eq!(b.path, b"/app/index.php/x");
        assert_eq!(Upward::query(&b), Some(&b"a=1"[..]));
        assert_eq!(Upward::authority(&b), Some(&b"example.test:8080"[..]));
        let s = script(&cfg(), b.path).unwrap();
        let peer = Peer {
            addr: "10.0.0.7:4242".parse().unwrap(),
            https: true,
            request_uri: b"/x/y?a=1",
        };
        let mut out = BytesMut::new();
        put(&cfg(), &b, &s, &peer, Some(3), &mut out);
        let env = pairs(&out);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("REQUEST_METHOD"), Some("POST"));
        assert_eq!(get("SCRIPT_NAME"), Some("/app/index.php"));
        assert_eq!(get("PATH_INFO"), Some("/x"));
        assert_eq!(get("QUERY_STRING"), Some("a=1"));
        assert_eq!(get("REQUEST_URI"), Some("/x/y?a=1"));
        assert_eq!(get("SERVER_NAME"), Some("example.test"));
        assert_eq!(get("SERVER_PORT"), Some("8080"));
        assert_eq!(get("REMOTE_ADDR"), Some("10.0.0.7"));
        assert_eq!(get("REMOTE_PORT"), Some("4242"));
        assert_eq!(get("HTTPS"), Some("on"));
        assert_eq!(get("CONTENT_LENGTH"), Some("3"));
        assert_eq!(get("CONTENT_TYPE"), Some("text/plain"));
        assert_eq!(get("HTTP_X_A"), Some("1"));
        assert_eq!(get("HTTP_COOKIE"), Some("a=1; b=2"));
        assert_eq!(get("HTTP_PROXY"), None);
        assert_eq!(env.iter().filter(|(n, _)| n == "HTTP_X_A").count(), 1);
        // Not a head weir writes: refused.
        assert!(Built::read(b"GET / HTTP/1.0\r\n\r\n", false).is_none());
    }

    /// The name-value pairs of a PARAMS body.
    fn pairs(mut b: &[u8]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let len = |b: &mut &[u8]| -> usize {
            if b[0] < 128 {
                let n = b[0] as usize;
                *b = &b[1..];
                n
            } else {
                let n = u32::from_be_bytes([b[0] & 0x7f, b[1], b[2], b[3]]) as usize;
                *b = &b[4..];
                n
            }
        };
        while !b.is_empty() {
            let (n, v) = (len(&mut b), len(&mut b));
            let name = String::from_utf8(b[..n].to_vec()).unwrap();
            let value = String::from_utf8(b[n..n + v].to_vec()).unwrap();
            b = &b[n + v..];
            out.push((name, value));
        }
        out
    }
}
