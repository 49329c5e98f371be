//! htpasswd files: `user:hash` lines, as Apache's `htpasswd` and nginx's `auth_basic_user_file`
//! read them. Hashes: bcrypt (`$2y$`, `$2b$`, `$2a$`), Apache's MD5 (`$apr1$`), `{SHA}` (base64
//! SHA-1), and SHA-crypt (`$5$`, `$6$`). Plain text and DES crypt are refused at load, naming
//! the line: a file weir cannot check is a config error, never a user who cannot log in.
//!
//! bcrypt and SHA-crypt come from their crates; apr1 is written here (40 lines over `md-5`):
//! no well-kept crate has it alone, and it is checked below against `openssl passwd -apr1`.

use std::collections::HashMap;

use base64::Engine;
use md5::{Digest, Md5};

/// A password hash of a supported scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hash {
    Bcrypt(String),
    Apr1 { salt: String, full: String },
    Sha1(Vec<u8>),
    ShaCrypt(String),
}

impl Hash {
    /// The hash in a file's second column, or why it is not one weir can check.
    pub fn parse(h: &str) -> Result<Hash, String> {
        if h.starts_with("$2y$") || h.starts_with("$2b$") || h.starts_with("$2a$") {
            return Ok(Hash::Bcrypt(h.to_string()));
        }
        if let Some(rest) = h.strip_prefix("$apr1$") {
            let salt = rest.split('$').next().unwrap_or("");
            if salt.is_empty() || salt.len() > 8 || !rest.contains('$') {
                return Err("a malformed $apr1$ hash".into());
            }
            return Ok(Hash::Apr1 {
                salt: salt.to_string(),
                full: h.to_string(),
            });
        }
        if let Some(b) = h.strip_prefix("{SHA}") {
            let d = base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|_| "a {SHA} hash that is not base64".to_string())?;
            if d.len() != 20 {
                return Err("a {SHA} hash that is not 20 bytes".into());
            }
            return Ok(Hash::Sha1(d));
        }
        if h.starts_with("$5$") || h.starts_with("$6$") {
            return Ok(Hash::ShaCrypt(h.to_string()));
        }
        Err("not a hash weir can check (bcrypt $2y$, $apr1$, {SHA}, $5$ or $6$; plain text and DES crypt are refused)".into())
    }

    /// About how much work a check of this hash is, to pick the costliest one of a file for
    /// users it does not have (so that their 401 takes what the slowest known user's does).
    pub fn work(&self) -> u64 {
        match self {
            // `$2y$10$...`: 2^cost rounds of Blowfish setup, ~1000 SHA-512 rounds each.
            Hash::Bcrypt(h) => {
                let cost: u32 = h.get(4..6).and_then(|c| c.parse().ok()).unwrap_or(10);
                1000u64.saturating_mul(1u64 << cost.min(31))
            }
            // `$6$rounds=N$...` (5000 by default), one SHA round each.
            Hash::ShaCrypt(h) => h
                .split('$')
                .nth(2)
                .and_then(|p| p.strip_prefix("rounds="))
                .and_then(|n| n.parse().ok())
                .unwrap_or(5000),
            Hash::Apr1 { .. } => 1000,
            Hash::Sha1(_) => 1,
        }
    }

    /// The stored hash's bytes (a changed hash is a new cache key).
    pub fn stored(&self) -> &[u8] {
        match self {
            Hash::Bcrypt(h) | Hash::ShaCrypt(h) => h.as_bytes(),
            Hash::Apr1 { full, .. } => full.as_bytes(),
            Hash::Sha1(d) => d,
        }
    }

    /// Whether `password` matches.
    pub fn verify(&self, password: &str) -> bool {
        match self {
            Hash::Bcrypt(h) => bcrypt::verify(password, h).unwrap_or(false),
            Hash::Apr1 { salt, full } => constant_eq(
                apr1(password.as_bytes(), salt.as_bytes()).as_bytes(),
                full.as_bytes(),
            ),
            Hash::Sha1(d) => {
                use sha1::Digest as _;
                constant_eq(&sha1::Sha1::digest(password.as_bytes()), d)
            }
            Hash::ShaCrypt(h) if h.starts_with("$5$") => {
                sha_crypt::sha256_check(password, h).is_ok()
            }
            Hash::ShaCrypt(h) => sha_crypt::sha512_check(password, h).is_ok(),
        }
    }
}

/// The users of a file.
pub type Users = HashMap<String, Hash>;

