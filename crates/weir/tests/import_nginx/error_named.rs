//! Issue 53 §5: `error_page` to a named location (tests/fixtures/nginx/error-named.conf),
//! served by nginx and by weir from `weir import` of the same file: `error_page 404 = @app`
//! over files sends a missing path to the application (a file and a directory's index are
//! still the files'), and `error_page 502 @maintenance` answers a dead backend with the named
//! location's page, status kept. A named location that does anything else is listed.

use std::io::{BufReader, Write};

use super::common;
use super::common::process::{free_port, have_all_or_skip};
use super::{copy, import, main_conf, side_by_side};

/// Status, and the body of any answer.
fn ask(port: u16, path: &str) -> (u16, String) {
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut s = common::connect(addr);
    let raw = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let r = common::roundtrip(&mut s, raw.as_bytes());
    (r.status, r.text())
}

#[test]
fn error_pages_to_named_locations_answer_as_nginx_after_import() {
    if !have_all_or_skip(&["nginx"], "apt-get install nginx-light") {
        return;
    }
    let origin = common::origin::origin(|conn| {
        let mut w = conn.try_clone().unwrap();
        let mut r = BufReader::new(conn);
        while let Some(req) = common::origin::read_request(&mut r) {
            let target = req.line.split(' ').nth(1).unwrap_or("-").to_string();
            if w.write_all(&common::origin::ok(&format!("app {target}\n")))
                .is_err()
            {
                return;
            }
        }
    });
    let (pn, pw) = (free_port(), free_port());
    let site =
        std::env::temp_dir().join(format!("weir-import-errnamed-site-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&site);
    std::fs::create_dir_all(site.join("www/docs")).unwrap();
    std::fs::create_dir_all(site.join("maint")).unwrap();
    std::fs::write(site.join("www/page.html"), "<p>page</p>\n").unwrap();
    std::fs::write(site.join("www/docs/index.html"), "<p>docs</p>\n").unwrap();
    std::fs::write(site.join("maint/down.html"), "<p>back soon</p>\n").unwrap();
    let edits = vec![
        ("listen 80;".to_string(), format!("listen 127.0.0.1:{pn};")),
        (
            "/srv/site".to_string(),
            site.join("www").display().to_string(),
        ),
        (
            "/srv/maintenance".to_string(),
            site.join("maint").display().to_string(),
        ),
        ("127.0.0.1:3000".to_string(), origin.addr.to_string()),
    ];
    let dir = copy("error-named.conf", "errnamed", &edits);
    let conf = dir.join("error-named.conf");
    let main = main_conf(&dir, &conf);
    let (yaml, stderr, ok) = import(&conf);
    assert!(ok, "{stderr}");
    assert!(yaml.contains("'@app'"), "{yaml}");
    assert!(yaml.contains("down.html"), "{yaml}");
    assert!(stderr.contains("error_page 500 @other"), "{stderr}");
    assert!(!stderr.contains("@maintenance"), "{stderr}");
    let (_n, _w) = side_by_side(&dir, &main, &yaml, pn, pw);
    for path in [
        "/page.html",
        "/docs/",
        "/missing",
        "/blog/post?id=1",
        "/backend/x",
    ] {
        let (n, w) = (ask(pn, path), ask(pw, path));
        eprintln!("{path}: nginx {n:?} weir {w:?}");
        assert_eq!(w, n, "{path}:\n{yaml}");
    }
    let _ = std::fs::remove_dir_all(&site);
    let _ = std::fs::remove_dir_all(&dir);
}
