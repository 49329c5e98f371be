//! Issue 53's translations, checked on the YAML and the list of what was left out: PHP
//! locations as FastCGI upstreams, their front controller, named locations as `@app`, and what
//! still refuses. `tests/import_nginx.rs` serves them beside nginx and php-fpm.

use std::path::PathBuf;

/// The YAML and the list `weir import` makes of `conf` (a file of server blocks).
fn import(tag: &str, conf: &str) -> (String, Vec<String>) {
    let dir = std::env::temp_dir().join(format!("weir-import-unit-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let file: PathBuf = dir.join("site.conf");
    std::fs::write(&file, conf).unwrap_or_else(|e| panic!("{e}"));
    let out = crate::import::nginx(&file, None).unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_dir_all(&dir);
    (out.yaml, out.skipped)
}

/// That `yaml` compiles as weir's config (paths relative to `/`, no environment).
fn compiles(yaml: &str) {
    let cfg = crate::runtime::compile_str(
        yaml,
        std::path::Path::new("/"),
        |_| None,
        &Default::default(),
    );
    assert!(cfg.is_ok(), "{:?}\n{yaml}", cfg.err());
}

fn listed(skipped: &[String], word: &str) -> bool {
    skipped.iter().any(|l| l.contains(word))
}

const WORDPRESS: &str = r#"
server {
    listen 8080;
    server_name blog.example;
    root /srv/www;
    index index.php index.html;
    location / { try_files $uri $uri/ /index.php?$args; }
    location ~ \.php$ {
        try_files $uri =404;
        include fastcgi.conf;
        fastcgi_pass unix:/run/php/php8.2-fpm.sock;
        fastcgi_index index.php;
        fastcgi_param HTTP_PROXY "";
        fastcgi_param APP_ENV production;
        fastcgi_connect_timeout 5;
    }
}
"#;

#[test]
fn a_php_location_is_a_fastcgi_upstream_and_its_fallback_the_front_controller() {
    let (yaml, skipped) = import("wp", WORDPRESS);
    for want in [
        "protocol: fastcgi",
        "unix:/run/php/php8.2-fpm.sock",
        "root: /srv/www",
        // `try_files $uri =404`: the whole path is the script.
        "split_path_info: (?s)^(.*)()$",
        "SERVER_NAME: blog.example",
        "APP_ENV: production",
        "connect: 5s",
        "max_idle: 0",
        "upstream: php\n",
        "php_front:",
        "fallback: /index.php",
        "'@app'",
        "upstream: php_front",
    ] {
        assert!(yaml.contains(want), "{want}:\n{yaml}");
    }
    // The directory's index.php is the front upstream's, never a file of the static route,
    // and index.html after it is not served either (nginx runs index.php where both are).
    assert!(yaml.contains("index: []"), "{yaml}");
    assert!(!yaml.contains("answers 503"), "{yaml}");
    for word in ["fastcgi", "try_files", "index.php"] {
        assert!(!listed(&skipped, word), "{word}: {skipped:?}");
    }
}

/// Without `$uri/` in the `try_files` (Drupal's), nginx never reaches its index module: a
/// directory runs the front controller, never 403 (`directories: fallback`); WordPress's has
/// `$uri/` and keeps the 403.
#[test]
fn a_front_controller_without_a_directory_candidate_runs_for_directories() {
    let drupal = WORDPRESS.replace(
        "try_files $uri $uri/ /index.php?$args;",
        "try_files $uri /index.php?$query_string;",
    );
    let (yaml, _) = import("drupal", &drupal);
    assert!(yaml.contains("directories: fallback"), "{yaml}");
    assert!(yaml.contains("split_path_info: (?s)^()(.*)$"), "{yaml}");
    compiles(&yaml.replace("/srv/www", "/tmp"));
    let (yaml, _) = import("wp-dirs", WORDPRESS);
    assert!(!yaml.contains("directories:"), "{yaml}");
}

#[test]
fn what_weir_does_not_pass_keeps_the_location_refusing() {
    let cases = [
        // Debian's fastcgi_params has no SCRIPT_FILENAME: php-fpm runs nothing.
        ("include fastcgi_params; fastcgi_pass 127.0.0.1:9000;", "SCRIPT_FILENAME"),
        (
            "include fastcgi.conf; fastcgi_param PATH_TRANSLATED $document_root$fastcgi_path_info; fastcgi_pass 127.0.0.1:9000;",
            "PATH_TRANSLATED",
        ),
        ("include fastcgi.conf; fastcgi_pass $backend;", "variable"),
        (
            "include fastcgi.conf; fastcgi_param SCRIPT_FILENAME /srv/app.php; fastcgi_pass 127.0.0.1:9000;",
            "names the script",
        ),
        (
            "include fastcgi.conf; try_files $uri /index.php; fastcgi_pass 127.0.0.1:9000;",
            "try_files",
        ),
        ("alias /srv/x; include fastcgi.conf; fastcgi_pass 127.0.0.1:9000;", "alias"),
        ("include fastcgi.conf; fastcgi_pass php;", "neither"),
    ];
    for (i, (php, why)) in cases.iter().enumerate() {
        let conf = format!(
            "server {{ listen 8080; root /srv/www; location / {{ try_files $uri $uri/ /index.php?$args; }} location ~ \\.php$ {{ {php} }} }}"
        );
        let (yaml, skipped) = import(&format!("refuse{i}"), &conf);
        assert!(
            yaml.contains("# weir import: answers 503"),
            "{php}:\n{yaml}"
        );
        assert!(listed(&skipped, why), "{php}: {why}: {skipped:?}");
        assert!(!yaml.contains("protocol: fastcgi"), "{php}:\n{yaml}");
        // The front controller of a location that refuses is not run either.
        assert!(yaml.contains("- =503"), "{php}:\n{yaml}");
        assert!(!yaml.contains("'@app'"), "{php}:\n{yaml}");
    }
}

#[test]
fn debian_s_snippet_and_an_upstream_block() {
    let (yaml, skipped) = import(
        "snippet",
        r#"
upstream php { server unix:/run/php/fpm.sock; keepalive 8; }
server {
    listen 8080;
    root /srv/www;
    index index.php;
    location / { try_files $uri $uri/ /index.php$is_args$args; }
    location ~ [^/]\.php(/|$) {
        include snippets/fastcgi-php.conf;
        fastcgi_keep_conn on;
        fastcgi_pass php;
    }
}
"#,
    );
    for want in [
        // The block's name, now a FastCGI upstream (no HTTP one is left).
        "upstreams:\n  php:\n",
        "max_idle: 8",
        "split_path_info: ^(.+?\\.php)(/.*)$",
        "upstream: php\n",
        "upstream: php_front",
        "index: []",
    ] {
        assert!(yaml.contains(want), "{want}:\n{yaml}");
    }
    assert_eq!(yaml.matches("protocol: fastcgi").count(), 2, "{yaml}");
    // `set $path_info $fastcgi_path_info` feeds PATH_INFO: translated.
    for word in ["set", "fastcgi", "try_files"] {
        assert!(
            !listed(&skipped, &format!(": {word}")),
            "{word}: {skipped:?}"
        );
    }
}

#[test]
fn a_front_controller_without_args_is_translated_and_says_what_differs() {
    let (yaml, skipped) = import(
        "bare",
        "server { listen 8080; root /srv/www; location / { try_files $uri $uri/ /index.php; } location ~ \\.php$ { include fastcgi.conf; fastcgi_pass 127.0.0.1:9000; } }",
    );
    assert!(
        yaml.contains("'@app'") && yaml.contains("fallback: /index.php"),
        "{yaml}"
    );
    assert!(listed(&skipped, "no query string"), "{skipped:?}");
    assert!(
        yaml.contains("# weir import: try_files falls back to \"/index.php\""),
        "{yaml}"
    );
}

#[test]
fn named_locations_are_apps_when_nothing_in_them_is_left_out() {
    let app = "location @app { proxy_pass http://127.0.0.1:3000; proxy_set_header X-Via nginx; }";
    let (yaml, skipped) = import(
        "named",
        &format!("server {{ listen 8080; root /srv/public; location / {{ try_files $uri @app; }} {app} location @unused {{ return 404; }} }}"),
    );
    for want in [
        "- '@app'",
        "upstream: 127_0_0_1_3000",
        "X-Via: nginx",
        "index: []",
    ] {
        assert!(yaml.contains(want), "{want}:\n{yaml}");
    }
    assert!(!listed(&skipped, "@app"), "{skipped:?}");
    assert!(
        listed(&skipped, "a named location is translated when"),
        "the unused one: {skipped:?}"
    );
    // A named location with a `return`, or filters of its own: the fallback refuses.
    for (i, (named, why)) in [
        ("location @app { return 200 x; }", "unconditional `return`"),
        ("location @app { expires 1d; }", "no proxy_pass"),
        (
            "location @app { rewrite ^ /x last; proxy_pass http://a:1; }",
            "rewrite",
        ),
        (
            "location @app { add_header X-A 1; proxy_pass http://a:1; }",
            "filters",
        ),
        (
            "location @other { proxy_pass http://a:1; }",
            "no location @app",
        ),
    ]
    .iter()
    .enumerate()
    {
        let (yaml, skipped) = import(
            &format!("named{i}"),
            &format!("server {{ listen 8080; root /srv/public; location / {{ try_files $uri @app; }} {named} }}"),
        );
        assert!(
            yaml.contains("- =503") && !yaml.contains("app:"),
            "{named}:\n{yaml}"
        );
        assert!(listed(&skipped, why), "{named}: {why}: {skipped:?}");
    }
}

/// `proxy_set_header`: `X-Real-IP $remote_addr` is set (weir does not send it itself), an empty
/// value removes the field, a variable weir lacks is listed, never silently dropped (the
/// corpus of issue 53: 96 answers differed for the first).
#[test]
fn proxy_set_header_is_translated_or_listed() {
    let conf = "server {\n listen 8080;\n location / {\n  proxy_pass http://127.0.0.1:3000;\n  proxy_set_header X-Real-IP $remote_addr;\n  proxy_set_header Proxy \"\";\n  proxy_set_header X-Forward-For $proxy_add_x_forwarded_for;\n }\n}\n";
    let (yaml, skipped) = import("psh", conf);
    assert!(yaml.contains("X-Real-IP: $remote_addr"), "{yaml}");
    assert!(
        yaml.contains("remove:") && yaml.contains("- Proxy"),
        "{yaml}"
    );
    assert!(!yaml.contains("proxy_add_x_forwarded_for"), "{yaml}");
    assert!(listed(&skipped, "X-Forward-For"), "{skipped:?}");
}

/// Nextcloud's `index index.php index.html /index.php$request_uri;` and an `error_page` to a
/// file that is not where its root is: each left out and listed, so that the config starts
/// (the corpus of issue 53: both made `weir check` fail).
#[test]
fn index_redirects_and_missing_error_pages_are_listed_not_copied() {
    let root = std::env::temp_dir().join(format!("weir-import-unit-root-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{e}"));
    let conf = format!(
        "server {{\n listen 8080;\n root {};\n index index.html /index.php$request_uri;\n error_page 500 502 /50x.html;\n location / {{ try_files $uri $uri/ =404; }}\n}}\n",
        root.display()
    );
    let (yaml, skipped) = import("idx", &conf);
    assert!(!yaml.contains("request_uri"), "{yaml}");
    assert!(!yaml.contains("50x.html"), "{yaml}");
    assert!(listed(&skipped, "index entry"), "{skipped:?}");
    assert!(listed(&skipped, "50x.html"), "{skipped:?}");
    let _ = std::fs::remove_dir_all(&root);
}

/// `client_max_body_size` in a `server` or `location` becomes the route's own body limit
/// (it had no home before issue 53's per-route limits).
#[test]
fn per_server_and_location_body_limits_become_route_limits() {
    let conf = "server {\n listen 8080;\n client_max_body_size 20M;\n location /upload { client_max_body_size 0; proxy_pass http://127.0.0.1:3000; }\n location / { proxy_pass http://127.0.0.1:3000; }\n}\n";
    let (yaml, skipped) = import("cmbs", conf);
    assert!(yaml.contains("max_body_bytes: 1024g"), "{yaml}");
    assert!(yaml.contains("max_body_bytes: 20m"), "{yaml}");
    assert!(!listed(&skipped, "client_max_body_size"), "{skipped:?}");
}

/// Laravel's PHP location, `try_files $uri /index.php =404;` before `fastcgi_pass`: a script
/// that is not there runs the front controller (the corpus of issue 53: it refused, 503).
#[test]
fn a_php_location_falling_back_to_the_front_controller_is_translated() {
    let conf = "server {\n listen 8080;\n root /srv/app/public;\n location / { try_files $uri $uri/ /index.php?$query_string; }\n location ~ \\.php$ {\n  try_files $uri /index.php =404;\n  fastcgi_pass 127.0.0.1:9000;\n  fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;\n  include fastcgi_params;\n }\n}\n";
    let (yaml, skipped) = import("laravel", conf);
    assert!(yaml.contains("fallback: /index.php"), "{yaml}");
    assert!(!yaml.contains("answers 503"), "{yaml}");
    assert!(!listed(&skipped, "try_files"), "{skipped:?}");
}

/// A server's own `try_files ... @unicorn` (Rails behind unicorn): the files route of the
/// server tries the files, then the named location's proxy (the corpus of issue 53: it was
/// left out, and the files answered 404 where nginx asked the app).
#[test]
fn a_server_level_try_files_with_a_named_location_is_translated() {
    let conf = "server {\n listen 8080;\n root /srv/app/public;\n try_files $uri/index.html $uri @unicorn;\n location @unicorn { proxy_pass http://127.0.0.1:3000; }\n location /assets/ { expires max; }\n}\n";
    let (yaml, skipped) = import("rails", conf);
    assert!(yaml.contains("- '@app'"), "{yaml}");
    assert!(yaml.contains("$uri/index.html"), "{yaml}");
    assert!(yaml.contains("upstream: 127_0_0_1_3000"), "{yaml}");
    assert!(!listed(&skipped, "outside a location"), "{skipped:?}");
}

/// `expires` on files (`max` is nginx's ten years), `add_header ETag ""` adding nothing, and
/// nginx's `gzip_min_length` (20 bytes by default): each as nginx answers (issue 53 §5).
#[test]
fn expires_empty_headers_and_gzip_min_length_answer_as_nginx() {
    let conf = "server {\n listen 8080;\n root /srv/www;\n gzip on;\n location /assets/ { expires max; add_header ETag \"\"; add_header X-A 1; }\n location /docs/ { expires 1h30m; gzip_min_length 1000; }\n location /api/ { expires 7d; proxy_pass http://127.0.0.1:3000; }\n}\n";
    let (yaml, skipped) = import("expires", conf);
    assert!(yaml.contains("expires: max"), "{yaml}");
    assert!(yaml.contains("expires: 5400s"), "{yaml}");
    assert!(!yaml.contains("ETag"), "{yaml}");
    assert!(yaml.contains("X-A"), "{yaml}");
    assert!(
        yaml.contains("min_length: '20'")
            || yaml.contains("min_length: \"20\"")
            || yaml.contains("min_length: 20"),
        "{yaml}"
    );
    assert!(
        yaml.contains("min_length: '1000'") || yaml.contains("min_length: 1000"),
        "{yaml}"
    );
    assert!(listed(&skipped, "proxied responses"), "{skipped:?}");
}

/// The rewrite-module script (`script.rs`): ways through the `if`s become routes with
/// `match.vars`; a flag's value is decided per way; a set value a location uses goes on its
/// route; what cannot be said refuses (503) with the reason listed.
#[test]
fn if_and_set_become_conditions_or_refuse() {
    let conf = "server {\n listen 8080;\n server_name site.example;\n root /srv/www;\n location /a { set $x \"1\"; if ($http_x_a = on) { set $x \"${x}2\"; } if ($x = 12) { return 403; } proxy_pass http://127.0.0.1:3000; }\n location /d { set $y a; if ($http_q = 1) { set $y b; } proxy_set_header X-Y $y; proxy_pass http://127.0.0.1:3000; }\n location /b { set $v $http_x_v; proxy_set_header X-V $v; proxy_pass http://127.0.0.1:3000; }\n location = /c { return 301 https://$server_name/c; }\n}\n";
    let (yaml, skipped) = import("script", conf);
    // The flag is "12" only when the header is `on`: one route answers, with that condition.
    assert!(yaml.contains("$http_x_a: on"), "{yaml}");
    assert!(yaml.contains("status: 403"), "{yaml}");
    // `$x` differs by way and the location uses it: refused, and said.
    assert!(listed(&skipped, "depends on the `if`s"), "{skipped:?}");
    // A value set from a request value goes on the route.
    assert!(yaml.contains("v: $http_x_v"), "{yaml}");
    // `$server_name` is the server's first name.
    assert!(yaml.contains("https://site.example/c"), "{yaml}");
    for (i, (loc, why)) in [
        (
            "location /f { if (-f $request_filename) { return 404; } }",
            "file test",
        ),
        (
            "location /r { rewrite ^/r/(.*)$ /s/$1 last; }",
            "internal rewrite",
        ),
        (
            "location /p { if ($http_a = x) { proxy_pass http://a:1; } }",
            "inside an `if`",
        ),
        (
            "location /u { if ($nope = x) { return 404; } }",
            "not a weir variable",
        ),
    ]
    .iter()
    .enumerate()
    {
        let (yaml, skipped) = import(
            &format!("script{i}"),
            &format!("server {{ listen 8080; root /srv/www; {loc} }}"),
        );
        assert!(yaml.contains("answers 503"), "{loc}:\n{yaml}");
        assert!(listed(&skipped, why), "{loc}: {why}: {skipped:?}");
    }
    // Six independent `if`s with answers: 64 ways, more than are written out.
    let many: String = (0..6)
        .map(|i| format!("if ($http_h{i} = x) {{ set $f{i} 1; }} "))
        .collect();
    let (yaml, skipped) = import(
        "script-many",
        &format!("server {{ listen 8080; root /srv/www; location /m {{ {many} return 204; }} }}"),
    );
    assert!(yaml.contains("answers 503"), "{yaml}");
    assert!(listed(&skipped, "ways through"), "{skipped:?}");
    // A relative root is under nginx's prefix (`--prefix`, Debian's by default), and said.
    let (yaml, skipped) = import("prefix", "server { listen 8080; root html; }");
    assert!(yaml.contains("root: /usr/share/nginx/html"), "{yaml}");
    assert!(listed(&skipped, "--prefix"), "{skipped:?}");
}

/// Duplicate `server_name`s (certbot-edited files): the first server on the address keeps the
/// name, as nginx does, and the duplicate is listed; a server with no name left is left out.
#[test]
fn a_duplicate_server_name_stays_with_the_first_server() {
    let conf =
        "server { listen 8080 default_server; server_name main.example; return 200 main; }\n\
server { listen 8080; server_name www.example main.example; return 200 second; }\n\
server { listen 8080; server_name www.example; return 200 third; }\n\
server { listen 8080; server_name other.example; return 200 other; }\n";
    let (yaml, skipped) = import("dup", conf);
    assert!(listed(&skipped, "conflicting server name"), "{skipped:?}");
    assert!(
        listed(&skipped, "every name an earlier server has"),
        "{skipped:?}"
    );
    // The second keeps www.example only; the third is gone; main stays the default's.
    assert!(!yaml.contains("body: third"), "{yaml}");
    assert_eq!(yaml.matches("main.example").count(), 0, "{yaml}");
    assert!(
        yaml.contains("- www.example") && yaml.contains("- other.example"),
        "{yaml}"
    );
    compiles(&yaml);
}

/// `map` at the http level: weir's `maps:`, its variable usable after it; the WebSocket idiom
/// is listed as not needed; a map weir cannot say is left out and its variable stays unknown.
#[test]
fn maps_are_translated_and_their_variables_known() {
    let conf = "http {\n map $arg_v $asset_immutable { \"\" \"\"; default \", immutable\"; }\n map $http_user_agent $mobile { ~*iphone 1; ~(android)-x $1; default 0; }\n map $http_upgrade $connection_upgrade { default upgrade; '' close; }\n map $host $h { hostnames; default 1; }\n server {\n  listen 8080;\n  root /tmp;\n  location /a { add_header Cache-Control \"public, max-age=60$asset_immutable\"; }\n  location /m { if ($mobile) { return 302 /mobile/; } }\n  location /h { add_header X-H $h; }\n }\n}\n";
    let (yaml, skipped) = import("maps", conf);
    for want in [
        "name: asset_immutable",
        "from: $arg_v",
        "default: ', immutable'",
        "pattern: (?i)iphone",
        "value: $1",
        "Cache-Control: public, max-age=60$asset_immutable",
        "$mobile: '!~^0?$'",
    ] {
        assert!(yaml.contains(want), "{want}:\n{yaml}");
    }
    assert!(listed(&skipped, "WebSocket idiom"), "{skipped:?}");
    assert!(listed(&skipped, "the map is left out"), "{skipped:?}");
    assert!(listed(&skipped, "$h is not a weir variable"), "{skipped:?}");
    compiles(&yaml);
}

/// What the review of issue 53 found, each refused or answered as nginx does.
#[test]
fn the_review_s_script_cases_refuse_or_match_nginx() {
    let refused = [
        // Two conditions on one glued value (`$${a}z` has one spelling).
        ("location /g { set $k \"${http_x_key}z\"; set $ok 0; if ($k = \"goodz\") { set $ok 1; } if ($k ~ \"z$\") { set $ok \"${ok}1\"; } if ($ok = \"11\") { return 200 granted; } return 403; }", "two conditions"),
        // `set $args` changes what goes upstream.
        ("location /q { set $args \"\"; proxy_pass http://127.0.0.1:3000; }", "a variable nginx or a map defines"),
        // A true `if` drops try_files in nginx.
        ("location / { try_files $uri @app; if ($http_x_mobile) { set $mob 1; } }", "loses the location's try_files"),
        // An identity rewrite with `last` is a cycle in nginx (500).
        ("location /r { rewrite ^(.*)$ $1 last; proxy_pass http://127.0.0.1:3000; }", "internal rewrite"),
        // `$uri` is decoded in nginx.
        ("location /u { if ($uri = \"/my file.txt\") { return 403; } }", "decoded in nginx"),
    ];
    for (i, (loc, why)) in refused.iter().enumerate() {
        let (yaml, skipped) = import(
            &format!("review{i}"),
            &format!("server {{ listen 8080; root /srv/www; {loc} location @app {{ proxy_pass http://127.0.0.1:3000; }} }}"),
        );
        assert!(yaml.contains("answers 503"), "{loc}:\n{yaml}");
        assert!(listed(&skipped, why), "{loc}: {why}: {skipped:?}");
    }
    // A named location's answers carry the try_files location's auth.
    let (yaml, _) = import(
        "review-auth",
        "server { listen 8080; root /srv/www; location / { auth_basic x; auth_basic_user_file /etc/htpasswd; try_files $uri @app; } location @app { auth_basic x; auth_basic_user_file /etc/htpasswd; if ($http_x) { return 302 /granted; } proxy_pass http://127.0.0.1:3000; } }",
    );
    let answer = yaml.find("$http_x:").expect(&yaml);
    let next_route = yaml[answer..]
        .find("- match:")
        .unwrap_or(yaml.len() - answer);
    assert!(
        yaml[answer..answer + next_route].contains("basic_auth"),
        "{yaml}"
    );
    // A location's own proxy_set_header replaces the server's (nginx's inheritance).
    let (yaml, _) = import(
        "review-psh",
        "server { listen 8080; proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection upgrade; location /a { proxy_set_header X-Foo 1; proxy_pass http://127.0.0.1:3000; } location /w { proxy_pass http://127.0.0.1:3000; } }",
    );
    assert_eq!(yaml.matches("upgrade: false").count(), 1, "{yaml}");
    // After `rewrite ... break` nginx passes the URI whole: proxy_pass's URI part is not used.
    let (yaml, _) = import(
        "review-rw",
        "server { listen 8080; location /c { rewrite ^(.*)$ $1 break; proxy_pass http://127.0.0.1:3000/app; } }",
    );
    assert!(!yaml.contains("regex_replace"), "{yaml}");
    // Quotes the parser took off are not taken off twice; a map's keys are case-blind and a
    // `${` in a value is written so the config does not read the environment.
    let (yaml, _) = import(
        "review-q",
        "http { map $http_x_user $blocked { default 0; evil 1; } map $arg_a $y { default \"${http_y}z\"; } server { listen 8080; root /tmp; location /q { if ($http_x = '\"q\"') { return 403; } } location /m { if ($blocked) { return 403; } } location /y { add_header X-Y $y; } } }",
    );
    assert!(yaml.contains("'\"q\"'"), "{yaml}");
    assert!(yaml.contains("(?i)^evil$"), "{yaml}");
    assert!(yaml.contains("$${http_y}z"), "{yaml}");
    compiles(&yaml);
}

/// `client_body_timeout` and `keepalive_timeout` in a `server` or `location`: the route's
/// `limits` (nginx's levels), in weir's durations; `keepalive_timeout 0` is not taken per route.
#[test]
fn per_server_and_location_timeouts_become_route_limits() {
    let conf = "server {\n listen 8080;\n keepalive_timeout 10;\n location /up { client_body_timeout 2m; proxy_pass http://127.0.0.1:3000; }\n location /off { keepalive_timeout 0; proxy_pass http://127.0.0.1:3000; }\n}\n";
    let (yaml, skipped) = import("timeouts", conf);
    assert!(yaml.contains("body_timeout: 2m"), "{yaml}");
    assert_eq!(yaml.matches("keepalive_timeout: 10s").count(), 2, "{yaml}");
    assert!(listed(&skipped, "keepalive_timeout"), "{skipped:?}");
    compiles(&yaml);
}

/// A location whose every way answers (`if`, two redirects, then `return`) needs no content of
/// its own: its routes are the answers, under the location's regex (a `$uri` condition where
/// a redirect has its own regex), none refusing.
#[test]
fn a_script_that_always_answers_needs_no_content() {
    let conf = "server { listen 8080; location ~ \\.x$ { if ($http_a = b) { return 403; } rewrite ^/a(.*)$ /b$1 permanent; rewrite ^/c(.*)$ /d$1 permanent; return 200 ok; } }";
    let (yaml, _) = import("answers-all", conf);
    assert!(!yaml.contains("answers 503"), "{yaml}");
    for want in [
        "status: 403",
        "to: /b$1",
        "to: /d$1",
        "body: ok",
        "$uri: ~\\.x$",
        "$${uri}: ~\\.x$",
    ] {
        assert!(yaml.contains(want), "{want}:\n{yaml}");
    }
    compiles(&yaml);
}
