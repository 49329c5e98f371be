//! Controlling a running weir as an operator would: `weir status`, `reload`, `upgrade` and
//! `stop` through the pid file and the admin API (the verbs reach the new process after an
//! upgrade), `weir check`'s bind test, warnings and `--print`, and `log.format: json` reaching
//! the start banner.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::process::{free_port, spawn_serving, Running, WEIR};

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dir(name: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("weir-control-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Dir(d)
}

fn weir(args: &[&str], cwd: &Path) -> Output {
    Command::new(WEIR)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn pid_in(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Running, not a zombie (the first weir is this test's child, reaped only when dropped).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
    })
}

fn config(port: u16, admin: Option<u16>, body: &str) -> String {
    let admin = admin
        .map(|a| format!("admin: {{ address: 127.0.0.1:{a} }}\n"))
        .unwrap_or_default();
    format!(
        "pid_file: weir.pid\n{admin}listeners:\n  - address: 127.0.0.1:{port}\n    routes:\n      - respond: {{ body: \"{body}\\n\" }}\n"
    )
}

#[test]
fn the_verbs_reach_the_running_weir_and_its_successor_after_an_upgrade() {
    let d = dir("verbs");
    let (port, admin) = (free_port(), free_port());
    std::fs::write(d.0.join("weir.yaml"), config(port, Some(admin), "one")).unwrap();
    let sock = d.0.join("upgrade.sock");
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c", "weir.yaml", "--upgrade-socket"])
        .arg(&sock)
        .current_dir(&d.0);
    let (_first, addr) = spawn_serving(cmd);
    let pid_file = d.0.join("weir.pid");
    // Whatever the pid file names when the test ends (a successor is no child of ours) goes.
    struct Reap(PathBuf);
    impl Drop for Reap {
        fn drop(&mut self) {
            if let Ok(p) = std::fs::read_to_string(&self.0) {
                let _ = Command::new("kill").args(["-9", p.trim()]).status();
            }
        }
    }
    let _reap = Reap(pid_file.clone());
    let first = pid_in(&pid_file);

    // status: pid, version, config file and generation, listeners.
    let out = weir(&["status", "-c", "weir.yaml"], &d.0);
    let s = text(&out);
    assert!(out.status.success(), "{s}");
    assert!(s.contains(&format!("running, pid {first}")), "{s}");
    assert!(s.contains("weir.yaml (generation 0)"), "{s}");
    assert!(s.contains(&format!("127.0.0.1:{admin} (admin)")), "{s}");

    // reload: through the admin API, with the outcome.
    std::fs::write(d.0.join("weir.yaml"), config(port, Some(admin), "two")).unwrap();
    let out = weir(&["reload", "-c", "weir.yaml"], &d.0);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(common::get(addr, "/").text(), "two\n");
    // A config that parses but does not compile: the running weir refuses it and says why.
    std::fs::write(
        d.0.join("weir.yaml"),
        config(port, Some(admin), "x")
            .replace("respond: { body: \"x\\n\" }", "proxy: { upstream: nope }"),
    )
    .unwrap();
    let out = weir(&["reload", "-c", "weir.yaml"], &d.0);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("reload refused") && text(&out).contains("nope"),
        "{}",
        text(&out)
    );
    assert_eq!(
        common::get(addr, "/").text(),
        "two\n",
        "the running config stays"
    );
    // One that does not parse: the verb says so before asking.
    std::fs::write(d.0.join("weir.yaml"), "listeners: [oops").unwrap();
    let out = weir(&["reload", "-c", "weir.yaml"], &d.0);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("weir.yaml"), "{}", text(&out));
    std::fs::write(d.0.join("weir.yaml"), config(port, Some(admin), "three")).unwrap();

    // upgrade: a new process takes over and rewrites the pid file; the old one exits.
    let out = weir(&["upgrade", "-c", "weir.yaml"], &d.0);
    let s = text(&out);
    assert!(out.status.success(), "{s}");
    let second = pid_in(&pid_file);
    assert_ne!(second, first);
    assert!(s.contains(&format!("{first} -> {second}")), "{s}");
    common::until("the old weir exited", Duration::from_secs(10), || {
        !alive(first)
    });
    assert_eq!(common::get(addr, "/").text(), "three\n");
    // ... and the verbs reach the new one.
    let s = text(&weir(&["status", "-c", "weir.yaml"], &d.0));
    assert!(s.contains(&format!("running, pid {second}")), "{s}");
    std::fs::write(d.0.join("weir.yaml"), config(port, Some(admin), "four")).unwrap();
    assert!(weir(&["reload", "-c", "weir.yaml"], &d.0).status.success());
    assert_eq!(common::get(addr, "/").text(), "four\n");

    // stop: graceful, waits for the end, removes the pid file; then status says not running.
    let out = weir(&["stop", "-c", "weir.yaml"], &d.0);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!alive(second));
    assert!(!pid_file.exists(), "the pid file is removed");
    let out = weir(&["status", "-c", "weir.yaml"], &d.0);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("not running"));
}

