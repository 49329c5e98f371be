//! The `weir` binary: `check`, `version`, and `run` with the built-in config and a signal.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn write_config(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("weir-cli-{name}-{}.yaml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn check_accepts_the_examples() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for example in ["hello", "proxy", "gateway", "cache"] {
        let file = format!("examples/{example}.yaml");
        let out = Command::new(WEIR)
            .args(["check", "-c", &file])
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
    let mut child = Command::new(WEIR)
        .arg("run")
        .env("WEIR_LISTEN", "127.0.0.1:0")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut addr = None;
    for _ in 0..5 {
        let line = lines.next().unwrap().unwrap();
        if let Some(i) = line.find("http://") {
            let rest = &line[i + 7..];
            addr = Some(rest[..rest.find('/').unwrap()].parse().unwrap());
            break;
        }
    }
    let addr = addr.expect("weir run should say where it listens");
    let r = common::get(addr, "/hello");
    assert_eq!(r.text(), "Hello, World\n");
    assert!(common::get(addr, "/").text().contains("Welcome to weir"));
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
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
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot listen on"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
