//! nginx's configuration syntax: directives (`name arg ...;`) and blocks (`name arg ... { ... }`),
//! with `#` comments, single and double quotes (and `\` escapes), and `include` followed (a file
//! or a glob; a relative one against the main file's directory, as nginx's `-c` prefix, then
//! the including file's, then `/etc/nginx`), each directive keeping the file and line it came
//! from. An include that names no file is kept as a directive, so the list of what was not
//! translated shows it, but for nginx's `fastcgi_params`, `fastcgi.conf` and Debian's
//! `snippets/fastcgi-php.conf`, whose standard text stands in.

use std::path::{Path, PathBuf};

/// One directive, with its block when it has one.
#[derive(Debug, Clone)]
pub struct Directive {
    pub name: String,
    pub args: Vec<String>,
    pub block: Option<Vec<Directive>>,
    pub file: std::sync::Arc<PathBuf>,
    pub line: usize,
}

impl Directive {
    /// `file:line`, as the list of what was not translated shows it.
    pub fn at(&self) -> String {
        format!("{}:{}", self.file.display(), self.line)
    }

    /// The directives of its block (none without one).
    pub fn children(&self) -> &[Directive] {
        self.block.as_deref().unwrap_or(&[])
    }
}

/// Includes deeper than this are refused (a file including itself).
const MAX_DEPTH: usize = 16;
/// Blocks nested deeper than this are refused (nginx's own configurations nest a few levels).
const MAX_NESTING: usize = 64;
/// The largest file read (a configuration, or what an include names).
const MAX_FILE: u64 = 16 * 1024 * 1024;
/// The most files one import reads, includes counted each time they are followed: a file
/// that includes the next one twice, 15 levels deep, is 32,767 reads (3 s and 235 MB before
/// this bound; a fan-out of 8 never ended). Real configurations read tens.
const MAX_FILES: usize = 1024;
/// The most directives (blocks included) one import holds after includes are expanded.
const MAX_DIRECTIVES: usize = 200_000;

/// What one import may still read: files and directives, counted across all includes.
struct Budget {
    files: usize,
    directives: usize,
}

/// Parses `path` and what it includes.
pub fn parse_file(path: &Path) -> Result<Vec<Directive>, String> {
    let main_dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let mut budget = Budget {
        files: MAX_FILES,
        directives: MAX_DIRECTIVES,
    };
    parse_at(path, &main_dir, 0, &mut budget)
}

