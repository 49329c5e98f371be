//! Debian's bind9 (`named`) on loopback, primary for `bind9.weir.test` (every name in it has an
//! A record to 127.0.0.1) and taking RFC 2136 updates signed with the TSIG key `weir-acme`
//! (hmac-sha256, made by `tsig-keygen`). Used by `tests/acme.rs`' DNS-01 tests.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::process::{free_port, Running};

/// The binaries a test of this module needs, and how to install them.
pub const NEEDS: &[&str] = &["named", "tsig-keygen", "dig"];
pub const INSTALL: &str = "apt-get install bind9 dnsutils";

pub struct Bind9 {
    _named: Running,
    pub port: u16,
    pub dir: PathBuf,
    /// The key as `tsig-keygen` wrote it (named.conf includes it).
    pub key_file: PathBuf,
}

impl Bind9 {
    pub const ZONE: &'static str = "bind9.weir.test";
    pub const KEY: &'static str = "weir-acme";

    /// Starts named and waits until it answers.
    pub fn start() -> Bind9 {
        // One directory per server: tests of one binary run at once.
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("weir-bind9-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key = Command::new("tsig-keygen")
            .args(["-a", "hmac-sha256", Self::KEY])
            .output()
            .unwrap();
        assert!(key.status.success());
        let key_file = dir.join("key.conf");
        std::fs::write(&key_file, &key.stdout).unwrap();
        std::fs::write(
            dir.join("zone"),
            "$TTL 60\n@ IN SOA ns.bind9.weir.test. admin.bind9.weir.test. 1 60 60 600 60\n@ IN NS ns.bind9.weir.test.\nns IN A 127.0.0.1\n* IN A 127.0.0.1\n",
        )
        .unwrap();
        let port = free_port();
        let d = dir.display();
        // `controls {}`: no rndc channel on port 953, which a second named would fight over.
        std::fs::write(
            dir.join("named.conf"),
            format!(
                "options {{ directory \"{d}\"; listen-on port {port} {{ 127.0.0.1; }}; listen-on-v6 {{ none; }}; pid-file \"{d}/named.pid\"; recursion no; dnssec-validation no; }};\ncontrols {{ }};\ninclude \"{d}/key.conf\";\nzone \"{zone}\" {{ type primary; file \"{d}/zone\"; allow-update {{ key \"{key}\"; }}; }};\n",
                zone = Self::ZONE,
                key = Self::KEY,
            ),
        )
        .unwrap();
        let named = Running(
            Command::new("named")
                .args(["-g", "-u", "root", "-c"])
                .arg(dir.join("named.conf"))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("named.log")).unwrap())
                .spawn()
                .unwrap(),
        );
        let b = Bind9 {
            _named: named,
            port,
            dir,
            key_file,
        };
        super::until("bind9 answers", Duration::from_secs(15), || {
            b.dig(&format!("ns.{}", Self::ZONE), "A") == "127.0.0.1"
        });
        b
    }

    /// `dig +short NAME KIND` at this server.
    pub fn dig(&self, name: &str, kind: &str) -> String {
        let out = Command::new("dig")
            .args([
                "+short",
                "-p",
                &self.port.to_string(),
                "@127.0.0.1",
                name,
                kind,
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The key's secret (base64), from the key file.
    pub fn secret(&self) -> String {
        let text = std::fs::read_to_string(&self.key_file).unwrap();
        let (_, rest) = text.split_once("secret \"").unwrap();
        rest.split('"').next().unwrap().to_string()
    }

    /// What named logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("named.log")).unwrap_or_default()
    }
}
