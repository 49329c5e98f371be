//! The CGI/1.1 environment of one request (RFC 3875 §4.1), as nginx's `fastcgi_params` and
//! `fastcgi_split_path_info` give it: which script runs, and what it learns of the request.
//!
//! The script is found from the path the pipeline normalised (the path the route matched and
//! the origin would see), percent-decoded once; a decoded path with a dot segment, a NUL or a
//! backslash names no script. Request fields become `HTTP_*` (`-` to `_`, upper case); a field
//! whose name has `_` is left out, as nginx does by default, so that `X_Forwarded_For` cannot
//! pose as `X-Forwarded-For`, and `Proxy` is never passed (`HTTP_PROXY`, "httpoxy").

use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use weir_http::{BodyKind, RequestHead};

use super::config::FastCgi;

/// What the request itself does not carry: who sent it and how, and the target it asked for
/// before a route rewrote it (`REQUEST_URI`, nginx's `$request_uri`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub addr: SocketAddr,
    pub https: bool,
    pub request_uri: Bytes,
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
    let mut decoded = percent_decode(path)?;
    if decoded.first() != Some(&b'/')
        || decoded.contains(&0)
        || decoded.contains(&b'\\')
        || decoded
            .split(|b| *b == b'/')
            .any(|seg| seg == b"." || seg == b"..")
    {
        return None;
    }
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

/// The parameters for `head` running `script`; `length` is the body's length
/// (`CONTENT_LENGTH`), known before the parameters are sent.
pub fn build(
    cfg: &FastCgi,
    head: &RequestHead,
    script: &Script,
    peer: &Peer,
    length: Option<u64>,
) -> Vec<(Bytes, Bytes)> {
    let mut p: Vec<(Bytes, Bytes)> = Vec::with_capacity(32 + head.headers().len());
    let mut set = |name: &'static str, value: &[u8]| {
        p.push((
            Bytes::from_static(name.as_bytes()),
            Bytes::copy_from_slice(value),
        ));
    };
    let (host, port) = split_host(head.authority().unwrap_or(b""), peer.https);
    set("GATEWAY_INTERFACE", b"CGI/1.1");
    set("SERVER_SOFTWARE", b"weir");
    set("SERVER_PROTOCOL", b"HTTP/1.1");
    set("REQUEST_METHOD", head.method.as_str().as_bytes());
    set(
        "REQUEST_SCHEME",
        if peer.https { b"https" } else { b"http" },
    );
    if peer.https {
        set("HTTPS", b"on");
    }
    set("REQUEST_URI", &peer.request_uri);
    set("DOCUMENT_URI", head.path());
    set("QUERY_STRING", head.query().unwrap_or(b""));
    set("DOCUMENT_ROOT", &cfg.root_bytes);
    set("SCRIPT_NAME", &script.name);
    set("SCRIPT_FILENAME", &script.filename);
    set("PATH_INFO", &script.path_info);
    set("SERVER_NAME", host);
    set("SERVER_PORT", port.as_bytes());
    set("REMOTE_ADDR", peer.addr.ip().to_string().as_bytes());
    set("REMOTE_PORT", peer.addr.port().to_string().as_bytes());
    // php-cgi built with force-cgi-redirect asks for it; nginx's fastcgi_params sends it.
    set("REDIRECT_STATUS", b"200");
    if let Some(n) = length {
        set("CONTENT_LENGTH", n.to_string().as_bytes());
    }
    if let Some(t) = head.header("content-type") {
        set("CONTENT_TYPE", t);
    }
    let mut fields: Vec<(Bytes, BytesMut)> = Vec::new();
    for h in head.headers() {
        let name = &h.name[..];
        if name.contains(&b'_')
            || name.eq_ignore_ascii_case(b"proxy")
            || name.eq_ignore_ascii_case(b"content-type")
            || name.eq_ignore_ascii_case(b"content-length")
            || weir_http::hop::not_in_h2(name)
        {
            continue;
        }
        let mut key = BytesMut::with_capacity(5 + name.len());
        key.put_slice(b"HTTP_");
        key.extend(name.iter().map(|b| match b {
            b'-' => b'_',
            b => b.to_ascii_uppercase(),
        }));
        let key = key.freeze();
        match fields.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => {
                // Repeated fields join as one (RFC 9110 §5.3); cookies with `; `.
                v.put_slice(if name.eq_ignore_ascii_case(b"cookie") {
                    b"; "
                } else {
                    b", "
                });
                v.put_slice(&h.value);
            }
            None => fields.push((key, BytesMut::from(&h.value[..]))),
        }
    }
    p.extend(fields.into_iter().map(|(k, v)| (k, v.freeze())));
    for (name, value) in &cfg.params {
        match p.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value.clone(),
            None => p.push((name.clone(), value.clone())),
        }
    }
    p
}

/// The body's length when its framing says it (a chunked body is counted first).
pub fn declared_length(head: &RequestHead) -> Option<u64> {
    match head.body {
        BodyKind::Empty => Some(0),
        BodyKind::Length(n) => Some(n),
        BodyKind::Chunked | BodyKind::CloseDelimited => None,
    }
}

/// `Host`'s name and port (the scheme's default when it names none).
fn split_host(host: &[u8], https: bool) -> (&[u8], String) {
    let default = if https { "443" } else { "80" };
    // An IPv6 literal keeps its brackets; its port follows `]:`.
    let colon = match host.iter().rposition(|b| *b == b':') {
        Some(i) if !host[i..].contains(&b']') => Some(i),
        _ => None,
    };
    match colon {
        Some(i) => (
            &host[..i],
            String::from_utf8_lossy(&host[i + 1..]).into_owned(),
        ),
        None => (host, default.to_string()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cfg() -> FastCgi {
        FastCgi {
            root: "/srv/www".into(),
            root_bytes: Bytes::from_static(b"/srv/www"),
            index: Bytes::from_static(b"index.php"),
            split: regex::bytes::Regex::new(r"^(.+?\.php)(/.*)$").unwrap(),
            require_file: true,
            fallback: None,
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
    }

    #[test]
    fn hosts_give_name_and_port() {
        assert_eq!(
            split_host(b"example.com:8080", false),
            (&b"example.com"[..], "8080".into())
        );
        assert_eq!(
            split_host(b"example.com", true),
            (&b"example.com"[..], "443".into())
        );
        assert_eq!(split_host(b"[::1]", false), (&b"[::1]"[..], "80".into()));
        assert_eq!(split_host(b"[::1]:81", false), (&b"[::1]"[..], "81".into()));
    }
}
