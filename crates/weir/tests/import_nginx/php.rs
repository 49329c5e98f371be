//! Issue 53: a PHP site on php-fpm (tests/fixtures/nginx/wordpress.conf) and an application
//! behind `try_files $uri @app` (app-behind-try-files.conf), each served by nginx and by weir
//! from `weir import` of the same file, against one php-fpm or one origin: the same status, the
//! same body where it is a file or the script's output, and never a script's source or an
//! upload run. The few answers that differ for a reason are listed with it (`KNOWN_*`) and
//! printed side by side.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use super::common;
use super::common::phpfpm::PhpFpm;
use super::common::process::{free_port, have_all_or_skip};
use super::{copy, import, main_conf, side_by_side};

/// One request: what the table calls it, and its bytes.
struct Req {
    label: String,
    raw: String,
}

fn get(path: &str) -> Req {
    Req {
        label: format!("GET {path}"),
        raw: format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"),
    }
}

fn post(path: &str, form: &str) -> Req {
    Req {
        label: format!("POST {path} ({form})"),
        raw: format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        ),
    }
}

fn send(port: u16, raw: &str) -> common::Response {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut s = common::connect(addr);
    common::roundtrip(&mut s, raw.as_bytes())
}

/// What is compared: the status, a success's body without the lines `skip` names (values that
/// differ for a known reason), and a redirect's `Location` made relative.
fn compared(
    r: &common::Response,
    port: u16,
    skip: &[(&str, &str)],
) -> (u16, String, Option<String>) {
    let body = if (200..300).contains(&r.status) {
        r.text()
            .lines()
            .filter(|l| !skip.iter().any(|(k, _)| l.starts_with(k)))
            .map(|l| {
                SAME_MEANING
                    .iter()
                    .find(|(w, _, _)| *w == l)
                    .map_or(l, |(_, n, _)| *n)
            })
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        String::new()
    };
    let location = r.header("location").map(|l| {
        l.strip_prefix(&format!("http://localhost:{port}"))
            .unwrap_or(l)
            .to_string()
    });
    (r.status, body, location)
}

