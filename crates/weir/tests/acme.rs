//! Automatic certificates against a real ACME server: Debian's `pebble` (and its
//! `pebble-challtestsrv` as the DNS server that points every name at 127.0.0.1), started on
//! loopback by the test. Issuance by HTTP-01 and by TLS-ALPN-01, the certificates served by
//! SNI and verified against pebble's root, reuse from storage across a restart (with the CA
//! gone), renewal, and backoff when the CA fails. DNS-01 through a hook command, and through
//! RFC 2136 updates to Debian's bind9 (`named`, started by the test) by weir's own client and by
//! `examples/acme/dns-nsupdate.sh`.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::bind9::Bind9;
use common::pebble::Pebble;
use common::process::{free_port, free_ports, have_all_or_skip, Running, WEIR};
use common::tlskit;
use rustls::pki_types::CertificateDer;

/// The leaf weir presents for `sni` on `addr`, verified against `root` (`None` while the
/// handshake fails or the chain does not verify yet).
fn served(addr: SocketAddr, sni: &str, root: &CertificateDer<'static>) -> Option<String> {
    let cfg = tlskit::client_config(root, &["http/1.1"], None);
    let mut s = tlskit::connect(addr, sni, &cfg).ok()?;
    let leaf = tlskit::presented(&s);
    let r = tlskit::exchange(
        &mut s,
        &format!("GET / HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(r.text(), "secure");
    let (_, cert) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    Some(cert.raw_serial_as_string())
}

fn serial_on_disk(dir: &Path) -> String {
    use rustls::pki_types::pem::PemObject;
    let der = CertificateDer::from_pem_file(dir.join("cert.pem")).unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    cert.raw_serial_as_string()
}

fn weir(config: &Path, log: &Path) -> Running {
    weir_with_env(config, log, &[])
}

fn weir_with_env(config: &Path, log: &Path, env: &[(&str, String)]) -> Running {
    let child = Command::new(WEIR)
        .args(["run", "-c"])
        .arg(config)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env(
            "WEIR_LOG",
            std::env::var("WEIR_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    Running(child)
}

#[test]
fn certificates_are_obtained_served_reused_and_renewed_against_pebble() {
    // As the etcd and Redis tests: CI installs it (.ci/run) and fails without it; a fresh
    // machine's `cargo test --workspace` says so and goes on.
    if !have_all_or_skip(&["pebble", "pebble-challtestsrv"], "apt-get install pebble") {
        return;
    }
    let p = free_ports(3);
    let (http, tls_alpn, tls_http) = (p[0], p[1], p[2]);
    let mut pebble = Pebble::start(http, tls_alpn);
    let storage = pebble.pki.dir.join("acme");
    let (dir_url, ca_file) = (pebble.dir_url.clone(), pebble.pki.ca_file());
    let config = |renew_before: &str| {
        format!(
            r#"
listeners:
  - address: 127.0.0.1:{http}
    routes:
      - respond: {{ body: "plain" }}
  - address: 127.0.0.1:{tls_alpn}
    tls:
      acme: {{ names: [alpn.weir.test], directory: "{dir}", directory_ca: "{ca}", storage: "{storage}",
               challenge: tls-alpn-01, renew_before: {renew_before}, check_every: 10s, retry_after: 1s }}
    routes:
      - respond: {{ body: "secure" }}
  - address: 127.0.0.1:{tls_http}
    tls:
      acme: {{ names: [www.weir.test, weir.test], directory: "{dir}", directory_ca: "{ca}", storage: "{storage}",
               challenge: http-01, check_every: 1h }}
    routes:
      - respond: {{ body: "secure" }}
"#,
            dir = dir_url,
            ca = ca_file.display(),
            storage = storage.display(),
        )
    };
    let file = pebble.pki.dir.join("weir.yaml");
    let log = pebble.pki.dir.join("weir.log");
    std::fs::write(&file, config("30d")).unwrap();
    let root = pebble.root();
    let alpn_addr: SocketAddr = format!("127.0.0.1:{tls_alpn}").parse().unwrap();
    let http_addr: SocketAddr = format!("127.0.0.1:{tls_http}").parse().unwrap();

    // Issuance: TLS-ALPN-01 on one listener, HTTP-01 (answered on the plain listener) on the
    // other; each served by SNI and verified against pebble's root.
    let first = {
        let _weir = weir(&file, &log);
        let logs = || std::fs::read_to_string(&log).unwrap_or_default();
        let mut serial = None;
        let took = common::until("a TLS-ALPN-01 certificate", Duration::from_secs(60), || {
            serial = served(alpn_addr, "alpn.weir.test", &root);
            serial.is_some() || logs().contains("ERROR")
        });
        assert!(
            serial.is_some(),
            "no certificate after {took:?}: {}",
            logs()
        );
        common::until("an HTTP-01 certificate", Duration::from_secs(60), || {
            served(http_addr, "www.weir.test", &root).is_some()
        });
        // One certificate for both names of the section.
        assert_eq!(
            served(http_addr, "weir.test", &root),
            served(http_addr, "www.weir.test", &root)
        );
        // The plain listener still serves its routes, and unknown tokens are 404.
        let plain: SocketAddr = format!("127.0.0.1:{http}").parse().unwrap();
        assert_eq!(common::get(plain, "/").text(), "plain");
        assert_eq!(
            common::get(plain, "/.well-known/acme-challenge/nope").status,
            404
        );
        let stored = serial_on_disk(&storage.join("alpn.weir.test"));
        assert_eq!(Some(stored.clone()), serial);
        assert!(storage.join("www.weir.test").join("key.pem").exists());
        let mode = std::fs::metadata(storage.join("alpn.weir.test/key.pem"))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        stored
    };

    // A restart with the CA gone serves the stored certificates.
    pebble.stop_ca();
    {
        let _weir = weir(&file, &log);
        common::until("the stored certificate", Duration::from_secs(10), || {
            served(alpn_addr, "alpn.weir.test", &root).is_some()
        });
        assert_eq!(
            served(alpn_addr, "alpn.weir.test", &root),
            Some(first.clone())
        );
        assert!(served(http_addr, "www.weir.test", &root).is_some());
    }

    // Renewal: due at once (renew_before longer than the certificate's life), so each check
    // renews; the new one is served and stored.
    pebble.start_ca();
    // A restarted pebble signs with a new root.
    let root = pebble.root();
    std::fs::write(&file, config("3650d")).unwrap();
    let _weir = weir(&file, &log);
    let mut renewed = None;
    common::until("a renewed certificate", Duration::from_secs(60), || {
        renewed = served(alpn_addr, "alpn.weir.test", &root).filter(|s| *s != first);
        renewed.is_some()
    });
    let renewed = renewed.unwrap();
    common::until(
        "the renewed certificate stored",
        Duration::from_secs(10),
        || serial_on_disk(&storage.join("alpn.weir.test")) != first,
    );

    // The CA fails: the certificate in use stays, and the retries back off (1 s, 2 s, 4 s).
    pebble.stop_ca();
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    common::until("three failed renewals", Duration::from_secs(60), || {
        logs().matches("obtaining a certificate failed").count() >= 3
    });
    let text = logs();
    for wait in ["retry_in=1s", "retry_in=2s", "retry_in=4s"] {
        assert!(text.contains(wait), "no {wait} in:\n{text}");
    }
    let now = served(alpn_addr, "alpn.weir.test", &root).unwrap();
    assert_ne!(
        now, first,
        "still a certificate pebble renewed, not the first"
    );
    let _ = renewed;

    // Bad sections are named by key.
    let bad = common::config_error(
        "listeners:\n  - address: 127.0.0.1:0\n    tls: { acme: { names: ['*.weir.test'] } }\n    routes: []\n",
    );
    assert!(
        bad.contains("acme.names[0]") && bad.contains("DNS-01"),
        "{bad}"
    );
    let bad = common::config_error(
        "listeners:\n  - address: 127.0.0.1:0\n    tls: { acme: { names: [a.weir.test], challenge: dns-01 } }\n    routes: []\n",
    );
    assert!(bad.contains("acme.dns"), "dns-01 needs its hook: {bad}");
    let bad = common::config_error(
        "listeners:\n  - address: 127.0.0.1:0\n    tls: { acme: { names: [a.weir.test], challenge: dns-02 } }\n    routes: []\n",
    );
    assert!(bad.contains("acme.challenge"), "{bad}");
}

/// DNS-01 through the `dns.exec` hook: a wildcard certificate, issued by pebble after the hook
/// set the TXT record in pebble-challtestsrv's DNS, served for names under it, and the record
/// removed afterwards.
#[test]
fn a_wildcard_certificate_is_obtained_by_dns01_through_the_hook() {
    if !have_all_or_skip(&["pebble", "pebble-challtestsrv"], "apt-get install pebble") {
        return;
    }
    let tls = free_port();
    let pebble = Pebble::start_anywhere();
    let dir = pebble.pki.dir.clone();
    let calls = dir.join("hook-calls.log");
    let hook = dir.join("dns-hook.py");
    std::fs::write(
        &hook,
        r#"import json, sys, urllib.request
port, action, fqdn, value = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
with open(sys.argv[5], "a") as f:
    f.write(f"{action} {fqdn}\n")
path, body = ("/set-txt", {"host": fqdn, "value": value}) if action == "present" else ("/clear-txt", {"host": fqdn})
req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST")
urllib.request.urlopen(req, timeout=10).read()
"#,
    )
    .unwrap();
    // The hook's own arguments come first, then weir's three (action, FQDN, value), then the
    // log file: passed through a wrapper that reorders them.
    let wrapper = dir.join("dns-hook.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec python3 {} {} \"$1\" \"$2\" \"$3\" {}\n",
            hook.display(),
            pebble.dns_mgmt,
            calls.display()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&wrapper).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&wrapper, perms).unwrap();
    let file = dir.join("weir-dns01.yaml");
    // Due again at every check (renew_before is longer than a pebble certificate's life): the
    // wildcard is renewed through the hook too.
    let config = dns01_config_with(
        tls,
        &["*.wild.weir.test"],
        &format!("{{ exec: [\"{}\"] }}", wrapper.display()),
        &pebble,
        &dir.join("acme-dns"),
        "renew_before: 3650d, check_every: 2s",
    );
    std::fs::write(&file, config).unwrap();
    let log = dir.join("weir-dns01.log");
    let _weir = weir(&file, &log);
    let root = pebble.root();
    let addr: SocketAddr = format!("127.0.0.1:{tls}").parse().unwrap();
    let serial = issued(addr, "a.wild.weir.test", &root, &log, String::new);
    // One certificate for every name one label under the wildcard.
    assert_eq!(
        served(addr, "other.wild.weir.test", &root),
        Some(serial.clone())
    );
    let mut renewed = None;
    common::until("the wildcard renewed", Duration::from_secs(60), || {
        renewed = served(addr, "a.wild.weir.test", &root).filter(|s| *s != serial);
        renewed.is_some()
    });
    let renewed = renewed.unwrap();
    // Still the wildcard (a name under it gets the renewed one or a later renewal).
    let other = served(addr, "other.wild.weir.test", &root).unwrap();
    assert_ne!(other, serial, "every name moved to a renewed certificate");
    let said = std::fs::read_to_string(&calls).unwrap();
    assert!(
        said.contains("present _acme-challenge.wild.weir.test."),
        "{said}"
    );
    common::until("the record removed", Duration::from_secs(10), || {
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .contains("cleanup _acme-challenge.wild.weir.test.")
    });
    // Each order sets its record and removes it. Renewals come every check: wait for a second
    // order through the hook (one that raced the first, on a loaded machine, can find pebble's
    // authorization already valid and need no record: seen once in CI).
    common::until(
        "a second order through the hook",
        Duration::from_secs(60),
        || {
            let said = std::fs::read_to_string(&calls).unwrap_or_default();
            said.matches("present ").count() >= 2 && said.matches("cleanup ").count() >= 2
        },
    );
    let _ = renewed;
}

/// RFC 2136 dynamic updates with TSIG, through `examples/acme/dns-nsupdate.sh` (nsupdate) as the
/// `dns.exec` hook, against Debian's bind9 on loopback: pebble reads the TXT record from bind9,
/// issues the wildcard, weir serves it, and the record is gone from the zone afterwards.
#[test]
fn a_wildcard_certificate_through_rfc2136_updates_to_bind9() {
    if !have_all_or_skip(
        &[&["pebble", "nsupdate"], common::bind9::NEEDS].concat(),
        &format!("apt-get install pebble; {}", common::bind9::INSTALL),
    ) {
        return;
    }
    let bind9 = Bind9::start();
    let pebble = {
        let p = free_ports(2);
        Pebble::start_with_dns(p[0], p[1], Some(bind9.port))
    };
    let tls = free_port();
    let hook = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/acme/dns-nsupdate.sh"
    );
    let file = bind9.dir.join("weir.yaml");
    let dns = format!("{{ exec: [\"{hook}\"] }}");
    let config = dns01_config(
        tls,
        &["*.bind9.weir.test"],
        &dns,
        &pebble,
        &bind9.dir.join("acme"),
    );
    std::fs::write(&file, config).unwrap();
    let log = bind9.dir.join("weir.log");
    let _weir = weir_with_env(
        &file,
        &log,
        &[
            ("WEIR_NSUPDATE_SERVER", format!("127.0.0.1 {}", bind9.port)),
            ("WEIR_NSUPDATE_KEY", bind9.key_file.display().to_string()),
        ],
    );
    let root = pebble.root();
    let addr: SocketAddr = format!("127.0.0.1:{tls}").parse().unwrap();
    issued(addr, "www.bind9.weir.test", &root, &log, || bind9.log());
    // The record was added by the hook, then removed once the certificate was issued.
    common::until("the TXT record removed", Duration::from_secs(15), || {
        bind9
            .dig("_acme-challenge.bind9.weir.test", "TXT")
            .is_empty()
    });
}

/// The same through weir's own RFC 2136 client (`dns: { rfc2136: ... }`), with the key file
/// tsig-keygen wrote and the zone found by asking bind9: one certificate for the wildcard and
/// the zone's apex (two TXT records on one name at once), served for both, and both records
/// deleted afterwards.
#[test]
fn a_wildcard_certificate_through_weirs_rfc2136_client_to_bind9() {
    let Some((bind9, pebble)) = bind9_and_pebble() else {
        return;
    };
    let tls = free_port();
    let file = bind9.dir.join("weir.yaml");
    let dns = format!(
        "{{ rfc2136: {{ server: \"127.0.0.1:{}\", key_file: \"{}\" }}, timeout: 10s }}",
        bind9.port,
        bind9.key_file.display()
    );
    let config = dns01_config(
        tls,
        &["*.bind9.weir.test", "bind9.weir.test"],
        &dns,
        &pebble,
        &bind9.dir.join("acme"),
    );
    std::fs::write(&file, config).unwrap();
    let log = bind9.dir.join("weir.log");
    let _weir = weir(&file, &log);
    let root = pebble.root();
    let addr: SocketAddr = format!("127.0.0.1:{tls}").parse().unwrap();
    let serial = issued(addr, "www.bind9.weir.test", &root, &log, || bind9.log());
    assert_eq!(served(addr, "bind9.weir.test", &root), Some(serial.clone()));
    assert_eq!(served(addr, "other.bind9.weir.test", &root), Some(serial));
    // bind9 took two additions and two deletions, signed by the key, and the name has no TXT
    // record left.
    common::until("the TXT records removed", Duration::from_secs(15), || {
        bind9
            .dig("_acme-challenge.bind9.weir.test", "TXT")
            .is_empty()
    });
    let named = bind9.log();
    assert_eq!(
        named
            .matches("adding an RR at '_acme-challenge.bind9.weir.test' TXT")
            .count(),
        2,
        "{named}"
    );
    assert_eq!(
        named
            .matches("deleting an RR at _acme-challenge.bind9.weir.test TXT")
            .count(),
        2,
        "{named}"
    );
}

/// A secret bind9 does not share: the update is refused (NOTAUTH, BADSIG), the log says so with
/// the server and zone, nothing is issued or stored, and no record is left in the zone.
#[test]
fn a_wrong_tsig_secret_fails_clearly_and_issues_nothing() {
    let Some((bind9, pebble)) = bind9_and_pebble() else {
        return;
    };
    let tls = free_port();
    // The right key's secret with its first letter changed: still base64, of the same length.
    let right = bind9.secret();
    let wrong = format!(
        "{}{}",
        if right.starts_with('A') { 'B' } else { 'A' },
        &right[1..]
    );
    let dns = format!(
        "{{ rfc2136: {{ server: \"127.0.0.1:{}\", zone: bind9.weir.test, key_name: weir-acme, key_secret: \"{wrong}\" }} }}",
        bind9.port
    );
    let storage = bind9.dir.join("acme");
    let file = bind9.dir.join("weir.yaml");
    std::fs::write(
        &file,
        dns01_config(tls, &["*.bind9.weir.test"], &dns, &pebble, &storage),
    )
    .unwrap();
    let log = bind9.dir.join("weir.log");
    let _weir = weir(&file, &log);
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    common::until("the failed attempt logged", Duration::from_secs(30), || {
        logs().contains("obtaining a certificate failed")
    });
    let text = logs();
    let want = format!(
        "RFC 2136 update at 127.0.0.1:{}, zone bind9.weir.test.: NOTAUTH: the server refused the signature of TSIG key weir-acme. (BADSIG: the server's secret or algorithm for this key differs)",
        bind9.port
    );
    assert!(text.contains(&want), "no {want:?} in:\n{text}");
    assert!(
        bind9.log().contains("tsig verify failure (BADSIG)"),
        "{}",
        bind9.log()
    );
    let addr: SocketAddr = format!("127.0.0.1:{tls}").parse().unwrap();
    assert_eq!(served(addr, "www.bind9.weir.test", &pebble.root()), None);
    let stored = std::fs::read_dir(&storage)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("cert.pem").exists())
        .count();
    assert_eq!(
        stored,
        0,
        "a certificate stored under {}",
        storage.display()
    );
    assert!(bind9
        .dig("_acme-challenge.bind9.weir.test", "TXT")
        .is_empty());
}

/// Bad `dns` sections are config errors naming the key, the key file's errors its line.
#[test]
fn rfc2136_config_errors_name_the_key() {
    let dir = std::env::temp_dir().join(format!("weir-rfc2136-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("bad.key");
    std::fs::write(
        &key,
        "key \"weir-acme\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2Vj\";\n}\n",
    )
    .unwrap();
    let key = key.display().to_string();
    for (dns, path, says) in [
        ("{ exec: [x], rfc2136: { server: 127.0.0.1, key_name: k, key_secret: c2Vj } }", "acme.dns:", "not both"),
        ("{ propagation: 1s }", "acme.dns:", "give `rfc2136"),
        ("{ exec: [] }", "acme.dns.exec:", "name the command"),
        ("{ rfc2136: { server: 127.0.0.1, key_name: k, key_secret: 'c2Vj!' } }", "acme.dns.rfc2136.key_secret:", "not base64"),
        ("{ rfc2136: { server: 127.0.0.1, key_name: k } }", "acme.dns.rfc2136.key_secret:", "give the TSIG key"),
        ("{ rfc2136: { server: 127.0.0.1, key_secret: c2Vj } }", "acme.dns.rfc2136.key_name:", "name the key"),
        ("{ rfc2136: { server: 127.0.0.1, key_name: k, key_secret: c2Vj, algorithm: hmac-md5 } }", "acme.dns.rfc2136.algorithm:", "not supported"),
        ("{ rfc2136: { server: '127.0.0.1:dns', key_name: k, key_secret: c2Vj } }", "acme.dns.rfc2136.server:", "the port"),
        ("{ rfc2136: { server: 127.0.0.1, zone: 'a..b', key_name: k, key_secret: c2Vj } }", "acme.dns.rfc2136.zone:", "a..b"),
        ("{ rfc2136: { server: 127.0.0.1, key_file: /nonexistent/k.key } }", "acme.dns.rfc2136.key_file:", "/nonexistent/k.key: No such file"),
        (&format!("{{ rfc2136: {{ server: 127.0.0.1, key_file: \"{key}\" }} }}"), "acme.dns.rfc2136.key_file:", &format!("{key}:4: expected \";\"")),
    ] {
        let yaml = format!("listeners:\n  - address: 127.0.0.1:0\n    tls:\n      acme: {{ names: [a.weir.test], challenge: dns-01,\n              dns: {dns} }}\n    routes: []\n");
        let e = common::config_error(&yaml);
        assert!(e.contains(path) && e.contains(says), "{dns}: {e}");
        // The line of the `dns:` key.
        assert!(e.starts_with("config:5:") || e.contains(":5:"), "{dns}: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits (90 s at most, less when weir logs an error) for weir to serve a certificate for `sni`
/// on `addr` that chains to `root`; returns its serial, or fails with weir's log and `more()`.
/// Debian's bind9 on loopback, and pebble validating against it (`None`: skipped, outside CI,
/// when they are not installed).
fn bind9_and_pebble() -> Option<(Bind9, Pebble)> {
    if !have_all_or_skip(
        &[&["pebble"], common::bind9::NEEDS].concat(),
        &format!("apt-get install pebble; {}", common::bind9::INSTALL),
    ) {
        return None;
    }
    let bind9 = Bind9::start();
    let pebble = {
        let p = free_ports(2);
        Pebble::start_with_dns(p[0], p[1], Some(bind9.port))
    };
    Some((bind9, pebble))
}

/// The serial of the certificate served for `sni` once there is one; panics with weir's log
/// (and `more`) when an attempt failed, weir did not start, or 90 s passed.
fn issued(
    addr: SocketAddr,
    sni: &str,
    root: &CertificateDer<'static>,
    log: &Path,
    more: impl Fn() -> String,
) -> String {
    let logs = || std::fs::read_to_string(log).unwrap_or_default();
    let start = std::time::Instant::now();
    loop {
        if let Some(serial) = served(addr, sni, root) {
            return serial;
        }
        let said = logs();
        // `weir: …` on stderr, other than the banner, is a start that failed (a port taken
        // meanwhile, say).
        let ended = said.contains("ERROR")
            || said.contains("obtaining a certificate failed")
            || said
                .lines()
                .any(|l| l.starts_with("weir: ") && !l.starts_with("weir: serving"));
        if ended || start.elapsed() > Duration::from_secs(90) {
            panic!(
                "no certificate for {sni} after {:?}:\n{said}\n{}",
                start.elapsed(),
                more()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A TLS listener on `tls` with one DNS-01 certificate for `names` from `pebble`, its records set
/// through `dns` (a YAML flow mapping), answering "secure".
fn dns01_config(tls: u16, names: &[&str], dns: &str, pebble: &Pebble, storage: &Path) -> String {
    dns01_config_with(tls, names, dns, pebble, storage, "check_every: 1h")
}

/// [`dns01_config`] with `timing` (`renew_before`, `check_every`) in the `acme:` section.
fn dns01_config_with(
    tls: u16,
    names: &[&str],
    dns: &str,
    pebble: &Pebble,
    storage: &Path,
    timing: &str,
) -> String {
    format!(
        r#"
listeners:
  - address: 127.0.0.1:{tls}
    tls:
      acme: {{ names: {names:?}, challenge: dns-01, dns: {dns},
               directory: "{dir_url}", directory_ca: "{ca}", storage: "{storage}", {timing} }}
    routes:
      - respond: {{ body: "secure" }}
"#,
        dir_url = pebble.dir_url,
        ca = pebble.pki.ca_file().display(),
        storage = storage.display(),
    )
}

/// Issue 52: a directory whose TLS certificate does not verify (pebble's, without
/// `directory_ca`) is named as such in the log, with what to do, not `client error (Connect)`.
#[test]
fn a_directory_whose_certificate_does_not_verify_is_named() {
    if !have_all_or_skip(&["pebble", "pebble-challtestsrv"], "apt-get install pebble") {
        return;
    }
    let p = free_ports(2);
    let pebble = Pebble::start(p[0], p[1]);
    let storage = pebble.pki.dir.join("acme-unverified");
    let file = pebble.pki.dir.join("weir-unverified.yaml");
    let log = pebble.pki.dir.join("weir-unverified.log");
    std::fs::write(
        &file,
        format!(
            r#"
listeners:
  - address: 127.0.0.1:{tls}
    tls:
      acme: {{ names: [alpn.weir.test], directory: "{dir}", storage: "{storage}",
               challenge: tls-alpn-01, check_every: 1h, retry_after: 1h }}
    routes:
      - respond: {{ body: "secure" }}
"#,
            tls = p[1],
            dir = pebble.dir_url,
            storage = storage.display(),
        ),
    )
    .unwrap();
    let _weir = weir(&file, &log);
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    common::until("the failed attempt logged", Duration::from_secs(30), || {
        logs().contains("obtaining a certificate failed")
    });
    let text = logs();
    assert!(
        text.contains("UnknownIssuer") || text.contains("invalid peer certificate"),
        "the certificate problem is named:\n{text}"
    );
    assert!(text.contains("directory_ca"), "and what to do:\n{text}");
}
