//! nginx's choice of a location, as weir's first-match route table.
//!
//! nginx: an exact (`=`) location that matches wins; else the longest matching prefix location
//! is found (nested prefix locations included); if it is `^~`, it wins; else the regexes
//! nested in it (and in the locations it is nested in, innermost first) are tried in order,
//! then the server's own regexes in order; the first that matches wins; else the prefix
//! location does.
//!
//! A table checked in order says that by giving each prefix location a group of its own,
//! longest prefix first, every route of the group restricted to that prefix: the nested
//! regexes, then the server's regexes (copied into each group, with the prefix added), then the
//! location's own routes. A request under several prefixes meets the longest one's group
//! first, as nginx would pick it. After the groups, the server's regexes alone serve paths no
//! prefix takes. (The review of issue 52 found the simpler ranking wrong twice: a regex nested
//! in `location /` answered before the longer `location /private/ { deny all; }`, and a plain
//! prefix under a `^~` one skipped the regexes that nginx tries for it.)

use serde_yaml::{Mapping, Value};

use super::location::Loc;
use super::s;

/// The routes of a server's locations (`(location, index in the server)`), in an order whose
/// first match is nginx's choice.
pub(super) fn ordered(locations: Vec<(Loc, usize)>) -> Vec<Value> {
    let mut exact = Vec::new();
    let mut prefixes: Vec<Loc> = Vec::new();
    let mut server_regexes: Vec<Value> = Vec::new();
    // Regexes nested in a prefix location, by that location's prefix, in order.
    let mut nested: Vec<(String, Vec<Value>)> = Vec::new();
    for (l, _) in locations {
        match (l.rank, &l.parent) {
            (0, _) => exact.extend(l.routes),
            (2, Some(parent)) => match nested.iter_mut().find(|(p, _)| p == parent) {
                Some((_, v)) => v.extend(l.routes),
                None => nested.push((parent.clone(), l.routes)),
            },
            (2, None) => server_regexes.extend(l.routes),
            _ => prefixes.push(l),
        }
    }
    // Longest first; among equal ones, the file's order (a stable sort).
    prefixes.sort_by(|a, b| {
        b.prefix
            .as_ref()
            .map_or(0, String::len)
            .cmp(&a.prefix.as_ref().map_or(0, String::len))
    });
    let parent_of = |p: &str| -> Option<String> {
        prefixes
            .iter()
            .find(|l| l.prefix.as_deref() == Some(p))
            .and_then(|l| l.parent.clone())
    };
    let mut out = exact;
    for l in &prefixes {
        let Some(prefix) = l.prefix.as_deref() else {
            out.extend(l.routes.iter().cloned());
            continue;
        };
        // The regexes nested in this location, then in the ones around it, innermost first.
        let mut at = Some(prefix.to_string());
        let mut seen = 0;
        while let Some(p) = at {
            if let Some((_, routes)) = nested.iter().find(|(n, _)| *n == p) {
                out.extend(routes.iter().filter_map(|r| restricted(r, prefix)));
            }
            at = parent_of(&p);
            seen += 1;
            if seen > 64 {
                break;
            }
        }
        if l.rank != 1 {
            out.extend(server_regexes.iter().filter_map(|r| restricted(r, prefix)));
        }
        // Its own routes too: a `rewrite`'s route matches by its regex alone.
        out.extend(l.routes.iter().filter_map(|r| restricted(r, prefix)));
    }
    out.extend(server_regexes);
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
