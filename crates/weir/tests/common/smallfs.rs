//! A small file system that fills up: a tmpfs of a given size mounted under the temp
//! directory, unmounted when dropped. For the disk-full tests (a log or purge record that
//! cannot be written). Mounting needs root: elsewhere the test skips, in CI (root) it fails.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

pub struct SmallFs {
    pub path: PathBuf,
}

impl SmallFs {
    /// Mounts a tmpfs of `size` (`1m`, `4m`, ...), or says why it cannot.
    pub fn mount(name: &str, size: &str) -> Option<SmallFs> {
        let path = std::env::temp_dir().join(format!("weir-smallfs-{name}-{}", std::process::id()));
        let _ = Command::new("umount")
            .arg(&path)
            .stderr(std::process::Stdio::null())
            .status();
        std::fs::create_dir_all(&path).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(
                !ci,
                "CI=true and a tmpfs cannot be mounted (the disk-full tests need root)"
            );
            eprintln!("SKIPPED: cannot mount a tmpfs (not root?)");
            let _ = std::fs::remove_dir(&path);
            return None;
        }
        Some(SmallFs { path })
    }

    /// Fills what is left with a file, so the next write gets ENOSPC.
    pub fn fill(&self) -> PathBuf {
        let f = self.path.join("filler");
        let _ = Command::new("dd")
            .args(["if=/dev/zero", "bs=64k"])
            .arg(format!("of={}", f.display()))
            .stderr(std::process::Stdio::null())
            .status();
        f
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
        let _ = std::fs::remove_dir(&self.path);
    }
}
