//! Automatic certificates (ACME, RFC 8555) for the names of a TLS listener's `acme:` section.
//!
//! One [`AcmeCerts`] per distinct section (kept by the registry, so a reload that keeps the
//! section keeps it and its thread): at creation it loads the stored certificate from
//! `storage/<first name>/` so a restart serves at once without asking the CA; a thread then
//! looks at the expiry every `check_every` and, when the certificate is missing or expires
//! within `renew_before`, obtains a new one ([`super::acme_issue`]), stores it and swaps it
//! in: handshakes pick it up at once (the listener's resolver reads it, `sni.rs`). A failed
//! attempt is retried after `retry_after`, doubling up to `check_every`, and the certificate
//! in use stays in use.
//!
//! The challenges are answered by weir itself: HTTP-01 tokens by a route placed first on every
//! plain-HTTP listener (`/.well-known/acme-challenge/`), TLS-ALPN-01 certificates by the
//! listener's resolver when a client offers only `acme-tls/1` ([`Challenges`]).
//!
//! Why `instant-acme`: it is the maintained async ACME client of the rustls/tokio stack (used
//! in production by its authors, tested against pebble); the protocol (JWS, nonces, polling)
//! is not our edge. `rustls-acme` would own the listener's resolver and TLS-ALPN handling,
//! which weir already has (SNI, session tickets, mTLS); `instant-acme` only talks to the CA.

use super::error::TlsError;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use rustls::sign::CertifiedKey;

use crate::config::model::Acme;

/// The ALPN protocol of TLS-ALPN-01 (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Challenge answers in progress, for every listener of the process.
#[derive(Debug, Default)]
pub struct Challenges {
    /// HTTP-01: token → key authorization.
    pub http: Mutex<HashMap<String, String>>,
    /// TLS-ALPN-01: name → the self-signed certificate that proves it.
    pub alpn: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl Challenges {
    /// The key authorization for HTTP-01 token `token`.
    pub fn http_answer(&self, token: &str) -> Option<String> {
        lock(&self.http).get(token).cloned()
    }

    /// Answers HTTP-01 token `token` with `key_auth` (`None`: stops answering it).
    pub fn set_http(&self, token: &str, key_auth: Option<String>) {
        let mut m = lock(&self.http);
        match key_auth {
            Some(k) => m.insert(token.to_string(), k),
            None => m.remove(token),
        };
    }

    /// Proves `name` with `cert` in TLS-ALPN-01 handshakes (`None`: stops).
    pub fn set_alpn(&self, name: &str, cert: Option<Arc<CertifiedKey>>) {
        let mut m = lock(&self.alpn);
        let name = name.to_ascii_lowercase();
        match cert {
            Some(c) => m.insert(name, c),
            None => m.remove(&name),
        };
    }

    /// The TLS-ALPN-01 certificate for `name`.
    pub fn alpn_cert(&self, name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let name = name?.trim_end_matches('.').to_ascii_lowercase();
        lock(&self.alpn).get(&name).cloned()
    }
}

/// A certificate in use and what it is.
#[derive(Debug)]
pub struct Current {
    pub key: Arc<CertifiedKey>,
    /// Its DNS names (subject alternative names), lowercase.
    pub names: Vec<String>,
    /// Unix seconds.
    pub not_after: i64,
    /// Hex, for logs and tests.
    pub serial: String,
}

/// The certificate of one `acme:` section, and its state.
#[derive(Debug)]
pub struct AcmeCerts {
    pub settings: Acme,
    /// Resolved against the config's directory.
    pub storage: PathBuf,
    pub directory_ca: Option<PathBuf>,
    pub current: ArcSwapOption<Current>,
    pub challenges: Arc<Challenges>,
    /// Where its thread (and its on-demand orders) run: stopped with the server.
    threads: Arc<super::acme_threads::AcmeThreads>,
    /// Names, lowercase.
    names: Vec<String>,
    started: std::sync::OnceLock<()>,
    /// Certificates obtained at handshakes (`on_demand`, `on_demand.rs`).
    pub on_demand: Option<Arc<super::on_demand::OnDemand>>,
}

impl AcmeCerts {
    /// The state of `settings` (paths already resolved), with the stored certificate loaded
    /// when there is one. Does not start the thread: [`AcmeCerts::start`].
    pub fn new(
        settings: Acme,
        storage: PathBuf,
        directory_ca: Option<PathBuf>,
        challenges: Arc<Challenges>,
        threads: Arc<super::acme_threads::AcmeThreads>,
    ) -> AcmeCerts {
        AcmeCerts::carrying(settings, storage, directory_ca, challenges, threads, None)
    }