/// Parses a file's text: `user:hash` lines, `#` comments and blank lines skipped. The error
/// names the line.
pub fn parse(text: &str) -> Result<Users, String> {
    let mut users = Users::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let (user, hash) = line
            .split_once(':')
            .ok_or_else(|| format!("line {}: no `user:hash`", n + 1))?;
        // Some tools add fields after the hash (`user:hash:comment`).
        let hash = hash.split(':').next().unwrap_or("");
        let h = Hash::parse(hash).map_err(|e| format!("line {} (user {user:?}): {e}", n + 1))?;
        users.insert(user.to_string(), h);
    }
    Ok(users)
}

/// Compares without stopping at the first difference.
fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Apache's MD5-crypt: `$apr1$salt$hash`.
pub fn apr1(pw: &[u8], salt: &[u8]) -> String {
    let magic = b"$apr1$";
    let alt = Md5::new()
        .chain_update(pw)
        .chain_update(salt)
        .chain_update(pw)
        .finalize();
    let mut ctx = Md5::new();
    ctx.update(pw);
    ctx.update(magic);
    ctx.update(salt);
    let mut left = pw.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alt[..n]);
        left -= n;
    }
    let mut i = pw.len();
    while i > 0 {
        if i & 1 != 0 {
            ctx.update([0u8]);
        } else {
            ctx.update(&pw[..1]);
        }
        i >>= 1;
    }
    let mut fin = ctx.finalize();
    for round in 0..1000 {
        let mut c = Md5::new();
        if round & 1 != 0 {
            c.update(pw);
        } else {
            c.update(fin);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(pw);
        }
        if round & 1 != 0 {
            c.update(fin);
        } else {
            c.update(pw);
        }
        fin = c.finalize();
    }
    let mut out = String::with_capacity(37);
    out.push_str("$apr1$");
    out.push_str(&String::from_utf8_lossy(salt));
    out.push('$');
    let mut to64 = |mut v: u32, n: usize| {
        for _ in 0..n {
            out.push(ITOA64[(v & 0x3f) as usize] as char);
            v >>= 6;
        }
    };
    let b = |i: usize| u32::from(fin[i]);
    to64((b(0) << 16) | (b(6) << 8) | b(12), 4);
    to64((b(1) << 16) | (b(7) << 8) | b(13), 4);
    to64((b(2) << 16) | (b(8) << 8) | b(14), 4);
    to64((b(3) << 16) | (b(9) << 8) | b(15), 4);
    to64((b(4) << 16) | (b(10) << 8) | b(5), 4);
    to64(b(11), 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each scheme against hashes made by other tools (`openssl passwd`, Apache's
    /// `htpasswd -B`), right and wrong passwords.
    #[test]
    fn schemes_table() {
        let table = [
            // openssl passwd -apr1 -salt saltsalt secret
            ("$apr1$saltsalt$LrttParrLPdxvgutaSXWJ0", "secret"),
            // a short salt: openssl passwd -apr1 -salt ab pw
            ("$apr1$ab$RieuZkC7MNZo71UI4mVva0", "pw"),
            // htpasswd -nbs demo demo (base64 of SHA-1)
            ("{SHA}ieSV55Qc+eQOaYDRSha/AjzNTJE=", "demo"),
            // openssl passwd -5 -salt saltsalt secret
            (
                "$5$saltsalt$0IyaXrmV7.sGNS6tirgqHLqX/G.FBvgkYA.lpPdS5sA",
                "secret",
            ),
            // openssl passwd -6 -salt saltsalt secret
            (
                "$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1",
                "secret",
            ),
            // htpasswd -nbB -C 4 demo demo
            (
                "$2y$04$bw/DjbZ7pnZEvEo1e.JXwu0kKPu44mWSeL5zCJW0eGFoTHAXCI5X6",
                "demo",
            ),
        ];
        for (hash, pw) in table {
            let h = Hash::parse(hash).unwrap();
            assert!(h.verify(pw), "{hash} with {pw}");
            assert!(!h.verify("wrong"), "{hash} with a wrong password");
        }
    }

    #[test]
    fn files_parse_and_bad_lines_are_named() {
        let users = parse("# users\n\ndemo:{SHA}ieSV55Qc+eQOaYDRSha/AjzNTJE=\nbob:$apr1$ab$RieuZkC7MNZo71UI4mVva0:comment\n").unwrap();
        assert_eq!(users.len(), 2);
        assert!(users["bob"].verify("pw"));
        let e = parse("demo:{SHA}ieSV55Qc+eQOaYDRSha/AjzNTJE=\neve:plaintext\n").unwrap_err();
        assert!(e.starts_with("line 2 (user \"eve\")"), "{e}");
        assert!(parse("nocolon\n").unwrap_err().starts_with("line 1"));
    }
}
