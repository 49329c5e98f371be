//! OCSP stapling over real sockets: a CA and a certificate whose Authority Information Access
//! names a local `openssl ocsp` responder started by the test; weir fetches the status,
//! staples it, refreshes it, and `openssl s_client -status` reads it in the handshake. Then a
//! response read from a file instead of a responder.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::process::{free_port, spawn_run, write_config, Running};

fn openssl(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Signs `leaf.csr` with the test CA into `<name>.pem` with the extensions of `ext`, and
/// writes `<name>-chain.pem` (the certificate, then the CA: the issuer OCSP asks about).
fn sign(dir: &Path, name: &str, ext: &str) {
    let pem = format!("{name}.pem");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "10",
            "-extfile",
            ext,
        ],
    );
    let chain = [
        std::fs::read_to_string(dir.join(&pem)).unwrap(),
        std::fs::read_to_string(dir.join("ca.pem")).unwrap(),
    ]
    .concat();
    std::fs::write(dir.join(format!("{name}-chain.pem")), chain).unwrap();
}

/// What `openssl s_client -status` says of the stapled response.
fn stapled(addr: std::net::SocketAddr) -> String {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &addr.to_string()])
        .args(["-servername", "ocsp.weir.test", "-status"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn line_after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(key).map(str::trim))
}

#[test]
fn the_responders_answer_is_stapled_and_refreshed_and_a_file_works_too() {
    let dir = std::env::temp_dir().join(format!("weir-ocsp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    openssl(
        &dir,
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem"],
            &["-subj", "/CN=weir OCSP test CA", "-days", "30"],
        ]
        .concat(),
    );
    openssl(
        &dir,
        &[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "leaf.key",
                "-out",
                "leaf.csr",
                "-subj",
                "/CN=ocsp.weir.test",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("ext.cnf"),
        format!("subjectAltName=DNS:ocsp.weir.test\nauthorityInfoAccess=OCSP;URI:http://127.0.0.1:{port}/\n"),
    )
    .unwrap();
    sign(&dir, "leaf", "ext.cnf");
    let serial = openssl(&dir, &["x509", "-in", "leaf.pem", "-noout", "-serial"]);
    let serial = serial.trim().trim_start_matches("serial=");
    std::fs::write(
        dir.join("index.txt"),
        format!("V\t301231235959Z\t\t{serial}\tunknown\t/CN=ocsp.weir.test\n"),
    )
    .unwrap();
    let responder = Command::new("openssl")
        .current_dir(&dir)
        .args(["ocsp", "-index", "index.txt", "-port", &port.to_string()])
        .args([
            "-rsigner", "ca.pem", "-rkey", "ca.key", "-CA", "ca.pem", "-nmin", "5",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _responder = Running(responder);
    // Ready once it answers a real request (a bare connect would stall this one-at-a-time
    // responder); the answer is kept for the file test below.
    let url = format!("http://127.0.0.1:{port}/");
    common::until("openssl ocsp answering", Duration::from_secs(10), || {
        Command::new("openssl")
            .current_dir(&dir)
            .args([
                "ocsp", "-issuer", "ca.pem", "-cert", "leaf.pem", "-url", &url,
            ])
            .args(["-respout", "resp.der", "-noverify"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });

    // From the responder named in the certificate, refreshed every second.
    let config = stapling_config(&dir, "ocsp", "{ refresh: 1s }");
    let (weir, addr) = spawn_run(&config);
    let mut first = String::new();
    common::until("a stapled response", Duration::from_secs(15), || {
        first = stapled(addr);
        first.contains("Cert Status: good")
    });
    assert!(
        first.contains("OCSP Response Status: successful"),
        "{first}"
    );
    assert!(line_after(&first, "Next Update:").is_some(), "{first}");
    let produced = line_after(&first, "Produced At:").unwrap().to_string();
    // Refreshed: a later handshake carries a response produced later.
    common::until("a refreshed response", Duration::from_secs(15), || {
        let now = stapled(addr);
        now.contains("Cert Status: good")
            && line_after(&now, "Produced At:").is_some_and(|p| p != produced)
    });
    drop(weir);

    // From a file (fetched above by openssl's client), with no responder reachable.
    drop(_responder);
    let config = stapling_config(
        &dir,
        "ocsp-file",
        &format!("{{ file: \"{}/resp.der\" }}", dir.display()),
    );
    let (_weir, addr) = spawn_run(&config);
    common::until(
        "the file's response stapled",
        Duration::from_secs(15),
        || stapled(addr).contains("Cert Status: good"),
    );

    // A certificate without a responder and no file is a config error naming the key.
    std::fs::write(dir.join("san.cnf"), "subjectAltName=DNS:ocsp.weir.test\n").unwrap();
    sign(&dir, "bare", "san.cnf");
    let err = common::config_error(&format!(
        "listeners:\n  - address: 127.0.0.1:0\n    tls: {{ certificates: [{{ cert: '{d}/bare-chain.pem', key: '{d}/leaf.key' }}], ocsp: {{}} }}\n    routes: []\n",
        d = dir.display()
    ));
    assert!(
        err.contains("certificates[0]") && err.contains("OCSP responder"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A TLS listener serving the leaf certificate with `ocsp` (YAML) as its stapling settings.
fn stapling_config(dir: &Path, name: &str, ocsp: &str) -> PathBuf {
    write_config(
        name,
        &format!(
            r#"
listeners:
  - address: 127.0.0.1:0
    tls:
      certificates: [{{ cert: "{d}/leaf-chain.pem", key: "{d}/leaf.key" }}]
      ocsp: {ocsp}
    routes:
      - respond: {{ body: "stapled" }}
"#,
            d = dir.display()
        ),
    )
}
