//! `weir import` on real nginx configurations (tests/fixtures/nginx: Debian's default site,
//! examples from nginx's documentation, h5bp's server-configs-nginx): each converts, the result
//! passes `weir check`, and nginx and weir, each serving its own config, give the same status
//! and body to a list of requests. What could not be translated is listed with file:line on
//! stderr. Needs nginx (CI installs it: `.ci/run`). PHP sites on php-fpm and applications behind
//! `try_files ... @app`: `import_nginx/php.rs`; `set`/`if`/`rewrite` idioms: `import_nginx/script.rs`.
#![allow(clippy::unwrap_used)]

use crate::common;
#[path = "import_nginx/error_named.rs"]
mod error_named;
#[path = "import_nginx/php.rs"]
mod php;
#[path = "import_nginx/script.rs"]
mod script;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::process::{free_port, have_all_or_skip, Running, WEIR};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/nginx");

/// A copy of fixture `name` (a file or a directory) in a fresh temporary directory, with
/// `edits` (from, to) applied to every file.
fn copy(name: &str, tag: &str, edits: &[(String, String)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-import-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(FIXTURES).join(name);
    let mut stack = vec![(src.clone(), dir.join(src.file_name().unwrap()))];
    while let Some((from, to)) = stack.pop() {
        if from.is_dir() {
            std::fs::create_dir_all(&to).unwrap();
            for e in std::fs::read_dir(&from).unwrap().flatten() {
                stack.push((e.path(), to.join(e.file_name())));
            }
        } else {
            let mut text = std::fs::read_to_string(&from).unwrap();
            for (a, b) in edits {
                text = text.replace(a, b);
            }
            std::fs::write(&to, text).unwrap();
        }
    }
    dir
}

/// nginx's main file in `dir` for the http-level file `site` (mime types, no access log, the
/// error log in `dir`): its path.
fn main_conf(dir: &Path, site: &Path) -> PathBuf {
    let main = dir.join("nginx.conf");
    std::fs::write(
        &main,
        format!(
            "events {{}}\nerror_log {d}/error.log;\nhttp {{\n  access_log off;\n  include /etc/nginx/mime.types;\n  include {site};\n}}\n",
            d = dir.display(),
            site = site.display()
        ),
    )
    .unwrap();
    main
}

/// Runs `weir import FILE`: the YAML, the stderr lines, the exit status.
fn import(file: &Path) -> (String, String, bool) {
    let out = Command::new(WEIR).arg("import").arg(file).output().unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
        out.status.success(),
    )
}

/// nginx in the foreground with `conf` (an http-level file is wrapped in a main config).
fn nginx(conf: &Path, dir: &Path) -> Running {
    let child = common::process::own_group(&mut Command::new("nginx"))
        .args(["-c"])
        .arg(conf)
        .args(["-p"])
        .arg(dir)
        .args([
            "-g",
            &format!("daemon off; pid {}/nginx.pid;", dir.display()),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("nginx.err")).unwrap())
        .spawn()
        .unwrap();
    Running(child)
}

fn weir(yaml: &Path, dir: &Path) -> Running {
    let child = Command::new(WEIR)
        .args(["run", "-c"])
        .arg(yaml)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("weir.err")).unwrap())
        .spawn()
        .unwrap();
    Running(child)
}

/// nginx on `main` listening on `pn`, and weir on the imported `yaml` moved to `pw` (written to
/// `dir/weir.yaml` and checked first), both up; stopped when the pair is dropped.
fn side_by_side(dir: &Path, main: &Path, yaml: &str, pn: u16, pw: u16) -> (Running, Running) {
    let yaml = yaml.replace(&format!(":{pn}"), &format!(":{pw}"));
    let file = dir.join("weir.yaml");
    std::fs::write(&file, &yaml).unwrap();
    check(&file);
    let n = nginx(main, dir);
    let w = weir(&file, dir);
    wait(pn, &dir.join("nginx.err"));
    wait(pw, &dir.join("weir.err"));
    (n, w)
}

