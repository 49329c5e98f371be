//! A real Redis on loopback for the cluster rate-limit tests: its own port and directory, no
//! persistence, killed when dropped. `None` (with the reason printed) only when no
//! `redis-server` binary exists, and never in CI (`CI=true`: a failure), which installs
//! Debian's `redis-server` (`.ci/run`).
#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::process::{free_port, have_all_or_skip, Running};

pub struct Redis {
    pub addr: SocketAddr,
    dir: std::path::PathBuf,
    pub child: Option<Running>,
}

impl Redis {
    /// Starts Redis, or says why it cannot.
    pub fn start(name: &str) -> Option<Redis> {
        if !have_all_or_skip(
            &["redis-server", "redis-cli"],
            "apt-get install redis-server",
        ) {
            return None;
        }
        let dir = std::env::temp_dir().join(format!("weir-redis-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = Redis {
            addr: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
            dir,
            child: None,
        };
        r.resume();
        Some(r)
    }

    /// Starts (again) on the same port.
    pub fn resume(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.addr.port().to_string())
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(Running(child));
        super::until("redis starts", Duration::from_secs(10), || {
            self.cli(&["PING"]).as_deref() == Ok("PONG")
        });
    }

    /// Stops it.
    pub fn stop(&mut self) {
        self.child = None;
    }

    /// Runs `redis-cli` against it; its output, trimmed.
    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p"])
            .arg(self.addr.port().to_string())
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !text.starts_with("Could not connect") {
            Ok(text)
        } else {
            Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.child = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