#[test]
fn without_an_admin_api_the_pid_file_carries_reload_and_a_fast_stop() {
    let d = dir("pid");
    let port = free_port();
    std::fs::write(d.0.join("weir.yaml"), config(port, None, "one")).unwrap();
    // --pid-file overrides the config's.
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c", "weir.yaml", "--pid-file", "other.pid"])
        .current_dir(&d.0);
    let (_child, addr) = spawn_serving(cmd);
    assert!(!d.0.join("weir.pid").exists());
    let pid = pid_in(&d.0.join("other.pid"));
    std::fs::write(d.0.join("weir.yaml"), config(port, None, "two")).unwrap();
    let out = weir(&["reload", "--pid-file", "other.pid"], &d.0);
    assert!(
        text(&out).contains(&format!("SIGHUP to pid {pid}")),
        "{}",
        text(&out)
    );
    common::until("reloaded", Duration::from_secs(10), || {
        common::get(addr, "/").text() == "two\n"
    });
    // A slow request in flight: a fast stop does not wait for it.
    let mut slow = std::net::TcpStream::connect(addr).unwrap();
    use std::io::Write;
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let start = Instant::now();
    let out = weir(
        &[
            "stop",
            "--fast",
            "--pid-file",
            "other.pid",
            "-c",
            "weir.yaml",
        ],
        &d.0,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(!alive(pid));
    let out = weir(&["stop", "--pid-file", "other.pid"], &d.0);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("is weir running?"), "{}", text(&out));
}

#[test]
fn check_binds_warns_and_prints_the_config_as_loaded() {
    let d = dir("check");
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = held.local_addr().unwrap().port();
    let free = free_port();
    let yaml = format!(
        "listeners:\n  - address: 127.0.0.1:{free}\n    routes:\n      - respond: {{ body: \"${{WEIR_TEST_GREETING}}\" }}\n      - name: never\n        match: {{ path: /x }}\n        respond: {{ body: b }}\n  - address: 127.0.0.1:{busy}\n"
    );
    std::fs::write(d.0.join("weir.yaml"), &yaml).unwrap();
    let check = |args: &[&str]| {
        Command::new(WEIR)
            .arg("check")
            .args(args)
            .args(["-c", "weir.yaml"])
            .env("WEIR_TEST_GREETING", "hello from env")
            .env("WEIR_TEST_API_TOKEN", "s3cret-value")
            .current_dir(&d.0)
            .output()
            .unwrap()
    };
    // The held address fails the check, named by file, line and key.
    let out = check(&[]);
    let s = text(&out);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert!(
        s.contains(&format!(
            "weir.yaml: line 8: listeners[1].address: cannot bind 127.0.0.1:{busy}"
        )),
        "{s}"
    );
    assert!(s.contains("--no-bind"), "{s}");
    // --no-bind passes, with the warnings.
    let out = check(&["--no-bind"]);
    let s = text(&out);
    assert!(out.status.success(), "{s}");
    assert!(
        s.contains("line 5: listeners[0].routes[1]: route never can never match: routes[0]"),
        "{s}"
    );
    assert!(
        s.contains(&format!("listener 127.0.0.1:{busy} has no routes")),
        "{s}"
    );
    // --print: variables substituted; a secret-looking one stays a variable.
    std::fs::write(
        d.0.join("weir.yaml"),
        yaml.replace(
            "respond: { body: b }",
            "respond: { body: \"${WEIR_TEST_API_TOKEN}\" }",
        ),
    )
    .unwrap();
    let out = check(&["--no-bind", "--print"]);
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", text(&out));
    assert!(s.contains("hello from env"), "{s}");
    assert!(
        !s.contains("s3cret-value") && s.contains("${WEIR_TEST_API_TOKEN}"),
        "{s}"
    );
    drop(held);
    // And the default path is the packages' /etc/weir/weir.yaml.
    let out = Command::new(WEIR).arg("check").output().unwrap();
    if !Path::new("/etc/weir/weir.yaml").exists() {
        assert!(text(&out).contains("/etc/weir/weir.yaml"), "{}", text(&out));
    }
}

