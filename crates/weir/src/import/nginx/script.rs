//! A location's rewrite-module script (`set`, `if`, `return`, `rewrite ... permanent|redirect`,
//! `break`) as routes: nginx runs these directives in order before the content phase, and the
//! import runs them once per way through the `if`s, symbolically. Each way is a list of
//! conditions on request values (`match.vars`: `$http_x_forwarded_proto: "!https"`) and ends
//! either in an answer (a route of its own, before the location's) or in the location's
//! content, with the values its `set`s left (the route's `set:`). Conditions on values only
//! `set`s made (`if ($redirect = "111")`) are decided here, per way, so the common idiom of
//! flags built up by several `if`s becomes one route per combination that answers.
//!
//! What this cannot say refuses (the caller makes the location answer 503): file tests
//! (`-f`, `-d`), internal rewrites (`last`, `break`, none), regex captures used later, more
//! than 32 ways, directives other than the five inside an `if`, unknown variables.

use serde_yaml::{Mapping, Value};

use super::actions::return_action;
use super::parse::Directive;
use super::{map, s, unknown_variable, Ctx};

/// The most ways through a script the import writes out.
const MAX_WAYS: usize = 32;

/// The directives that make a location's script.
pub(super) fn is_script(name: &str) -> bool {
    matches!(name, "set" | "if" | "return" | "rewrite" | "break")
}

/// What a script became.
#[derive(Debug, Default)]
pub(super) struct Scripted {
    /// Routes before the location's own, each with `match: { vars }` (the caller adds the
    /// location's match) or, for a `rewrite`, its `path_regex`.
    pub(super) before: Vec<Value>,
    /// The location's own route's `set:` (values its content uses), in order.
    pub(super) set: Vec<(String, String)>,
    /// Whether any way reaches the location's content.
    pub(super) falls_through: bool,
    /// An identity `rewrite ... break` was passed: `proxy_pass`'s URI part is not used.
    pub(super) rewrote: bool,
}

#[derive(Clone, Debug, Default)]
struct Way {
    /// Bindings in the order made: name → value with request variables only.
    vars: Vec<(String, String)>,
    /// `(value with variables, want)` as `match.vars` takes them.
    conds: Vec<(String, String)>,
    /// Stopped by `break`, or answered.
    stopped: bool,
    answer: Option<Value>,
    /// Went through an `if`'s block and on: nginx then serves with the `if`'s own
    /// configuration, which has no `try_files` ("if is evil").
    through_if: bool,
    /// Passed an identity `rewrite ... break`: nginx then ignores `proxy_pass`'s URI part.
    rewrote: bool,
}

impl Way {
    fn bound(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn bind(&mut self, name: &str, value: String) {
        self.vars.retain(|(n, _)| n != name);
        self.vars.push((name.to_string(), value));
    }

    /// `value` with the names this way bound replaced by their values; `Err` names a
    /// variable that is neither bound nor weir's.
    fn subst(&self, value: &str) -> Result<String, String> {
        let b = value.as_bytes();
        let mut out = String::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] != b'$' {
                let next = value[i..].find('$').map_or(b.len(), |k| i + k);
                out.push_str(&value[i..next]);
                i = next;
                continue;
            }
            let braced = b.get(i + 1) == Some(&b'{');
            let start = i + 1 + usize::from(braced);
            let mut end = start;
            while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
                end += 1;
            }
            let name = &value[start..end];
            let close = if braced {
                if b.get(end) != Some(&b'}') {
                    return Err(format!("{value:?}: an unclosed ${{"));
                }
                end + 1
            } else {
                end
            };
            if name.is_empty() {
                out.push('$');
                i += 1;
                continue;
            }
            if name.bytes().all(|c| c.is_ascii_digit()) {
                return Err(format!(
                    "${name}: a regex capture of an `if` or `rewrite` is not translated"
                ));
            }
            match self.bound(name) {
                Some(v) => out.push_str(v),
                None => {
                    if let Some(u) = unknown_variable(&format!("${name}")) {
                        return Err(format!("${u} is not a weir variable"));
                    }
                    out.push_str(&format!("${{{name}}}"));
                }
            }
            i = close;
        }
        Ok(out)
    }

    /// Adds a condition; `false` when the way cannot be taken (it contradicts one it has).
    fn require(&mut self, key: String, want: String) -> Result<bool, String> {
        let negated = negate(&want);
        let same: Vec<&(String, String)> = self.conds.iter().filter(|(k, _)| *k == key).collect();
        if same.iter().any(|(_, w)| *w == want) {
            return Ok(true);
        }
        if same.iter().any(|(_, w)| *w == negated) {
            return Ok(false);
        }
        // `match.vars` is a mapping: a value can be spelt two ways ([`yaml_form`]), no more.
        if same.len() >= 2 {
            return Err(format!("three conditions on {key} are not translated"));
        }
        self.conds.push((key, want));
        Ok(true)
    }
}

