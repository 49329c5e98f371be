//! Static sites over a real socket (issue 36 §4): `try_files` (a single-page app's fallback, a
//! status as the last entry), directory listings (off by default; HTML and JSON, names escaped,
//! dotfiles hidden, never outside the root), `index`, and `Cache-Control`/`Expires` by file name.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::PathBuf;

use common::*;

/// A site: `/index.html`, `/app.css`, `/assets/app-1a2b.js`, `/docs/` (an index), `/files/`
/// (no index: `a.txt`, `<b>.txt`, `.hidden`, `sub/`), and a secret beside the root.
fn site(tag: &str) -> PathBuf {
    let base = std::env::temp_dir().join(format!("weir-site-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("www");
    for d in ["assets", "docs", "files/sub"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("index.html"), "<p>the app</p>").unwrap();
    std::fs::write(root.join("app.css"), "body{}").unwrap();
    std::fs::write(root.join("assets/app-1a2b.js"), "run()").unwrap();
    std::fs::write(root.join("docs/index.html"), "<p>docs</p>").unwrap();
    std::fs::write(root.join("files/a.txt"), "aaa").unwrap();
    std::fs::write(root.join("files/<b>.txt"), "b").unwrap();
    std::fs::write(root.join("files/.hidden"), "h").unwrap();
    std::fs::write(base.join("secret.txt"), "top secret").unwrap();
    std::os::unix::fs::symlink(&base, root.join("files/up")).unwrap();
    root
}

fn serve(root: &std::path::Path, static_section: &str) -> TestServer {
    start(
        "",
        &format!(
            "      - static: {{ root: '{}', {static_section} }}\n",
            root.display()
        ),
    )
}

#[test]
fn a_single_page_app_falls_back_to_its_index() {
    let root = site("spa");
    let srv = serve(&root, "try_files: ['$uri', '$uri/', '/index.html']");
    // Files and directories that exist are served as they are.
    assert_eq!(get(srv.addr, "/app.css").text(), "body{}");
    assert_eq!(get(srv.addr, "/docs/").text(), "<p>docs</p>");
    // A directory without the slash ($uri/) is redirected to it, as nginx does.
    let r = get(srv.addr, "/docs");
    assert_eq!((r.status, r.header("location")), (301, Some("/docs/")));
    // A directory without an index is refused (403), as nginx's `$uri/` does: not the app.
    assert_eq!(get(srv.addr, "/files/").status, 403);
    // Everything else is the app, with 200 and its type.
    for path in ["/settings/profile", "/missing.css", "/%2e%2e/secret.txt"] {
        let r = get(srv.addr, path);
        assert_eq!(
            (r.status, r.text().as_str()),
            (200, "<p>the app</p>"),
            "{path}"
        );
        assert_eq!(r.header("content-type"), Some("text/html"), "{path}");
    }
    // A fallback never reaches outside the root.
    assert!(!get(srv.addr, "/../secret.txt").text().contains("secret"));
}

#[test]
fn a_status_as_the_last_entry_is_answered() {
    let root = site("tryfail");
    let srv = serve(&root, "try_files: ['$uri', '$uri.html', '=404']");
    assert_eq!(get(srv.addr, "/app.css").status, 200);
    // `/index` finds index.html through `$uri.html`.
    assert_eq!(get(srv.addr, "/index").text(), "<p>the app</p>");
    assert_eq!(get(srv.addr, "/nothing").status, 404);
}

#[test]
fn listings_are_off_by_default_and_escaped_when_on() {
    let root = site("autoindex");
    let off = serve(&root, "index: index.html");
    assert_eq!(
        get(off.addr, "/files/").status,
        403,
        "no listing unless asked"
    );

    let html = serve(&root, "autoindex: html");
    let r = get(html.addr, "/files/");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let page = r.text();
    assert!(page.contains("Index of /files/"), "{page}");
    assert!(
        page.contains("href=\"./a.txt\"") && page.contains("href=\"./sub/\""),
        "{page}"
    );
    assert!(
        page.contains("&lt;b&gt;.txt") && !page.contains("<b>"),
        "escaped: {page}"
    );
    assert!(!page.contains(".hidden"), "dotfiles hidden: {page}");
    // A directory with an index is still its index; a listed symlink cannot be followed out.
    assert_eq!(get(html.addr, "/docs/").text(), "<p>docs</p>");
    assert_eq!(get(html.addr, "/files/up/").status, 403);
    assert_eq!(get(html.addr, "/files/up/secret.txt").status, 403);

    let json = serve(&root, "autoindex: json");
    let r = get(json.addr, "/files/");
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sub", "up", "<b>.txt", "a.txt"]);
    assert_eq!(v[3]["size"], 3);
}

#[test]
fn caching_fields_follow_the_file_name() {
    let root = site("caching");
    let srv = serve(
        &root,
        "cache_control: [ { pattern: 'index.html', value: no-cache }, { pattern: 'app-*.js', value: 'public, max-age=31536000, immutable' }, { pattern: '*.css', expires: 1h } ]",
    );
    assert_eq!(get(srv.addr, "/").header("cache-control"), Some("no-cache"));
    assert_eq!(
        get(srv.addr, "/assets/app-1a2b.js").header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    let css = get(srv.addr, "/app.css");
    assert_eq!(css.header("cache-control"), Some("max-age=3600"));
    let expires = httpdate::parse_http_date(css.header("expires").unwrap()).unwrap();
    let ahead = expires
        .duration_since(std::time::SystemTime::now())
        .unwrap()
        .as_secs();
    assert!((3500..=3600).contains(&ahead), "{ahead}");
    assert_eq!(get(srv.addr, "/files/a.txt").header("cache-control"), None);
}

#[test]
fn static_config_errors_name_the_key() {
    let root = site("errors");
    for (section, key) in [
        ("try_files: ['$uri']", "static.try_files"),
        ("try_files: ['=404', '$uri']", "static.try_files[0]"),
        ("try_files: ['$uri', 'index.html']", "static.try_files[1]"),
        ("autoindex: yes", "static.autoindex"),
        (
            "cache_control: [ { pattern: '*.css' } ]",
            "static.cache_control[0]",
        ),
        (
            "cache_control: [ { pattern: 'a/*.css', value: x } ]",
            "static.cache_control[0].pattern",
        ),
    ] {
        let yaml = format!(
            "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - static: {{ root: '{}', {section} }}\n",
            root.display()
        );
        let e = config_error(&yaml);
        assert!(e.contains(key), "{section}: {e}");
    }
}
