//! Edge cases of listeners on unix sockets, from an outside review (attacks that broke the
//! first version, now fixed, and attacks that held): a changed `unix_mode` on reload, a live
//! socket with a full backlog, files left by a failed start, an inherited socket whose path
//! was taken since, `send_proxy` and PROXY headers naming no address, symlinks, directories and
//! aliases at the path, h2c, `tcp:` relays and split ClientHellos over unix sockets, and
//! `weir check` on a socket of another kind. Everything on loopback and bounded in time.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::inproc::{client_hello, reload, start, stop, unix_connect};

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn one_unix_listener(sock: &Path, extra: &str) -> String {
    format!(
        "workers: 1\nlisteners:\n  - address: \"unix:{}\"\n{extra}    routes:\n      - respond: {{ body: \"ok $remote_addr\\n\" }}\n",
        sock.display()
    )
}

/// A TCP backend that echoes every byte back (half-close aware).
fn echo_backend() -> common::origin::Origin {
    common::origin::origin(|mut c| {
        let mut w = c.try_clone().unwrap();
        let _ = std::io::copy(&mut c, &mut w);
        let _ = w.shutdown(std::net::Shutdown::Write);
    })
}

// ---------------------------------------------------------------------------------------------
// unix listeners: found by the review, fixed

/// `unix_mode` is applied once, at bind. A reload that tightens it ("0666" → "0600") keeps the
/// listener (its id is the path's hash alone) and says "configuration reloaded", but the
/// socket stays world-connectable. Same for a binary upgrade (an inherited socket is never
/// chmod-ed).
#[test]
fn a_reload_applies_a_changed_unix_mode() {
    let d = common::inproc::dir("review", "mode");
    let sock = d.join("m.sock");
    let h = start(&one_unix_listener(&sock, "    unix_mode: \"0666\"\n"));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&sock), 0o666);
    reload(&h, &one_unix_listener(&sock, "    unix_mode: \"0600\"\n"));
    let now = mode(&sock);
    stop(h);
    let _ = std::fs::remove_dir_all(&d);
    assert_eq!(
        now, 0o600,
        "after a reload to unix_mode 0600 the socket file is still {now:o}: every local user can still connect"
    );
}

