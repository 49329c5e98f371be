//! `maps:` (issue 53 §3, nginx's `map`): variables chosen by another value, by exact value,
//! longest prefix, regex (with captures) or default, usable wherever variables are; a map may
//! key on an earlier one. Over real sockets, and the config errors that name the key.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;

use common::inproc;

const CONFIG: &str = r#"workers: 1
maps:
  - name: connection_upgrade
    from: $http_upgrade
    exact: { "": close }
    default: upgrade
  - name: legacy
    from: $uri
    prefix: { /old/: "yes", /old/keep/: "kept-longest" }
    regex:
      - { pattern: '^/v(\d+)/(\w+)', value: 'api-$1-$2' }
    default: "no"
  - name: chained
    from: $legacy
    exact: { "yes": moved }
    default: $legacy
listeners:
  - address: 127.0.0.1:0
    routes:
      - match: { path_prefix: /go/ }
        redirect: { to: "https://$legacy.example.test$uri", status: 302 }
      - filters:
          - headers: { response: { set: { x-upgrade: $connection_upgrade } } }
        respond: { body: "cu=$connection_upgrade legacy=$legacy chained=$chained\n" }
"#;

fn get(addr: SocketAddr, path: &str, extra: &str) -> common::Response {
    let mut s = common::connect(addr);
    common::roundtrip(
        &mut s,
        format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n").as_bytes(),
    )
}

#[test]
fn maps_choose_values_by_exact_prefix_regex_and_default() {
    let handle = inproc::start(CONFIG);
    let addr = handle.local_addrs()[0];
    let r = get(addr, "/page", "");
    assert_eq!(r.text(), "cu=close legacy=no chained=no\n");
    assert_eq!(r.header("x-upgrade"), Some("close"));
    let r = get(addr, "/page", "Upgrade: websocket\r\n");
    assert_eq!(r.text(), "cu=upgrade legacy=no chained=no\n");
    assert_eq!(r.header("x-upgrade"), Some("upgrade"));
    assert_eq!(
        get(addr, "/old/a", "").text(),
        "cu=close legacy=yes chained=moved\n"
    );
    assert_eq!(
        get(addr, "/old/keep/a", "").text(),
        "cu=close legacy=kept-longest chained=kept-longest\n"
    );
    assert_eq!(
        get(addr, "/v2/users/7", "").text(),
        "cu=close legacy=api-2-users chained=api-2-users\n"
    );
    let r = get(addr, "/go/x", "");
    assert_eq!(
        (r.status, r.header("location")),
        (302, Some("https://no.example.test/go/x"))
    );
    inproc::stop(handle);
}

fn load_error(yaml: &str) -> String {
    weir::runtime::load_str(yaml, std::path::Path::new("."), |_| None)
        .unwrap_err()
        .to_string()
}

#[test]
fn map_errors_name_the_key() {
    let cases = [
        (
            "maps: [ { name: host, from: $uri } ]",
            "maps[0].name",
            "already a variable",
        ),
        (
            "maps: [ { name: a, from: $b }, { name: b, from: $uri } ]",
            "maps[0].from",
            "unknown variable $b",
        ),
        (
            "maps: [ { name: a, from: $uri, regex: [ { pattern: '^/(x)', value: '$2' } ] } ]",
            "maps[0].regex[0].value",
            "only a regex's value has captures, and this one has 1",
        ),
        (
            "maps: [ { name: Bad, from: $uri } ]",
            "maps[0].name",
            "lowercase",
        ),
    ];
    for (maps, key, says) in cases {
        let err = load_error(&format!(
            "{maps}\nlisteners:\n  - address: 127.0.0.1:0\n    routes: [ {{ respond: {{ body: ok }} }} ]\n"
        ));
        assert!(err.contains(key) && err.contains(says), "{maps}: {err}");
    }
    // A map's variable is unknown outside the config that defines it.
    let err = load_error(
        "listeners:\n  - address: 127.0.0.1:0\n    routes: [ { respond: { body: $connection_upgrade } } ]\n",
    );
    assert!(
        err.contains("unknown variable $connection_upgrade"),
        "{err}"
    );
}

