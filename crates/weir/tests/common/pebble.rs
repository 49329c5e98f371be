//! Debian's `pebble` ACME server and its `pebble-challtestsrv` DNS server (every name resolves
//! to 127.0.0.1), started on loopback for a test; shared by `tests/acme.rs` and
//! `tests/sites.rs`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use rustls::pki_types::CertificateDer;

use super::process::{free_port, Running};
use super::tlskit::{self, Pki};

pub fn wait_port(port: u16, what: &str) {
    super::until(what, Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
}

/// pebble and its DNS server, with the files a client needs to trust its directory.
pub struct Pebble {
    _dns: Running,
    ca: Option<Running>,
    pub dir_url: String,
    mgmt: u16,
    pub pki: Pki,
    config: PathBuf,
    dns_port: u16,
    port: u16,
    /// pebble-challtestsrv's management API (`/set-txt`, `/clear-txt`).
    pub dns_mgmt: u16,
}

impl Pebble {
    /// A pebble on two distinct free ports (its challenge ports are not used by these tests).
    pub fn start_anywhere() -> Pebble {
        let p = super::process::free_ports(2);
        Pebble::start(p[0], p[1])
    }

    pub fn start(http_port: u16, tls_port: u16) -> Pebble {
        Pebble::start_with_dns(http_port, tls_port, None)
    }

    /// [`Pebble::start`], its validation asking the DNS server on port `dns_server` (a real one, bind9)
    /// instead of pebble-challtestsrv's.
    pub fn start_with_dns(http_port: u16, tls_port: u16, dns_server: Option<u16>) -> Pebble {
        // One directory per pebble: tests of one binary run at once.
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let pki = Pki::new(&format!("pebble{n}"));
        let served = pki.issue("pebble", "pebble", &["127.0.0.1", "localhost"]);
        let (port, mgmt, dns_port, chall_mgmt) =
            (free_port(), free_port(), free_port(), free_port());
        let config = pki.dir.join("pebble.json");
        let json = serde_json::json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{port}"),
            "managementListenAddress": format!("127.0.0.1:{mgmt}"),
            "certificate": served.cert, "privateKey": served.key,
            "httpPort": http_port, "tlsPort": tls_port,
            "ocspResponderURL": "", "externalAccountBindingRequired": false,
        }});
        std::fs::write(&config, json.to_string()).unwrap();
        let dns = Command::new("pebble-challtestsrv")
            .args(["-management", &format!("127.0.0.1:{chall_mgmt}")])
            .args(["-dns01", &format!("127.0.0.1:{dns_port}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let dns = Running(dns);
        wait_port(chall_mgmt, "pebble-challtestsrv up");
        let mut p = Pebble {
            _dns: dns,
            ca: None,
            dir_url: format!("https://127.0.0.1:{port}/dir"),
            mgmt,
            pki,
            config,
            dns_port,
            port,
            dns_mgmt: chall_mgmt,
        };
        if let Some(port) = dns_server {
            p.dns_port = port;
        }
        p.start_ca();
        p
    }

    pub fn start_ca(&mut self) {
        let ca = Command::new("pebble")
            .arg("-config")
            .arg(&self.config)
            .args(["-dnsserver", &format!("127.0.0.1:{}", self.dns_port)])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.ca = Some(Running(ca));
        wait_port(self.port, "pebble up");
        // Its management API listens a moment after the ACME one: `root()` once found it
        // closed on a loaded machine.
        wait_port(self.mgmt, "pebble management up");
    }

    pub fn stop_ca(&mut self) {
        self.ca = None;
    }

    /// The root pebble signs with (random per run), from its management API.
    pub fn root(&self) -> CertificateDer<'static> {
        use rustls::pki_types::pem::PemObject;
        let cfg = tlskit::client_config(&self.pki.ca_der, &[], None);
        let addr: SocketAddr = format!("127.0.0.1:{}", self.mgmt).parse().unwrap();
        let mut s = tlskit::connect(addr, "localhost", &cfg).unwrap();
        let r = tlskit::exchange(
            &mut s,
            "GET /roots/0 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(r.status, 200);
        CertificateDer::from_pem_slice(r.text().as_bytes()).unwrap()
    }
}
