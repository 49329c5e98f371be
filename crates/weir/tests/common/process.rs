//! Running the `weir` binary as a child process.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

pub const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// Writes a config file under the temp directory; returns its path.
pub fn write_config(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("weir-test-{name}-{}.yaml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

/// A child process killed when dropped, so a failing test leaves no server behind. A child
/// started in a process group of its own ([`own_group`]) is killed with its whole group: nginx's
/// workers outlived their killed master and went on listening (issue 52).
pub struct Running(pub std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let pid = self.0.id() as libc::pid_t;
        // SAFETY: kill(2) takes any pid; a group this child does not lead answers ESRCH (or
        // EPERM), and nothing else is touched: group ids are process ids that lead them.
        #[allow(unsafe_code)]
        unsafe {
            if libc::getpgid(pid) == pid {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `cmd` started as the leader of a process group of its own, so that [`Running`] stops
/// everything it starts (a master's workers).
pub fn own_group(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0)
}

impl std::ops::Deref for Running {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

/// Starts `weir run -c FILE`; returns the child and the address it says it serves.
pub fn spawn_run(config: &std::path::Path) -> (Running, std::net::SocketAddr) {
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c"]).arg(config);
    spawn_serving(cmd)
}

/// Spawns `cmd` (a `weir run`); returns the child and the address it says it serves.
pub fn spawn_serving(mut cmd: Command) -> (Running, std::net::SocketAddr) {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut addr = None;
    for _ in 0..5 {
        let line = lines.next().unwrap().unwrap();
        if let Some(i) = line
            .find("://")
            .filter(|i| line[..*i].ends_with("http") || line[..*i].ends_with("https"))
        {
            let rest = &line[i + 3..];
            addr = Some(rest[..rest.find('/').unwrap()].parse().unwrap());
            break;
        }
    }
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (
        Running(child),
        addr.expect("weir run should say where it listens"),
    )
}

pub fn signal(child: &std::process::Child, sig: &str) {
    Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
}

/// `n` distinct ports free a moment ago ([`free_port`] each).
pub fn free_ports(n: usize) -> Vec<u16> {
    (0..n).map(|_| free_port()).collect()
}

/// A port nothing listens on now (for configs that must name a fixed port), never one this
/// process was given before: the kernel can hand the
/// same port to two `bind(0)` calls in a row, and a config listing a port twice is refused (a
/// test then waited out its timeout in CI).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Whether every one of `bins` is on the PATH. When one is missing: in CI (`CI=true`, where
/// `.ci/run` installs them all) the test fails, saying which; elsewhere it prints `SKIPPED`
/// and the caller returns (a fresh machine's `cargo test --workspace` goes on; the README
/// lists the tests that skip).
pub fn have_all_or_skip(bins: &[&str], install: &str) -> bool {
    let missing: Vec<&str> = bins.iter().copied().filter(|b| !have(b)).collect();
    if missing.is_empty() {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        !ci,
        "CI=true and {missing:?} not installed ({install}): .ci/run installs it"
    );
    eprintln!("SKIPPED: no {missing:?} ({install})");
    false
}

/// Whether `bin` is on the PATH.
pub fn have(bin: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// user+sys CPU seconds of process `pid` (`/proc/PID/stat` fields 14 and 15).
pub fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // Fields 14 and 15 of stat(5), counted from the state (field 3) here.
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz
}
