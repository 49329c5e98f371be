//! Config from several files: `include:` of a file and of a `conf.d` directory, and the
//! watched directory (`reload.watch`): a saved change is live without a signal, a change that
//! leaves the texts as they were rebuilds nothing, and a bad file keeps the running config.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::process::*;
use common::*;

/// Writes `text` to `path` the way editors save: a new file renamed over the old one.
fn save(path: &Path, text: &str) {
    let tmp = path.with_extension("swp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn reloads(admin: std::net::SocketAddr) -> u64 {
    let m = get(admin, "/metrics");
    let text = String::from_utf8_lossy(&m.body).to_string();
    text.lines()
        .find(|l| l.starts_with("weir_config_reloads"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no weir_config_reloads in {text}"))
}

fn until(what: &str, ok: impl FnMut() -> bool) {
    common::until(what, Duration::from_secs(10), ok);
}

fn route(path: &str, body: &str) -> String {
    format!("listeners:\n  - address: 127.0.0.1:{{PORT}}\n    routes:\n      - name: {body}\n        match: {{ path: {path} }}\n        respond: {{ body: {body} }}\n")
}

#[test]
fn included_files_and_a_watched_conf_d_reload_on_change_only() {
    let dir = std::env::temp_dir().join(format!("weir-conf-d-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("conf.d")).unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let main = format!(
        "include: [upstreams.yaml, conf.d]\nreload: {{ watch: true, debounce: 50ms }}\nadmin: {{ address: '127.0.0.1:{admin_port}' }}\nlisteners:\n  - address: 127.0.0.1:{port}\n    routes:\n      - match: {{ path: /main }}\n        respond: {{ body: main }}\n"
    );
    std::fs::write(dir.join("weir.yaml"), &main).unwrap();
    std::fs::write(
        dir.join("upstreams.yaml"),
        "upstreams:\n  o: { servers: ['127.0.0.1:9'] }\n",
    )
    .unwrap();
    let fragment = |path: &str, body: &str| route(path, body).replace("{PORT}", &port.to_string());
    std::fs::write(dir.join("conf.d/10-a.yaml"), fragment("/a", "a")).unwrap();
    std::fs::write(dir.join("conf.d/notes.txt"), "not a config").unwrap();
    let (_weir, addr) = spawn_run(&dir.join("weir.yaml"));
    let admin: std::net::SocketAddr = format!("127.0.0.1:{admin_port}").parse().unwrap();
    assert_eq!(get(addr, "/main").body, b"main");
    assert_eq!(get(addr, "/a").body, b"a", "a route from conf.d/10-a.yaml");
    let before = reloads(admin);

    // A new file in conf.d, saved as editors do: live without a signal.
    save(&dir.join("conf.d/20-b.yaml"), &fragment("/b", "b"));
    until("/b served", || get(addr, "/b").status == 200);
    assert_eq!(get(addr, "/b").body, b"b");
    until("one reload counted", || reloads(admin) == before + 1);

    // Touching a file without changing it: nothing rebuilt.
    save(&dir.join("conf.d/20-b.yaml"), &fragment("/b", "b"));
    // paces: a reload, were one made, would be counted by now (debounce 50 ms).
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        reloads(admin),
        before + 1,
        "unchanged texts are not rebuilt"
    );

    // A bad file: the running config stays.
    save(
        &dir.join("conf.d/30-bad.yaml"),
        "upstreams:\n  x: { servrs: [] }\n",
    );
    // paces: a reload, were one made, would be counted by now (debounce 50 ms).
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(reloads(admin), before + 1);
    assert_eq!(get(addr, "/b").body, b"b", "still served after a bad file");

    // Fixed: applied; a removed file's route goes.
    std::fs::remove_file(dir.join("conf.d/30-bad.yaml")).unwrap();
    std::fs::remove_file(dir.join("conf.d/10-a.yaml")).unwrap();
    until("/a gone", || get(addr, "/a").status == 404);
    assert_eq!(get(addr, "/b").body, b"b");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `weir check -c FILE`, which must fail: its stderr.
fn check_fails(config: &Path) -> String {
    let out = std::process::Command::new(WEIR)
        .args(["check", "-c"])
        .arg(config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn check_names_the_included_file_and_line_of_an_error() {
    let dir = std::env::temp_dir().join(format!("weir-include-err-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("weir.yaml"),
        "include: [more.yaml]\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - name: a\n        respond: { body: a }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("more.yaml"),
        "# upstreams\nupstreams:\n  o:\n    servers: ['127.0.0.1:9']\n    balance: sideways\n",
    )
    .unwrap();
    let err = check_fails(&dir.join("weir.yaml"));
    assert!(
        err.contains(&format!(
            "{}:5: upstreams.o",
            dir.join("more.yaml").display()
        )),
        "{err}"
    );
    // A second route named `a` in an include is refused, naming the file.
    std::fs::write(
        dir.join("more.yaml"),
        "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - name: a\n        respond: { body: b }\n",
    )
    .unwrap();
    let err = check_fails(&dir.join("weir.yaml"));
    assert!(err.contains("more.yaml:4"), "{err}");
    assert!(err.contains("already defined"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
