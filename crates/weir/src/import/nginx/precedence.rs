//! nginx's choice of a location, as weir's first-match route table.
//!
//! nginx (`ngx_http_core_find_location`): at the server's level, an exact (`=`) location that
//! matches wins; else the longest matching prefix location of that level is chosen, and the
//! lookup goes down into the locations nested in it, the same way, for as deep as they go.
//! Then, on the way back up, each level's regexes are tried in order (the regexes nested in a
//! location are that location's level), except at a level whose chosen location is `^~`; the
//! first that matches wins. Else the deepest prefix location chosen does.
//!
//! A table checked in order says that with one group of routes per prefix location, every
//! route of the group restricted to the location's prefix, emitted level by level: at each
//! level the locations longest first, each one's nested locations' groups before its own. A
//! request meets first the group of the deepest location nginx would choose: a longer sibling,
//! or a nested location, comes before. A location's group holds the regexes nested in it, then
//! those of each level above whose chosen location (the one on the way to it) is not `^~`, then
//! the server's regexes unless its top-level ancestor is `^~`, then its own routes. After the
//! groups, the server's regexes alone serve paths no prefix takes.
//!
//! The reviews of issue 52 found a simpler ranking wrong four times: a regex nested in
//! `location /` answered before the longer `location /private/ { deny all; }`; a plain prefix
//! under a `^~` one skipped the regexes nginx tries for it; a `^~` nested in a plain prefix
//! skipped the server's regexes (PHP source served); and a nested prefix beat a longer sibling
//! of its parent (`/a/ { /a/b/c/ }` against `/a/b/ { deny all; }`).

use serde_yaml::{Mapping, Value};

use super::location::Loc;
use super::s;

/// `^~` in [`Loc::rank`].
const NO_REGEX: u8 = 1;

/// What the table is built from: a server's locations, sorted by kind.
struct Tree {
    exact: Vec<Value>,
    prefixes: Vec<Loc>,
    server_regexes: Vec<Value>,
    /// Regexes nested in a prefix location, by its prefix, in order.
    nested: Vec<(String, Vec<Value>)>,
}

impl Tree {
    fn nested_in(&self, prefix: &str) -> &[Value] {
        self.nested
            .iter()
            .find(|(p, _)| p == prefix)
            .map_or(&[], |(_, r)| r.as_slice())
    }

    /// The prefix locations directly under `parent` (`None`: the server's level), longest
    /// first, in the file's order among equal ones.
    fn level(&self, parent: Option<&str>) -> Vec<&Loc> {
        let known = |p: &str| self.prefixes.iter().any(|l| l.prefix.as_deref() == Some(p));
        let mut level: Vec<&Loc> = self
            .prefixes
            .iter()
            .filter(|l| match (parent, l.parent.as_deref()) {
                (None, None) => true,
                // Nested in a location that is not a prefix one (a regex): at the top.
                (None, Some(p)) => !known(p),
                (Some(want), Some(p)) => p == want,
                (Some(_), None) => false,
            })
            .collect();
        level.sort_by(|a, b| {
            b.prefix
                .as_ref()
                .map_or(0, String::len)
                .cmp(&a.prefix.as_ref().map_or(0, String::len))
        });
        level
    }

    /// The groups of the locations of one level under `chain` (the locations chosen above it,
    /// from the top), deepest first.
    fn emit<'a>(&'a self, parent: Option<&str>, chain: &mut Vec<&'a Loc>, out: &mut Vec<Value>) {
        for l in self.level(parent) {
            let Some(prefix) = l.prefix.as_deref() else {
                out.extend(l.routes.iter().cloned());
                continue;
            };
            chain.push(l);
            self.emit(Some(prefix), chain, out);
            // Its own nested regexes (no location below it was chosen), then those of each
            // level above, unless the location chosen below that level is `^~`.
            out.extend(
                self.nested_in(prefix)
                    .iter()
                    .filter_map(|r| restricted(r, prefix)),
            );
            for i in (0..chain.len() - 1).rev() {
                if chain[i + 1].rank != NO_REGEX {
                    if let Some(p) = chain[i].prefix.as_deref() {
                        out.extend(
                            self.nested_in(p)
                                .iter()
                                .filter_map(|r| restricted(r, prefix)),
                        );
                    }
                }
            }
            if chain[0].rank != NO_REGEX {
                out.extend(
                    self.server_regexes
                        .iter()
                        .filter_map(|r| restricted(r, prefix)),
                );
            }
            // Its own routes too: a `rewrite`'s route matches by its regex alone.
            out.extend(l.routes.iter().filter_map(|r| restricted(r, prefix)));
            chain.pop();
        }
    }
}

/// The routes of a server's locations (`(location, index in the server)`), in an order whose
/// first match is nginx's choice.
pub(super) fn ordered(locations: Vec<(Loc, usize)>) -> Vec<Value> {
    let mut tree = Tree {
        exact: Vec::new(),
        prefixes: Vec::new(),
        server_regexes: Vec::new(),
        nested: Vec::new(),
    };
    for (l, _) in locations {
        match (l.rank, &l.parent) {
            (0, _) => tree.exact.extend(l.routes),
            (2, Some(parent)) => match tree.nested.iter_mut().find(|(p, _)| p == parent) {
                Some((_, v)) => v.extend(l.routes),
                None => tree.nested.push((parent.clone(), l.routes)),
            },
            (2, None) => tree.server_regexes.extend(l.routes),
            _ => tree.prefixes.push(l),
        }
    }
    let mut out = std::mem::take(&mut tree.exact);
    tree.emit(None, &mut Vec::new(), &mut out);
    out.extend(tree.server_regexes.iter().cloned());
    out
}

/// `route` limited to paths under `prefix`: `None` when it cannot match any (its own prefix
/// is elsewhere).
fn restricted(route: &Value, prefix: &str) -> Option<Value> {
    let mut r = route.clone();
    let Value::Mapping(m) = &mut r else {
        return Some(r);
    };
    let matcher = m
        .entry(s("match"))
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    let Value::Mapping(mm) = matcher else {
        return None;
    };
    if let Some(path) = mm.get(s("path")).and_then(Value::as_str) {
        return path.starts_with(prefix).then_some(r.clone());
    }
    let own = mm
        .get(s("path_prefix"))
        .and_then(Value::as_str)
        .map(String::from);
    match own {
        Some(p) if p.starts_with(prefix) => {}
        Some(p) if prefix.starts_with(p.as_str()) => {
            mm.insert(s("path_prefix"), s(prefix));
        }
        Some(_) => return None,
        None => {
            mm.insert(s("path_prefix"), s(prefix));
        }
    }
    Some(r)
}
