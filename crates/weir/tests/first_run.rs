//! What a new user runs first works as written (issue 18, item 12): the README's TLS quick
//! start, the install recipe in `deploy/weir.service`, `weir check` catching an admin address
//! that is also a listener's, duplicate route names, run errors naming the file, purge by a
//! full URL, the RFC 9110 reason phrases, and `weir bench --h2` against an HTTP/1.1 port.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::process::{free_port, spawn_serving, write_config, Running, WEIR};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The shell lines of the first fenced block after `marker` in `text`.
fn block_after(text: &str, marker: &str) -> Vec<String> {
    let from = text.find(marker).unwrap();
    let rest = &text[from..];
    let start = rest.find("```sh\n").unwrap() + 6;
    let end = rest[start..].find("```").unwrap();
    rest[start..start + end]
        .lines()
        .map(str::to_string)
        .collect()
}

fn wait_port(port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// The two lines of the README's TLS block, run by `sh` from a scratch copy of the repository's
/// `examples/`, with `cargo run --release --` standing for the binary under test (building a
/// release binary inside a test would take minutes).
#[test]
fn the_readme_tls_quick_start_works_as_written() {
    if Command::new("openssl").arg("version").output().is_err() {
        panic!(
            "openssl is needed by the README's TLS quick start (Debian: apt-get install openssl)"
        );
    }
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let lines = block_after(&readme, "TLS and HTTP/2 ([examples/tls.yaml]");
    assert_eq!(lines.len(), 2, "{lines:?}");
    let scratch = std::env::temp_dir().join(format!("weir-first-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let status = Command::new("cp")
        .arg("-r")
        .arg(repo().join("examples"))
        .arg(&scratch)
        .status()
        .unwrap();
    assert!(status.success());
    let out = Command::new("sh")
        .arg("-c")
        .arg(&lines[0])
        .current_dir(&scratch)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = lines[1]
        .split('#')
        .next()
        .unwrap()
        .replace("cargo run --release --", WEIR);
    let port = free_port();
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!("exec env {run}"))
        .current_dir(&scratch)
        .env("WEIR_LISTEN", format!("127.0.0.1:{port}"))
        .env("WEIR_WORKERS", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Running(child);
    if !wait_port(port) {
        let _ = child.0.kill();
        let out = child.0.wait_with_output_or_stderr();
        panic!("the README's command did not serve: {out}");
    }
    // The README's own check, on the port the test gave it.
    let then = lines[1]
        .split("then: ")
        .nth(1)
        .unwrap()
        .replace("8443", &port.to_string());
    let out = Command::new("sh").arg("-c").arg(&then).output().unwrap();
    assert!(
        out.status.success(),
        "{then}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Hello, World\n");
    let _ = std::fs::remove_dir_all(&scratch);
}

trait StderrOf {
    fn wait_with_output_or_stderr(&mut self) -> String;
}

impl StderrOf for std::process::Child {
    fn wait_with_output_or_stderr(&mut self) -> String {
        use std::io::Read;
        let _ = self.wait();
        let mut s = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}

/// The install recipe at the top of `deploy/weir.service`, with `/etc` and `/usr/local` moved
/// under a scratch prefix; `cargo install` is stood in for by the binary under test, and the
/// systemd lines are left out. Then `ExecStartPre`'s check and the service's config serve.
#[test]
fn the_systemd_install_recipe_works_as_written() {
    let unit = std::fs::read_to_string(repo().join("deploy/weir.service")).unwrap();
    let prefix = std::env::temp_dir().join(format!("weir-install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    std::fs::create_dir_all(prefix.join("etc/systemd/system")).unwrap();
    let p = prefix.display().to_string();
    let recipe: Vec<String> = unit
        .lines()
        .take_while(|l| l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("#   "))
        .filter(|l| l.starts_with("install ") || l.starts_with("cp "))
        .map(|l| l.replace("/etc/", &format!("{p}/etc/")))
        .collect();
    assert_eq!(recipe.len(), 2, "{recipe:?}");
    for line in &recipe {
        let out = Command::new("sh")
            .arg("-c")
            .arg(line)
            .current_dir(repo())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{line}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let config = prefix.join("etc/weir/weir.yaml");
    let check = Command::new(WEIR)
        .args(["check", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let port = free_port();
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c"])
        .arg(&config)
        .env("WEIR_LISTEN", format!("127.0.0.1:{port}"))
        .env("WEIR_WORKERS", "1");
    let (_child, addr) = spawn_serving(cmd);
    let r = common::get(addr, "/static/hello.txt");
    assert_eq!(
        r.status,
        200,
        "the www directory was installed: {}",
        r.text()
    );
    let _ = std::fs::remove_dir_all(&prefix);
}

#[test]
fn check_refuses_an_admin_address_that_is_a_listeners() {
    let port = free_port();
    let p = write_config(
        "admin-clash",
        &format!("admin: {{ address: 127.0.0.1:{port} }}\nlisteners:\n  - address: 0.0.0.0:{port}\n    routes:\n      - respond: {{ body: hi }}\n"),
    );
    let out = Command::new(WEIR)
        .args(["check", "-c"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&p.display().to_string())
            && err.contains("admin.address")
            && err.contains("listeners[0]"),
        "{err}"
    );
}

#[test]
fn duplicate_route_names_are_refused() {
    let e = weir::runtime::load_str(
        "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - name: api\n        respond: { body: a }\n      - name: api\n        respond: { body: b }\n",
        Path::new("."),
        |_| None,
    )
    .unwrap_err();
    assert_eq!(e.line, Some(6), "{e}");
    assert!(e.to_string().contains("listeners[0].routes[1].name"), "{e}");
}

#[test]
fn run_errors_name_the_file() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let p = write_config(
        "in-use",
        &format!("listeners:\n  - address: 127.0.0.1:{port}\n    routes:\n      - respond: {{ body: hi }}\n"),
    );
    let out = Command::new(WEIR)
        .args(["run", "-c"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&p.display().to_string()) && err.contains("line 2"),
        "{err}"
    );
}

#[test]
fn reason_phrases_are_rfc_9110s() {
    let srv = common::start("limits: { max_body_bytes: 10 }", common::BASIC_ROUTES);
    let mut s = srv.connect();
    use std::io::{Read, Write};
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n")
        .unwrap();
    let mut head = [0u8; 64];
    let n = s.read(&mut head).unwrap();
    assert!(
        head[..n].starts_with(b"HTTP/1.1 413 Content Too Large\r\n"),
        "{:?}",
        String::from_utf8_lossy(&head[..n])
    );
}

#[test]
fn purge_takes_a_full_url_and_refuses_one_that_matches_nothing() {
    use common::cachekit::{cache, get, resp, scripted};
    let o = scripted(|_, n| resp("200 OK", "Cache-Control: max-age=600\r\n", &format!("v{n}")));
    let c = cache(&o.origin, "", "1m");
    get(&c, "/p?x=1", "");
    let admin = |path: &str| {
        let mut s = common::connect(c.admin);
        common::roundtrip(
            &mut s,
            format!("POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n")
                .as_bytes(),
        )
    };
    let r = admin("/purge?url=http://SITE.test:80/p%3Fx%3D1");
    assert_eq!(
        (r.status, r.text().contains("\"purged\":1")),
        (200, true),
        "{}",
        r.text()
    );
    for bad in [
        "/purge?url=site.test",
        "/purge?url=http://bad%20host/p",
        "/purge?url=http://a@b/p",
    ] {
        let r = admin(bad);
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }
}

#[test]
fn bench_h2_against_an_http1_port_says_so_and_fails() {
    let srv = common::start("", common::BASIC_ROUTES);
    let out = Command::new(WEIR)
        .args(["bench", "--h2", "-c", "1", "-d", "1s"])
        .arg(format!("http://{}/hello", srv.addr))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no response") && err.contains("HTTP/2"),
        "{err}"
    );
}
