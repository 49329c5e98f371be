//! The `static` action over a real socket: validators, conditionals, ranges, escapes.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;

use common::*;

struct Fixture {
    srv: TestServer,
    _dir: std::path::PathBuf,
}

fn fixture(name: &str) -> Fixture {
    let base = std::env::temp_dir().join(format!("weir-static-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("www");
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("hello.txt"), "0123456789").unwrap();
    std::fs::write(root.join("docs/index.html"), "<p>docs</p>").unwrap();
    std::fs::write(root.join("big.bin"), vec![7u8; 300 * 1024]).unwrap();
    std::fs::write(base.join("secret.txt"), "top secret").unwrap();
    std::os::unix::fs::symlink(base.join("secret.txt"), root.join("escape.txt")).unwrap();
    std::os::unix::fs::symlink(root.join("hello.txt"), root.join("inside.txt")).unwrap();
    let routes = format!(
        "      - match: {{ path_prefix: /static/ }}\n        static: {{ root: {} }}\n      - static: {{ root: {} }}\n",
        root.display(),
        root.display()
    );
    Fixture {
        srv: start("", &routes),
        _dir: base,
    }
}

fn req(f: &Fixture, raw: &str) -> Response {
    let mut s = f.srv.connect();
    s.write_all(raw.as_bytes()).unwrap();
    read_response_to(&mut s, raw.starts_with("HEAD"))
}

#[test]
fn serves_files_with_validators() {
    let f = fixture("validators");
    let r = get(f.srv.addr, "/static/hello.txt");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "0123456789");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    let etag = r.header("etag").unwrap().to_string();
    let lm = r.header("last-modified").unwrap().to_string();

    let r = req(
        &f,
        &format!(
            "GET /static/hello.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: \"x\", {etag}\r\n\r\n"
        ),
    );
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    let r = req(
        &f,
        &format!("GET /static/hello.txt HTTP/1.1\r\nHost: t\r\nIf-Modified-Since: {lm}\r\n\r\n"),
    );
    assert_eq!(r.status, 304);
    let r = req(&f, "GET /static/hello.txt HTTP/1.1\r\nHost: t\r\nIf-Modified-Since: Thu, 01 Jan 1998 00:00:00 GMT\r\n\r\n");
    assert_eq!(r.status, 200);
    // If-None-Match wins over If-Modified-Since.
    let r = req(&f, &format!("GET /static/hello.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: \"other\"\r\nIf-Modified-Since: {lm}\r\n\r\n"));
    assert_eq!(r.status, 200);

    let r = req(&f, "HEAD /static/hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("10"));
}

#[test]
fn byte_ranges() {
    let f = fixture("ranges");
    let r = req(
        &f,
        "GET /static/hello.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=2-4\r\n\r\n",
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.text(), "234");
    assert_eq!(r.header("content-range"), Some("bytes 2-4/10"));
    let r = req(
        &f,
        "GET /static/hello.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=-3\r\n\r\n",
    );
    assert_eq!((r.status, r.text().as_str()), (206, "789"));
    let r = req(
        &f,
        "GET /static/hello.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=20-\r\n\r\n",
    );
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */10"));
    let r = req(&f, "GET /static/hello.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=0-1\r\nIf-Range: \"stale\"\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "0123456789"));
}

#[test]
fn large_files_stream_whole() {
    let f = fixture("large");
    let r = get(f.srv.addr, "/static/big.bin");
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 300 * 1024);
    assert!(r.body.iter().all(|b| *b == 7));
    let r = req(
        &f,
        "GET /static/big.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=100000-299999\r\n\r\n",
    );
    assert_eq!((r.status, r.body.len()), (206, 200_000));
}

#[test]
fn directories_and_index() {
    let f = fixture("dirs");
    let r = get(f.srv.addr, "/static/docs");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/static/docs/"));
    let r = get(f.srv.addr, "/static/docs/");
    assert_eq!((r.status, r.text().as_str()), (200, "<p>docs</p>"));
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(
        get(f.srv.addr, "/static/").status,
        403,
        "no index, no listing"
    );
    assert_eq!(get(f.srv.addr, "/static/missing.txt").status, 404);
}

#[test]
fn no_escape_from_the_root() {
    let f = fixture("escape");
    assert_eq!(get(f.srv.addr, "/static/../secret.txt").status, 404);
    assert_eq!(get(f.srv.addr, "/static/%2e%2e/secret.txt").status, 404);
    // An encoded slash is refused before any route (docs/config.md, "Request paths").
    assert_eq!(
        get(f.srv.addr, "/static/docs/..%2f..%2fsecret.txt").status,
        400
    );
    assert_eq!(
        get(f.srv.addr, "/static/escape.txt").status,
        403,
        "symlink out of the root"
    );
    assert_eq!(
        get(f.srv.addr, "/static/inside.txt").text(),
        "0123456789",
        "symlink inside the root is fine"
    );
    assert_eq!(get(f.srv.addr, "/static/hello.txt%00.html").status, 400);
    let r = req(
        &f,
        "POST /static/hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD")));
}