fn wait(port: u16, log: &Path) {
    let ok = common::until(&format!("port {port}"), Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let _ = (ok, log);
}

/// What is compared of `GET path` with `Host: host` on port `port`: the status, the body of a
/// success (error bodies are each server's own wording), and a redirect's `Location`.
fn answer(port: u16, host: &str, path: &str) -> (u16, String, Option<String>) {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut s = common::connect(addr);
    let r = common::roundtrip(
        &mut s,
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    let body = if (200..300).contains(&r.status) {
        r.text()
    } else {
        String::new()
    };
    // nginx makes a redirect absolute (`http://HOST:PORT/docs/`), weir keeps it relative.
    let location = r.header("location").map(|l| {
        match l
            .strip_prefix("http://")
            .and_then(|rest| rest.find('/').map(|i| &rest[i..]))
        {
            Some(path) if l.contains(&format!(":{port}/")) => path.to_string(),
            _ => l.to_string(),
        }
    });
    (r.status, body, location)
}

fn check(yaml: &Path) {
    let out = Command::new(WEIR)
        .args(["check", "-c"])
        .arg(yaml)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "weir check: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Converts `file`, checks it, serves the original with nginx and the conversion with weir
/// (nginx on `nginx_port`'s config, weir on the same config with `weir_port`), and compares.
fn same_answers(
    nginx_conf: &Path,
    import_conf: &Path,
    dir: &Path,
    ports: (u16, u16),
    requests: &[(&str, &str)],
) -> String {
    let (yaml, stderr, ok) = import(import_conf);
    assert!(ok, "import failed: {stderr}");
    let yaml = yaml.replace(&format!(":{}", ports.0), &format!(":{}", ports.1));
    let file = dir.join("weir.yaml");
    std::fs::write(&file, &yaml).unwrap();
    check(&file);
    let _n = nginx(nginx_conf, dir);
    let _w = weir(&file, dir);
    wait(ports.0, &dir.join("nginx.err"));
    wait(ports.1, &dir.join("weir.err"));
    for (host, path) in requests {
        let n = answer(ports.0, host, path);
        let w = answer(ports.1, host, path);
        assert_eq!(w, n, "{host}{path}: weir vs nginx\n{yaml}");
    }
    // nginx stops with its workers (its process group): none is left listening.
    drop(_n);
    common::until("nginx's workers stopped", Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", ports.0)).is_err()
    });
    stderr
}

#[test]
fn debian_s_default_site_converts_and_answers_as_nginx() {
    if !have_all_or_skip(&["nginx"], "apt-get install nginx-light") {
        return;
    }
    let (pn, pw) = (free_port(), free_port());
    let root = std::env::temp_dir().join(format!("weir-import-www-{}", std::process::id()));
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("index.html"), "<h1>welcome</h1>\n").unwrap();
    std::fs::write(root.join("docs/index.htm"), "docs\n").unwrap();
    std::fs::write(root.join("a.txt"), "a\n").unwrap();
    let edits = vec![
        (
            "listen 80 default_server;".to_string(),
            format!("listen 127.0.0.1:{pn} default_server;"),
        ),
        ("listen [::]:80 default_server;".to_string(), String::new()),
        ("/var/www/html".to_string(), root.display().to_string()),
    ];
    let dir = copy("debian-default", "debian", &edits);
    let site = dir.join("debian-default");
    let main = main_conf(&dir, &site);
    let stderr = same_answers(
        &main,
        &site,
        &dir,
        (pn, pw),
        &[
            ("localhost", "/"),
            ("localhost", "/a.txt"),
            ("localhost", "/docs/"),
            ("other.example", "/missing"),
            ("localhost", "/docs"),
            ("localhost", "/nothing/"),
        ],
    );
    assert!(
        stderr.is_empty() || stderr.contains("not translated:"),
        "{stderr}"
    );
}

#[test]
fn the_documentation_s_proxy_example_converts_and_answers_as_nginx() {
    if !have_all_or_skip(&["nginx"], "apt-get install nginx-light") {
        return;
    }
    let (up_n, up_w, pn, pw) = (free_port(), free_port(), free_port(), free_port());
    let data = std::env::temp_dir().join(format!("weir-import-data-{}", std::process::id()));
    std::fs::create_dir_all(data.join("up1")).unwrap();
    std::fs::create_dir_all(data.join("images")).unwrap();
    std::fs::write(data.join("up1/page.html"), "from up1\n").unwrap();
    std::fs::write(data.join("images/logo.png"), "PNG\n").unwrap();
    // Two copies: nginx's upstream server on its port, weir's own on another.
    let edits = |up: u16, front: u16| {
        vec![
            ("listen 8080;".to_string(), format!("listen 127.0.0.1:{up};")),
            ("localhost:8080".to_string(), format!("127.0.0.1:{up}")),
            (
                "server {\n    location / {\n        proxy_pass".to_string(),
                format!("server {{\n    listen 127.0.0.1:{front};\n    location / {{\n        proxy_pass"),
            ),
            ("/data".to_string(), data.display().to_string()),
        ]
    };
    let dir_n = copy("docs-beginners-guide.conf", "docs-n", &edits(up_n, pn));
    let dir_w = copy("docs-beginners-guide.conf", "docs-w", &edits(up_w, pw));
    let main = main_conf(&dir_n, &dir_n.join("docs-beginners-guide.conf"));
    let (yaml, stderr, ok) = import(&dir_w.join("docs-beginners-guide.conf"));
    assert!(ok, "{stderr}");
    let file = dir_w.join("weir.yaml");
    std::fs::write(&file, &yaml).unwrap();
    check(&file);
    let _n = nginx(&main, &dir_n);
    let _w = weir(&file, &dir_w);
    wait(pn, &dir_n.join("error.log"));
    wait(pw, &dir_w.join("weir.err"));
    for path in ["/page.html", "/logo.png", "/missing.png", "/missing"] {
        assert_eq!(
            answer(pw, "localhost", path),
            answer(pn, "localhost", path),
            "{path}\n{yaml}"
        );
    }
}

#[test]
fn the_documentation_s_load_balancer_converts_to_an_upstream() {
    let (yaml, stderr, ok) = import(&Path::new(FIXTURES).join("docs-load-balancing.conf"));
    assert!(ok, "{stderr}");
    assert!(yaml.contains("policy: least_conn"), "{yaml}");
    assert!(yaml.contains("srv3.example.com:80"), "{yaml}");
    assert!(yaml.contains("upstream: myapp1"), "{yaml}");
}

#[test]
fn h5bp_server_configs_convert_check_and_answer_as_nginx() {
    if !have_all_or_skip(&["nginx"], "apt-get install nginx-light") {
        return;
    }
    let (pn, pw) = (free_port(), free_port());
    let tag = format!("{}", std::process::id());
    let public = std::env::temp_dir().join(format!("weir-import-h5bp-www-{tag}"));
    std::fs::create_dir_all(&public).unwrap();
    std::fs::write(public.join("index.html"), "<p>example</p>\n").unwrap();
    std::fs::write(public.join("404.html"), "<p>custom 404</p>\n").unwrap();
    std::fs::write(public.join(".env"), "SECRET=1\n").unwrap();
    let logs = std::env::temp_dir().join(format!("weir-import-h5bp-logs-{tag}"));
    std::fs::create_dir_all(&logs).unwrap();
    let edits = vec![
        ("listen 80".to_string(), format!("listen 127.0.0.1:{pn}")),
        (
            "listen [::]:80 default_server deferred;".to_string(),
            String::new(),
        ),
        ("listen [::]:80;".to_string(), String::new()),
        (
            "/var/www/example.com/public".to_string(),
            public.display().to_string(),
        ),
        ("/var/log/nginx".to_string(), logs.display().to_string()),
        ("pid /var/run/nginx.pid;".to_string(), String::new()),
        ("user www-data;".to_string(), String::new()),
    ];
    let dir = copy("h5bp", "h5bp", &edits);
    let conf = dir.join("h5bp/nginx.conf");
    let stderr = same_answers(
        &conf,
        &conf,
        &dir.join("h5bp"),
        (pn, pw),
        &[
            ("example.com", "/"),
            ("example.com", "/index.html"),
            ("example.com", "/missing"),
            ("example.com", "/.env"),
            ("www.example.com", "/x?y=1"),
        ],
    );
    // The custom 404 page (h5bp/errors/custom_errors.conf) is weir's too.
    let yaml = std::fs::read_to_string(dir.join("h5bp/weir.yaml")).unwrap();
    assert!(yaml.contains("404.html"), "{yaml}");
    // What was not translated is listed with file and line.
    assert!(stderr.contains("not translated:"), "{stderr}");
    assert!(stderr.contains("nginx.conf:"), "{stderr}");
}

/// What nginx closes stays closed: `deny` beside `proxy_pass`, `limit_except`, a `deny`
/// location under a `^~` prefix, and access controls weir cannot translate (`internal`) all
/// answer 403 from the converted config, served by weir.
#[test]
fn access_controls_stay_closed_after_import() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("weir-import-closed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("www/static/private")).unwrap();
    std::fs::write(dir.join("www/static/private/key.txt"), "secret").unwrap();
    std::fs::write(dir.join("www/static/open.txt"), "open").unwrap();
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            r#"server {{
    listen 127.0.0.1:{port};
    root {www};
    location /admin/ {{ allow 10.0.0.0/8; deny all; proxy_pass http://127.0.0.1:9; }}
    location /api/ {{ limit_except GET {{ deny all; }} return 200 "api"; }}
    location ^~ /static/ {{ }}
    location /static/private/ {{ deny all; }}
    location /internal/ {{ internal; }}
    location / {{ return 200 "ok\n"; }}
}}
"#,
            www = dir.join("www").display()
        ),
    )
    .unwrap();
    let (yaml, stderr, ok) = import(&conf);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("internal"), "listed: {stderr}");
    let file = dir.join("weir.yaml");
    std::fs::write(&file, &yaml).unwrap();
    check(&file);
    let _w = weir(&file, &dir);
    wait(port, &dir.join("weir.err"));
    let status = |raw: &str| {
        let mut s = common::connect(format!("127.0.0.1:{port}").parse().unwrap());
        common::roundtrip(&mut s, raw.as_bytes())
    };
    let get = |path: &str| status(&format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n"));
    assert_eq!(
        get("/admin/x").status,
        403,
        "deny beside proxy_pass\n{yaml}"
    );
    assert_eq!(get("/api/x").text(), "api");
    let post = status("POST /api/x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(post.status, 403, "limit_except\n{yaml}");
    assert_eq!(get("/static/open.txt").text(), "open");
    assert_eq!(
        get("/static/private/key.txt").status,
        403,
        "deny under ^~\n{yaml}"
    );
    assert_eq!(get("/internal/x").status, 404, "internal\n{yaml}");
    assert_eq!(get("/").text(), "ok\n", "quoted escapes");
}

/// Issue 52: the import fails closed. A php-fpm site (`fastcgi_pass` in a regex location,
/// `index index.php`, `try_files ... /index.php?$args`), an `internal` location without a root
/// of its own, a nested PHP location, and an `if`: served by weir from the conversion, no
/// request answers with a script's source or a backup, each untranslated location refuses with
/// the status nginx's phase would give (503 handler, 404 internal, 403 access), the YAML says
/// why in comments, `weir check` passes, and `--strict` exits 2.
#[test]
fn an_import_never_serves_what_it_did_not_translate() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("weir-import-php-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let www = dir.join("www");
    for d in ["backups", "app/sub", "static"] {
        std::fs::create_dir_all(www.join(d)).unwrap();
    }
    let php = "<?php define('DB_PASSWORD', 'hunter2'); ?>";
    for f in [
        "index.php",
        "wp-config.php",
        "app/x.php",
        "app/sub/index.php",
    ] {
        std::fs::write(www.join(f), php).unwrap();
    }
    std::fs::write(www.join("backups/db.sql"), "DB_PASSWORD hunter2").unwrap();
    std::fs::write(www.join("readme.html"), "readme").unwrap();
    std::fs::write(www.join("static/a.css"), "css").unwrap();
    std::fs::write(www.join("static/b.txt"), "txt").unwrap();
    std::fs::write(www.join(".htaccess"), "DB_PASSWORD hunter2").unwrap();
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            r#"server {{
    listen 127.0.0.1:{port};
    index index.php index.html;
    location / {{
        root {www};
        try_files $uri $uri/ /index.php?$args;
    }}
    location ~ \.php$ {{
        root {www};
        include fastcgi_params;
        fastcgi_pass 127.0.0.1:9;
    }}
    location /backups/ {{ internal; }}
    location ~ /\.ht {{ deny all; }}
    location /app/ {{
        root {www};
        location ~ \.php$ {{ fastcgi_pass unix:/run/php/php8.2-fpm.sock; }}
    }}
    location /static/ {{
        root {www};
        location ~ \.css$ {{ expires 1d; }}
        if (-f $request_filename) {{ return 405; }}
    }}
}}
"#,
            www = www.display()
        ),
    )
    .unwrap();
    let (yaml, stderr, ok) = import(&conf);
    assert!(ok, "{stderr}");
    for listed in ["fastcgi_pass", "internal", "if"] {
        assert!(stderr.contains(listed), "{listed} listed: {stderr}");
    }
    assert!(
        yaml.contains("# weir import: answers 503") && yaml.contains("# weir import: answers 404"),
        "the YAML says why:\n{yaml}"
    );
    let strict = Command::new(WEIR)
        .args(["import", "--strict"])
        .arg(&conf)
        .output()
        .unwrap();
    assert_eq!(strict.status.code(), Some(2), "--strict exits 2");
    let file = dir.join("weir.yaml");
    std::fs::write(&file, &yaml).unwrap();
    check(&file);
    let _w = weir(&file, &dir);
    wait(port, &dir.join("weir.err"));
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let get = |path: &str| {
        let mut s = common::connect(addr);
        common::roundtrip(
            &mut s,
            format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").as_bytes(),
        )
    };
    for (path, status) in [
        ("/wp-config.php", 503),
        ("/index.php", 503),
        ("/", 503),
        ("/index.php/x", 503),
        ("/no/such/page", 503),
        ("/backups/db.sql", 404),
        ("/backups/", 404),
        ("/.htaccess", 403),
        ("/app/x.php", 503),
        ("/app/sub/", 403),
        // The parent's `if` refuses the parent; the nested location has none (as in nginx).
        ("/static/b.txt", 503),
    ] {
        let r = get(path);
        assert_eq!(r.status, status, "{path}\n{yaml}");
        assert!(!r.text().contains("hunter2"), "{path} leaked: {}", r.text());
    }
    // What nginx serves as files is still served.
    assert_eq!(get("/readme.html").text(), "readme");
    assert_eq!(get("/static/a.css").text(), "css");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The review of issue 52's configurations, each imported and served by weir: an error page
