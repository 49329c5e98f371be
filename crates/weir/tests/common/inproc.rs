//! Servers started in this process from a YAML text, and what the tests around them share: a
//! fresh directory of their own, stop, reload, a unix-socket client, a bare ClientHello.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use weir::server::ServerHandle;

/// An empty directory `weir-<prefix>-<tag>-<pid>` under the temp directory.
pub fn dir(prefix: &str, tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-{prefix}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A server from a whole config (relative files against `.`, no environment).
pub fn start(yaml: &str) -> ServerHandle {
    let cfg = weir::runtime::load_str(yaml, Path::new("."), |_| None).unwrap();
    weir::server::start(cfg).unwrap()
}

/// Why `weir::server::start` refuses a config that loads.
pub fn start_error(yaml: &str) -> String {
    let cfg = weir::runtime::load_str(yaml, Path::new("."), |_| None).unwrap();
    weir::server::start(cfg).unwrap_err().to_string()
}

pub fn stop(h: ServerHandle) {
    h.shutdown();
    h.join();
}

/// Reloads `h` with `yaml`, which must be accepted.
pub fn reload(h: &ServerHandle, yaml: &str) {
    let cfg = weir::runtime::compile_str(yaml, Path::new("."), |_| None, &h.registry()).unwrap();
    h.reload(cfg).unwrap();
}

/// A client of the unix socket at `path`, with a 5 s read timeout.
pub fn unix_connect(path: &Path) -> UnixStream {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// The bytes of a TLS ClientHello naming `sni` (nothing after it is ever sent).
pub fn client_hello(sni: &str) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(super::tlskit::Pki::new("hello-only").ca_der.clone())
        .unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cfg = Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(cfg, name).unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}
