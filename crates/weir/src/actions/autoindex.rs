//! Directory listings for `static` routes with `autoindex: html` or `json` (nginx `autoindex`),
//! answered for a directory without an index file. Off by default: a listing shows what a site
//! did not mean to link.
//!
//! Names starting with a dot are left out (`.git`, `.htpasswd`), as nginx does; directories come
//! first, then files, each by name. Names are escaped for HTML and percent-encoded in links, so
//! a file named `<script>` is shown, never run. At most [`MAX_ENTRIES`] are listed.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::UNIX_EPOCH;

use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};

/// Most entries a listing shows (the rest are counted in a last line).
pub const MAX_ENTRIES: usize = 10_000;

/// The listing's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Html,
    Json,
}

/// Bytes percent-encoded in a link: controls, space and what HTML or a URL treats specially.
const LINK: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'\'')
    .add(b'&')
    .add(b':');

struct Entry {
    name: String,
    dir: bool,
    size: u64,
    mtime: u64,
}

/// The listing of `dir`, shown as `shown` (the request path), with its content type; `None`
/// when the directory cannot be read.
pub fn listing(dir: &Path, shown: &[u8], format: Format) -> Option<(Vec<u8>, &'static str)> {
    let mut entries = Vec::new();
    let mut more = 0usize;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let name = e.file_name();
        if name.as_bytes().first() == Some(&b'.') {
            continue;
        }
        if entries.len() == MAX_ENTRIES {
            more += 1;
            continue;
        }
        // The target's type and size (a symlink to a directory lists as one).
        let Ok(meta) = std::fs::metadata(e.path()) else {
            continue;
        };
        entries.push(Entry {
            name: String::from_utf8_lossy(name.as_bytes()).into_owned(),
            dir: meta.is_dir(),
            size: meta.len(),
            mtime: meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs()),
        });
    }
    entries.sort_by(|a, b| b.dir.cmp(&a.dir).then_with(|| a.name.cmp(&b.name)));
    Some(match format {
        Format::Html => (html(&entries, shown, more), "text/html; charset=utf-8"),
        Format::Json => (json(&entries), "application/json"),
    })
}

fn date(secs: u64) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

fn html(entries: &[Entry], shown: &[u8], more: usize) -> Vec<u8> {
    let title = escape(&String::from_utf8_lossy(shown));
    let mut out = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n<body><h1>Index of {title}</h1><hr><pre><a href=\"../\">../</a>\n"
    );
    for e in entries {
        let slash = if e.dir { "/" } else { "" };
        let size = if e.dir {
            "-".to_string()
        } else {
            e.size.to_string()
        };
        out.push_str(&format!(
            "<a href=\"./{}{slash}\">{}{slash}</a>  {}  {size}\n",
            utf8_percent_encode(&e.name, LINK),
            escape(&e.name),
            date(e.mtime),
        ));
    }
    if more > 0 {
        out.push_str(&format!("({more} more not listed)\n"));
    }
    out.push_str("</pre><hr></body></html>\n");
    out.into_bytes()
}

fn json(entries: &[Entry]) -> Vec<u8> {
    let list: Vec<serde_json::Value> = entries
        .iter()
        .map(|e| {
            let mut v = serde_json::json!({
                "name": e.name,
                "type": if e.dir { "directory" } else { "file" },
                "mtime": date(e.mtime),
            });
            if !e.dir {
                v["size"] = serde_json::json!(e.size);
            }
            v
        })
        .collect();
    let mut out = serde_json::to_vec(&list).unwrap_or_else(|_| b"[]".to_vec());
    out.push(b'\n');
    out
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_sorted_and_dotfiles_left_out() {
        let dir = std::env::temp_dir().join(format!("weir-autoindex-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("zdir")).unwrap();
        std::fs::write(dir.join("b.txt"), b"12345").unwrap();
        std::fs::write(dir.join("<script>.txt"), b"x").unwrap();
        std::fs::write(dir.join(".secret"), b"x").unwrap();
        std::fs::write(dir.join("javascript:alert(1)"), b"x").unwrap();
        let (html, ctype) = listing(&dir, b"/files/", Format::Html).unwrap();
        let html = String::from_utf8(html).unwrap();
        assert_eq!(ctype, "text/html; charset=utf-8");
        assert!(!html.contains("<script>") && html.contains("&lt;script&gt;.txt"));
        assert!(html.contains("href=\"./%3Cscript%3E.txt\""));
        assert!(!html.contains("secret"));
        // A name that reads as a URL scheme stays a relative link.
        assert!(html.contains("href=\"./javascript%3Aalert(1)\""), "{html}");
        let (z, b) = (html.find("zdir/").unwrap(), html.find("b.txt").unwrap());
        assert!(z < b, "directories first");
        let (json, _) = listing(&dir, b"/files/", Format::Json).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v[0]["name"], "zdir");
        assert_eq!(v[0]["type"], "directory");
        assert_eq!(v[2]["name"], "b.txt");
        assert_eq!(v[2]["size"], 5);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