/// Issue 18, item 11: no open redirect, long segments and a file named as a directory are
/// 404, and If-Match / If-Unmodified-Since are honoured (412).
#[test]
fn redirects_never_leave_the_site_and_odd_paths_are_404() {
    let f = fixture("odd");
    for (path, location) in [
        ("//docs", "/docs/"),
        ("///docs?x=1", "/docs/?x=1"),
        ("/docs", "/docs/"),
        ("/static/docs", "/static/docs/"),
    ] {
        let r = req(&f, &format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert_eq!(
            (r.status, r.header("location")),
            (301, Some(location)),
            "{path}"
        );
    }
    let long = "a".repeat(300);
    for path in [
        format!("/static/{long}"),
        format!("/static/docs/{long}/x"),
        "/static/hello.txt/".to_string(),
        "/hello.txt/".to_string(),
    ] {
        let r = req(&f, &format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert_eq!(r.status, 404, "{path}");
    }
}

#[test]
fn if_match_and_if_unmodified_since_answer_412() {
    let f = fixture("preconditions");
    let r = get(f.srv.addr, "/static/hello.txt");
    let etag = r.header("etag").unwrap().to_string();
    let get_with = |h: &str| {
        req(
            &f,
            &format!("GET /static/hello.txt HTTP/1.1\r\nHost: a\r\n{h}\r\n"),
        )
        .status
    };
    assert_eq!(get_with(&format!("If-Match: {etag}\r\n")), 200);
    assert_eq!(get_with("If-Match: *\r\n"), 200);
    assert_eq!(get_with(&format!("If-Match: \"nope\", {etag}\r\n")), 200);
    assert_eq!(get_with("If-Match: \"nope\"\r\n"), 412);
    assert_eq!(
        get_with(&format!("If-Match: W/{etag}\r\n")),
        412,
        "strong comparison"
    );
    assert_eq!(
        get_with("If-Unmodified-Since: Mon, 01 Jan 2001 00:00:00 GMT\r\n"),
        412
    );
    assert_eq!(
        get_with("If-Unmodified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\n"),
        200
    );
    assert_eq!(
        get_with("If-Unmodified-Since: soon\r\n"),
        200,
        "an invalid date is ignored"
    );
    // If-Match wins over If-Unmodified-Since, and 412 over 304.
    assert_eq!(
        get_with(&format!(
            "If-Match: {etag}\r\nIf-Unmodified-Since: Mon, 01 Jan 2001 00:00:00 GMT\r\n"
        )),
        200
    );
    assert_eq!(
        get_with(&format!("If-Match: \"nope\"\r\nIf-None-Match: {etag}\r\n")),
        412
    );
}

/// Issue 52: dotfiles. `/.git/config`, `/.env`, `/.htpasswd` and a dot-directory's listing
/// answer 404 by default, directly, escaped (`%2E`) and through a `try_files` route, while
/// `/.well-known/` is served; `dotfiles: allow` serves them.
#[test]
fn dotfiles_are_404_unless_allowed() {
    let base = std::env::temp_dir().join(format!("weir-static-dot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("www");
    for d in [".git", ".well-known/acme-challenge", "sub/.hidden", "pub"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(root.join(".env"), "DB_PASSWORD=hunter2\n").unwrap();
    std::fs::write(root.join(".htpasswd"), "admin:$apr1$x\n").unwrap();
    std::fs::write(root.join("sub/.hidden/x.txt"), "hidden").unwrap();
    std::fs::write(root.join(".well-known/acme-challenge/tok"), "tok.key").unwrap();
    std::fs::write(root.join("index.html"), "<p>spa</p>").unwrap();
    std::fs::write(root.join("pub/a.txt"), "public").unwrap();
    // A link without a dot to a name with one (review of issue 52).
    std::os::unix::fs::symlink(root.join(".env"), root.join("envlink")).unwrap();
    std::os::unix::fs::symlink(root.join(".git"), root.join("gitlink")).unwrap();
    let r = root.display();
    let routes = format!(
        "      - match: {{ path_prefix: /spa/ }}\n        static: {{ root: {r}, try_files: [$uri, $uri/, /index.html] }}\n      - match: {{ path_prefix: /open/ }}\n        static: {{ root: {r}, dotfiles: allow }}\n      - static: {{ root: {r}, autoindex: html }}\n"
    );
    let srv = start("", &routes);
    for path in [
        "/.git/config",
        "/.env",
        "/.htpasswd",
        "/%2Eenv",
        "/%2egit/config",
        "/sub/.hidden/x.txt",
        "/.git/",
        "/sub/.hidden/",
        "/envlink",
        "/gitlink/config",
    ] {
        let got = get(srv.addr, path);
        assert_eq!(got.status, 404, "{path}: {}", got.text());
    }
    // Through try_files: the dotfile candidate is skipped, the fallback answers.
    let got = get(srv.addr, "/spa/.env");
    assert_eq!(got.status, 200);
    assert_eq!(got.text(), "<p>spa</p>");
    assert_eq!(get(srv.addr, "/pub/a.txt").text(), "public");
    let wk = get(srv.addr, "/.well-known/acme-challenge/tok");
    assert_eq!((wk.status, wk.text().as_str()), (200, "tok.key"));
    // The listing of a visible directory leaves dot names out.
    let listing = get(srv.addr, "/sub/");
    assert_eq!(listing.status, 200);
    assert!(!listing.text().contains(".hidden"), "{}", listing.text());
    // Opted out: served.
    let env = get(srv.addr, "/open/.env");
    assert_eq!(
        (env.status, env.text().as_str()),
        (200, "DB_PASSWORD=hunter2\n")
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// `dotfiles` takes `deny` or `allow`, and the error names the key.
#[test]
fn dotfiles_takes_deny_or_allow() {
    let err = config_error(
        "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - static: { root: ., dotfiles: maybe }\n",
    );
    assert!(err.contains("dotfiles"), "{err}");
}

/// `try_files [$uri, $uri/, /index.html]`: a directory without an index is nginx's 403, not the
/// fallback page (the corpus of issue 53 found weir answering a SPA's index.html there, a page
/// nginx refused); a path that names nothing gets the fallback.
#[test]
fn a_directory_without_an_index_is_refused_not_the_fallback() {
    let base = std::env::temp_dir().join(format!("weir-static-spa403-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("www");
    std::fs::create_dir_all(root.join("nodir")).unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("index.html"), "app").unwrap();
    std::fs::write(root.join("docs/index.html"), "docs").unwrap();
    let srv = start(
        "",
        &format!(
            "      - static: {{ root: {}, try_files: [$uri, $uri/, /index.html] }}\n",
            root.display()
        ),
    );
    let get = |p: &str| {
        let mut s = srv.connect();
        s.write_all(format!("GET {p} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .unwrap();
        read_response_to(&mut s, false)
    };
    assert_eq!(get("/nodir/").status, 403);
    assert_eq!(get("/docs/").text(), "docs");
    assert_eq!(get("/missing/route").text(), "app");
    assert_eq!(get("/missing/").text(), "app");
    let _ = std::fs::remove_dir_all(&base);
}