    /// [`AcmeCerts::new`], its on-demand issuance on `carried` state (a reload's: see
    /// `on_demand.rs`).
    pub fn carrying(
        settings: Acme,
        storage: PathBuf,
        directory_ca: Option<PathBuf>,
        challenges: Arc<Challenges>,
        threads: Arc<super::acme_threads::AcmeThreads>,
        carried: Option<Arc<super::on_demand::State>>,
    ) -> AcmeCerts {
        let names = settings
            .names
            .iter()
            .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
            .collect();
        let on_demand = settings.on_demand.clone().map(|od| {
            Arc::new(super::on_demand::OnDemand::new(
                &settings,
                od,
                storage.clone(),
                directory_ca.clone(),
                challenges.clone(),
                threads.clone(),
                carried,
            ))
        });
        let certs = AcmeCerts {
            settings,
            storage,
            directory_ca,
            current: ArcSwapOption::empty(),
            challenges,
            threads,
            names,
            started: std::sync::OnceLock::new(),
            on_demand,
        };
        if certs.names.is_empty() {
            // Only on-demand names: nothing of its own to load.
            return certs;
        }
        match certs.load() {
            Ok(Some(c)) => {
                tracing::info!(names = ?certs.names, serial = %c.serial, expires_in_days = (c.not_after - now_unix()) / 86_400, "ACME certificate loaded from storage");
                certs.current.store(Some(Arc::new(c)));
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(names = ?certs.names, error = %e, "stored ACME certificate unusable: a new one will be obtained")
            }
        }
        certs
    }

