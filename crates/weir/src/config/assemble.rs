//! One config from several texts: the main file, the files it `include:`s (a file, or every
//! `*.yaml` / `*.yml` of a directory in name order: a `conf.d`), and fragments from a config
//! source such as etcd. Each text is interpolated and checked on its own first, so a mistake in
//! one is reported at its own file, line and key; then they are merged as YAML values:
//!
//! * named sections (`upstreams`, `cache_zones`, `kv_stores`, `filters`): entries are added by
//!   name;
//! * `listeners`: a listener whose `address` is new is added; one whose `address` is already
//!   defined adds its `routes` to that listener (a route whose `name` is already there replaces
//!   it in place), and may set nothing else;
//! * any other key (`workers`, `admin`, `log`, `cache`…) is set once.
//!
//! Defining the same name or key twice is an error naming both places, except in a fragment
//! marked `overrides` (etcd's: the dynamic layer exists to change what the files say), where the
//! later one wins. The merged value is deserialized again, and an error found there or while
//! compiling is mapped back to the text the offending part came from ([`Locator`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

use super::locate::LineIndex;
use super::{interpolate, model, ConfigError};

/// One text merged into a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    /// Where it came from, for errors: a file path or an etcd key.
    pub name: String,
    pub text: String,
    /// It may redefine what earlier texts define (etcd's fragments).
    pub overrides: bool,
}

/// Maps a key path of the merged config to the text it came from and its line there.
#[derive(Debug, Default)]
pub struct Locator {
    /// Each text's name (`None`: the main one, named by the caller) and line index.
    sources: Vec<(Option<String>, LineIndex)>,
    /// (merged path prefix, source, that prefix's path in the source), latest last.
    map: Vec<(String, usize, String)>,
}

impl Locator {
    /// A locator for one text.
    pub fn single(index: LineIndex) -> Locator {
        Locator {
            sources: vec![(None, index)],
            map: Vec::new(),
        }
    }