/// A route's `set` (nginx's `set $name value;`): variables of that route only, in order, each
/// seeing those before it and the maps.
#[test]
fn routes_set_their_own_variables() {
    let handle = inproc::start(
        r#"workers: 1
maps:
  - name: tier
    from: $arg_plan
    exact: { gold: premium }
    default: basic
listeners:
  - address: 127.0.0.1:0
    routes:
      - match: { path_prefix: /a }
        set:
          backend: "app-$tier"
          full: "$backend:$uri"
          port: 8080
        filters:
          - headers: { response: { set: { x-backend: $backend } } }
        respond: { body: "full=$full port=$port\n" }
      - respond: { body: "tier=$tier\n" }
"#,
    );
    let addr = handle.local_addrs()[0];
    let r = get(addr, "/a/x?plan=gold", "");
    assert_eq!(r.text(), "full=app-premium:/a/x port=8080\n");
    assert_eq!(r.header("x-backend"), Some("app-premium"));
    assert_eq!(get(addr, "/b", "").text(), "tier=basic\n");
    inproc::stop(handle);
    // Another route does not see them.
    let err = load_error(
        "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - { match: { path: /a }, set: { x: one }, respond: { body: ok } }\n      - { respond: { body: $x } }\n",
    );
    assert!(
        err.contains("routes[1]") && err.contains("unknown variable $x"),
        "{err}"
    );
    let err = load_error(
        "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - { set: { uri: one }, respond: { body: ok } }\n",
    );
    assert!(
        err.contains("routes[0].set") && err.contains("already a variable"),
        "{err}"
    );
}

/// nginx's common `if` idioms as route matches: the scheme, and variables' values (equal, not
/// equal, regex, not regex, empty), maps included.
#[test]
fn routes_match_on_the_scheme_and_on_variables() {
    let handle = inproc::start(
        r#"workers: 1
maps:
  - name: mobile
    from: $http_user_agent
    regex: [ { pattern: '(?i)iphone|android', value: "1" } ]
listeners:
  - address: 127.0.0.1:0
    routes:
      - match: { scheme: http, vars: { $http_x_forwarded_proto: "!https", $arg_force: "" } }
        redirect: { to: "https://$host$request_uri", status: 301 }
      - match: { vars: { $host: "~^www\\." } }
        respond: { body: "www\n" }
      - match: { vars: { $mobile: "1" } }
        respond: { body: "mobile\n" }
      - match: { vars: { $arg_force: "!" } }
        respond: { body: "forced\n" }
      - respond: { body: "plain\n" }
"#,
    );
    let addr = handle.local_addrs()[0];
    let ask = |path: &str, host: &str, extra: &str| {
        let mut s = common::connect(addr);
        common::roundtrip(
            &mut s,
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n").as_bytes(),
        )
    };
    let r = ask("/a?b=1", "site.test", "");
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("https://site.test/a?b=1"))
    );
    // Behind a proxy that terminated TLS: not redirected.
    let r = ask("/a", "site.test", "X-Forwarded-Proto: https\r\n");
    assert_eq!(r.text(), "plain\n");
    assert_eq!(
        ask("/", "www.site.test", "X-Forwarded-Proto: https\r\n").text(),
        "www\n"
    );
    assert_eq!(
        ask(
            "/",
            "site.test",
            "X-Forwarded-Proto: https\r\nUser-Agent: Mozilla (iPhone)\r\n"
        )
        .text(),
        "mobile\n"
    );
    assert_eq!(ask("/?force=1", "site.test", "").text(), "forced\n");
    inproc::stop(handle);
    let err = load_error(
        "listeners:\n  - address: 127.0.0.1:0\n    routes: [ { match: { scheme: ftp }, respond: { body: ok } } ]\n",
    );
    assert!(err.contains("routes[0].match.scheme"), "{err}");
}
