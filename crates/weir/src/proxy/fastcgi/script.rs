//! Which script a request runs: the one its path names when it is a file under the root,
//! else the fallback (a front controller), else weir's own 404, or 403 for a directory without
//! its index script (nginx's index module).

use std::cell::RefCell;
use std::time::Duration;

use super::config::FastCgi;
use super::params::{self, Script};

/// The script for `path` (percent-encoded, the upstream's path), or the status weir answers
/// without asking the application.
pub fn resolve(cfg: &FastCgi, path: &[u8]) -> Result<Script, u16> {
    let named =
        params::script(cfg, path).filter(|s| !cfg.require_file || is_script(cfg, &s.filename));
    // A directory without its index script is nginx's 403 ("directory index forbidden"), not
    // the front controller's, unless `directories: fallback` (no `$uri/` in nginx's
    // `try_files`: the index module is never reached).
    if named.is_none() && !cfg.directory_fallback && path.ends_with(b"/") && is_directory(cfg, path)
    {
        return Err(403);
    }
    match named {
        Some(s) => Ok(s),
        None => match params::fallback(cfg) {
            Some(s) if !cfg.require_file || is_script(cfg, &s.filename) => Ok(s),
            _ => Err(404),
        },
    }
}

/// Whether `path` (percent-encoded, as received) is a directory under the root.
fn is_directory(cfg: &FastCgi, path: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Some(decoded) = params::decoded_path(path) else {
        return false;
    };
    let mut full = cfg.root_bytes.to_vec();
    full.extend_from_slice(&decoded);
    match std::fs::canonicalize(std::ffi::OsStr::from_bytes(&full)) {
        Ok(real) => real.starts_with(&cfg.root) && real.is_dir(),
        Err(_) => false,
    }
}

/// How long an answer of [`is_script`] is kept (nginx's `open_file_cache_valid` is 60 s; a
/// script added or removed is seen within this).
const SCRIPT_CACHE: Duration = Duration::from_secs(1);

/// Whether a file name was a script, and when that was found.
type Answers = std::collections::HashMap<Box<[u8]>, (bool, std::time::Instant)>;

thread_local! {
    /// This worker's recent answers of [`is_script`], by file name: a `realpath` walks every
    /// component of the path (a system call each), 5.5k instructions a request by callgrind.
    static SCRIPTS: RefCell<Answers> = RefCell::new(Answers::new());
    /// The look-up key of [`is_script`], built here (no allocation per request).
    static KEY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Whether `filename` is a regular file inside the canonical `root` (symlinks followed),
/// answered again at most every [`SCRIPT_CACHE`].
fn is_script(cfg: &FastCgi, filename: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let now = std::time::Instant::now();
    // Keyed by root and name: another upstream's root (or a reloaded one) has its own answer.
    let key = KEY.with_borrow_mut(|key| {
        key.clear();
        key.extend_from_slice(&cfg.root_bytes);
        key.push(0);
        key.extend_from_slice(filename);
        SCRIPTS
            .with_borrow(|m| {
                m.get(&key[..])
                    .filter(|(_, at)| now.duration_since(*at) < SCRIPT_CACHE)
                    .map(|(yes, _)| *yes)
            })
            .ok_or_else(|| key.clone())
    });
    let key = match key {
        Ok(yes) => return yes,
        Err(key) => key,
    };
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(filename));
    let yes = match std::fs::canonicalize(path) {
        Ok(real) => real.starts_with(&cfg.root) && real.is_file(),
        Err(_) => false,
    };
    SCRIPTS.with_borrow_mut(|m| {
        // Bounded: a client naming random scripts cannot grow it past this.
        if m.len() >= 4096 {
            m.clear();
        }
        m.insert(key.into(), (yes, now));
    });
    yes
}
