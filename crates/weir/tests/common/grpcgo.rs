//! A real grpc-go server and client (`tests/fixtures/grpc-go`, built from the Go module proxy
//! with `go build`, once per test process; Go's own cache makes later builds quick). `None`
//! (with the reason printed) only when no `go` exists, and never in CI (`CI=true`: a failure).
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use super::process::{have_all_or_skip, Running};

/// The fixture's binary, built on first use.
pub fn fixture() -> Option<PathBuf> {
    if !have_all_or_skip(&["go"], "Go 1.24 or newer, from go.dev or the image") {
        return None;
    }
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    Some(
        BUILT
            .get_or_init(|| {
                let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("weir-grpc-fixture");
                let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/grpc-go");
                let status = Command::new("go")
                    .args(["build", "-o"])
                    .arg(&out)
                    .arg(".")
                    .current_dir(src)
                    .status()
                    .expect("go build runs");
                assert!(status.success(), "go build of {src} failed");
                out
            })
            .clone(),
    )
}

/// The fixture's server: echo.Echo and grpc.health.v1 over h2c on loopback, killed when
/// dropped.
pub struct GrpcServer {
    pub addr: SocketAddr,
    stdin: std::process::ChildStdin,
    lines: BufReader<std::process::ChildStdout>,
    _child: Running,
}

impl GrpcServer {
    pub fn start() -> Option<GrpcServer> {
        Self::start_at("127.0.0.1:0")
    }

    /// [`GrpcServer::start`] on `bind` (`IP:0`).
    pub fn start_at(bind: &str) -> Option<GrpcServer> {
        let bin = fixture()?;
        let mut child = Command::new(bin)
            .args(["server", "-addr", bind])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        lines.read_line(&mut line).unwrap();
        let addr = line
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("the fixture said {line:?}"))
            .trim()
            .parse()
            .unwrap();
        Some(GrpcServer {
            addr,
            stdin,
            lines,
            _child: Running(child),
        })
    }

    /// Sets `service`'s health (`""`: the server's), once the server has taken it.
    pub fn set_serving(&mut self, service: &str, serving: bool) {
        let word = if serving { "serving" } else { "not_serving" };
        writeln!(self.stdin, "{word} {service}").unwrap();
        let mut line = String::new();
        self.lines.read_line(&mut line).unwrap();
        assert!(line.starts_with("ok "), "the fixture said {line:?}");
    }
}

/// Runs the fixture's client with `args`; its exit status and what it printed (both streams).
pub fn client(args: &[&str]) -> (bool, String) {
    let out = Command::new(fixture().unwrap())
        .arg("client")
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