fn parse_at(
    path: &Path,
    main_dir: &Path,
    depth: usize,
    budget: &mut Budget,
) -> Result<Vec<Directive>, String> {
    if depth > MAX_DEPTH {
        return Err(format!("{}: includes nested too deep", path.display()));
    }
    if budget.files == 0 {
        return Err(format!(
            "{}: more than {MAX_FILES} files read through includes (a file included again and again?)",
            path.display()
        ));
    }
    budget.files -= 1;
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() || meta.len() > MAX_FILE {
        return Err(format!(
            "{}: not a regular file of at most 16 MiB",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file = std::sync::Arc::new(path.to_path_buf());
    let tokens = tokenize(&text).map_err(|(line, m)| format!("{}:{line}: {m}", path.display()))?;
    let mut pos = 0;
    let list = block(&tokens, &mut pos, &file, 0, budget)?;
    expand_includes(list, path, main_dir, depth, budget)
}

/// Replaces `include` directives with what they name, at any depth.
fn expand_includes(
    list: Vec<Directive>,
    from: &Path,
    main_dir: &Path,
    depth: usize,
    budget: &mut Budget,
) -> Result<Vec<Directive>, String> {
    let mut out = Vec::with_capacity(list.len());
    for mut d in list {
        if d.name == "include" && d.block.is_none() && d.args.len() == 1 {
            let targets = include_targets(&d.args[0], from, main_dir);
            // A glob in a directory part is not followed: kept, so it is listed.
            let dir_glob = Path::new(&d.args[0])
                .parent()
                .is_some_and(|p| p.to_string_lossy().contains('*'));
            if !dir_glob && targets.is_empty() {
                // nginx's own parameter files, where this machine has none (issue 53: a PHP
                // location would refuse for the missing file).
                if let Some((label, text)) = builtin(&d.args[0]) {
                    let file = std::sync::Arc::new(PathBuf::from(label));
                    let tokens =
                        tokenize(&text).map_err(|(line, m)| format!("{label}:{line}: {m}"))?;
                    let list = block(&tokens, &mut 0, &file, 0, budget)?;
                    out.extend(expand_includes(list, from, main_dir, depth + 1, budget)?);
                    continue;
                }
            }
            if dir_glob || (targets.is_empty() && !d.args[0].contains('*')) {
                out.push(d);
                continue;
            }
            for f in targets {
                out.extend(
                    parse_at(&f, main_dir, depth + 1, budget)
                        .map_err(|e| format!("{}: {e}", d.at()))?,
                );
            }
            continue;
        }
        if let Some(b) = d.block.take() {
            d.block = Some(expand_includes(b, from, main_dir, depth, budget)?);
        }
        out.push(d);
    }
    Ok(out)
}

/// nginx's `fastcgi_params` (as Debian ships it, but its `HTTP_HOST` line).
const FASTCGI_PARAMS: &str = "fastcgi_param QUERY_STRING $query_string;
fastcgi_param REQUEST_METHOD $request_method;
fastcgi_param CONTENT_TYPE $content_type;
fastcgi_param CONTENT_LENGTH $content_length;
fastcgi_param SCRIPT_NAME $fastcgi_script_name;
fastcgi_param REQUEST_URI $request_uri;
fastcgi_param DOCUMENT_URI $document_uri;
fastcgi_param DOCUMENT_ROOT $document_root;
fastcgi_param SERVER_PROTOCOL $server_protocol;
fastcgi_param REQUEST_SCHEME $scheme;
fastcgi_param HTTPS $https if_not_empty;
fastcgi_param GATEWAY_INTERFACE CGI/1.1;
fastcgi_param SERVER_SOFTWARE nginx/$nginx_version;
fastcgi_param REMOTE_ADDR $remote_addr;
fastcgi_param REMOTE_PORT $remote_port;
fastcgi_param REMOTE_USER $remote_user;
fastcgi_param SERVER_ADDR $server_addr;
fastcgi_param SERVER_PORT $server_port;
fastcgi_param SERVER_NAME $server_name;
fastcgi_param REDIRECT_STATUS 200;
";

/// Debian's `snippets/fastcgi-php.conf`.
const FASTCGI_PHP: &str = "fastcgi_split_path_info ^(.+?\\.php)(/.*)$;
try_files $fastcgi_script_name =404;
set $path_info $fastcgi_path_info;
fastcgi_param PATH_INFO $path_info;
fastcgi_index index.php;
include fastcgi.conf;
";

/// The standard file an `include` names that this machine does not have: its label and text
/// (`fastcgi_params`, `fastcgi.conf`, Debian's `snippets/fastcgi-php.conf`, relative or under
/// `/etc/nginx`).
fn builtin(name: &str) -> Option<(&'static str, std::borrow::Cow<'static, str>)> {
    let name = name.strip_prefix("/etc/nginx/").unwrap_or(name);
    match name {
        "fastcgi_params" => Some(("(nginx's fastcgi_params, built in)", FASTCGI_PARAMS.into())),
        "fastcgi.conf" => Some((
            "(nginx's fastcgi.conf, built in)",
            format!(
                "fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;\n{FASTCGI_PARAMS}"
            )
            .into(),
        )),
        "snippets/fastcgi-php.conf" => {
            Some(("(Debian's snippets/fastcgi-php.conf, built in)", FASTCGI_PHP.into()))
        }
        _ => None,
    }
}

/// The files an `include` names: a path or a glob (`*` in the file name); a relative one
/// against the main file's directory, then the including file's, then `/etc/nginx`; in name
/// order.
fn include_targets(pattern: &str, from: &Path, main_dir: &Path) -> Vec<PathBuf> {
    let p = Path::new(pattern);
    let candidates: Vec<PathBuf> = if p.is_absolute() {
        vec![p.to_path_buf()]
    } else {
        let here = from.parent().unwrap_or(Path::new("."));
        vec![
            main_dir.join(p),
            here.join(p),
            Path::new("/etc/nginx").join(p),
        ]
    };
    for c in candidates {
        let name = c
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !name.contains('*') {
            if c.exists() {
                return vec![c];
            }
            continue;
        }
        let Some(dir) = c.parent() else { continue };
        let (before, after) = name.split_once('*').unwrap_or((&name, ""));
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|f| {
                let n = f
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                f.is_file()
                    && n.len() >= before.len() + after.len()
                    && n.starts_with(before)
                    && n.ends_with(after)
            })
            .collect();
        found.sort();
        return found;
    }
    Vec::new()
}

#[derive(Debug, PartialEq)]
enum Token {
    Word(String, usize),
    Semi(usize),
    Open(usize),
    Close(usize),
}

fn tokenize(text: &str) -> Result<Vec<Token>, (usize, String)> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            '\n' => {
                line += 1;
                chars.next();
            }
            c if c.is_whitespace() => {
                chars.next();
            }
            '#' => {
                while let Some(&c) = chars.peek() {
                    if c == '\n' {
                        break;
                    }
                    chars.next();
                }
            }
            ';' => {
                out.push(Token::Semi(line));
                chars.next();
            }
            '{' => {
                out.push(Token::Open(line));
                chars.next();
            }
            '}' => {
                out.push(Token::Close(line));
                chars.next();
            }
            '"' | '\'' => {
                let quote = c;
                let start = line;
                chars.next();
                let mut word = String::new();
                loop {
                    match chars.next() {
                        None => return Err((start, "unterminated quote".into())),
                        Some('\\') => {
                            if let Some(n) = chars.next() {
                                if n == '\n' {
                                    line += 1;
                                }
                                match n {
                                    '"' | '\'' | '\\' => word.push(n),
                                    'n' => word.push('\n'),
                                    't' => word.push('\t'),
                                    'r' => word.push('\r'),
                                    other => {
                                        word.push('\\');
                                        word.push(other);
                                    }
                                }
                            }
                        }
                        Some(q) if q == quote => break,
                        Some(ch) => {
                            if ch == '\n' {
                                line += 1;
                            }
                            word.push(ch);
                        }
                    }
                }
                out.push(Token::Word(word, start));
            }
            _ => {
                let mut word = String::new();
                while let Some(&ch) = chars.peek() {
                    // A quote inside a word is a letter of it (nginx starts a quoted string
                    // only at a word's start: `it's` is one word; the review of issue 53 found
                    // `add_header X it's; deny all;` swallowing the `deny`).
                    if ch.is_whitespace() || matches!(ch, ';' | '{' | '}') {
                        // `${var}` keeps its braces inside a word.
                        if ch == '{' && word.ends_with('$') {
                            word.push(ch);
                            chars.next();
                            continue;
                        }
                        if ch == '}' && word.contains("${") && !word.ends_with('}') {
                            word.push(ch);
                            chars.next();
                            continue;
                        }
                        break;
                    }
                    if ch == '#' && word.is_empty() {
                        break;
                    }
                    word.push(ch);
                    chars.next();
                }
                out.push(Token::Word(word, line));
            }
        }
    }
    Ok(out)
}

