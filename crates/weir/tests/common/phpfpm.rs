//! A real php-fpm (Debian's `php8.2-fpm`) on loopback for the FastCGI tests: its own directory,
//! a TCP port or a unix socket, a static pool of `children` workers, killed with its group when
//! dropped. `None` (with the reason printed) only when php-fpm is not installed, and never in CI
//! (`CI=true`: a failure), which installs it (`.ci/run`).
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::process::{free_port, have_all_or_skip, own_group, Running};

pub const BIN: &str = "php-fpm8.2";

pub struct PhpFpm {
    /// What weir's upstream names: `127.0.0.1:PORT` or `unix:/path`.
    pub server: String,
    pub dir: PathBuf,
    conf: PathBuf,
    pub child: Option<Running>,
}

impl PhpFpm {
    /// Starts php-fpm listening on TCP (`unix: false`) or a unix socket, with `children`
    /// workers and `extra` pool settings.
    pub fn start(name: &str, unix: bool, children: u32, extra: &str) -> Option<PhpFpm> {
        if !have_all_or_skip(&[BIN], "apt-get install php8.2-fpm") {
            return None;
        }
        let dir = std::env::temp_dir().join(format!("weir-fpm-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let listen = if unix {
            dir.join("fpm.sock").display().to_string()
        } else {
            format!("127.0.0.1:{}", free_port())
        };
        let server = if unix {
            format!("unix:{listen}")
        } else {
            listen.clone()
        };
        let conf = dir.join("fpm.conf");
        std::fs::write(
            &conf,
            format!(
                "[global]\nerror_log = {dir}/fpm.log\ndaemonize = no\npid = {dir}/fpm.pid\n\
                 [www]\nuser = nobody\ngroup = nogroup\nlisten = {listen}\n\
                 listen.mode = 0666\npm = static\npm.max_children = {children}\n\
                 catch_workers_output = yes\nclear_env = no\n{extra}\n",
                dir = dir.display()
            ),
        )
        .unwrap();
        let mut f = PhpFpm {
            server,
            dir,
            conf,
            child: None,
        };
        f.resume();
        Some(f)
    }

    /// Starts (again) with the same settings.
    pub fn resume(&mut self) {
        let mut cmd = Command::new(BIN);
        // Debian's php.ini and extensions (posix among them); -R: the tests run as root; -F: in
        // the foreground.
        cmd.args(["-R", "-F", "-y"])
            .arg(&self.conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        own_group(&mut cmd);
        self.child = Some(Running(cmd.spawn().unwrap()));
        let server = self.server.clone();
        super::until("php-fpm listens", Duration::from_secs(20), || match server
            .strip_prefix("unix:")
        {
            Some(path) => std::os::unix::net::UnixStream::connect(path).is_ok(),
            None => std::net::TcpStream::connect(&server).is_ok(),
        });
    }

    /// Stops it (the whole process group).
    pub fn stop(&mut self) {
        self.child = None;
        if let Some(path) = self.server.strip_prefix("unix:") {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for PhpFpm {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