/// The lines of `text` that start with one of `keys`.
fn lines_of(text: &str, keys: &[(&str, &str)]) -> String {
    text.lines()
        .filter(|l| keys.iter().any(|(k, _)| l.starts_with(k)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What each script prints: which script ran, what it learnt of the request from the CGI
/// environment, and the request's body.
const ECHO: &str = r#"<?php
echo "script=" . basename(__DIR__) . "/" . basename(__FILE__) . "\n";
foreach (['SCRIPT_NAME', 'SCRIPT_FILENAME', 'PHP_SELF', 'PATH_INFO', 'REQUEST_URI', 'DOCUMENT_URI',
          'QUERY_STRING', 'REQUEST_METHOD', 'DOCUMENT_ROOT', 'SERVER_NAME', 'SERVER_PORT',
          'SERVER_SOFTWARE', 'REQUEST_SCHEME', 'GATEWAY_INTERFACE', 'REDIRECT_STATUS', 'HTTP_HOST',
          'CONTENT_TYPE', 'CONTENT_LENGTH', 'REMOTE_ADDR', 'HTTPS', 'HTTP_PROXY',
          'WP_ENVIRONMENT_TYPE'] as $k) {
    echo $k, '=', array_key_exists($k, $_SERVER) ? var_export($_SERVER[$k], true) : '(unset)', "\n";
}
echo 'GET=', json_encode($_GET), "\nPOST=", json_encode($_POST), "\n";
echo 'input=', file_get_contents('php://input'), "\n";
"#;

/// Lines of the scripts' output where weir and nginx 1.22 differ, and why.
const KNOWN_LINES: &[(&str, &str)] = &[
    (
        "DOCUMENT_URI=",
        "weir passes the script and its path info; nginx the URI after its internal redirects, which Debian's snippet's `try_files $fastcgi_script_name` makes the script alone",
    ),
    (
        "SERVER_PORT=",
        "weir's is the Host field's port (80 without one); nginx's the port that accepted the connection",
    ),
    ("SERVER_SOFTWARE=", "weir, not nginx/1.22.1"),
];

/// Lines that say the same in other words: weir's, nginx's, and why they differ.
const SAME_MEANING: &[(&str, &str, &str)] = &[];

/// Requests whose answers differ, and why.
const KNOWN_PHP: &[(&str, &str)] = &[];

/// A PHP site's fixture and what is said of it.
struct Site {
    fixture: &'static str,
    tag: &'static str,
    /// php-fpm on a unix socket, else TCP.
    unix: bool,
    /// The fixture's `listen`, root and php-fpm address, replaced by the test's.
    listen: &'static str,
    root: &'static str,
    fpm: &'static str,
    /// Files of /etc/nginx its includes name (nginx reads them beside the config).
    includes: &'static [&'static str],
    known_lines: &'static [(&'static str, &'static str)],
    /// What `--strict` may still list.
    may_list: &'static [&'static str],
}

#[test]
fn a_wordpress_site_on_php_fpm_answers_as_nginx_after_import() {
    let lines = KNOWN_LINES;
    php_site_answers_as_nginx(&Site {
        fixture: "wordpress.conf",
        tag: "wp",
        unix: false,
        listen: "listen 80;",
        root: "/var/www/wordpress",
        fpm: "127.0.0.1:9000",
        includes: &["fastcgi_params"],
        known_lines: lines,
        may_list: &[
            "log_not_found",
            "access_log",
            "expires",
            "fastcgi_intercept_errors",
            "index [\"index.php\"] left out",
            // After index.php, which the front controller runs: a directory holding both runs
            // index.php in nginx, so index.html is not served as a file.
            "index [\"index.php\", \"index.html\"] left out",
            "index [\"index.html\"] left out",
        ],
    });
}

/// Debian's default site with its PHP block: `snippets/fastcgi-php.conf` (split, PATH_INFO,
/// `try_files $fastcgi_script_name =404`), php-fpm on a unix socket.
#[test]
fn debian_s_php_site_on_a_unix_socket_answers_as_nginx_after_import() {
    php_site_answers_as_nginx(&Site {
        fixture: "debian-php.conf",
        tag: "debphp",
        unix: true,
        listen: "listen 80 default_server;",
        root: "/var/www/html",
        fpm: "unix:/run/php/php8.2-fpm.sock",
        includes: &["snippets/fastcgi-php.conf", "fastcgi.conf"],
        known_lines: KNOWN_LINES,
        may_list: &[],
    });
}

fn php_site_answers_as_nginx(site: &Site) {
    if !have_all_or_skip(&["nginx"], "apt-get install nginx-light") {
        return;
    }
    let Some(fpm) = PhpFpm::start(&format!("import-{}", site.tag), site.unix, 4, "") else {
        return;
    };
    let (pn, pw) = (free_port(), free_port());
    let tag = std::process::id();
    let www = std::env::temp_dir().join(format!("weir-import-{}-www-{tag}", site.tag));
    let _ = std::fs::remove_dir_all(&www);
    for d in ["wp-admin", "uploads"] {
        std::fs::create_dir_all(www.join(d)).unwrap();
    }
    for f in ["index.php", "wp-admin/index.php", "info.php"] {
        std::fs::write(www.join(f), ECHO).unwrap();
    }
    std::fs::write(
        www.join("wp-config.php"),
        "<?php define('DB_PASSWORD', 'SECRET_MARKER');\n",
    )
    .unwrap();
    std::fs::write(www.join("style.css"), "body { color: #333 }\n").unwrap();
    // An upload holding PHP: served as the file it is, never run.
    std::fs::write(
        www.join("uploads/x.jpg"),
        b"\xff\xd8\xff\xe0<?php echo 'RAN_' . 'UPLOAD'; ?>".as_slice(),
    )
    .unwrap();
    std::fs::write(www.join(".htaccess"), "Deny from all\n").unwrap();
    let edits = vec![
        (site.listen.to_string(), format!("listen 127.0.0.1:{pn};")),
        (site.root.to_string(), www.display().to_string()),
        (site.fpm.to_string(), fpm.server.clone()),
    ];
    let dir = copy(site.fixture, site.tag, &edits);
    // What its includes name is the machine's file, for nginx and the import alike.
    for inc in site.includes {
        let to = dir.join(inc);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(Path::new("/etc/nginx").join(inc), to).unwrap();
    }
    let conf = dir.join(site.fixture);
    let main = main_conf(&dir, &conf);
    let (yaml, stderr, ok) = import(&conf);
    assert!(ok, "{stderr}");
    // Translated, not listed: the FastCGI location and its parameters, the front controller.
    for gone in [
        "fastcgi_pass",
        "fastcgi_param",
        "try_files",
        "index.php?",
        ": set",
    ] {
        assert!(!stderr.contains(gone), "{gone} listed:\n{stderr}");
    }
    assert!(yaml.contains("protocol: fastcgi") && yaml.contains("fallback: /index.php"));
    assert!(!yaml.contains("answers 503"), "nothing refuses:\n{yaml}");
    let (_n, _w) = side_by_side(&dir, &main, &yaml, pn, pw);
    let requests = vec![
        get("/"),
        get("/style.css"),
        get("/wp-admin/"),
        get("/wp-admin/?page=1"),
        get("/2026/11/hello/?p=1"),
        get("/2026/"),
        get("/index.php"),
        get("/index.php/extra?x=1"),
        get("/missing.php"),
        get("/wp-admin/missing.php"),
        get("/uploads/x.jpg"),
        get("/uploads/x.jpg/x.php"),
        get("/info.php/extra"),
        get("/info.php?a=1&b=2"),
        post("/index.php?c=1", "comment=hi&author=x"),
        post("/2026/11/hello/", "reply=yes"),
        get("/.htaccess"),
        get("/wp-config.php"),
        get("/favicon.ico"),
        get("/wp-admin"),
        get("/uploads/"),
    ];
    let known_lines = site.known_lines;
    let mut same = 0;
    eprintln!(
        "{} ({}):\n| request | nginx | weir | body |\n|---|---|---|---|",
        site.fixture, fpm.server
    );
    for r in &requests {
        let n = send(pn, &r.raw);
        let w = send(pw, &r.raw);
        let (nt, wt) = (n.text(), w.text());
        // weir never answers with a script's source, an upload run, or the config's secret
        // where nginx ran or refused the file.
        if !nt.contains("<?php") {
            assert!(!wt.contains("<?php"), "{}: source served:\n{wt}", r.label);
        }
        for marker in ["RAN_UPLOAD", "SECRET_MARKER"] {
            assert!(!wt.contains(marker), "{}: {marker}:\n{wt}", r.label);
        }
        let (cn, cw) = (compared(&n, pn, known_lines), compared(&w, pw, known_lines));
        let body = match (cn.1 == cw.1, cn.1.is_empty()) {
            (true, true) => "-".to_string(),
            (true, false) => format!(
                "same{}",
                cn.1.lines()
                    .find(|l| l.starts_with("script="))
                    .map(|l| format!(" ({l})"))
                    .unwrap_or_default()
            ),
            (false, _) => "differs".to_string(),
        };
        let differing = if cn == cw && nt.contains("script=") {
            let (a, b) = (lines_of(&nt, known_lines), lines_of(&wt, known_lines));
            if a == b {
                String::new()
            } else {
                format!("; nginx {a}; weir {b}")
            }
        } else {
            String::new()
        };
        eprintln!(
            "| {} | {} | {} | {body}{differing} |",
            r.label, n.status, w.status
        );
        match KNOWN_PHP.iter().find(|(l, _)| *l == r.label) {
            Some((_, why)) => eprintln!("|   known: {why} | | | |"),
            None => {
                assert_eq!(cw, cn, "{}: weir vs nginx\n{yaml}", r.label);
                same += 1;
            }
        }
    }
    assert!(same >= 12, "{same} compared");
    // The scripts did run, on both sides (not two failures compared).
    assert!(send(pw, &get("/wp-admin/").raw)
        .text()
        .contains("script=wp-admin/index.php"));
    assert!(send(pw, &get("/2026/11/hello/").raw)
        .text()
        .contains("REQUEST_URI='/2026/11/hello/'"));
    // Strict: only what this site leaves out for good (logging hints, intercepted errors).
    let strict = Command::new(super::common::process::WEIR)
        .args(["import", "--strict"])
        .arg(&conf)
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&strict.stderr);
    for l in listed.lines().filter(|l| l.contains("not translated:")) {
        assert!(site.may_list.iter().any(|k| l.contains(k)), "{l}");
    }
    drop(_n);
    common::until(
        "nginx's workers stopped",
        std::time::Duration::from_secs(10),
        || std::net::TcpStream::connect(("127.0.0.1", pn)).is_err(),
    );
    let _ = std::fs::remove_dir_all(&www);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Requests whose answers differ in the application's case, and why.
const KNOWN_APP: &[(&str, &str)] = &[
    (
    "GET /.env",
        "nginx serves the dotfile; weir's static action never does (dotfiles: deny), so the app gets the request",
    ),
];

#[test]
fn an_app_behind_try_files_and_a_named_location_answers_as_nginx_after_import() {
    if !have_all_or_skip(&["nginx"], "apt-get install nginx-light") {
        return;
    }
    // The application: says what it was asked, how, and with which of the fields nginx sets.
    let origin = common::origin::http_origin(|req| {
        let target = req.line.split(' ').take(2).collect::<Vec<_>>().join(" ");
        common::origin::ok(&format!(
            "app {target} host={} x-app-via={} body={}\n",
            req.header("host").unwrap_or("-"),
            req.header("x-app-via").unwrap_or("-"),
            String::from_utf8_lossy(&req.body)
        ))
    });
    let (pn, pw) = (free_port(), free_port());
    let public = std::env::temp_dir().join(format!("weir-import-public-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&public);
    std::fs::create_dir_all(public.join("assets")).unwrap();
    std::fs::create_dir_all(public.join("dir")).unwrap();
    std::fs::write(public.join("robots.txt"), "User-agent: *\n").unwrap();
    std::fs::write(public.join("about.html"), "<p>about</p>\n").unwrap();
    std::fs::write(public.join("index.html"), "<p>static home</p>\n").unwrap();
    std::fs::write(public.join("assets/app.js"), "console.log(1)\n").unwrap();
    std::fs::write(public.join("dir/a.txt"), "a\n").unwrap();
    std::fs::write(public.join(".env"), "SECRET_MARKER=1\n").unwrap();
    let edits = vec![
        ("listen 80;".to_string(), format!("listen 127.0.0.1:{pn};")),
        ("/srv/app/public".to_string(), public.display().to_string()),
        ("127.0.0.1:3000".to_string(), origin.addr.to_string()),
    ];
    let dir = copy("app-behind-try-files.conf", "app", &edits);
    let site = dir.join("app-behind-try-files.conf");
    let main = main_conf(&dir, &site);
    let (yaml, stderr, ok) = import(&site);
    assert!(ok, "{stderr}");
    assert!(
        yaml.contains("'@app'") && yaml.contains("X-App-Via: nginx-app"),
        "{yaml}"
    );
    assert!(!stderr.contains("named location"), "{stderr}");
    let (_n, _w) = side_by_side(&dir, &main, &yaml, pn, pw);
    let requests = vec![
        get("/robots.txt"),
        get("/about"),
        get("/about.html"),
        get("/assets/app.js"),
        get("/"),
        get("/assets"),
        get("/dir/"),
        get("/dir/a.txt"),
        get("/api/users?id=1"),
        get("/missing.png"),
        post("/api/items", "name=x"),
        get("/.env"),
    ];
    eprintln!("| request | nginx | weir | body |\n|---|---|---|---|");
    for r in &requests {
        let (n, w) = (send(pn, &r.raw), send(pw, &r.raw));
        assert!(
            !w.text().contains("SECRET_MARKER"),
            "{}: {}",
            r.label,
            w.text()
        );
        let (cn, cw) = (compared(&n, pn, &[]), compared(&w, pw, &[]));
        eprintln!(
            "| {} | {} {:?} | {} {:?} |",
            r.label,
            n.status,
            n.text().trim(),
            w.status,
            w.text().trim()
        );
        match KNOWN_APP.iter().find(|(l, _)| *l == r.label) {
            Some((_, why)) => eprintln!("|   known: {why} | | |"),
            None => assert_eq!(cw, cn, "{}: weir vs nginx\n{yaml}", r.label),
        }
    }
    // Files came from disk, the rest from the application, on both sides.
    assert_eq!(send(pw, &get("/about").raw).text(), "<p>about</p>\n");
    assert!(send(pw, &get("/").raw).text().starts_with("app GET / "));
    drop(_n);
    common::until(
        "nginx's workers stopped",
        std::time::Duration::from_secs(10),
        || std::net::TcpStream::connect(("127.0.0.1", pn)).is_err(),
    );
    let _ = std::fs::remove_dir_all(&public);
    let _ = std::fs::remove_dir_all(&dir);
}