/// The shield counted every unix client as one (they all come as 0.0.0.0): one local process
/// over the request limit blocked every other for `block_for` (review of issue 54). Unix
/// clients are not counted, as documented; TCP clients of the same server still are.
#[test]
fn one_unix_client_over_the_shield_s_limits_blocks_nobody() {
    let d = common::inproc::dir("review", "shield");
    let sock = d.join("s.sock");
    let yaml = format!(
        "workers: 1\nshield: {{ requests: {{ rate: 5, burst: 5 }} }}\nlisteners:\n  - address: \"unix:{}\"\n    routes:\n      - respond: {{ body: \"ok\\n\" }}\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {{ body: \"ok\\n\" }}\n",
        sock.display()
    );
    let h = start(&yaml);
    let tcp = *h
        .local_addrs()
        .iter()
        .find(|a| !a.ip().is_unspecified())
        .unwrap();
    let get = |s: &mut dyn ReadWrite| {
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out.split(' ').nth(1).unwrap_or("none").to_string()
    };
    let unix: Vec<String> = (0..20).map(|_| get(&mut unix_connect(&sock))).collect();
    let over_tcp: Vec<String> = (0..20)
        .map(|_| get(&mut std::net::TcpStream::connect(tcp).unwrap()))
        .collect();
    stop(h);
    let _ = std::fs::remove_dir_all(&d);
    assert!(unix.iter().all(|s| s == "200"), "unix clients: {unix:?}");
    assert!(
        over_tcp.iter().any(|s| s != "200"),
        "a TCP client past its limits is still refused: {over_tcp:?}"
    );
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// The stale-file probe is a *blocking* `connect`. A process that listens on the path but
/// does not accept (accept queue full) makes `weir run` (and a reload that adds the listener,
/// and `weir check`) hang forever instead of refusing the path.
#[test]
fn a_live_socket_with_a_full_backlog_is_refused_without_blocking() {
    use socket2::{Domain, SockAddr, Socket, Type};
    let d = common::inproc::dir("review", "backlog");
    let sock = d.join("busy.sock");
    let addr = SockAddr::unix(&sock).unwrap();
    let owner = Socket::new(Domain::UNIX, Type::STREAM, None).unwrap();
    owner.bind(&addr).unwrap();
    owner.listen(0).unwrap();
    let mut fillers = Vec::new();
    loop {
        let c = Socket::new(Domain::UNIX, Type::STREAM, None).unwrap();
        c.set_nonblocking(true).unwrap();
        match c.connect(&addr) {
            Ok(()) => fillers.push(c),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
        assert!(fillers.len() < 1000);
    }
    let yaml = one_unix_listener(&sock, "");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let cfg = weir::runtime::load_str(&yaml, Path::new("."), |_| None).unwrap();
        let r = weir::server::start(cfg)
            .map(stop)
            .map_err(|e| e.to_string());
        let _ = tx.send(r);
    });
    let first = rx.recv_timeout(Duration::from_secs(5));
    // Unblock weir's connect (make room in the queue), whatever happened.
    owner.set_nonblocking(true).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        while owner.accept().is_ok() {}
        if let Ok(r) = rx.try_recv() {
            eprintln!("after the owner accepted: start returned {r:?}");
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(fillers);
    let _ = std::fs::remove_dir_all(&d);
    assert!(
        first.is_ok(),
        "weir::server::start was still blocked after 5 s on the stale-socket probe of a live socket whose owner does not accept"
    );
}

/// A failed start (a later listener cannot bind) returns the error but leaves the socket
/// files of the unix listeners it already bound (the reload path cleans up; start does not).
#[test]
fn a_failed_start_removes_the_socket_files_it_bound() {
    let d = common::inproc::dir("review", "failstart");
    let sock = d.join("f.sock");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let yaml = format!(
        "workers: 1\nlisteners:\n  - address: \"unix:{}\"\n    routes: [ {{ respond: {{ body: a }} }} ]\n  - address: {}\n    routes: [ {{ respond: {{ body: b }} }} ]\n",
        sock.display(),
        taken.local_addr().unwrap()
    );
    let cfg = weir::runtime::load_str(&yaml, Path::new("."), |_| None).unwrap();
    let e = weir::server::start(cfg).map(stop).unwrap_err();
    let left = sock.exists();
    let _ = std::fs::remove_dir_all(&d);
    assert!(
        !left,
        "start failed ({e}) but left its socket file {} behind",
        sock.display()
    );
}

/// After a binary upgrade the new process records as "its" file whatever is at the path when
/// it starts (`unix_sockets_for`: `file_id(&u.path)` for an inherited socket), without
/// checking that it is the inherited socket, or even a socket. If the path was taken by
/// something else meanwhile, that file is deleted at the new process's shutdown.
#[test]
fn an_inherited_socket_never_deletes_a_file_that_took_its_path() {
    use weir::server::{Endpoint, ListenSocket};
    let d = common::inproc::dir("review", "inherit");
    let sock = d.join("s.sock");
    // The old process's listening socket...
    let old = UnixListener::bind(&sock).unwrap();
    let bound = {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(&sock).unwrap();
        (m.dev(), m.ino())
    };
    // ...whose path was since taken by something else (moved aside, a file written there).
    std::fs::rename(&sock, d.join("moved.sock")).unwrap();
    std::fs::write(&sock, "not weir's").unwrap();
    let cfg =
        weir::runtime::load_str(&one_unix_listener(&sock, ""), Path::new("."), |_| None).unwrap();
    let h = weir::server::start_with(
        cfg,
        vec![(
            Endpoint::Unix(sock.clone(), Some(bound)),
            ListenSocket::Unix(old),
        )],
    )
    .unwrap();
    stop(h);
    let survived = std::fs::read_to_string(&sock).ok();
    let _ = std::fs::remove_dir_all(&d);
    assert_eq!(
        survived.as_deref(),
        Some("not weir's"),
        "a regular file at the path of an inherited socket was deleted at shutdown"
    );
}

/// A `tcp:` listener on a unix socket with `send_proxy` tells the backend the client is
/// `0.0.0.0:0` talking to `0.0.0.0:0` (`PROXY TCP4 0.0.0.0 0.0.0.0 0 0`), where the PROXY
/// protocol has `UNKNOWN` (v1) / `LOCAL`/AF_UNSPEC or AF_UNIX (v2) for this.
#[test]
fn send_proxy_from_a_unix_listener_sends_no_address() {
    let d = common::inproc::dir("review", "sendproxy");
    let sock = d.join("t.sock");
    let seen = Arc::new(Mutex::new(String::new()));
    let s2 = seen.clone();
    let backend = common::origin::origin(move |c| {
        let mut r = std::io::BufReader::new(c);
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut r, &mut line);
        *s2.lock().unwrap() = line;
    });
    let h = start(&format!(
        "workers: 1\nupstreams: {{ b: {{ servers: ['{}'] }} }}\nlisteners:\n  - address: \"unix:{}\"\n    tcp: {{ upstream: b, send_proxy: v1 }}\n",
        backend.addr,
        sock.display()
    ));
    let mut c = unix_connect(&sock);
    c.write_all(b"hello\n").unwrap();
    common::until("the backend got the header", Duration::from_secs(5), || {
        !seen.lock().unwrap().is_empty()
    });
    let line = seen.lock().unwrap().clone();
    drop(c);
    stop(h);
    let _ = std::fs::remove_dir_all(&d);
    assert!(
        line.starts_with("PROXY UNKNOWN"),
        "the backend was told {line:?}"
    );
}