/// A value as the config file takes it: `${name}` (the form kept here) is `$name` where no
/// name character follows, else `${name}` (written `$${name}` in the file by the import's last
/// pass, the file's own `${` being the environment's); `braced` writes every one as `${name}`,
/// the second spelling of a `match.vars` key.
fn yaml_form(v: &str, braced: bool) -> String {
    let mut out = String::new();
    let mut rest = v;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(j) = after.find('}') else {
            out.push_str(&rest[i..]);
            return out;
        };
        let name = &after[..j];
        let tail = &after[j + 1..];
        let glued = tail
            .bytes()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_');
        if glued || braced {
            out.push_str(&format!("${{{name}}}"));
        } else {
            out.push_str(&format!("${name}"));
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// The want that holds exactly when `want` does not.
fn negate(want: &str) -> String {
    match want.strip_prefix('!') {
        Some(w) => w.to_string(),
        None => format!("!{want}"),
    }
}

/// A regex as weir's `match.vars` and `maps` build theirs: over bytes, ASCII classes (PCRE's).
pub(super) fn bytes_regex(r: &str) -> Result<regex::bytes::Regex, regex::Error> {
    regex::bytes::RegexBuilder::new(r).unicode(false).build()
}

/// Whether a value known here meets an `if`'s condition.
type Holds = Box<dyn Fn(&str) -> bool>;

/// What an `if`'s condition is for one way.
enum Test {
    /// Decided: the subject holds no request value.
    Known(bool),
    /// On a request value: `(key, want)`.
    On(String, String),
}

fn condition(way: &Way, args: &[String]) -> Result<Test, String> {
    // The parser keeps `(` and `)` on the words (`($a` `=` `b` `)`), quotes already gone.
    let mut words: Vec<String> = args.to_vec();
    match words.first().map(String::as_str) {
        Some("(") => {
            words.remove(0);
        }
        Some(f) if f.starts_with('(') => words[0] = f[1..].to_string(),
        _ => return Err("an `if` condition not understood".into()),
    }
    match words.last().map(String::as_str) {
        Some(")") => {
            words.pop();
        }
        Some(l) if l.ends_with(')') => {
            let n = words.len() - 1;
            words[n] = l[..l.len() - 1].to_string();
        }
        _ => return Err("an `if` condition not understood".into()),
    }
    // The parser has taken the quotes off already (`"q"` is the word q, `'"q"'` the word "q").
    let subject = match words.first() {
        Some(w) if w.starts_with('$') => way.subst(w)?,
        Some(w) if w.starts_with('-') || w.starts_with("!-") => {
            return Err(format!("an `if` with the file test {w} is not translated"))
        }
        _ => return Err("an `if` condition not understood".into()),
    };
    let (op, value) = match words.as_slice() {
        [_] => ("", String::new()),
        [_, op, v] => (op.as_str(), v.clone()),
        _ => return Err("an `if` condition not understood".into()),
    };
    let value = if op.contains('~') {
        value
    } else {
        way.subst(&value)?
    };
    // nginx's `$uri` is decoded; weir's is the path as sent, normalised (unreserved
    // characters decoded, others kept encoded): the same only for such characters.
    if ["${uri}", "${document_uri}"]
        .iter()
        .any(|u| subject.contains(u))
    {
        let plain = |c: char| c.is_ascii_alphanumeric() || "-._~/".contains(c);
        if matches!(op, "=" | "!=") && !value.chars().all(plain) {
            return Err(format!(
                "a comparison of $uri with {value:?} (decoded in nginx, encoded in weir) is not translated"
            ));
        }
        if op.contains('~') && !value.is_ascii() {
            return Err("a regex on $uri with non-ASCII letters is not translated".into());
        }
    }
    if value.contains('$') && matches!(op, "=" | "!=") {
        return Err(format!(
            "a comparison with a variable ({value:?}) is not translated"
        ));
    }
    if value.starts_with(['!', '~']) && matches!(op, "=" | "!=") {
        return Err(format!("a compared value starting with ! or ~ ({value:?})"));
    }
    let regex = |ci: bool| -> Result<String, String> {
        let r = if ci {
            format!("(?i){value}")
        } else {
            value.clone()
        };
        bytes_regex(&r).map_err(|e| format!("the regex {value:?}: {e}"))?;
        Ok(r)
    };
    let (want, holds): (String, Holds) = match op {
        // `if ($a)`: neither empty nor "0".
        "" => (
            "!~^0?$".into(),
            Box::new(|v: &str| !v.is_empty() && v != "0"),
        ),
        "=" => (value.clone(), {
            let v2 = value.clone();
            Box::new(move |v: &str| v == v2)
        }),
        "!=" => (format!("!{value}"), {
            let v2 = value.clone();
            Box::new(move |v: &str| v != v2)
        }),
        "~" | "~*" | "!~" | "!~*" => {
            let r = regex(op.ends_with('*'))?;
            let re = bytes_regex(&r).map_err(|e| e.to_string())?;
            let neg = op.starts_with('!');
            (
                format!("{}~{r}", if neg { "!" } else { "" }),
                Box::new(move |v: &str| re.is_match(v.as_bytes()) != neg),
            )
        }
        _ => return Err(format!("the `if` operator {op:?} is not translated")),
    };
    if subject.contains('$') {
        Ok(Test::On(subject, want))
    } else {
        Ok(Test::Known(holds(&subject)))
    }
}

/// Runs `stmts` on every live way, forking at `if`s.
fn run(cx: &mut Ctx, stmts: &[&Directive], ways: Vec<Way>) -> Result<Vec<Way>, String> {
    let mut ways = ways;
    for d in stmts {
        let mut next = Vec::new();
        for mut w in ways {
            if w.stopped {
                next.push(w);
                continue;
            }
            match d.name.as_str() {
                "set" => {
                    let [name, value] = d.args.as_slice() else {
                        return Err(format!("{}: set takes a name and a value", d.at()));
                    };
                    let Some(name) = name.strip_prefix('$') else {
                        return Err(format!("{}: set names a $variable", d.at()));
                    };
                    // `set $args ""` changes what goes upstream; a map's or weir's own
                    // variable is seen by directives this script does not know of.
                    if crate::vars::variable(name).is_ok() || super::maps::defined(name) {
                        return Err(format!(
                            "{}: set of ${name}, a variable nginx or a map defines, is not translated",
                            d.at()
                        ));
                    }
                    let v = w.subst(value).map_err(|e| format!("{}: {e}", d.at()))?;
                    w.bind(name, v);
                    next.push(w);
                }
                "break" => {
                    w.stopped = true;
                    next.push(w);
                }
                "return" => {
                    let action = return_action(cx, d)
                        .ok_or_else(|| format!("{}: return not translated", d.at()))?;
                    let mut r = Mapping::new();
                    for (k, v) in action {
                        r.insert(
                            k,
                            subst_value(&w, v).map_err(|e| format!("{}: {e}", d.at()))?,
                        );
                    }
                    w.answer = Some(Value::Mapping(r));
                    w.stopped = true;
                    next.push(w);
                }
                "rewrite" => next.extend(rewrite(cx, d, w)?),
                "if" => {
                    let body: Vec<&Directive> = d.children().iter().collect();
                    if let Some(x) = body.iter().find(|x| !is_script(&x.name)) {
                        return Err(format!(
                            "{}: {} inside an `if` is not translated",
                            x.at(),
                            x.name
                        ));
                    }
                    match condition(&w, &d.args).map_err(|e| format!("{}: {e}", d.at()))? {
                        Test::Known(true) => next.extend(if_body(cx, &body, w)?),
                        Test::Known(false) => next.push(w),
                        Test::On(key, want) => {
                            let mut yes = w.clone();
                            if yes.require(key.clone(), want.clone())? {
                                next.extend(if_body(cx, &body, yes)?);
                            }
                            if w.require(key, negate(&want))? {
                                next.push(w);
                            }
                        }
                    }
                }
                other => return Err(format!("{}: {other} in a script", d.at())),
            }
            if next.len() > MAX_WAYS {
                return Err(format!(
                    "{}: more than {MAX_WAYS} ways through the `if`s",
                    d.at()
                ));
            }
        }
        ways = next;
    }
    Ok(ways)
}

/// An `if`'s block on way `w`: the ways out of it that did not answer went through it.
fn if_body(cx: &mut Ctx, body: &[&Directive], w: Way) -> Result<Vec<Way>, String> {
    let mut out = run(cx, body, vec![w])?;
    for w in &mut out {
        if w.answer.is_none() {
            w.through_if = true;
        }
    }
    Ok(out)
}

/// `rewrite`: a redirect (`permanent`, `redirect`) answers where the regex matches the path;
/// an identity rewrite (`^(.*)$ $1 break`, as SPA configs write before `proxy_pass`) does
/// nothing. Others are internal rewrites, not translated.
fn rewrite(cx: &mut Ctx, d: &Directive, w: Way) -> Result<Vec<Way>, String> {
    let (re, to, flag) = match d.args.as_slice() {
        [re, to] => (re, to, ""),
        [re, to, flag] => (re, to, flag.as_str()),
        _ => return Err(format!("{}: rewrite form not understood", d.at())),
    };
    let re = re.trim_matches('"');
    // With `last` or no flag nginx looks the location up again with the same URI (a cycle:
    // its 500); with `break` the request stays here, unchanged.
    if matches!(re, "^(.*)$" | "^(.+)$" | "(.*)" | "^(.*)") && to == "$1" && flag == "break" {
        cx.done();
        let mut w = w;
        w.stopped = true;
        w.rewrote = true;
        return Ok(vec![w]);
    }
    let status = match flag {
        "permanent" => 301,
        "redirect" => 302,
        _ => return Err(format!("{}: an internal rewrite is not translated", d.at())),
    };
    regex::Regex::new(re).map_err(|e| format!("{}: the regex: {e}", d.at()))?;
    let to = &super::actions::rewrite_target(to);
    let to = if to.contains("$1") || to.contains("$2") {
        // Captures are the route's `path_regex`'s: kept as written.
        to.to_string()
    } else {
        w.subst(to).map_err(|e| format!("{}: {e}", d.at()))?
    };
    if let Some(v) = unknown_variable(&to) {
        return Err(format!("{}: ${v} is not a weir variable", d.at()));
    }
    cx.done();
    let always = matches!(re, "^" | "^.*$" | "^(.*)$" | ".*" | "^(.+)$" | "^/(.*)$");
    let redirect = map(vec![
        ("to", s(&yaml_form(&to, false))),
        ("status", Value::Number(status.into())),
    ]);
    let mut hit = w.clone();
    hit.stopped = true;
    hit.answer = Some(map(vec![("redirect", redirect), ("__path_regex", s(re))]));
    if always {
        return Ok(vec![hit]);
    }
    let mut miss = w;
    let mut out = vec![hit];
    if miss.require("${uri}".into(), format!("!~{re}"))? {
        out.push(miss);
    }
    Ok(out)
}

/// A `return`'s values with the way's bindings.
fn subst_value(w: &Way, v: Value) -> Result<Value, String> {
    Ok(match v {
        Value::String(t) => Value::String(yaml_form(&w.subst(&t)?, false)),
        Value::Mapping(m) => {
            let mut out = Mapping::new();
            for (k, v) in m {
                out.insert(k, subst_value(w, v)?);
            }
            Value::Mapping(out)
        }
        other => other,
    })
}

/// Runs a location's script. `content` holds the arguments of the location's other
/// directives: a name they use must have one value on every way that reaches them.
pub(super) fn script(
    cx: &mut Ctx,
    stmts: &[&Directive],
    content: &[&str],
    try_files: bool,
) -> Result<Scripted, String> {
    let ways = run(cx, stmts, vec![Way::default()])?;
    if try_files && ways.iter().any(|w| w.answer.is_none() && w.through_if) {
        return Err(
            "a request that goes through an `if` block loses the location's try_files in nginx: not translated"
                .into(),
        );
    }
    let mut out = Scripted::default();
    let mut through: Vec<&Way> = Vec::new();
    for w in &ways {
        match &w.answer {
            Some(Value::Mapping(a)) => {
                let mut r = Mapping::new();
                let mut m = Mapping::new();
                let mut a = a.clone();
                if let Some(re) = a.shift_remove(s("__path_regex")) {
                    m.insert(s("path_regex"), re);
                }
                if !w.conds.is_empty() {
                    let mut vars = Mapping::new();
                    for (k, want) in &w.conds {
                        let mut key = yaml_form(k, false);
                        if vars.contains_key(s(&key)) {
                            key = yaml_form(k, true);
                        }
                        // `${a}z` has one spelling only: a second condition on it would
                        // overwrite the first.
                        if vars.contains_key(s(&key)) {
                            return Err(format!("two conditions on {key} are not translated"));
                        }
                        vars.insert(s(&key), s(want));
                    }
                    m.insert(s("vars"), Value::Mapping(vars));
                }
                r.insert(s("match"), Value::Mapping(m));
                for (k, v) in a {
                    r.insert(k, v);
                }
                out.before.push(Value::Mapping(r));
            }
            _ => through.push(w),
        }
    }
    out.falls_through = !through.is_empty();
    out.rewrote = through.iter().any(|w| w.rewrote);
    // The location's content on every way that reaches it: the values it uses must agree,
    // and a way that reached it under conditions must be every way (else it refuses on the
    // others, which is what the conditions' routes would not say).
    let used = |name: &str| {
        content
            .iter()
            .any(|a| a.contains(&format!("${name}")) || a.contains(&format!("${{{name}}}")))
    };
    let names: Vec<String> = through
        .iter()
        .flat_map(|w| w.vars.iter().map(|(n, _)| n.clone()))
        .filter(|n| used(n))
        .collect();
    for n in names {
        if out.set.iter().any(|(k, _)| *k == n) {
            continue;
        }
        let first = through[0].bound(&n);
        if through.iter().any(|w| w.bound(&n) != first) {
            return Err(format!(
                "${n} has a value that depends on the `if`s, and the location uses it"
            ));
        }
        if let Some(v) = first {
            out.set.push((n, yaml_form(v, false)));
        }
    }
    Ok(out)
}
