//! A real etcd on loopback for the cluster tests: its own data directory and ports, killed
//! when dropped. `None` (with the reason printed) only when no `etcd` binary exists, and
//! never in CI (`CI=true`: a failure), which installs Debian's `etcd-server` (`.ci/run`).
#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::process::{free_port, have_all_or_skip, Running};

pub struct Etcd {
    pub addr: SocketAddr,
    peer: u16,
    dir: std::path::PathBuf,
    pub child: Option<Running>,
}

impl Etcd {
    /// Starts etcd, or says why it cannot.
    pub fn start(name: &str) -> Option<Etcd> {
        if !have_all_or_skip(
            &["etcd", "etcdctl"],
            "apt-get install etcd-server etcd-client",
        ) {
            return None;
        }
        let dir = std::env::temp_dir().join(format!("weir-etcd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut e = Etcd {
            addr: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
            peer: free_port(),
            dir,
            child: None,
        };
        e.resume();
        Some(e)
    }

    /// Starts (again) on the same data and ports.
    pub fn resume(&mut self) {
        let client = format!("http://{}", self.addr);
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let child = Command::new("etcd")
            .arg("--name=default")
            .arg(format!("--data-dir={}", self.dir.display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=default={peer}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(Running(child));
        super::until("etcd starts", Duration::from_secs(20), || {
            self.ctl(&["endpoint", "health"]).is_ok()
        });
    }

    /// Stops it (the data stays).
    pub fn stop(&mut self) {
        self.child = None;
    }

    /// Runs `etcdctl` against it.
    pub fn ctl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.addr))
            .arg("--dial-timeout=1s")
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.child = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