    /// Whether the certificate serves `name`.
    /// Whether the certificate is for `name`: one of its names, or under a `*.` one by one
    /// label (RFC 6125, as certificate selection does).
    pub fn serves(&self, name: &str) -> bool {
        let name = name.trim_end_matches('.');
        let parent = name.split_once('.').map(|(_, p)| p);
        self.names.iter().any(|n| match n.strip_prefix("*.") {
            Some(suffix) => parent.is_some_and(|p| p.eq_ignore_ascii_case(suffix)),
            None => n.eq_ignore_ascii_case(name),
        })
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The directory of the certificate's files.
    pub fn cert_dir(&self) -> PathBuf {
        self.storage.join(sanitize(&self.names[0]))
    }

    /// The account's credentials file (one account per CA directory).
    pub fn account_file(&self) -> PathBuf {
        self.storage.join(format!(
            "account-{}.json",
            sanitize(&self.settings.directory)
        ))
    }

    /// Whether a certificate must be obtained now: none yet, or expiring within
    /// `renew_before`.
    pub fn due(&self) -> bool {
        match &*self.current.load() {
            None => true,
            Some(c) => c.not_after - now_unix() <= self.settings.renew_before.0.as_secs() as i64,
        }
    }

    /// Reads `cert.pem` and `key.pem` from [`AcmeCerts::cert_dir`].
    fn load(&self) -> Result<Option<Current>, TlsError> {
        let dir = self.cert_dir();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        if !cert.exists() {
            return Ok(None);
        }
        let chain = std::fs::read(&cert).map_err(|e| TlsError::file("read", &cert, e))?;
        let key = std::fs::read(&key).map_err(|e| TlsError::file("read", &key, e))?;
        let c = current(&chain, &key).map_err(|e| e.context(cert.display()))?;
        // Another section may have stored a certificate under the same first name: one that
        // does not cover every name of this section is not served for it (a new one is due).
        if let Some(missing) = self.names.iter().find(|n| !covers(&c.names, n)) {
            return Err(TlsError::certificate(format_args!(
                "{}: the stored certificate does not cover {missing}",
                cert.display()
            )));
        }
        Ok(Some(c))
    }

    /// Stores a new certificate (chain and key, PEM) and swaps it in.
    pub fn install(&self, chain_pem: &str, key_pem: &str) -> Result<(), TlsError> {
        let c = current(chain_pem.as_bytes(), key_pem.as_bytes())?;
        let dir = self.cert_dir();
        write_private(&dir.join("key.pem"), key_pem.as_bytes())?;
        write_private(&dir.join("cert.pem"), chain_pem.as_bytes())?;
        tracing::info!(names = ?self.names, serial = %c.serial, expires_in_days = (c.not_after - now_unix()) / 86_400, "ACME certificate installed");
        self.current.store(Some(Arc::new(c)));
        Ok(())
    }

    /// Starts the thread that obtains and renews the certificate (once: a server serving
    /// the config calls this, `weir check` does not); it ends once `self` is dropped (a
    /// reload without this section).
    pub fn start(self: &Arc<Self>) {
        self.started.get_or_init(|| {
            let weak = Arc::downgrade(self);
            let names = self.names.clone();
            let spawned = self.threads.spawn("weir-acme", move || run(weak));
            if let Err(e) = spawned {
                tracing::error!(?names, error = %e, "cannot start the ACME thread");
            }
        });
    }
}

/// The renewal loop of one [`AcmeCerts`] (on its thread's runtime).
async fn run(weak: Weak<AcmeCerts>) {
    {
        let mut failures = 0u32;
        loop {
            let Some(certs) = weak.upgrade() else { return };
            let check_every = certs.settings.check_every.0;
            // Names obtained on demand are renewed here too, one after the other.
            for named in certs.on_demand.iter().flat_map(|od| od.all()) {
                if named.due() {
                    if let Err(e) = super::acme_issue::obtain_guarded(&named).await {
                        tracing::warn!(names = ?named.names, error = %e, "ACME: renewing an on-demand certificate failed; it is tried again at the next check");
                    }
                }
            }
            let wait = if certs.names.is_empty() {
                check_every
            } else if certs.due() {
                match super::acme_issue::obtain_guarded(&certs).await {
                    Ok(()) => {
                        failures = 0;
                        check_every
                    }
                    Err(e) => {
                        failures += 1;
                        let wait = backoff(certs.settings.retry_after.0, failures, check_every);
                        if e.disk_full() {
                            tracing::error!(names = ?certs.names, error = %e, "ACME: the disk is full: a new certificate was obtained but cannot be stored");
                        }
                        tracing::warn!(names = ?certs.names, error = %e, failures, retry_in = ?wait, "ACME: obtaining a certificate failed; the certificate in use (if any) stays");
                        wait
                    }
                }
            } else {
                check_every
            };
            drop(certs);
            // Wakes at least once a minute to notice when the section was dropped.
            let until = tokio::time::Instant::now() + wait;
            while tokio::time::Instant::now() < until {
                tokio::time::sleep_until(
                    until.min(tokio::time::Instant::now() + Duration::from_secs(60)),
                )
                .await;
                if weak.strong_count() == 0 {
                    return;
                }
            }
        }
    }
}

/// The wait after `failures` failures in a row: `first`, doubling, at most `max`.
pub fn backoff(first: Duration, failures: u32, max: Duration) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(20);
    first.saturating_mul(factor).min(max).max(first.min(max))
}

/// A certificate in use from its PEM chain and key.
fn current(chain_pem: &[u8], key_pem: &[u8]) -> Result<Current, TlsError> {
    use rustls_pki_types::pem::PemObject;
    let chain: Vec<_> = rustls_pki_types::CertificateDer::pem_slice_iter(chain_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::certificate(format_args!("certificate: {e}")))?;
    let leaf = chain
        .first()
        .ok_or_else(|| TlsError::certificate("no certificate in the chain"))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| TlsError::certificate(format_args!("certificate: {e}")))?;
    let not_after = parsed.validity().not_after.timestamp();
    let serial = parsed.raw_serial_as_string().replace(':', "");
    let names = match parsed.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|g| match g {
                x509_parser::extensions::GeneralName::DNSName(n) => Some(n.to_ascii_lowercase()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| TlsError::certificate(format_args!("key: {e}")))?;
    let key = CertifiedKey::from_der(chain, key, &super::provider())
        .map_err(|e| TlsError::certificate(format_args!("certificate and key: {e}")))?;
    Ok(Current {
        key: Arc::new(key),
        names,
        not_after,
        serial,
    })
}

/// Whether certificate names `names` cover `name` (exactly, or by a `*.` one label up).
fn covers(names: &[String], name: &str) -> bool {
    let parent = name.split_once('.').map(|(_, p)| p);
    names.iter().any(|n| {
        n.eq_ignore_ascii_case(name)
            || n.strip_prefix("*.")
                .is_some_and(|s| parent.is_some_and(|p| p.eq_ignore_ascii_case(s)))
    })
}

/// Writes `data` readable by the owner only, by a rename (never half a file).
pub(crate) fn write_private(path: &Path, data: &[u8]) -> Result<(), TlsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| TlsError::file("create", dir, e))?;
    // Unique per write: two orders writing one name at once never share a temporary file.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}.{n}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| TlsError::file("create", &tmp, e))?;
    let written = f.write_all(data).and_then(|_| f.sync_all());
    if let Err(e) = written {
        // A full disk leaves no half-written temporary file behind.
        let _ = std::fs::remove_file(&tmp);
        return Err(TlsError::file("write", &tmp, e));
    }
    std::fs::rename(&tmp, path).map_err(|e| TlsError::file("rename into", path, e))
}

