//! nginx's `map` (http level) as weir's `maps:`: exact keys, `~regex` and `~*regex` entries
//! (captures usable in the value), `default`. The names it defines become variables the rest
//! of the import may use (`add_header Cache-Control "max-age=1$asset_immutable"`). The
//! WebSocket idiom `map $http_upgrade $connection_upgrade { default upgrade; '' close; }` is
//! dropped with a note: weir relays upgrades without it. `hostnames`, `include` in a map and
//! `volatile` are not translated (the map is left out, and its variable stays unknown).

use std::cell::RefCell;
use std::collections::BTreeSet;

use serde_yaml::Value;

use super::parse::Directive;
use super::{map, s, unknown_variable, Ctx};

thread_local! {
    /// The maps this import defined (the converting thread's), as variables it may use.
    static DEFINED: RefCell<BTreeSet<String>> = const { RefCell::new(BTreeSet::new()) };
}

/// Forgets the maps of an earlier conversion on this thread.
pub(super) fn reset() {
    DEFINED.with(|d| d.borrow_mut().clear());
}

/// Whether `name` is a map this import defined.
pub(super) fn defined(name: &str) -> bool {
    DEFINED.with(|d| d.borrow().contains(name))
}

/// `map $from $name { ... }`: the `maps:` entry, or `None` (listed).
pub(super) fn map_block(cx: &mut Ctx, d: &Directive) -> Option<Value> {
    let [from, name] = d.args.as_slice() else {
        cx.skip(d, "map takes a source and a $variable");
        return None;
    };
    let Some(name) = name.strip_prefix('$') else {
        cx.skip(d, "map's result is not a $variable");
        return None;
    };
    let entries = d.children();
    if from == "$http_upgrade" && name == "connection_upgrade" {
        cx.skip(
            d,
            "the WebSocket idiom is not needed: weir relays upgrades where the location sends Upgrade (`$connection_upgrade` is \"upgrade\", or \"close\" without one)",
        );
        // Still defined: `proxy_set_header Connection $connection_upgrade` uses it.
    }
    if let Some(v) = unknown_variable(from) {
        cx.skip(d, &format!("map source ${v} is not a weir variable"));
        return None;
    }
    let mut exact = Vec::new();
    let mut regex = Vec::new();
    let mut default = String::new();
    for e in entries {
        let value = match e.args.as_slice() {
            [v] => v.clone(),
            _ => {
                cx.skip(e, "a map entry is a key and one value (hostnames, include and volatile are not translated): the map is left out");
                return None;
            }
        };
        if let Some(v) = unknown_variable(&value).filter(|v| !v.bytes().all(|b| b.is_ascii_digit()))
        {
            cx.skip(
                e,
                &format!("${v} is not a weir variable: the map is left out"),
            );
            return None;
        }
        let key = e.name.as_str();
        if key == "default" {
            default = value;
        } else if let Some(re) = key.strip_prefix("~*") {
            regex.push(map(vec![
                ("pattern", s(&format!("(?i){re}"))),
                ("value", s(&value)),
            ]));
        } else if let Some(re) = key.strip_prefix('~') {
            regex.push(map(vec![("pattern", s(re)), ("value", s(&value))]));
        } else if matches!(key, "hostnames" | "include" | "volatile") {
            cx.skip(e, "not translated: the map is left out");
            return None;
        } else {
            // `\~` is a key that starts with `~`. nginx compares keys without regard to ASCII
            // case (it lower-cases both): weir's `exact` does not, so each is an anchored
            // case-blind regex, tried before the map's own regexes as nginx tries exact keys
            // first (the review of issue 53: `X-User: EVIL` missed `evil`).
            let key = key.strip_prefix('\\').unwrap_or(key);
            if from.contains("$uri")
                && !key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._~/".contains(c))
            {
                cx.skip(e, "a key of $uri with characters nginx compares decoded and weir encoded: the map is left out");
                return None;
            }
            exact.push(map(vec![
                ("pattern", s(&format!("(?i)^{}$", regex::escape(key)))),
                ("value", s(&value)),
            ]));
        }
    }
    exact.extend(regex);
    let regex = exact;
    for r in &regex {
        if let Some(p) = r.get("pattern").and_then(Value::as_str) {
            if let Err(e) = super::script::bytes_regex(p) {
                cx.skip(d, &format!("the regex {p:?}: {e}: the map is left out"));
                return None;
            }
        }
    }
    DEFINED.with(|d| d.borrow_mut().insert(name.to_string()));
    cx.done();
    let mut m = vec![("name", s(name)), ("from", s(from))];
    if !regex.is_empty() {
        m.push(("regex", Value::Sequence(regex)));
    }
    m.push(("default", s(&default)));
    Some(map(m))
}
