//! Binary upgrade over real sockets: a second `weir run --upgrade-socket` takes the listening
//! sockets of the first under keep-alive load; the first drains and exits; no request fails.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::process::{free_port, signal, spawn_serving, write_config, Running, WEIR};

/// `weir run -c CFG --upgrade-socket SOCKET`, and the address it serves.
fn upgradable(cfg: &std::path::Path, socket: &std::path::Path) -> (Running, std::net::SocketAddr) {
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c"])
        .arg(cfg)
        .arg("--upgrade-socket")
        .arg(socket);
    spawn_serving(cmd)
}

fn config(port: u16, body: &str) -> String {
    format!("workers: 2\nlisteners:\n  - address: 127.0.0.1:{port}\n    routes:\n      - respond: {{ body: {body} }}\n")
}

#[test]
fn a_new_process_takes_the_sockets_and_the_old_one_drains_without_failures() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("weir-upgrade-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("upgrade.sock");
    let cfg = write_config("upgrade-old", &config(port, "old"));
    let start = |cfg: &std::path::Path| upgradable(cfg, &socket);
    let (mut old, addr) = start(&cfg);

    // Keep-alive clients that reconnect after `Connection: close`, as browsers and load
    // balancers do; any error or unexpected answer is a failure.
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let served = Arc::new(AtomicUsize::new(0));
    let seen_new = Arc::new(AtomicBool::new(false));
    // Clients answered at least once, and answered by the new process.
    let (on_old, on_new) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (stop, failures, served, seen_new) = (
                stop.clone(),
                failures.clone(),
                served.clone(),
                seen_new.clone(),
            );
            let (on_old, on_new) = (on_old.clone(), on_new.clone());
            std::thread::spawn(move || {
                let mut conn = common::connect(addr);
                let (mut answered, mut answered_new) = (false, false);
                while !stop.load(Ordering::SeqCst) {
                    if conn
                        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
                        .is_err()
                    {
                        failures.lock().unwrap().push("write failed".into());
                        conn = common::connect(addr);
                        continue;
                    }
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        common::read_response(&mut conn)
                    }));
                    match r {
                        Ok(r) if r.status == 200 => {
                            served.fetch_add(1, Ordering::SeqCst);
                            if !answered {
                                answered = true;
                                on_old.fetch_add(1, Ordering::SeqCst);
                            }
                            if r.text() == "new" {
                                seen_new.store(true, Ordering::SeqCst);
                                if !answered_new {
                                    answered_new = true;
                                    on_new.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                            if r.header("connection") == Some("close") {
                                conn = common::connect(addr);
                            }
                        }
                        Ok(r) => {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("status {}", r.status));
                            conn = common::connect(addr);
                        }
                        Err(_) => {
                            failures.lock().unwrap().push("read failed".into());
                            conn = common::connect(addr);
                        }
                    }
                }
            })
        })
        .collect();
    common::until(
        "every client served before the upgrade",
        Duration::from_secs(10),
        || on_old.load(Ordering::SeqCst) == 8,
    );
    let before = served.load(Ordering::SeqCst);
    assert!(before > 0, "no traffic before the upgrade");

    let new_cfg = write_config("upgrade-new", &config(port, "new"));
    let (mut new, new_addr) = start(&new_cfg);
    assert_eq!(new_addr, addr, "the new process serves the same address");
    let mut status = None;
    common::until(
        "the old weir drained and exited",
        Duration::from_secs(15),
        || {
            status = old.try_wait().unwrap();
            status.is_some()
        },
    );
    let status = status.unwrap();
    assert!(status.success(), "the old weir exits cleanly: {status:?}");
    // Every client went on with the new process (reconnecting after the old one's close).
    common::until(
        "every client answered by the new process",
        Duration::from_secs(10),
        || on_new.load(Ordering::SeqCst) == 8,
    );
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }
    let failures = failures.lock().unwrap();
    assert!(failures.is_empty(), "failed requests: {failures:?}");
    assert!(seen_new.load(Ordering::SeqCst), "the new process answered");
    assert!(served.load(Ordering::SeqCst) > before);
    assert_eq!(common::get(addr, "/").text(), "new");

    // The new one can be upgraded in turn, and a bad config leaves it serving.
    let bad = write_config("upgrade-bad", "listeners: [ { address: nowhere } ]\n");
    let out = Command::new(WEIR)
        .args(["run", "-c"])
        .arg(&bad)
        .arg("--upgrade-socket")
        .arg(&socket)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        new.try_wait().unwrap().is_none(),
        "a failed upgrade leaves the running weir"
    );
    assert_eq!(common::get(addr, "/").text(), "new");
    signal(&new, "-TERM");
    assert!(new.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigusr2_starts_the_new_binary_which_takes_over() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("weir-usr2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("upgrade.sock");
    let cfg = dir.join("weir-usr2.yaml");
    std::fs::write(&cfg, config(port, "one")).unwrap();
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c"])
        .arg(&cfg)
        .arg("--upgrade-socket")
        .arg(&socket);
    let (mut old, addr) = spawn_serving(cmd);
    assert_eq!(common::get(addr, "/").text(), "one");
    std::fs::write(&cfg, config(port, "two")).unwrap();
    signal(&old, "-USR2");
    common::until("the old weir handed over", Duration::from_secs(15), || {
        old.try_wait().unwrap().is_some()
    });
    assert_eq!(common::get(addr, "/").text(), "two");
    // The new process outlives its parent: stop it by its command line.
    Command::new("pkill")
        .args(["-TERM", "-f", &cfg.display().to_string()])
        .status()
        .unwrap();
    common::until("the new weir stopped", Duration::from_secs(10), || {
        std::net::TcpStream::connect(addr).is_err()
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// A unix listener's socket crosses the upgrade too: the new process serves on the same file
/// (the old one, draining, leaves it in place), and removes it when it stops.
#[test]
fn a_unix_listener_crosses_the_upgrade() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("weir-upgrade-unix-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("upgrade.sock");
    let http = dir.join("http.sock");
    let config = |body: &str| {
        format!(
            "workers: 2\nlisteners:\n  - address: 127.0.0.1:{port}\n    routes:\n      - respond: {{ body: {body} }}\n  - address: \"unix:{}\"\n    unix_mode: \"0600\"\n    routes:\n      - respond: {{ body: unix-{body} }}\n",
            http.display()
        )
    };
    let ask = |path: &std::path::Path| {
        let mut s = std::os::unix::net::UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        common::read_response_to(&mut s, false).text()
    };
    let start = |cfg: &std::path::Path| upgradable(cfg, &socket);
    let (mut old, _) = start(&write_config("upgrade-unix-old", &config("old")));
    assert_eq!(ask(&http), "unix-old");
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(&http).unwrap().ino();
    let (mut new, _) = start(&write_config("upgrade-unix-new", &config("new")));
    common::until(
        "the old weir drained and exited",
        Duration::from_secs(15),
        || old.try_wait().unwrap().is_some(),
    );
    assert_eq!(
        std::fs::metadata(&http).unwrap().ino(),
        inode,
        "the same socket file, not a new one"
    );
    assert_eq!(ask(&http), "unix-new");
    signal(&new, "-TERM");
    assert!(new.wait().unwrap().success());
    assert!(!http.exists(), "the last process removes the socket file");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn quic_sockets_cross_the_upgrade() {
    let port = free_port();
    let pki = common::tlskit::Pki::new("upgrade-quic");
    let cert = pki.issue("leaf", "leaf", &["leaf.test"]);
    let dir = std::env::temp_dir().join(format!("weir-upgrade-quic-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("upgrade.sock");
    let config = |body: &str| {
        format!(
            "workers: 2\nlisteners:\n  - address: 127.0.0.1:{port}\n    quic: true\n    tls: {{ certificates: [{{ cert: '{}', key: '{}' }}] }}\n    routes:\n      - respond: {{ body: {body} }}\n",
            cert.cert.display(),
            cert.key.display()
        )
    };
    let c = common::h3::Client::new(common::h3::client_config(&pki.ca_der, false));
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (mut old, _) = upgradable(&write_config("upgrade-quic-old", &config("old")), &socket);
    assert_eq!(c.get(addr, "leaf.test", "/").text(), "old");
    // The new process starts while the old one holds the UDP port: it can only be serving it
    // on the sockets handed over (a fresh bind would be refused as in use).
    let (mut new, _) = upgradable(&write_config("upgrade-quic-new", &config("new")), &socket);
    common::until(
        "the old weir drained and exited",
        Duration::from_secs(15),
        || old.try_wait().unwrap().is_some(),
    );
    for _ in 0..5 {
        assert_eq!(c.get(addr, "leaf.test", "/").text(), "new");
    }
    signal(&new, "-TERM");
    assert!(new.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}