/// `weir run -c weir.yaml` in `dir`, its stderr lines coming through the receiver.
fn run_logged(dir: &Path) -> (Running, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(WEIR)
        .args(["run", "-c", "weir.yaml"])
        .current_dir(dir)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    (Running(child), rx)
}

#[test]
fn json_logs_cover_the_start_banner() {
    let d = dir("json");
    let port = free_port();
    std::fs::write(
        d.0.join("weir.yaml"),
        format!("log: {{ format: json }}\nlisteners:\n  - address: 127.0.0.1:{port}\n    routes:\n      - respond: {{ body: x }}\n"),
    )
    .unwrap();
    let (_running, lines) = run_logged(&d.0);
    let first = lines.recv_timeout(Duration::from_secs(5)).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first}"));
    assert!(
        v["fields"]["message"] == "serving" || v["message"] == "serving",
        "{first}"
    );
    assert!(first.contains(&format!("127.0.0.1:{port}")), "{first}");
}

#[test]
fn upstream_failure_lines_name_the_request() {
    let d = dir("failure");
    let (port, dead) = (free_port(), free_port());
    std::fs::write(
        d.0.join("weir.yaml"),
        format!("upstreams: {{ gone: {{ servers: ['127.0.0.1:{dead}'] }} }}\nlisteners:\n  - address: 127.0.0.1:{port}\n    routes:\n      - proxy: {{ upstream: gone }}\n"),
    )
    .unwrap();
    let (_running, rx) = run_logged(&d.0);
    rx.recv_timeout(Duration::from_secs(5)).unwrap(); // the banner
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let r = common::roundtrip(
        &mut s,
        b"GET /x?y=1 HTTP/1.1\r\nHost: site.test\r\nX-Request-Id: abc-123\r\n\r\n",
    );
    assert_eq!(r.status, 502);
    let line = loop {
        let l = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        if l.contains("upstream failure") {
            break l;
        }
    };
    assert!(line.contains("request=GET site.test/x?y=1"), "{line}");
    assert!(line.contains("request_id="), "{line}");
    assert!(line.contains(&format!("127.0.0.1:{dead}")), "{line}");
}

/// Issue 33 §6: without a pid file, `weir status` found the process through the admin API but
/// `upgrade` and `stop` refused. They find it the same way now.
#[test]
fn stop_and_upgrade_find_weir_through_the_admin_api_without_a_pid_file() {
    let d = dir("nopid");
    let (port, admin) = (free_port(), free_port());
    let cfg = config(port, Some(admin), "one").replace("pid_file: weir.pid\n", "");
    std::fs::write(d.0.join("weir.yaml"), cfg).unwrap();
    let sock = d.0.join("upgrade.sock");
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c", "weir.yaml", "--upgrade-socket"])
        .arg(&sock)
        .current_dir(&d.0);
    let (first, _) = spawn_serving(cmd);
    let first_pid = first.id() as i32;
    let out = weir(&["status", "-c", "weir.yaml"], &d.0);
    assert!(out.status.success(), "{}", text(&out));
    let out = weir(&["upgrade", "-c", "weir.yaml"], &d.0);
    assert!(out.status.success(), "{}", text(&out));
    let said = text(&out);
    let new_pid: i32 = said
        .rsplit("-> ")
        .next()
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert_ne!(new_pid, first_pid);
    let out = weir(&["stop", "-c", "weir.yaml"], &d.0);
    assert!(out.status.success(), "{}", text(&out));
    common::until("the new weir exited", Duration::from_secs(10), || {
        !alive(new_pid)
    });
    drop(first);
}