    /// The text `path` came from (`None`: the main one) and its line there.
    pub fn locate(&self, path: &str) -> (Option<&str>, Option<usize>) {
        let within = |prefix: &str| {
            path.strip_prefix(prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
        };
        let best = self
            .map
            .iter()
            .rev()
            .filter(|(p, ..)| within(p))
            .max_by_key(|(p, ..)| p.len());
        let (src, local) = match best {
            Some((p, src, there)) => (*src, format!("{there}{}", &path[p.len()..])),
            None => (0, path.to_string()),
        };
        match self.sources.get(src) {
            Some((name, index)) => (name.as_deref(), index.line_of(&local)),
            None => (None, None),
        }
    }

    /// A compile error `(path, message)`, located.
    pub(crate) fn error(&self, (path, message): super::CompileError) -> ConfigError {
        let (file, line) = self.locate(&path);
        ConfigError {
            file: file.map(str::to_string),
            line,
            path: Some(path),
            message,
        }
    }
}

/// What reading a main file and its includes found.
#[derive(Debug)]
pub struct Included {
    pub fragments: Vec<Fragment>,
    /// The directories to watch for changes: the main file's and each included one's.
    pub dirs: Vec<PathBuf>,
}

/// Reads the files `include` names (relative to `base`), for the main file `main`.
pub fn read_includes(
    include: &[String],
    base: &Path,
    main: &LineIndex,
) -> Result<Included, ConfigError> {
    let mut out = Included {
        fragments: Vec::new(),
        dirs: vec![base.to_path_buf()],
    };
    for (i, entry) in include.iter().enumerate() {
        let at = |message: String| ConfigError {
            file: None,
            line: main.line_of(&format!("include[{i}]")),
            path: Some(format!("include[{i}]")),
            message,
        };
        let path = base.join(entry);
        let meta = std::fs::metadata(&path)
            .map_err(|e| at(format!("cannot read {}: {e}", path.display())))?;
        let files = if meta.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&path)
                .map_err(|e| at(format!("cannot list {}: {e}", path.display())))?
                .filter_map(|d| d.ok().map(|d| d.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect();
            files.sort();
            out.dirs.push(path.clone());
            files
        } else {
            if let Some(dir) = path.parent() {
                out.dirs.push(dir.to_path_buf());
            }
            vec![path]
        };
        for f in files {
            let text = std::fs::read_to_string(&f)
                .map_err(|e| at(format!("cannot read {}: {e}", f.display())))?;
            out.fragments.push(Fragment {
                name: f.display().to_string(),
                text,
                overrides: false,
            });
        }
    }
    out.dirs.sort();
    out.dirs.dedup();
    Ok(out)
}

/// The merged config: its model, where each part came from, and the env values used.
#[derive(Debug)]
pub struct Assembled {
    pub file: model::File,
    pub locator: Locator,
    pub secrets: interpolate::Secrets,
    /// The merged text (`weir check --print`).
    pub text: String,
}

/// Merges `main` (already interpolated, its line index built) with `fragments` (raw).
pub fn assemble(
    main: (&str, LineIndex),
    fragments: &[Fragment],
    env: impl Fn(&str) -> Option<String>,
    mut secrets: interpolate::Secrets,
) -> Result<Assembled, ConfigError> {
    let mut locator = Locator::single(main.1);
    let mut merged = parse_mapping(main.0).map_err(|e| secrets.redact(e))?;
    merged.remove("include");
    let mut owners: HashMap<String, usize> = HashMap::new();
    for (key, value) in &merged {
        let Some(key) = key.as_str() else { continue };
        owners.insert(key.to_string(), 0);
        // The main file's named entries are its own too: a fragment defining `upstreams.X`
        // again is the error the module says, not a silent replacement (it was: a Kubernetes
        // Service named like an operator's upstream took its traffic, the second attack review
        // of issue 56).
        if NAMED.contains(&key) {
            for name in value.as_mapping().into_iter().flat_map(|m| m.keys()) {
                if let Some(n) = name.as_str() {
                    owners.insert(format!("{key}.{n}"), 0);
                }
            }
        }
    }
    for f in fragments {
        let named = |mut e: ConfigError| {
            e.file = Some(f.name.clone());
            e
        };
        let (text, s) = interpolate::interpolate_tracked(&f.text, &env).map_err(named)?;
        secrets.extend(s);
        // Checked alone first: a misspelt key is reported at its own file and line.
        super::load_str_partial(&text).map_err(|e| named(secrets.redact(e)))?;
        let src = locator.sources.len();
        locator
            .sources
            .push((Some(f.name.clone()), LineIndex::build(&text)));
        let mapping = parse_mapping(&text).map_err(named)?;
        let mut m = Merge {
            into: &mut merged,
            map: &mut locator.map,
            owners: &mut owners,
            src,
            fragment: f,
            names: fragments,
        };
        m.merge(mapping).map_err(|mut e| {
            e.line = e
                .path
                .as_deref()
                .and_then(|p| locator.sources[src].1.line_of(p));
            named(secrets.redact(e))
        })?;
    }
    let text = serde_yaml::to_string(&Value::Mapping(merged)).map_err(|e| ConfigError {
        file: None,
        line: None,
        path: None,
        message: format!("cannot merge the config's texts: {e}"),
    })?;
    let file: model::File = super::deserialize(&text).map_err(|e| {
        let located = match &e.path {
            Some(p) => {
                let (f, line) = locator.locate(p);
                ConfigError {
                    file: f.map(str::to_string),
                    line,
                    ..e
                }
            }
            None => e,
        };
        secrets.redact(located)
    })?;
    Ok(Assembled {
        file,
        locator,
        secrets,
        text,
    })
}

fn parse_mapping(text: &str) -> Result<Mapping, ConfigError> {
    match serde_yaml::from_str::<Value>(text) {
        Ok(Value::Mapping(m)) => Ok(m),
        Ok(Value::Null) => Ok(Mapping::new()),
        Ok(_) => Err(ConfigError {
            file: None,
            line: Some(1),
            path: None,
            message: "a config text must be a mapping of keys".into(),
        }),
        Err(e) => Err(ConfigError {
            file: None,
            line: e.location().map(|l| l.line()),
            path: None,
            message: super::strip_location(&e.to_string()),
        }),
    }
}

/// Sections whose entries are merged by name.
const NAMED: [&str; 4] = ["upstreams", "cache_zones", "kv_stores", "filters"];

struct Merge<'a> {
    into: &'a mut Mapping,
    map: &'a mut Vec<(String, usize, String)>,
    /// Which source set each merged path (0: the main text).
    owners: &'a mut HashMap<String, usize>,
    src: usize,
    fragment: &'a Fragment,
    names: &'a [Fragment],
}

