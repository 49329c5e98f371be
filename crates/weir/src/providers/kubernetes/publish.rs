//! A snapshot turned into the fragment the reloader merges after the file's texts: the
//! conversion of `import/` (the same one `weir import` prints), with the Secrets the config
//! names written as files first (mode 0600, named by their content's digest, so a changed
//! Secret is a new file and the running config's stays; [`prune`] removes the ones no applied
//! config names).
//!
//! One object must not take every other tenant's config down with it (attack review of issue
//! 56: a path with a space, a regex that compiles alone but not anchored, a garbage
//! certificate, each accepted by the API server, failed the whole reload). So the fragment is
//! compiled on its own first, as `weir check` compiles a file; when it does not compile, each
//! Gateway (with the ReferenceGrants) and then each route and Ingress (with the Gateways that
//! did) is compiled alone, those that fail are left out and told why (a note, an event, their
//! parents `Accepted: False`), and the rest is published. The isolating pass costs one
//! conversion and compile per object, only when something is wrong.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::Path;

use super::view::Snapshot;
use crate::config::assemble::Fragment;
use crate::config::kubernetes::Settings;
use crate::import::gateway::Outcomes;

/// A rebuild's result.
#[derive(Debug)]
pub struct Built {
    pub fragment: Fragment,
    pub outcomes: Outcomes,
    /// What the conversion left out or refused, per object.
    pub notes: Vec<String>,
    /// The Secret files the fragment names.
    pub files: Vec<String>,
    /// The Services and Secrets the objects name (`watch::matters`).
    pub referenced: std::collections::BTreeSet<(&'static str, String, String)>,
}

/// The fragment's name in errors and logs.
pub const NAME: &str = "kubernetes";

/// The texts the fragment is merged with: the config file and etcd's fragments (the
/// reloader's).
#[derive(Debug, Clone)]
pub struct Base {
    pub path: Option<std::path::PathBuf>,
    pub fragments: std::sync::Arc<std::sync::Mutex<Vec<Fragment>>>,
}

/// Compiles `text` merged with `base`, as the reload will, and as `weir check` compiles a
/// file: a fragment that compiles alone but clashes with the file (an upstream name the file
/// has too) is caught here, per object, not by the reload (the second attack review).
///
/// Against a probe registry ([`Registry::probe`]): the running one's would be changed by a
/// compile that is never applied (the attack review of 2026-11-30: a key-value store whose
/// settings the file changed was closed under the running config by a rebuild that applied
/// nothing), and a fresh one opened the file's disk tiers and key-value logs a second time.
///
/// [`Registry::probe`]: crate::runtime::registry::Registry::probe
fn compiles(text: &str, base: &Base) -> Result<(), String> {
    let mut fragments = base
        .fragments
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    fragments.push(Fragment {
        name: NAME.into(),
        text: text.to_string(),
        overrides: false,
    });
    let source =
        crate::reload::read(base.path.as_deref(), &fragments).map_err(|e| e.to_string())?;
    let probe = std::sync::Arc::new(crate::runtime::registry::Registry::probe());
    crate::runtime::compile(source, &probe)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The fragment's text around the converted `yaml`: what the reload reads, and what is
/// compiled here.
fn framed(yaml: &str, files: &[String]) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    files.hash(&mut h);
    format!(
        "# From the Kubernetes API (providers.kubernetes).\n{yaml}# Secret files: {:016x}\n",
        h.finish()
    )
}

/// The objects of `kinds` each compiled alone with `base` beside them; those that fail, by
/// index, with the error.
fn isolate(
    objects: &[serde_yaml::Value],
    base: &[usize],
    kinds: &[&str],
    (convert, texts): (
        &dyn Fn(Vec<serde_yaml::Value>) -> Result<String, String>,
        &Base,
    ),
) -> Vec<(usize, String)> {
    let mut bad = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        if !kinds.contains(&o["kind"].as_str().unwrap_or("")) {
            continue;
        }
        let mut set: Vec<serde_yaml::Value> = base.iter().map(|b| objects[*b].clone()).collect();
        set.push(o.clone());
        if let Err(e) = convert(set).and_then(|t| compiles(&t, texts)) {
            bad.push((i, e));
        }
    }
    bad
}

/// `Kind ns/name`.
fn ident(o: &serde_yaml::Value) -> String {
    format!(
        "{} {}/{}",
        o["kind"].as_str().unwrap_or(""),
        o["metadata"]["namespace"].as_str().unwrap_or(""),
        o["metadata"]["name"].as_str().unwrap_or("")
    )
}

