//! One normal form for request paths (issue 33 §1): spellings of `/private/x` that an origin
//! normalising as nginx or a framework does would serve must meet `/private/`'s JWT, over
//! HTTP/1.1 and HTTP/2 alike, or be refused: never the content. The origin here decodes
//! escapes until none is left, reads `\` as `/`, drops `;` parameters and resolves dot
//! segments, the most trusting origin there is.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::h2raw;
use common::origin::{http_origin, ok, Origin};
use common::{roundtrip, start_config, TestServer};
use jsonwebtoken::{encode, EncodingKey, Header};

const SECRET: &str = "s3cret-for-paths";

/// What the most trusting origin makes of a path.
fn origin_view(path: &str) -> String {
    let mut p = path.to_string();
    loop {
        let d = percent_encoding::percent_decode_str(&p)
            .decode_utf8_lossy()
            .into_owned();
        if d == p {
            break;
        }
        p = d;
    }
    let p = p.replace('\\', "/");
    // NFKC, for the code points that fold into `.`, `/` or `\\` (issue 52).
    let p = p
        .replace(['\u{FF0E}', '\u{FE52}', '\u{2024}'], ".")
        .replace('\u{2025}', "..")
        .replace(['\u{FF0F}', '\u{FF3C}', '\u{FE68}'], "/")
        .replace('\u{FF50}', "p")
        .replace('\u{FF41}', "a");
    let mut out: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg.split(';').next().unwrap_or("") {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

/// An origin serving `SECRET CONTENT` for what it reads as /private/..., and recording the
/// request lines it got.
fn normalising_origin() -> (Origin, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let o = http_origin(move |req| {
        s2.lock().unwrap().push(req.line.clone());
        let target = req.line.split(' ').nth(1).unwrap_or("/");
        let path = target.split('?').next().unwrap_or("/");
        let view = origin_view(path);
        if view.starts_with("/private/") {
            ok("SECRET CONTENT")
        } else {
            ok(&format!("public {view}"))
        }
    });
    (o, seen)
}

fn server(origin: &Origin, extra: &str) -> TestServer {
    start_config(&format!(
        r#"
workers: 1
{extra}
upstreams:
  o: {{ servers: ["{}"] }}
filters:
  token:
    jwt: {{ algorithms: [HS256], secret: "{SECRET}" }}
listeners:
  - address: 127.0.0.1:0
    h2c: true
    routes:
      - match: {{ path_prefix: /private/ }}
        filters: [token]
        proxy: {{ upstream: o }}
      - match: {{ path_prefix: /api/ }}
        proxy: {{ upstream: o }}
      - match: {{ path_prefix: / }}
        proxy: {{ upstream: o }}
"#,
        origin.addr
    ))
}

fn bearer() -> String {
    let claims = serde_json::json!({"sub": "alice", "exp": 4_000_000_000u64});
    let t = encode(
        &Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    format!("Authorization: Bearer {t}\r\n")
}

/// Every spelling the issue lists, and the variants it asks for.
const SPELLINGS: &[&str] = &[
    "/private/x",
    "/api/../private/x",
    "/api/%2e%2e/private/x",
    "/api/%2E%2E/private/x",
    "/api/..%2Fprivate/x",
    "/api/..%2fprivate/x",
    "/x/../private/x",
    "/%70rivate/x",
    "/%70%72ivate/x",
    "//private/x",
    "/private%2Fx",
    "/api/%252e%252e/private/x",
    "/api/..;/private/x",
    "/api/.%2e/private/x",
    "/./private/x",
    "/api/./../private/x",
    "/api/..\\private/x",
    "/api/%5c..%5cprivate/x",
    "/api/..%5Cprivate/x",
    "/p%72ivate/x?q=1",
    // Found by the attack review: double encodings of other bytes, path parameters outside
    // dot segments, an encoded ;, overlong UTF-8.
    "/%2570rivate/x",
    "/%25%37%30rivate/x",
    "/api/%25%32%65%25%32%65/private/x",
    "/api/%25252e%25252e/private/x",
    "/private;a/x",
    "/private;/x",
    "/api/..%3b/private/x",
    // The second review: three- and four-byte overlong encodings of `.` and `/`.
    "/api/%E0%80%AE%E0%80%AE/private/x",
    "/api/%F0%80%80%AE%F0%80%80%AE/private/x",
    "/api/%E0%80%AF..%E0%80%AFprivate/x",
    // Issue 52: Unicode look-alikes of `.` and `/`, escaped and raw, for an origin that
    // applies NFKC to paths.
    "/api/%EF%BC%8E%EF%BC%8E/private/x",
    "/api/%E2%80%A5/private/x",
    "/api%EF%BC%8F..%EF%BC%8Fprivate/x",
    "/api/%EF%B9%92%EF%B9%92/private/x",
    "/api/\u{FF0E}\u{FF0E}/private/x",
    "/api/\u{2025}/private/x",
    "/api\u{FF0F}..\u{FF0F}private/x",
    // Its review: fullwidth letters, escaped.
    "/%EF%BD%90rivate/x",
    "/priv%EF%BD%81te/x",
];

fn sure_the_origin_would_serve_it(p: &str) {
    // (Overlong encodings are what a lax decoder reads as `.` or `/`; this origin's strict
    // decoder does not, so those spellings are taken on the review's word.)
    assert!(
        origin_view(p.split('?').next().unwrap()).starts_with("/private/")
            || origin_view(p).contains("private"),
        "{p} is not a spelling of /private/: the test is wrong"
    );
}

#[test]
fn no_spelling_of_a_protected_path_reaches_it_without_a_token_over_http1() {
    let (o, seen) = normalising_origin();
    let s = server(&o, "");
    for p in SPELLINGS {
        sure_the_origin_would_serve_it(p);
        let mut c = s.connect();
        let raw = format!("GET {p} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let r = roundtrip(&mut c, raw.as_bytes());
        assert!(
            matches!(r.status, 400 | 401 | 404),
            "{p}: {} {:?}",
            r.status,
            r.text()
        );
        assert!(!r.text().contains("SECRET"), "{p} reached the content");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "the origin was asked: {:?}",
        seen.lock().unwrap()
    );
}

#[test]
fn no_spelling_of_a_protected_path_reaches_it_without_a_token_over_http2() {
    let (o, seen) = normalising_origin();
    let s = server(&o, "");
    let mut c = h2raw::raw(s.addr);
    for (i, p) in SPELLINGS.iter().enumerate() {
        let stream = 1 + 2 * i as u32;
        let block = h2raw::get("http", b"a", p.as_bytes());
        c.write_all_frames(&h2raw::frame(
            h2raw::HEADERS,
            h2raw::END_HEADERS | h2raw::END_STREAM,
            stream,
            &block,
        ));
        let out = h2raw::outcome(&mut c, stream);
        assert!(out.goaway.is_none(), "{p}: GOAWAY {:?}", out.goaway);
        assert!(out.answered || out.reset.is_some(), "{p}: {out:?}");
        assert!(
            !out.text().contains("SECRET"),
            "{p} reached the content over h2"
        );
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
}

/// Issue 52: raw bytes above 0x7F in an HTTP/1.1 request target are refused (400) and never
/// relayed, unless `limits.utf8_paths: keep`, where the origin gets them as sent; a look-alike
/// of `.` is refused either way.
#[test]
fn raw_non_ascii_paths_are_refused_unless_kept() {
    let send = |s: &TestServer, path: &[u8]| {
        let mut c = s.connect();
        let mut raw = b"GET ".to_vec();
        raw.extend_from_slice(path);
        raw.extend_from_slice(b" HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        roundtrip(&mut c, &raw)
    };
    let (o, seen) = normalising_origin();
    let s = server(&o, "");
    for path in [
        "/caf\u{e9}".as_bytes(),
        b"/a\xff",
        "/\u{0430}pi/x".as_bytes(),
    ] {
        assert_eq!(send(&s, path).status, 400, "{path:?}");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
    drop(s);
    let s = server(&o, "limits: { utf8_paths: keep }");
    let r = send(&s, "/caf\u{e9}".as_bytes());
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "public /caf\u{e9}");
    assert_eq!(send(&s, b"/a\xff").status, 400, "never UTF-8");
    assert_eq!(
        send(&s, "/api/\u{FF0E}\u{FF0E}/private/x".as_bytes()).status,
        400
    );
    assert!(seen.lock().unwrap()[0].starts_with("GET /caf\u{e9} HTTP/1.1"));
}

trait WriteFrames {
    fn write_all_frames(&mut self, f: &[u8]);
}

impl WriteFrames for std::net::TcpStream {
    fn write_all_frames(&mut self, f: &[u8]) {
        use std::io::Write;
        self.write_all(f).unwrap();
    }
}

#[test]
fn with_a_token_the_origin_sees_the_normal_form() {
    let (o, seen) = normalising_origin();
    let s = server(&o, "");
    let auth = bearer();
    for (raw, want) in [
        ("/api/%2e%2e/private/x", "/private/x"),
        ("/api/../private/x?a=%2F", "/private/x?a=%2F"),
        ("//private//x/./y/..", "/private/x/"),
        ("/%70rivate/%7euser", "/private/~user"),
        ("/private/a%2bb", "/private/a%2Bb"),
    ] {
        seen.lock().unwrap().clear();
        let mut c = s.connect();
        let req = format!("GET {raw} HTTP/1.1\r\nHost: a\r\n{auth}Connection: close\r\n\r\n");
        let r = roundtrip(&mut c, req.as_bytes());
        assert_eq!(r.status, 200, "{raw}");
        assert_eq!(r.text(), "SECRET CONTENT");
        assert_eq!(
            seen.lock().unwrap().as_slice(),
            [format!("GET {want} HTTP/1.1")],
            "{raw}"
        );
    }
    // A refused spelling is refused with a token too (400, not forwarded).
    let mut c = s.connect();
    let req = format!("GET /private%2Fx HTTP/1.1\r\nHost: a\r\n{auth}\r\n");
    assert_eq!(roundtrip(&mut c, req.as_bytes()).status, 400);
}

#[test]
fn encoded_slashes_pass_through_when_the_operator_says_keep() {
    let (o, seen) = normalising_origin();
    let s = server(&o, "limits: { encoded_slashes: keep }");
    let mut c = s.connect();
    let r = roundtrip(&mut c, b"GET /files/a%2fb HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        ["GET /files/a%2Fb HTTP/1.1"]
    );
    // Kept inside its segment: it neither matches /private/ nor escapes the route.
    let r = roundtrip(&mut c, b"GET /private%2Fx HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 200);
    // The origin here decodes it and would serve /private/x: that is what `keep` trusts the
    // origin not to do, and why it is off by default.
    assert_eq!(r.text(), "SECRET CONTENT");
    assert_eq!(
        roundtrip(&mut c, b"GET /a%00 HTTP/1.1\r\nHost: a\r\n\r\n").status,
        400
    );
}

/// The example contract: examples/gateway.yaml sends /api/../private/x to /private/'s JWT.
#[test]
fn the_gateway_example_protects_private_from_dot_segments() {
    let (o, seen) = normalising_origin();
    let vars: HashMap<String, String> = [
        ("WEIR_LISTEN", "127.0.0.1:0".to_string()),
        ("WEIR_ECHO_1", o.addr.to_string()),
        ("WEIR_ECHO_2", o.addr.to_string()),
        ("WEIR_WORKERS", "1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples"));
    let example = include_str!("../../../examples/gateway.yaml");
    let cfg = weir::runtime::load_str(example, dir, |v| vars.get(v).cloned()).unwrap();
    let handle = weir::server::start(cfg).unwrap();
    let s = TestServer {
        addr: handle.local_addrs()[0],
        handle: Some(handle),
    };
    for p in [
        "/api/../private/x",
        "/api/%2e%2e/private/x",
        "/api/..%2Fprivate/x",
    ] {
        let mut c = s.connect();
        let raw = format!("GET {p} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let r = roundtrip(&mut c, raw.as_bytes());
        assert!(matches!(r.status, 400 | 401), "{p}: {}", r.status);
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
}