/// The unix stand-in address (0.0.0.0) does not leak: on a TCP `proxy_protocol` listener, a
/// header naming source 0.0.0.0 names nobody, and the connection's own peer stands (it
/// printed as `unix:`, a local unix-socket client, before).
#[test]
fn a_proxy_header_naming_0_0_0_0_names_nobody() {
    let h = start(
        "workers: 1\nlisteners:\n  - address: 127.0.0.1:0\n    proxy_protocol: { trusted: [127.0.0.1/32] }\n    routes:\n      - respond: { body: \"client $remote_addr\\n\" }\n",
    );
    let mut s = common::connect(h.local_addrs()[0]);
    s.write_all(b"PROXY TCP4 0.0.0.0 127.0.0.1 4444 80\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let r = common::read_response_to(&mut s, false);
    stop(h);
    assert_eq!(
        r.text(),
        "client 127.0.0.1\n",
        "a TCP client is never shown as a unix one"
    );
}

/// Part of a PROXY header and then a FIN was held until `timeouts.header` (4 s here): peeking
/// finds the same bytes again and never the end (review of issue 54, finding 3). Now the
/// connection closes at once, on a TCP and on a unix listener alike.
#[test]
fn a_proxy_header_cut_by_a_fin_closes_at_once() {
    let d = common::inproc::dir("review", "proxyfin");
    let sock = d.join("p.sock");
    let h = start(&format!(
        "workers: 1\ntimeouts: {{ header: 4s }}\nlisteners:\n  - address: 127.0.0.1:0\n    proxy_protocol: {{ trusted: [127.0.0.1/32] }}\n    routes:\n      - respond: {{ body: \"ok\\n\" }}\n  - address: \"unix:{}\"\n    proxy_protocol: {{ trusted: [127.0.0.1/32] }}\n    routes:\n      - respond: {{ body: \"ok\\n\" }}\n",
        sock.display()
    ));
    let tcp = *h
        .local_addrs()
        .iter()
        .find(|a| !a.ip().is_unspecified())
        .unwrap();
    let cut = |s: &mut dyn ReadWrite, shut: &dyn Fn()| {
        s.write_all(b"PROXY TCP4 1.2").unwrap();
        shut();
        let t = Instant::now();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        t.elapsed()
    };
    let mut t = common::connect(tcp);
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t2 = t.try_clone().unwrap();
    let over_tcp = cut(&mut t, &|| t2.shutdown(std::net::Shutdown::Write).unwrap());
    let mut u = unix_connect(&sock);
    u.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let u2 = u.try_clone().unwrap();
    let over_unix = cut(&mut u, &|| u2.shutdown(std::net::Shutdown::Write).unwrap());
    stop(h);
    let _ = std::fs::remove_dir_all(&d);
    for (what, took) in [("TCP", over_tcp), ("unix", over_unix)] {
        assert!(
            took < Duration::from_secs(2),
            "{what}: closed after {took:?} (timeouts.header is 4 s)"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// unix listeners: attacks that held

/// A symlink at the path (to a stale socket, or to a file) is refused and neither the link
/// nor its target is removed; a directory is refused and kept.
#[test]
fn symlinks_and_directories_at_the_path_are_never_removed() {
    let d = common::inproc::dir("review", "symlink");
    let target = d.join("stale.sock");
    drop(UnixListener::bind(&target).unwrap());
    let link = d.join("link.sock");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let cfg =
        weir::runtime::load_str(&one_unix_listener(&link, ""), Path::new("."), |_| None).unwrap();
    let e = weir::server::start(cfg).map(stop).unwrap_err().to_string();
    assert!(e.contains("not a socket"), "{e}");
    assert!(std::fs::symlink_metadata(&link).is_ok() && target.exists());
    let file = d.join("data");
    std::fs::write(&file, "keep").unwrap();
    let flink = d.join("flink.sock");
    std::os::unix::fs::symlink(&file, &flink).unwrap();
    let cfg =
        weir::runtime::load_str(&one_unix_listener(&flink, ""), Path::new("."), |_| None).unwrap();
    assert!(weir::server::start(cfg).map(stop).is_err());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    let sub = d.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let cfg =
        weir::runtime::load_str(&one_unix_listener(&sub, ""), Path::new("."), |_| None).unwrap();
    assert!(weir::server::start(cfg).map(stop).is_err());
    assert!(sub.is_dir());
    let _ = std::fs::remove_dir_all(&d);
}

/// Two listeners naming one file (`/d/x/../s.sock` and `/d/s.sock`): the second finds the
/// first live and the start fails; nothing is left behind that belongs to someone else, and
/// another process's live socket at the path is never unlinked, at start or by a reload that
/// removes a listener whose file was replaced meanwhile.
#[test]
fn aliases_and_foreign_sockets_are_not_unlinked() {
    let d = common::inproc::dir("review", "alias");
    std::fs::create_dir_all(d.join("x")).unwrap();
    let sock = d.join("s.sock");
    let alias = d.join("x/../s.sock");
    let yaml = format!(
        "workers: 1\nlisteners:\n  - address: \"unix:{}\"\n    routes: [ {{ respond: {{ body: a }} }} ]\n  - address: \"unix:{}\"\n    routes: [ {{ respond: {{ body: b }} }} ]\n",
        sock.display(),
        alias.display()
    );
    let cfg = weir::runtime::load_str(&yaml, Path::new("."), |_| None).unwrap();
    let e = weir::server::start(cfg).map(stop).unwrap_err().to_string();
    assert!(e.contains("a process is listening"), "{e}");

    // A foreign live socket is refused, not replaced.
    let _ = std::fs::remove_file(&sock);
    let foreign = UnixListener::bind(&sock).unwrap();
    let cfg =
        weir::runtime::load_str(&one_unix_listener(&sock, ""), Path::new("."), |_| None).unwrap();
    assert!(weir::server::start(cfg).map(stop).is_err());
    assert!(UnixStream::connect(&sock).is_ok());
    drop(foreign);
    std::fs::remove_file(&sock).unwrap();

    // Weir's file replaced by someone else's socket, then the listener removed by a reload.
    let tcp_only = "workers: 1\nlisteners:\n  - address: 127.0.0.1:0\n    routes: [ { respond: { body: t } } ]\n";
    let h = start(&format!(
        "{tcp_only}  - address: \"unix:{}\"\n    routes: [ {{ respond: {{ body: u }} }} ]\n",
        sock.display()
    ));
    std::fs::remove_file(&sock).unwrap();
    let foreign = UnixListener::bind(&sock).unwrap();
    reload(&h, tcp_only);
    assert!(
        sock.exists(),
        "someone else's socket was unlinked by the reload"
    );
    stop(h);
    assert!(
        sock.exists(),
        "someone else's socket was unlinked at shutdown"
    );
    drop(foreign);
    let _ = std::fs::remove_dir_all(&d);
}

/// The connection path's TCP-only calls on a unix fd: h2c, a `tcp:` relay with splice both
/// ways (1 MiB), SNI routing whose ClientHello arrives in two pieces (SO_RCVLOWAT and MSG_PEEK
/// on a unix socket), and a request body, all work.
#[test]
fn h2c_tcp_relays_split_hellos_and_bodies_work_on_unix_sockets() {
    let d = common::inproc::dir("review", "paths");
    let h2 = d.join("h2.sock");
    let relay = d.join("relay.sock");
    let sni = d.join("sni.sock");
    let backend = echo_backend();
    let h = start(&format!(
        r#"workers: 1
upstreams: {{ b: {{ servers: ['{b}'] }} }}
listeners:
  - address: "unix:{h2}"
    h2c: true
    routes:
      - match: {{ path: /echo }}
        echo: {{}}
      - respond: {{ body: "h2 $remote_addr" }}
  - address: "unix:{relay}"
    tcp: {{ upstream: b }}
  - address: "unix:{sni}"
    tcp: {{ routes: [ {{ sni: a.test, upstream: b }} ] }}
"#,
        b = backend.addr,
        h2 = h2.display(),
        relay = relay.display(),
        sni = sni.display(),
    ));
    use common::h2raw;
    let mut s = unix_connect(&h2);
    h2raw::preface(&mut s);
    s.write_all(&h2raw::frame(
        h2raw::HEADERS,
        h2raw::END_STREAM | h2raw::END_HEADERS,
        1,
        &h2raw::get("http", b"a", b"/"),
    ))
    .unwrap();
    let o = h2raw::outcome_of(&mut s, 1);
    assert!(o.answered, "{o:?}");
    assert_eq!(o.text(), "h2 unix:");
    // HTTP/1.1 with a body on the same h2c listener.
    let mut s = unix_connect(&h2);
    let body = "x".repeat(100_000);
    s.write_all(
        format!(
            "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    let r = common::read_response_to(&mut s, false);
    assert_eq!(r.status, 200);
    assert!(r.text().contains(&body[..1000]));

    // splice both ways.
    let big: Vec<u8> = (0..1024 * 1024).map(|i| (i % 253) as u8).collect();
    let mut c = unix_connect(&relay);
    let mut w = c.try_clone().unwrap();
    let send = big.clone();
    let t = std::thread::spawn(move || {
        w.write_all(&send).unwrap();
        w.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    c.read_to_end(&mut back).unwrap();
    t.join().unwrap();
    assert!(back == big, "relayed {} of {} bytes", back.len(), big.len());

    // SNI routing with a ClientHello split in two, 300 ms apart.
    let hello = client_hello("a.test");
    let mut c = unix_connect(&sni);
    c.write_all(&hello[..40]).unwrap();
    // paces: the rest of the hello 300 ms later.
    std::thread::sleep(Duration::from_millis(300));
    c.write_all(&hello[40..]).unwrap();
    let mut back = vec![0u8; hello.len()];
    c.read_exact(&mut back).unwrap();
    assert!(back == hello, "the hello reached the backend whole");
    drop(c);
    stop(h);
    let _ = std::fs::remove_dir_all(&d);
}

/// `weir check` calls a path fine whenever the probe's connect fails for any reason; `run`
/// then refuses it (EPROTOTYPE here: a datagram socket lives at the path).
#[test]
fn weir_check_refuses_a_socket_of_another_kind() {
    let d = common::inproc::dir("review", "check");
    let sock = d.join("dgram.sock");
    let _dgram = std::os::unix::net::UnixDatagram::bind(&sock).unwrap();
    let yaml = one_unix_listener(&sock, "");
    let cfg = common::process::write_config("review-check", &yaml);
    let out = std::process::Command::new(common::process::WEIR)
        .args(["check", "-c"])
        .arg(&cfg)
        .output()
        .unwrap();
    let run = weir::runtime::load_str(&yaml, Path::new("."), |_| None)
        .map(|c| weir::server::start(c).map(stop).map_err(|e| e.to_string()));
    let _ = std::fs::remove_dir_all(&d);
    let run = run.unwrap();
    assert!(run.is_err(), "run accepted it: {run:?}");
    assert!(
        !out.status.success(),
        "`weir check` passed a unix path that `run` refuses with {run:?}"
    );
}