/// Converts `snap` and writes the Secrets' files it names.
pub fn build(snap: &Snapshot, s: &Settings, texts: &Base) -> Result<Built, String> {
    let opts = crate::import::ingress::Options {
        class: s.ingress_class.clone().unwrap_or_default(),
        service_address: String::new(),
        secrets_dir: s.secrets_dir.display().to_string(),
        cluster: Some(std::sync::Arc::new(snap.view.clone())),
    };
    let convert = |objects: Vec<serde_yaml::Value>| {
        crate::import::cluster_config(
            objects,
            &opts,
            (&s.listen, &s.listen_tls, &s.listen_passthrough),
        )
    };
    let (mut yaml, mut c) = convert(snap.objects.clone())?;
    // Every object's, those left out below too: fixing their Secret must rebuild.
    let referenced = c.referenced.clone();
    // The files first: the compile reads them.
    let files = write_files(snap, s, &c)?;
    let mut left_out: Vec<(String, String)> = Vec::new();
    if let Err(whole) = compiles(&framed(&yaml, &files), texts) {
        // Each set's own Secret files written first: an object alone may name a certificate
        // the whole did not (a host another's route owns in the whole is free alone), and was
        // left out for a missing file. Those the applied config does not name are pruned.
        let text_of = |set: Vec<serde_yaml::Value>| {
            let (t, c) = convert(set)?;
            write_files(snap, s, &c)?;
            Ok(t)
        };
        let objects = &snap.objects;
        let grants: Vec<usize> = (0..objects.len())
            .filter(|i| objects[*i]["kind"].as_str() == Some("ReferenceGrant"))
            .collect();
        let mut bad = isolate(objects, &grants, &["Gateway"], (&text_of, texts));
        let gateways: Vec<usize> = (0..objects.len())
            .filter(|i| {
                objects[*i]["kind"].as_str() == Some("Gateway") && !bad.iter().any(|(b, _)| b == i)
            })
            .chain(grants.iter().copied())
            .collect();
        bad.extend(isolate(
            objects,
            &gateways,
            &["HTTPRoute", "GRPCRoute", "TLSRoute", "Ingress"],
            (&text_of, texts),
        ));
        let kept: Vec<serde_yaml::Value> = (0..objects.len())
            .filter(|i| !bad.iter().any(|(b, _)| b == i))
            .map(|i| objects[i].clone())
            .collect();
        let (y, c2) = convert(kept)?;
        compiles(&framed(&y, &files), texts).map_err(|e| {
            format!("the cluster's config does not compile ({whole}), nor without the objects that fail alone ({e})")
        })?;
        for (i, e) in &bad {
            let o = &objects[*i];
            tracing::warn!(object = %ident(o), error = %e, "Kubernetes object left out: its config does not compile");
            left_out.push((ident(o), e.clone()));
        }
        yaml = y;
        c = c2;
    }
    crate::metrics::kubernetes::LEFT_OUT
        .store(left_out.len() as u64, std::sync::atomic::Ordering::Relaxed);
    let mut notes = std::mem::take(&mut c.skipped);
    let mut outcomes = std::mem::take(&mut c.gateway);
    for (id, e) in &left_out {
        notes.push(format!(
            "{id}: not served: its config does not compile: {e}"
        ));
        let Some(route) = snap.objects.iter().find(|o| {
            ident(o) == *id
                && matches!(
                    o["kind"].as_str(),
                    Some("HTTPRoute" | "GRPCRoute" | "TLSRoute")
                )
        }) else {
            continue;
        };
        // Its parents naming weir's Gateways: not accepted, and why.
        let ns = route["metadata"]["namespace"].as_str().unwrap_or("");
        let name = route["metadata"]["name"].as_str().unwrap_or("");
        for parent in route["spec"]["parentRefs"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            let gw = (
                parent["namespace"].as_str().unwrap_or(ns).to_string(),
                parent["name"].as_str().unwrap_or("").to_string(),
            );
            if outcomes.listeners.iter().any(|l| l.gateway == gw) {
                outcomes
                    .parents
                    .push(crate::import::gateway::ParentOutcome {
                        kind: route["kind"].as_str().unwrap_or("").to_string(),
                        route: (ns.to_string(), name.to_string()),
                        parent: parent.clone(),
                        accepted: Err(("UnsupportedValue".into(), format!("not served: {e}"))),
                        resolved: Ok(()),
                    });
            }
        }
    }
    Ok(Built {
        fragment: Fragment {
            name: NAME.into(),
            text: framed(&yaml, &files),
            overrides: false,
        },
        outcomes,
        notes,
        files,
        referenced,
    })
}

/// Writes the Secrets' files `c` names; their paths.
fn write_files(
    snap: &Snapshot,
    s: &Settings,
    c: &crate::import::ingress::Converted,
) -> Result<Vec<String>, String> {
    let mut files: BTreeMap<String, &[u8]> = BTreeMap::new();
    let dir = s.secrets_dir.display().to_string();
    for (ns, name) in &c.secrets_used {
        let key = (ns.clone(), name.clone());
        let Some(data) = snap.secrets.get(&key) else {
            continue;
        };
        let base = crate::import::cluster::secret_file(&dir, "tls", (ns, name), Some(&snap.view));
        if let (Some(cert), Some(k)) = (data.get("tls.crt"), data.get("tls.key")) {
            files.insert(format!("{base}.crt"), cert);
            files.insert(format!("{base}.key"), k);
        }
    }
    for (ns, name) in &c.auth_secrets_used {
        let key = (ns.clone(), name.clone());
        if let Some(auth) = snap.secrets.get(&key).and_then(|d| d.get("auth")) {
            let base =
                crate::import::cluster::secret_file(&dir, "auth", (ns, name), Some(&snap.view));
            files.insert(format!("{base}.htpasswd"), auth);
        }
    }
    for (path, bytes) in &files {
        write_if_changed(Path::new(path), bytes)
            .map_err(|e| format!("cannot write {path}: {e}"))?;
    }
    Ok(files.into_keys().collect())
}

/// Removes the Secret files under `dir` that `keep` (the applied config's) does not name.
pub fn prune(dir: &Path, keep: &[String]) {
    for kind in ["tls", "auth"] {
        let Ok(entries) = std::fs::read_dir(dir.join(kind)) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if !keep.iter().any(|k| Path::new(k) == p) {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
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
