//! Watching the config's directories (`reload.watch: true`). Directories, not files: editors
//! save by writing a new file and renaming it over the old one, and Kubernetes updates a
//! mounted ConfigMap by swapping a symlinked directory, so a watch on the file's inode would
//! see nothing after the first change. Every event in a watched directory is a hint; the reload
//! loop waits for the debounce, re-reads, and rebuilds only when the texts' digest changed.
//!
//! `notify` (inotify on Linux) rather than polling: a change is seen in milliseconds, and an
//! idle weir does no work.

use std::path::PathBuf;

use notify::{RecursiveMode, Watcher};

/// The live watch: dropped, it stops.
pub struct DirWatch {
    watcher: notify::RecommendedWatcher,
    dirs: Vec<PathBuf>,
}

impl std::fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatch")
            .field("dirs", &self.dirs)
            .finish()
    }
}

impl DirWatch {
    /// Watches `dirs`; each event sends `()` to `tx`.
    pub fn start(
        dirs: &[PathBuf],
        tx: tokio::sync::mpsc::UnboundedSender<()>,
    ) -> Result<DirWatch, String> {
        let watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if let Ok(ev) = ev {
                if !ev.kind.is_access() {
                    let _ = tx.send(());
                }
            }
        })
        .map_err(|e| format!("cannot watch the config directory: {e}"))?;
        let mut w = DirWatch {
            watcher,
            dirs: Vec::new(),
        };
        w.set(dirs);
        Ok(w)
    }

    /// Watches exactly `dirs` from now on (the includes may have changed).
    pub fn set(&mut self, dirs: &[PathBuf]) {
        for d in &self.dirs {
            if !dirs.contains(d) {
                let _ = self.watcher.unwatch(d);
            }
        }
        for d in dirs {
            if !self.dirs.contains(d) {
                let dir = if d.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    d.clone()
                };
                if let Err(e) = self.watcher.watch(&dir, RecursiveMode::NonRecursive) {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot watch config directory");
                }
            }
        }
        self.dirs = dirs.to_vec();
    }
}
