//! The pid file (`pid_file:` or `--pid-file`) and signals to the process it names.
//!
//! `weir run` writes its pid once it serves (after a binary upgrade the new process writes its
//! own, so the verbs reach it), and removes the file when it stops only if the file still
//! holds its own pid (the old process of an upgrade leaves the new one's file alone).

use std::path::{Path, PathBuf};

/// A pid file this process wrote.
#[derive(Debug)]
pub struct PidFile(PathBuf);

impl PidFile {
    /// Writes this process's pid to `path` (through a temporary file and a rename, so a reader
    /// never sees it half-written).
    pub fn write(path: &Path) -> Result<PidFile, String> {
        let tmp = path.with_extension("pid.tmp");
        std::fs::write(&tmp, format!("{}\n", std::process::id()))
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| format!("pid file {}: {e}", path.display()))?;
        Ok(PidFile(path.to_path_buf()))
    }

    /// Removes the file if it still names this process.
    pub fn remove(&self) {
        remove_if_ours(&self.0);
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Removes `path` if it names this process (also on the way out of a fast stop, where no
/// destructor runs).
pub fn remove_if_ours(path: &Path) {
    if read(path).ok() == Some(std::process::id() as i32) {
        let _ = std::fs::remove_file(path);
    }
}

/// The pid in `path`.
pub fn read(path: &Path) -> Result<i32, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read the pid file {}: {e} (is weir running?)",
            path.display()
        )
    })?;
    text.trim()
        .parse::<i32>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("{}: {:?} is not a process id", path.display(), text.trim()))
}

/// Whether process `pid` runs (a zombie, ended but not yet reaped by its parent, does not).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the last `)` (comm may hold one).
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Sends `signal` to `pid`.
pub fn send(pid: i32, signal: libc::c_int) -> Result<(), String> {
    // SAFETY: kill(2) takes two integers and touches no memory of ours; a wrong pid or signal
    // is reported through its return value.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(pid, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "cannot signal process {pid}: {}",
            std::io::Error::last_os_error()
        ))
    }
}