/// The directives of one block. Errors name the file and line, never a word of the file: an
/// `include` may name a file that is not a configuration (`/etc/shadow`), whose text must not
/// reach the terminal or a CI log through an error.
fn block(
    tokens: &[Token],
    pos: &mut usize,
    file: &std::sync::Arc<PathBuf>,
    depth: usize,
    budget: &mut Budget,
) -> Result<Vec<Directive>, String> {
    let nested = depth > 0;
    if depth > MAX_NESTING {
        return Err(format!("{}: blocks nested too deep", file.display()));
    }
    let mut out = Vec::new();
    let at = |line: usize| format!("{}:{line}", file.display());
    loop {
        let Some(t) = tokens.get(*pos) else {
            if nested {
                return Err(format!("{}: a block is not closed", file.display()));
            }
            return Ok(out);
        };
        match t {
            Token::Close(line) => {
                if !nested {
                    return Err(format!("{}: unexpected }}", at(*line)));
                }
                *pos += 1;
                return Ok(out);
            }
            Token::Semi(line) | Token::Open(line) => {
                return Err(format!("{}: a directive needs a name", at(*line)));
            }
            Token::Word(name, line) => {
                let (name, line) = (name.clone(), *line);
                *pos += 1;
                if budget.directives == 0 {
                    return Err(format!(
                        "{}: more than {MAX_DIRECTIVES} directives after includes",
                        at(line)
                    ));
                }
                budget.directives -= 1;
                let mut args = Vec::new();
                loop {
                    match tokens.get(*pos) {
                        Some(Token::Word(w, _)) => {
                            args.push(w.clone());
                            *pos += 1;
                        }
                        Some(Token::Semi(_)) => {
                            *pos += 1;
                            out.push(Directive {
                                name,
                                args,
                                block: None,
                                file: file.clone(),
                                line,
                            });
                            break;
                        }
                        Some(Token::Open(_)) => {
                            *pos += 1;
                            let inner = block(tokens, pos, file, depth + 1, budget)?;
                            out.push(Directive {
                                name,
                                args,
                                block: Some(inner),
                                file: file.clone(),
                                line,
                            });
                            break;
                        }
                        Some(Token::Close(l)) => {
                            return Err(format!(
                                "{}: the directive of line {line} is not ended by ;",
                                at(*l)
                            ));
                        }
                        None => return Err(format!("{}: a directive is not ended by ;", at(line))),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_blocks_quotes_comments_and_includes() {
        let dir = std::env::temp_dir().join(format!("weir-ngx-parse-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("conf.d")).unwrap();
        std::fs::write(dir.join("conf.d/a.conf"), "server { listen 81; }\n").unwrap();
        std::fs::write(dir.join("conf.d/b.conf"), "server { listen 82; }\n").unwrap();
        std::fs::write(
            dir.join("nginx.conf"),
            "# top\nevents {}\nhttp {\n  log_format x '$remote_addr \"q\"';\n  include conf.d/*.conf;\n  server { return 200 \"a;b\"; } # end\n}\n",
        )
        .unwrap();
        let d = parse_file(&dir.join("nginx.conf")).unwrap();
        assert_eq!(d[0].name, "events");
        let http = &d[1];
        assert_eq!(http.line, 3);
        let kids = http.children();
        assert_eq!(kids[0].args, ["x", "$remote_addr \"q\""]);
        assert_eq!(kids[1].children()[0].args, ["81"]);
        assert!(kids[1].file.ends_with("conf.d/a.conf"));
        assert_eq!(kids[2].children()[0].args, ["82"]);
        assert_eq!(kids[3].children()[0].args, ["200", "a;b"]);
        assert_eq!(kids[3].line, 6);
        // A quote inside a word is part of it, as nginx reads it: the `deny` is not swallowed.
        std::fs::write(
            dir.join("q.conf"),
            "location / { add_header X-A it's; deny all; add_header X-B it's; }\n",
        )
        .unwrap();
        let q = parse_file(&dir.join("q.conf")).unwrap();
        let names: Vec<&str> = q[0].children().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["add_header", "deny", "add_header"]);
        assert_eq!(q[0].children()[0].args, ["X-A", "it's"]);
        for bad in ["http {", "server }", "listen 80", "{ }"] {
            std::fs::write(dir.join("bad.conf"), bad).unwrap();
            assert!(parse_file(&dir.join("bad.conf")).is_err(), "{bad}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 52: a file that includes the next one eight times, eight levels deep, would be
    /// 16 million reads; the import stops at the bound, at once, with a clear error.
    #[test]
    fn include_fan_out_is_bounded() {
        let dir = std::env::temp_dir().join(format!("weir-ngx-fan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for level in 0..8 {
            let next = format!("include l{}.conf;\n", level + 1).repeat(8);
            std::fs::write(dir.join(format!("l{level}.conf")), next).unwrap();
        }
        std::fs::write(dir.join("l8.conf"), "gzip on;\n").unwrap();
        let started = std::time::Instant::now();
        let err = parse_file(&dir.join("l0.conf")).unwrap_err();
        assert!(err.contains("more than 1024 files"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// nginx's parameter files, where a machine has none: what Debian ships, as directives.
    #[test]
    fn the_standard_fastcgi_files_are_known() {
        let names = |file: &str| {
            let (_, text) = builtin(file).unwrap();
            let tokens = tokenize(&text).unwrap();
            let mut budget = Budget {
                files: 1,
                directives: 1000,
            };
            let list = block(
                &tokens,
                &mut 0,
                &std::sync::Arc::new("x".into()),
                0,
                &mut budget,
            );
            list.unwrap()
                .iter()
                .map(|d| format!("{} {}", d.name, d.args.join(" ")))
                .collect::<Vec<_>>()
        };
        let params = names("fastcgi_params");
        assert!(params.contains(&"fastcgi_param HTTPS $https if_not_empty".to_string()));
        assert!(!params.iter().any(|p| p.contains("SCRIPT_FILENAME")));
        let conf = names("/etc/nginx/fastcgi.conf");
        assert_eq!(
            conf[0],
            "fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name"
        );
        let php = names("snippets/fastcgi-php.conf");
        assert_eq!(php[0], r"fastcgi_split_path_info ^(.+?\.php)(/.*)$");
        assert_eq!(php.last().unwrap(), "include fastcgi.conf");
        assert!(builtin("mime.types").is_none());
    }

    /// An included file that is not a configuration fails without its text in the error.
    #[test]
    fn errors_never_echo_an_included_file_s_words() {
        let dir = std::env::temp_dir().join(format!("weir-ngx-echo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("shadow"),
            "root:$6$Secret.Hash$abc:19000:0:99999:7:::\ndaemon:*:19000\n",
        )
        .unwrap();
        std::fs::write(dir.join("brace"), "password hunter2 }\n").unwrap();
        for inc in ["shadow", "brace"] {
            std::fs::write(
                dir.join("nginx.conf"),
                format!("http {{ include {}; }}\n", dir.join(inc).display()),
            )
            .unwrap();
            let err = parse_file(&dir.join("nginx.conf")).unwrap_err();
            for word in ["Secret", "root:", "daemon", "hunter2", "password"] {
                assert!(!err.contains(word), "{inc}: {err}");
            }
            assert!(err.contains(inc), "names the file: {err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