/// A name safe as one path component.
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_check_interval() {
        let s = Duration::from_secs;
        let cases = [(1, 60), (2, 120), (3, 240), (9, 3600), (40, 3600)];
        for (failures, want) in cases {
            assert_eq!(backoff(s(60), failures, s(3600)), s(want), "{failures}");
        }
    }

    /// Storing a certificate on a full disk fails as a file error a caller can recognise
    /// (`disk_full`), leaves no temporary file behind and keeps the stored one; a chain that
    /// is not a certificate fails as a certificate error. Mounting the small file system
    /// needs root: elsewhere the test skips, with CI=true it fails.
    #[test]
    fn a_full_disk_is_told_from_a_bad_certificate() {
        use super::super::error::Kind;
        let dir = std::env::temp_dir().join(format!("weir-acme-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(
                !ci,
                "CI=true and a tmpfs cannot be mounted (this test needs root)"
            );
            eprintln!("SKIPPED: cannot mount a tmpfs (not root?)");
            return;
        }
        let cert = dir.join("a.test").join("cert.pem");
        write_private(&cert, b"stored").unwrap();
        let e = write_private(&cert, &vec![b'x'; 128 * 1024]).unwrap_err();
        let left: Vec<_> = std::fs::read_dir(cert.parent().unwrap())
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        let kept = std::fs::read(&cert).unwrap_or_default();
        let _ = std::process::Command::new("umount").arg(&dir).status();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(e.kind(), Kind::File, "{e}");
        assert!(e.disk_full(), "{e}");
        assert_eq!(
            left,
            vec![std::ffi::OsString::from("cert.pem")],
            "no temporary left"
        );
        assert_eq!(kept, b"stored", "the stored certificate stays");
        let bad = current(b"not a certificate", b"").unwrap_err();
        assert_eq!(bad.kind(), Kind::Certificate, "{bad}");
        assert!(!bad.disk_full());
    }

    #[test]
    fn names_become_safe_path_components() {
        assert_eq!(sanitize("a.example.com"), "a.example.com");
        assert_eq!(sanitize("https://x/dir"), "https___x_dir");
        assert_eq!(sanitize("*.example.com"), "_.example.com");
    }
}
