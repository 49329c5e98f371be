//! A snapshot turned into the fragment the reloader merges after the file's texts: the
//! conversion of `import/` (the same one `weir import` prints), with the Secrets the config
//! names written as files first (mode 0600, replaced by rename, only when their bytes
//! changed). The fragment's last line is a digest of those files' contents: a rotated
//! certificate changes the text, so the reload that loads it happens although the paths are
//! the same.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::Path;

use super::settings::Settings;
use super::view::Snapshot;
use crate::config::assemble::Fragment;
use crate::import::gateway::Outcomes;

/// A rebuild's result.
#[derive(Debug)]
pub struct Built {
    pub fragment: Fragment,
    pub outcomes: Outcomes,
    /// What the conversion left out or refused, per object.
    pub notes: Vec<String>,
}

/// The fragment's name in errors and logs.
pub const NAME: &str = "kubernetes";

/// Converts `snap` and writes the Secrets' files it names.
pub fn build(snap: &Snapshot, s: &Settings) -> Result<Built, String> {
    let opts = crate::import::ingress::Options {
        class: s.ingress_class.clone().unwrap_or_default(),
        service_address: String::new(),
        secrets_dir: s.secrets_dir.display().to_string(),
        cluster: Some(std::sync::Arc::new(snap.view.clone())),
    };
    let (yaml, c) =
        crate::import::cluster_config(snap.objects.clone(), &opts, (&s.listen, &s.listen_tls))?;
    let mut files: BTreeMap<String, &[u8]> = BTreeMap::new();
    let dir = s.secrets_dir.display().to_string();
    for (ns, name) in &c.secrets_used {
        let key = (ns.clone(), name.clone());
        let Some(data) = snap.secrets.get(&key) else {
            continue;
        };
        let base = crate::import::cluster::secret_file(&dir, "tls", (ns, name));
        if let (Some(cert), Some(k)) = (data.get("tls.crt"), data.get("tls.key")) {
            files.insert(format!("{base}.crt"), cert);
            files.insert(format!("{base}.key"), k);
        }
    }
    for (ns, name) in &c.auth_secrets_used {
        let key = (ns.clone(), name.clone());
        if let Some(auth) = snap.secrets.get(&key).and_then(|d| d.get("auth")) {
            let base = crate::import::cluster::secret_file(&dir, "auth", (ns, name));
            files.insert(format!("{base}.htpasswd"), auth);
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (path, bytes) in &files {
        write_if_changed(Path::new(path), bytes)
            .map_err(|e| format!("cannot write {path}: {e}"))?;
        path.hash(&mut h);
        bytes.hash(&mut h);
    }
    let text = format!(
        "# From the Kubernetes API (providers.kubernetes): {} objects converted, {} notes.\n{yaml}# Secret files: {:016x}\n",
        c.translated,
        c.skipped.len(),
        h.finish()
    );
    Ok(Built {
        fragment: Fragment {
            name: NAME.into(),
            text,
            overrides: false,
        },
        outcomes: c.gateway,
        notes: c.skipped,
    })
}

/// Writes `bytes` to `path` (mode 0600, directories made) unless it holds them already.
fn write_if_changed(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}
