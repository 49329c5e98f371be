//! The `weir` binary: `check`, `version`, and `run` with the built-in config and a signal.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::process::{Command, Stdio};

use common::process::{signal, spawn_run, spawn_serving, write_config, Running, WEIR};

#[test]
fn check_accepts_the_examples() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for file in [
        "examples/hello.yaml",
        "examples/proxy.yaml",
        "examples/gateway.yaml",
        "examples/cache.yaml",
        "examples/kv.yaml",
        "examples/echo-origins.yaml",
        "examples/https-acme.yaml",
        "examples/behind-lb.yaml",
        "examples/tcp.yaml",
        "deploy/container.yaml",
    ] {
        let out = Command::new(WEIR)
            .args(["check", "--no-bind", "-c", file])
            .env(
                "WEIR_CACHE_DIR",
                std::env::temp_dir().join(format!("weir-cli-cache-{}", std::process::id())),
            )
            .env(
                "WEIR_KV_DIR",
                std::env::temp_dir().join(format!("weir-cli-kv-{}", std::process::id())),
            )
            .current_dir(root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("ok"),
            "{file}"
        );
    }
}

#[test]
fn check_rejects_with_key_and_line() {
    let p = write_config(
        "bad",
        "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: { stauts: 200 }\n",
    );
    let out = Command::new(WEIR)
        .args(["check", "-c"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(":4:")
            && err.contains("listeners[0].routes[0].respond")
            && err.contains("stauts"),
        "{err}"
    );

    let out = Command::new(WEIR)
        .args(["check", "-c", "/nonexistent.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read config file"));
}

#[test]
fn version_prints() {
    let out = Command::new(WEIR).arg("version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("weir "));
}

#[test]
fn run_without_config_serves_the_builtin_and_stops_on_sigterm() {
    let mut cmd = Command::new(WEIR);
    cmd.arg("run").env("WEIR_LISTEN", "127.0.0.1:0");
    let (mut child, addr) = spawn_serving(cmd);
    let r = common::get(addr, "/hello");
    assert_eq!(r.text(), "Hello, World\n");
    assert!(common::get(addr, "/").text().contains("Welcome to weir"));
    signal(&child, "-TERM");
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
}

#[test]
fn run_reports_a_busy_port() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let p = write_config(
        "busy",
        &format!(
            "listeners:\n  - address: {}\n    routes: []\n",
            taken.local_addr().unwrap()
        ),
    );
    let out = Command::new(WEIR)
        .args(["run", "-c"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 2: listeners[0].address") && err.contains("in use by another process"),
        "{err}"
    );
}

#[test]
fn a_second_weir_cannot_take_the_port_of_the_first() {
    let first_cfg = write_config(
        "first",
        "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: { status: 200, body: first }\n",
    );
    let (mut first, addr) = spawn_run(&first_cfg);
    let second_cfg = write_config(
        "second",
        &format!("workers: 1\nlisteners:\n  - address: {addr}\n    routes:\n      - respond: {{ status: 200, body: second }}\n"),
    );
    let mut second = Running(
        Command::new(WEIR)
            .args(["run", "-c"])
            .arg(&second_cfg)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while second.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = second.kill();
            panic!("the second weir started on the first one's port");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = second.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "the second weir must not start");
    assert!(
        err.contains("line 3: listeners[0].address") && err.contains("in use by another process"),
        "{err}"
    );
    // Every request still reaches the first.
    for _ in 0..20 {
        assert_eq!(common::get(addr, "/").text(), "first");
    }
    signal(&first, "-TERM");
    assert!(first.wait().unwrap().success());
}

#[test]
fn sighup_reloads_the_config_and_a_bad_one_keeps_the_running_one() {
    let body = |b: &str| {
        format!("listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {{ status: 200, body: {b} }}\n")
    };
    let cfg = write_config("hup", &body("one"));
    let (mut child, addr) = spawn_run(&cfg);
    assert_eq!(common::get(addr, "/").text(), "one");
    std::fs::write(&cfg, body("two")).unwrap();
    signal(&child, "-HUP");
    common::until(
        "SIGHUP reloaded",
        std::time::Duration::from_secs(10),
        || common::get(addr, "/").text() == "two",
    );
    // A broken config: the process stays up on the running config.
    std::fs::write(
        &cfg,
        "listeners: [ {address: 127.0.0.1:0, routes: [ {respond: {stauts: 1}} ] } ]\n",
    )
    .unwrap();
    signal(&child, "-HUP");
    // paces: had the bad config ended weir, it would have by now.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "SIGHUP must not end weir"
    );
    assert_eq!(common::get(addr, "/").text(), "two");
    signal(&child, "-TERM");
    assert!(child.wait().unwrap().success());
}

#[test]
fn check_rejects_overflowing_durations_and_sizes_naming_the_key() {
    for (text, key) in [
        (
            "timeouts: { header: 99999999999999999999d }\nlisteners: []\n",
            "timeouts.header",
        ),
        (
            "timeouts: { keepalive: 1e300s }\nlisteners: []\n",
            "timeouts.keepalive",
        ),
        (
            "limits: { max_body_bytes: 99999999999999999999g }\nlisteners: []\n",
            "limits.max_body_bytes",
        ),
    ] {
        let p = write_config("overflow", text);
        let out = Command::new(WEIR)
            .args(["check", "-c"])
            .arg(&p)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "an error, not an abort: {err}");
        assert!(err.contains(key) && err.contains(":1:"), "{text}: {err}");
    }
}

#[test]
fn a_relative_static_root_resolves_against_the_config_file() {
    let dir = std::env::temp_dir().join(format!("weir-cli-site-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::write(dir.join("www/page.txt"), "from the config's directory").unwrap();
    let cfg = dir.join("site.yaml");
    std::fs::write(
        &cfg,
        "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - static: { root: www }\n",
    )
    .unwrap();
    // Started from elsewhere: the root must not depend on the working directory.
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c"]).arg(&cfg).current_dir("/");
    let (mut child, addr) = spawn_serving(cmd);
    assert_eq!(
        common::get(addr, "/page.txt").text(),
        "from the config's directory"
    );
    signal(&child, "-TERM");
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_ipv6_address_from_the_environment_works_unquoted_in_the_examples() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for file in [
        "examples/hello.yaml",
        "examples/cache.yaml",
        "deploy/container.yaml",
    ] {
        let out = Command::new(WEIR)
            .args(["check", "--no-bind", "-c", file])
            .env(
                "WEIR_CACHE_DIR",
                std::env::temp_dir().join(format!("weir-cli-cache-{}", std::process::id())),
            )
            .env(
                "WEIR_KV_DIR",
                std::env::temp_dir().join(format!("weir-cli-kv-{}", std::process::id())),
            )
            .env("WEIR_LISTEN", "[::1]:8080")
            .current_dir(root)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.contains("[::1]:8080"),
            "{file}: {said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn bench_takes_wrk_and_hey_flags_and_fails_loudly_when_nothing_listens() {
    let srv = common::start("", common::BASIC_ROUTES);
    let url = format!("http://{}/hello", srv.addr);
    // wrk's --latency and hey's -z are accepted.
    let out = Command::new(WEIR)
        .args(["bench", "-c", "2", "-z", "300ms", "--latency", &url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Latency Distribution"));
    let dead = common::process::free_port();
    let started = std::time::Instant::now();
    let out = Command::new(WEIR)
        .args(["bench", "-n", "10", &format!("http://127.0.0.1:{dead}/")])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "nothing listening must not look like success"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot connect") && err.contains("refused"),
        "{err}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}
