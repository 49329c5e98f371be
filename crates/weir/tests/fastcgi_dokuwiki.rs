//! A real PHP application end to end through weir's FastCGI upstream (issue 53 §1): Debian's
//! DokuWiki (no database), copied to a directory of its own (its code, its configuration with
//! ACLs off, its data), on Debian's php-fpm. A page is edited through the wiki's own form and
//! read back, over real sockets, as a browser would.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use common::inproc;
use common::phpfpm::PhpFpm;

const DOKUWIKI: &str = "/usr/share/dokuwiki";

/// `cp -rL from to`: the Debian package's links (to /etc/dokuwiki, /var/lib/dokuwiki) copied
/// as what they point to, so that nothing outside the copy is read or written.
fn copy(from: &str, to: &Path) {
    let ok = Command::new("cp")
        .args(["-rL", from])
        .arg(to)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cp -rL {from} {}", to.display());
}

/// A request with the cookie the wiki set (its session), and the answer.
fn send(addr: SocketAddr, raw: String) -> common::Response {
    let mut s = common::connect(addr);
    common::roundtrip(&mut s, raw.as_bytes())
}

fn form_value(html: &str, name: &str) -> String {
    let key = format!("name=\"{name}\" value=\"");
    let at = html
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} in the edit form"));
    let rest = &html[at + key.len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn dokuwiki_pages_are_edited_and_read_back_through_weir() {
    let have = Path::new(DOKUWIKI).join("doku.php").exists();
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        have || !ci,
        "CI=true and DokuWiki is not installed: .ci/run installs it"
    );
    if !have {
        eprintln!("SKIPPED: no DokuWiki (apt-get install dokuwiki)");
        return;
    }
    let Some(fpm) = PhpFpm::start("dokuwiki", false, 2, "") else {
        return;
    };
    let dir = inproc::dir("dokuwiki", "e2e");
    let (www, conf, data) = (dir.join("www"), dir.join("conf"), dir.join("data"));
    copy(DOKUWIKI, &www);
    copy("/etc/dokuwiki", &conf);
    copy("/var/lib/dokuwiki/data", &data);
    std::fs::write(
        www.join("inc/preload.php"),
        format!(
            "<?php\nif(!defined('DOKU_CONF')) define('DOKU_CONF', '{}/');\n",
            conf.display()
        ),
    )
    .unwrap();
    let mut local = std::fs::read_to_string(conf.join("local.php")).unwrap();
    local.push_str(&format!(
        "\n$conf['savedir'] = '{}';\n$conf['useacl'] = 0;\n",
        data.display()
    ));
    std::fs::write(conf.join("local.php"), local).unwrap();
    // php-fpm's workers run as nobody.
    assert!(Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(&dir)
        .status()
        .unwrap()
        .success());
    let handle = inproc::start(&format!(
        r#"workers: 1
upstreams:
  php:
    servers: ['{server}']
    protocol: fastcgi
    fastcgi: {{ root: '{www}', fallback: /doku.php }}
listeners:
  - address: 127.0.0.1:0
    routes:
      - match: {{ path_regex: '\.php(/|$)' }}
        proxy: {{ upstream: php }}
      - static: {{ root: '{www}', index: index.html, try_files: ['$uri', '$uri/', '@app'], app: {{ upstream: php }} }}
"#,
        server = fpm.server,
        www = www.display()
    ));
    let addr = handle.local_addrs()[0];

    // The edit form, with the session the wiki keeps in its cookie.
    let r = send(
        addr,
        "GET /doku.php?id=weir_e2e&do=edit HTTP/1.1\r\nHost: wiki.test\r\n\r\n".into(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let cookie = r
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .expect("the wiki's session cookie")
        .to_string();
    let html = r.text();
    let mut form: Vec<(String, String)> = [
        "sectok",
        "rev",
        "date",
        "prefix",
        "suffix",
        "changecheck",
        "target",
    ]
    .iter()
    .map(|n| (n.to_string(), form_value(&html, n)))
    .collect();
    let text = "Edited through weir over FastCGI: ünïcödé & <tags>";
    form.extend([
        ("id".into(), "weir_e2e".into()),
        ("summary".into(), "weir test".into()),
        ("wikitext".into(), text.into()),
        ("do[save]".into(), "Save".into()),
    ]);
    let body = form
        .iter()
        .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
        .collect::<Vec<_>>()
        .join("&");
    // Saved: the wiki redirects to the page.
    let r = send(
        addr,
        format!(
            "POST /doku.php HTTP/1.1\r\nHost: wiki.test\r\nCookie: {cookie}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    assert_eq!(r.status, 302, "{}", r.text());
    assert!(
        r.header("location")
            .is_some_and(|l| l.ends_with("/doku.php?id=weir_e2e")),
        "{:?}",
        r.headers
    );
    // Read back, by the script and through the front controller; stored on disk.
    let r = send(
        addr,
        "GET /doku.php?id=weir_e2e HTTP/1.1\r\nHost: wiki.test\r\n\r\n".into(),
    );
    assert_eq!(r.status, 200);
    assert!(
        r.text()
            .contains("Edited through weir over FastCGI: ünïcödé &amp; &lt;tags&gt;"),
        "{}",
        r.text()
    );
    // A path that names no file and no script goes to the front controller (doku.php).
    let r = send(
        addr,
        "GET /no-such-file?id=weir_e2e HTTP/1.1\r\nHost: wiki.test\r\n\r\n".into(),
    );
    assert!(
        r.text().contains("Edited through weir over FastCGI"),
        "{} {}",
        r.status,
        r.text()
    );
    let stored = std::fs::read_to_string(data.join("pages/weir_e2e.txt")).unwrap();
    assert_eq!(stored.trim_end(), text);
    // The wiki's static files come from disk, its configuration never.
    let r = send(
        addr,
        "GET /lib/tpl/dokuwiki/images/logo.png HTTP/1.1\r\nHost: wiki.test\r\n\r\n".into(),
    );
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[1..4], b"PNG");
    inproc::stop(handle);
    let _ = std::fs::remove_dir_all(&dir);
}