/// another location serves (`error_page 404 /index.php`), a regex nested in `location /`
/// beside longer prefixes, a plain prefix under a `^~` one (nginx still tries its regexes),
/// a server-level `if` and internal rewrite, and index files of `location /sub` and of an
/// exact location. No answer carries a script's source or a refused file.
#[test]
fn the_review_s_configurations_never_serve_what_nginx_would_not() {
    let dir = std::env::temp_dir().join(format!("weir-import-review-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let www = dir.join("www");
    for d in ["private", "data", "backup", "sub", "wp-content/uploads"] {
        std::fs::create_dir_all(www.join(d)).unwrap();
    }
    let secret = "<?php /* SECRET_MARKER */ ?>";
    for f in [
        "index.php",
        "private/p.txt",
        "data/owncloud.log",
        "backup/db.sql",
        "backup/x.php",
        "sub/index.php",
        "wp-content/uploads/shell.php",
    ] {
        std::fs::write(www.join(f), secret).unwrap();
    }
    std::fs::write(www.join("index.html"), "home").unwrap();
    std::fs::write(www.join("wp-content/a.css"), "css").unwrap();
    let w = www.display().to_string();
    let php = "location ~ \\.php$ { fastcgi_pass 127.0.0.1:9; }";
    /// What is imported (a server's directives) and the answers expected, by path.
    type Case<'a> = (&'a str, String, Vec<(&'a str, u16)>);
    let cases: Vec<Case> = vec![
        (
            "error page",
            format!("error_page 404 /index.php; location / {{ try_files $uri $uri/ =404; }} {php}"),
            vec![("/nothere", 404), ("/index.html", 200)],
        ),
        (
            "nested regex",
            format!("location / {{ try_files $uri $uri/ =404; location ~* \\.(?:css|txt|log|sql)$ {{ expires 30d; }} }} location /private/ {{ deny all; }} location /data/ {{ return 404; }} location /backup/ {{ internal; }} {php}"),
            vec![("/private/p.txt", 403), ("/data/owncloud.log", 404), ("/backup/db.sql", 404), ("/wp-content/a.css", 200)],
        ),
        (
            "plain under ^~",
            format!("location ^~ /wp-content/ {{ expires 30d; }} location /wp-content/uploads/ {{ autoindex off; }} {php} location / {{ }}"),
            vec![("/wp-content/uploads/shell.php", 503), ("/wp-content/a.css", 200)],
        ),
        (
            "server-level if",
            format!("if ($uri ~* \"\\.(sql|log)$\") {{ return 403; }} location / {{ }} {php}"),
            vec![("/backup/db.sql", 503), ("/data/owncloud.log", 503), ("/index.html", 503)],
        ),
        (
            "server-level rewrite",
            format!("rewrite ^/private/(.*)$ /index.php?p=$1 last; location / {{ }} {php}"),
            vec![("/private/p.txt", 503)],
        ),
        (
            // The second review: a `^~` nested in a plain prefix skips only its parent's
            // regexes, not the server's.
            "^~ nested",
            format!("location / {{ location ^~ /wp-content/ {{ }} }} location ~ \\.(bak|sql)$ {{ deny all; }} {php}"),
            vec![("/wp-content/uploads/shell.php", 503), ("/backup/db.sql", 403), ("/wp-content/a.css", 200)],
        ),
        (
            // ... and a nested prefix does not beat a longer sibling of its parent.
            "nested prefix",
            "location /backup/ { location /backup/x/ { } } location /backup/x { deny all; } location / { }".to_string(),
            vec![("/backup/x.php", 403), ("/index.html", 200)],
        ),
        (
            // An error page's query is not part of its file (the config did not start), and
            // certbot's `if` with a capital never matches in nginx ($host is lower-case).
            "error page query",
            "error_page 404 /index.html?x=1; if ($host = A) { return 301 https://$host$request_uri; } location / { try_files $uri =404; }".to_string(),
            vec![("/nothere", 404), ("/index.html", 200)],
        ),
        (
            // certbot's redirect of a name to HTTPS is translated, not refused.
            "certbot's if",
            "if ($host = a) { return 301 https://$host$request_uri; } return 404;".to_string(),
            vec![("/x", 301)],
        ),
        (
            "index dirs",
            "location /sub { index index.php; } location = /backup/ { index x.php; } location ~ ^/(sub|backup)/.+\\.php$ { fastcgi_pass 127.0.0.1:9; } location / { index index.html; }".to_string(),
            vec![("/sub/", 403), ("/backup/", 403), ("/", 200)],
        ),
    ];
    for (what, body, requests) in cases {
        let port = free_port();
        let conf = dir.join("nginx.conf");
        std::fs::write(
            &conf,
            format!("server {{ listen 127.0.0.1:{port}; root {w}; {body} }}\n"),
        )
        .unwrap();
        let (yaml, stderr, ok) = import(&conf);
        assert!(ok, "{what}: {stderr}");
        let file = dir.join("weir.yaml");
        std::fs::write(&file, &yaml).unwrap();
        check(&file);
        let _w = weir(&file, &dir);
        wait(port, &dir.join("weir.err"));
        for (path, status) in requests {
            let mut s = common::connect(format!("127.0.0.1:{port}").parse().unwrap());
            let r = common::roundtrip(
                &mut s,
                format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").as_bytes(),
            );
            assert!(
                !r.text().contains("SECRET_MARKER"),
                "{what}: {path} leaked\n{yaml}"
            );
            assert_eq!(r.status, status, "{what}: {path}\n{yaml}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