impl Merge<'_> {
    fn error(&self, path: &str, message: String) -> ConfigError {
        ConfigError {
            file: None,
            line: None,
            path: Some(path.to_string()),
            message,
        }
    }

    /// Records that `merged` now comes from this source's `local`, or refuses a second
    /// definition.
    fn claim(&mut self, merged: String, local: String) -> Result<(), ConfigError> {
        if let Some(prev) = self.owners.get(&merged) {
            if !self.fragment.overrides {
                let other = match prev {
                    0 => "the main config file".to_string(),
                    n => self
                        .names
                        .get(n - 1)
                        .map_or("another text".into(), |f| f.name.clone()),
                };
                return Err(self.error(&local, format!("already defined in {other}")));
            }
        }
        self.owners.insert(merged.clone(), self.src);
        self.map.push((merged, self.src, local));
        Ok(())
    }

    fn merge(&mut self, mapping: Mapping) -> Result<(), ConfigError> {
        for (k, v) in mapping {
            let Some(key) = k.as_str().map(str::to_string) else {
                return Err(self.error("", "keys must be strings".into()));
            };
            match key.as_str() {
                "include" => {
                    return Err(self.error(
                        "include",
                        "only the main config file may include others".into(),
                    ))
                }
                "listeners" => self.listeners(v)?,
                k if NAMED.contains(&k) => {
                    let Value::Mapping(entries) = v else { continue };
                    for (name, item) in entries {
                        let n = name.as_str().unwrap_or_default().to_string();
                        self.claim(format!("{key}.{n}"), format!("{key}.{n}"))?;
                        let section = self
                            .into
                            .entry(Value::from(key.as_str()))
                            .or_insert_with(|| Value::Mapping(Mapping::new()));
                        if let Value::Mapping(s) = section {
                            s.insert(name, item);
                        }
                    }
                }
                _ => {
                    self.claim(key.clone(), key.clone())?;
                    self.into.insert(Value::from(key.as_str()), v);
                }
            }
        }
        Ok(())
    }

    fn listeners(&mut self, v: Value) -> Result<(), ConfigError> {
        let Value::Sequence(list) = v else {
            return Ok(());
        };
        for (j, l) in list.into_iter().enumerate() {
            let here = format!("listeners[{j}]");
            let all = self
                .into
                .entry(Value::from("listeners"))
                .or_insert_with(|| Value::Sequence(Vec::new()));
            let Value::Sequence(all) = all else {
                return Err(self.error("listeners", "must be a list".into()));
            };
            let address = l.get("address").cloned();
            let existing = all
                .iter()
                .position(|x| x.get("address") == address.as_ref());
            let Some(i) = existing.filter(|_| address.is_some()) else {
                let i = all.len();
                all.push(l);
                self.owners.insert(format!("listeners[{i}]"), self.src);
                self.map.push((format!("listeners[{i}]"), self.src, here));
                continue;
            };
            let Value::Mapping(lm) = l else { continue };
            if let Some(k) = lm
                .keys()
                .filter_map(Value::as_str)
                .find(|k| *k != "address" && *k != "routes")
            {
                return Err(self.error(
                    &format!("{here}.{k}"),
                    "this listener is defined in another text: a later one may add or replace its routes only".into(),
                ));
            }
            let routes = match lm.get("routes") {
                Some(Value::Sequence(r)) => r.clone(),
                _ => Vec::new(),
            };
            for (n, r) in routes.into_iter().enumerate() {
                let local = format!("{here}.routes[{n}]");
                let target = &mut all[i];
                let slot = target
                    .as_mapping_mut()
                    .map(|m| {
                        m.entry(Value::from("routes"))
                            .or_insert_with(|| Value::Sequence(Vec::new()))
                    })
                    .and_then(Value::as_sequence_mut);
                let Some(existing_routes) = slot else {
                    continue;
                };
                let name = r.get("name").cloned();
                let at = name.as_ref().and_then(|nm| {
                    existing_routes
                        .iter()
                        .position(|x| x.get("name") == Some(nm))
                });
                let r_i = match at {
                    Some(r_i) => {
                        existing_routes[r_i] = r;
                        r_i
                    }
                    None => {
                        existing_routes.push(r);
                        existing_routes.len() - 1
                    }
                };
                let merged = format!("listeners[{i}].routes[{r_i}]");
                // A route of the same name: replaced only by an overriding fragment.
                if at.is_some() && !self.fragment.overrides {
                    {
                        return Err(self.error(
                            &format!("{local}.name"),
                            "a route of this name is already defined on this listener".into(),
                        ));
                    }
                }
                self.owners.insert(merged.clone(), self.src);
                self.map.push((merged, self.src, local));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frag(name: &str, text: &str, overrides: bool) -> Fragment {
        Fragment {
            name: name.into(),
            text: text.into(),
            overrides,
        }
    }

    fn run(main: &str, frags: &[Fragment]) -> Result<Assembled, ConfigError> {
        assemble(
            (main, LineIndex::build(main)),
            frags,
            |_| None,
            Default::default(),
        )
    }

    const MAIN: &str = "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - name: a\n        respond: {body: a}\n";

    #[test]
    fn fragments_add_routes_upstreams_and_listeners() {
        let a = run(
            MAIN,
            &[frag(
                "conf.d/x.yaml",
                "upstreams: {o: {servers: ['127.0.0.1:9']}}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - name: b\n        respond: {body: b}\n  - address: 127.0.0.2:0\n    routes: []\n",
                false,
            )],
        )
        .unwrap();
        assert_eq!(a.file.listeners.len(), 2);
        assert_eq!(a.file.listeners[0].routes.len(), 2);
        assert!(a.file.upstreams.contains_key("o"));
        assert_eq!(
            a.locator.locate("listeners[0].routes[1].respond"),
            (Some("conf.d/x.yaml"), Some(6))
        );
        assert_eq!(
            a.locator.locate("listeners[0].routes[0].respond"),
            (None, Some(5))
        );
        assert_eq!(
            a.locator.locate("upstreams.o.servers[0]"),
            (Some("conf.d/x.yaml"), Some(1))
        );
    }

    #[test]
    fn the_main_file_s_named_entries_are_not_replaced_by_a_fragment() {
        let main = "upstreams:\n  api.v1.80: {servers: ['127.0.0.1:9']}\nlisteners: []\n";
        let Err(e) = run(
            main,
            &[frag(
                "kubernetes",
                "upstreams:\n  api.v1.80: {servers: ['10.0.0.1:80']}\n",
                false,
            )],
        ) else {
            panic!("a second upstreams.api.v1.80 was taken");
        };
        assert!(
            e.to_string()
                .contains("already defined in the main config file"),
            "{e}"
        );
        // A fragment that overrides (etcd's) may.
        let a = run(
            main,
            &[frag(
                "etcd",
                "upstreams:\n  api.v1.80: {servers: ['10.0.0.1:80']}\n",
                true,
            )],
        )
        .unwrap();
        assert!(a.file.upstreams.contains_key("api.v1.80"));
    }

    #[test]
    fn a_second_definition_is_an_error_unless_the_fragment_overrides() {
        let twice = frag(
            "b.yaml",
            "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - name: a\n        respond: {body: b}\n",
            false,
        );
        let e = run(MAIN, std::slice::from_ref(&twice)).unwrap_err();
        assert_eq!(e.file.as_deref(), Some("b.yaml"), "{e}");
        assert!(e.message.contains("already defined"), "{e}");
        let over = Fragment {
            overrides: true,
            ..twice
        };
        let a = run(MAIN, &[over]).unwrap();
        assert_eq!(a.file.listeners[0].routes.len(), 1, "replaced in place");
        let e = run(
            "workers: 1\nlisteners: []\n",
            &[frag("w.yaml", "workers: 2\n", false)],
        )
        .unwrap_err();
        assert!(e.to_string().contains("w.yaml"), "{e}");
        assert!(e.message.contains("main config file"), "{e}");
    }

    #[test]
    fn a_bad_fragment_is_reported_at_its_own_line() {
        let e = run(
            MAIN,
            &[frag(
                "bad.yaml",
                "upstreams:\n  o:\n    servrs: []\n",
                false,
            )],
        )
        .unwrap_err();
        assert_eq!(
            (e.file.as_deref(), e.line),
            (Some("bad.yaml"), Some(3)),
            "{e}"
        );
        let e = run(
            MAIN,
            &[frag(
                "l.yaml",
                "listeners:\n  - address: 127.0.0.1:0\n    h2c: true\n",
                false,
            )],
        )
        .unwrap_err();
        assert!(e.message.contains("add or replace its routes only"), "{e}");
    }
}
