//! `maps:`: variables whose value is chosen by another value, as nginx's `map` (`map
//! $http_upgrade $connection_upgrade { default upgrade; '' close; }`). Each map names a
//! variable (`$connection_upgrade`) usable wherever variables are (header edits, redirects,
//! `respond`, rate-limit keys); its value is the first that matches the rendered `from`: an
//! exact value, then the longest prefix, then the regexes in order (whose captures `$1`..`$9`
//! its value may use), else `default`.
//!
//! A map sees the maps defined before it (so a map can key on another), never itself or one
//! after it: no cycles. While a config compiles, its maps are installed for this thread
//! ([`Installed`]); [`super::variable`] finds them by name.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use super::{scan, variable, Env, Piece, Template, Var};
use crate::config::{model, CompileError};

/// A compiled map.
#[derive(Debug)]
pub struct Map {
    pub name: String,
    from: Template,
    exact: HashMap<Vec<u8>, Vec<Piece<Var>>>,
    /// Longest first.
    prefix: Vec<(Vec<u8>, Vec<Piece<Var>>)>,
    regex: Vec<(regex::bytes::Regex, Vec<Piece<Var>>)>,
    default: Vec<Piece<Var>>,
}

impl PartialEq for Map {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Map {}

thread_local! {
    static INSTALLED: RefCell<Vec<Arc<Map>>> = const { RefCell::new(Vec::new()) };
}

/// The maps of a config being compiled, known by name on this thread until dropped.
#[derive(Debug)]
pub struct Installed(());

impl Drop for Installed {
    fn drop(&mut self) {
        INSTALLED.with_borrow_mut(Vec::clear);
    }
}

/// The installed map called `name`.
pub(super) fn lookup(name: &str) -> Option<Arc<Map>> {
    INSTALLED.with_borrow(|m| m.iter().find(|m| m.name == name).cloned())
}

/// A route's `set` variables, known while the route compiles (dropped after it).
#[derive(Debug)]
pub struct Scoped(usize);

impl Drop for Scoped {
    fn drop(&mut self) {
        INSTALLED.with_borrow_mut(|m| m.truncate(self.0));
    }
}

/// Installs a route's `set:` (nginx's `set $name value;`) in order, each seeing those before
/// it, until the returned guard is dropped: a variable whose value is always `value` rendered
/// for the request (a map with a default only).
pub(crate) fn scope(set: &serde_yaml::Mapping, path: &str) -> Result<Scoped, CompileError> {
    let before = INSTALLED.with_borrow(Vec::len);
    let guard = Scoped(before);
    for (k, v) in set {
        let value = match v {
            serde_yaml::Value::String(t) => t.clone(),
            serde_yaml::Value::Number(n) => n.to_string(),
            serde_yaml::Value::Bool(b) => b.to_string(),
            _ => String::new(),
        };
        let Some(name) = k.as_str().filter(|_| !v.is_mapping() && !v.is_sequence()) else {
            return Err((
                format!("{path}.set"),
                "each entry is `name: value` (a value with variables)".into(),
            ));
        };
        let def = model::MapDef {
            name: name.to_string(),
            from: String::new(),
            exact: Default::default(),
            prefix: Default::default(),
            regex: Vec::new(),
            default: value,
        };
        let compiled = Map::compile(&def, &format!("{path}.set"))
            .map_err(|(key, m)| (key.replace(".set.default", &format!(".set.{name}")), m))?;
        INSTALLED.with_borrow_mut(|all| all.push(Arc::new(compiled)));
    }
    Ok(guard)
}

/// Compiles `maps` in order (each seeing those before it) and installs them for the rest of
/// this config's compilation.
pub(crate) fn install(maps: &[model::MapDef]) -> Result<Installed, CompileError> {
    INSTALLED.with_borrow_mut(Vec::clear);
    let guard = Installed(());
    for (i, m) in maps.iter().enumerate() {
        let compiled = Map::compile(m, &format!("maps[{i}]"))?;
        INSTALLED.with_borrow_mut(|all| all.push(Arc::new(compiled)));
    }
    Ok(guard)
}

impl Map {
    fn compile(m: &model::MapDef, path: &str) -> Result<Map, CompileError> {
        let bad = |key: &str, msg: String| (format!("{path}.{key}"), msg);
        let name = m.name.as_str();
        let shaped = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !shaped {
            return Err(bad(
                "name",
                format!("{name:?}: lowercase letters, digits and _"),
            ));
        }
        if lookup(name).is_some() || variable(name).is_ok() {
            return Err(bad(
                "name",
                format!("${name} is already a variable: give the map another name"),
            ));
        }
        let from = Template::parse(&m.from).map_err(|e| bad("from", e))?;
        let value = |key: &str,
                     v: &str,
                     captures: usize|
         -> Result<Vec<Piece<Var>>, CompileError> {
            let pieces = scan(v, variable).map_err(|e| bad(key, e))?;
            for p in &pieces {
                if let Piece::Var(Var::Capture(n)) = p {
                    if *n > captures {
                        return Err(bad(
                            key,
                            format!("${n}: only a regex's value has captures, and this one has {captures}"),
                        ));
                    }
                }
            }
            Ok(pieces)
        };
        let mut exact = HashMap::new();
        for (k, v) in &m.exact {
            exact.insert(k.as_bytes().to_vec(), value(&format!("exact.{k}"), v, 0)?);
        }
        let mut prefix = Vec::new();
        for (k, v) in &m.prefix {
            prefix.push((k.as_bytes().to_vec(), value(&format!("prefix.{k}"), v, 0)?));
        }
        prefix.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        let mut regex = Vec::new();
        for (j, r) in m.regex.iter().enumerate() {
            // Bytes and ASCII classes, as nginx's PCRE (`\d` is 0-9 only, `(?i)` ASCII only).
            let re = regex::bytes::RegexBuilder::new(&r.pattern)
                .unicode(false)
                .build()
                .map_err(|e| bad(&format!("regex[{j}].pattern"), e.to_string()))?;
            let v = value(
                &format!("regex[{j}].value"),
                &r.value,
                re.captures_len() - 1,
            )?;
            regex.push((re, v));
        }
        Ok(Map {
            name: name.to_string(),
            from,
            exact,
            prefix,
            regex,
            default: value("default", &m.default, 0)?,
        })
    }

    /// Appends the map's value for `env` to `out`.
    pub fn render(&self, env: &Env<'_>, out: &mut Vec<u8>) {
        let key = self.from.to_vec(env);
        if let Some(v) = self.exact.get(&key) {
            return put(v, None, env, out);
        }
        if let Some((_, v)) = self.prefix.iter().find(|(p, _)| key.starts_with(p)) {
            return put(v, None, env, out);
        }
        for (re, v) in &self.regex {
            if let Some(c) = re.captures(&key) {
                return put(v, Some(&c), env, out);
            }
        }
        put(&self.default, None, env, out)
    }
}

fn put(
    pieces: &[Piece<Var>],
    caps: Option<&regex::bytes::Captures<'_>>,
    env: &Env<'_>,
    out: &mut Vec<u8>,
) {
    for p in pieces {
        match p {
            Piece::Text(t) => out.extend_from_slice(t),
            Piece::Var(Var::Capture(n)) => {
                if let Some(m) = caps.and_then(|c| c.get(*n)) {
                    out.extend_from_slice(m.as_bytes());
                }
            }
            Piece::Var(v) => super::value(v, env, out),
        }
    }
}
