//! An HTTPRoute's rules as weir routes: their matches (`matcher`, with the specification's
//! precedence) and backends (`backends`); the action and filters are `filters.rs`'s.

use serde_yaml::{Mapping, Value};

use super::super::ingress::{host_class, service_upstream, Converted, Options, Route};
use super::filters::action;
use super::grants::granted;
use super::{Backends, Rank};

/// What a route's rules are read in: the route (for notes), its namespace, the grants, the
/// options.
pub(super) struct RouteCtx<'a> {
    pub(super) id: &'a str,
    pub(super) ns: &'a str,
    pub(super) grants: &'a [Value],
    pub(super) opts: &'a Options,
}

impl RouteCtx<'_> {
    /// The route's kind (`HTTPRoute`, `GRPCRoute`, `TLSRoute`), from its id.
    pub(super) fn kind(&self) -> &str {
        self.id.split(' ').next().unwrap_or("HTTPRoute")
    }
}

/// The weir routes of an HTTPRoute's rules, for `hosts`.
pub(super) fn rules(
    x: &RouteCtx<'_>,
    obj: &Value,
    hosts: &[String],
    c: &mut Converted,
    upstreams: &mut Mapping,
) -> Vec<Route> {
    let (id, ns, grants, opts) = (x.id, x.ns, x.grants, x.opts);
    let mut out = Vec::new();
    let default_match = {
        let mut m = Mapping::new();
        let mut p = Mapping::new();
        p.insert("type".into(), "PathPrefix".into());
        p.insert("value".into(), "/".into());
        m.insert("path".into(), Value::Mapping(p));
        vec![Value::Mapping(m)]
    };
    for (ri, rule) in obj["spec"]["rules"]
        .as_sequence()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let backends = backends(x, rule, c, upstreams);
        if let Err(why) = &backends {
            c.gateway.unresolved(id, why);
        }
        // RequestMirror: its Service an upstream of its own (same rules as a backend's).
        let mut mirrors = Vec::new();
        for f in rule["filters"].as_sequence().into_iter().flatten() {
            if f["type"].as_str() != Some("RequestMirror") {
                continue;
            }
            let b = &f["requestMirror"]["backendRef"];
            let name = b["name"].as_str().unwrap_or("");
            let bns = b["namespace"].as_str().unwrap_or(ns);
            match b["port"].as_u64() {
                Some(port) if bns == ns || granted(grants, (x.kind(), ns), ("Service", bns, name)) => {
                    match service_upstream((bns, name, &port.to_string()), Mapping::new(), upstreams, opts, c) {
                        Ok(up) => mirrors.push(up),
                        Err(why) => c.skipped.push(format!("{id}: RequestMirror: {why}: not mirrored")),
                    }
                }
                _ => c.skipped.push(format!(
                    "{id}: RequestMirror to Service {bns}/{name}: without a port or a ReferenceGrant, not mirrored"
                )),
            }
        }
        // A redirect's `ReplacePrefixMatch` reads what the path match captured; without one
        // the prefix `/` (every path) needs no regex (one per route was most of a 2,000-route
        // rebuild's compile, and every request's match).
        let captured = rule["filters"]
            .as_sequence()
            .into_iter()
            .flatten()
            .any(|f| f["requestRedirect"]["path"]["type"].as_str() == Some("ReplacePrefixMatch"));
        let matches = rule["matches"]
            .as_sequence()
            .cloned()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| default_match.clone());
        for (mi, m) in matches.iter().enumerate() {
            let Some((mut wm, mut rank, prefix)) = matcher(id, m, captured, c) else {
                continue;
            };
            rank.0 = hosts.iter().map(|h| host_class(Some(h))).min().unwrap_or(2);
            if !hosts.is_empty() {
                let hs: Vec<Value> = hosts.iter().map(|h| h.clone().into()).collect();
                wm.insert(
                    "host".into(),
                    if hs.len() == 1 {
                        hs[0].clone()
                    } else {
                        Value::Sequence(hs)
                    },
                );
            }
            let mut r = Mapping::new();
            r.insert(
                "name".into(),
                // Unique whatever the names (see `ingress/mod.rs`): `HTTPRoute ns/name`.
                format!(
                    "{}.{}.r{ri}.m{mi}",
                    id.split(' ').next().unwrap_or("").to_ascii_lowercase(),
                    id.split(' ').nth(1).unwrap_or("").replacen('/', ".", 1)
                )
                .into(),
            );
            r.insert("match".into(), Value::Mapping(wm));
            action(
                id,
                rule,
                (&backends, &mirrors),
                prefix.as_deref(),
                &mut r,
                c,
            );
            out.push(Route { rank, body: r });
            c.translated += 1;
        }
    }
    out
}

/// The backends of a rule, by upstream name and weight; `Err` with the reason when the rule
/// must answer 500.
pub(super) fn backends(
    x: &RouteCtx<'_>,
    rule: &Value,
    c: &mut Converted,
    upstreams: &mut Mapping,
) -> Backends {
    let (ns, grants, opts) = (x.ns, x.grants, x.opts);
    let settings = timeouts(&rule["timeouts"], c)?;
    let mut out = Vec::new();
    for b in rule["backendRefs"].as_sequence().into_iter().flatten() {
        let kind = b["kind"].as_str().unwrap_or("Service");
        let group = b["group"].as_str().unwrap_or("");
        let name = b["name"].as_str().unwrap_or("");
        let bns = b["namespace"].as_str().unwrap_or(ns);
        if kind != "Service" || !group.is_empty() {
            return Err(format!("InvalidKind: a backend of kind {kind}"));
        }
        // The grant must name the route's own kind: one for HTTPRoutes lets no GRPCRoute or
        // TLSRoute through.
        if bns != ns && !granted(grants, (x.kind(), ns), ("Service", bns, name)) {
            return Err(format!(
                "RefNotPermitted: Service {bns}/{name} without a ReferenceGrant in {bns} for {}s of {ns}",
                x.kind()
            ));
        }
        let Some(port) = b["port"].as_u64() else {
            return Err(format!(
                "BackendNotFound: Service {bns}/{name} without a port"
            ));
        };
        if b["filters"].as_sequence().is_some_and(|f| !f.is_empty()) {
            return Err(format!("filters on the backend {name} are not translated"));
        }
        let weight = match &b["weight"] {
            Value::Null => 1,
            w => w
                .as_u64()
                .ok_or(format!("the weight of backend {name} is not a count"))?,
        };
        if weight == 0 {
            continue;
        }
        let up = service_upstream(
            (bns, name, &port.to_string()),
            settings.clone(),
            upstreams,
            opts,
            c,
        )?;
        out.push((up, weight));
    }
    if out.is_empty()
        && rule["backendRefs"]
            .as_sequence()
            .is_some_and(|s| !s.is_empty())
    {
        return Err("every backend has weight 0".into());
    }
    Ok(out)
}

/// A match as weir's, its precedence, and the path prefix it matched (for
/// `ReplacePrefixMatch`). `None` (noted) when it cannot be said.
fn matcher(
    id: &str,
    m: &Value,
    captured: bool,
    c: &mut Converted,
) -> Option<(Mapping, Rank, Option<String>)> {
    let mut wm = Mapping::new();
    let mut vars = Mapping::new();
    let path_type = m["path"]["type"].as_str().unwrap_or("PathPrefix");
    let value = m["path"]["value"].as_str().unwrap_or("/");
    let mut prefix = None;
    // As `Route::rank` has it: 0 exact, 1 regex, 2 prefix.
    let kind = match path_type {
        "Exact" => {
            wm.insert("path".into(), value.into());
            0
        }
        "PathPrefix" => {
            let p = value.trim_end_matches('/');
            if p.is_empty() && !captured {
                wm.insert("path_prefix".into(), "/".into());
            } else if p.is_empty() {
                // Every path, captured whole for a `ReplacePrefixMatch` (`$1`).
                wm.insert("path_regex".into(), "^(/.*)$".into());
            } else {
                wm.insert(
                    "path_regex".into(),
                    format!("^{}(/.*)?$", regex::escape(p)).into(),
                );
            }
            prefix = Some(p.to_string());
            2
        }
        "RegularExpression" => {
            // Checked alone first: `/a)|(.*` must not escape its anchors.
            if regex::Regex::new(value).is_err() {
                c.skipped.push(format!(
                    "{id}: path regex `{value}` does not compile: the match is left out"
                ));
                return None;
            }
            wm.insert("path_regex".into(), format!("^(?:{value})$").into());
            1
        }
        other => {
            c.skipped.push(format!(
                "{id}: path match type {other} not translated: the match is left out"
            ));
            return None;
        }
    };
    let mut headers = Mapping::new();
    let nh = m["headers"].as_sequence().map_or(0, Vec::len);
    for h in m["headers"].as_sequence().into_iter().flatten() {
        let name = h["name"].as_str().unwrap_or("").to_ascii_lowercase();
        let v = h["value"].as_str().unwrap_or("");
        match h["type"].as_str().unwrap_or("Exact") {
            "Exact" => {
                headers.insert(name.into(), v.into());
            }
            _ => {
                if regex::Regex::new(v).is_err() {
                    c.skipped.push(format!(
                        "{id}: header regex `{v}` does not compile: the match is left out"
                    ));
                    return None;
                }
                // The whole value, as Envoy-based implementations match it.
                vars.insert(
                    format!("$http_{}", name.replace('-', "_")).into(),
                    format!("~^(?:{v})$").into(),
                );
            }
        }
    }
    if !headers.is_empty() {
        wm.insert("headers".into(), Value::Mapping(headers));
    }
    let mut query = Mapping::new();
    let nq = m["queryParams"].as_sequence().map_or(0, Vec::len);
    for q in m["queryParams"].as_sequence().into_iter().flatten() {
        let name = q["name"].as_str().unwrap_or("");
        let v = q["value"].as_str().unwrap_or("");
        match q["type"].as_str().unwrap_or("Exact") {
            "Exact" => {
                query.insert(name.into(), v.into());
            }
            _ => {
                if regex::Regex::new(v).is_err()
                    || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    c.skipped.push(format!(
                        "{id}: query match `{name}` ~ `{v}` is not translated: the match is left out"
                    ));
                    return None;
                }
                vars.insert(format!("$arg_{name}").into(), format!("~^(?:{v})$").into());
            }
        }
    }
    if !query.is_empty() {
        wm.insert("query".into(), Value::Mapping(query));
    }
    if let Some(method) = m["method"].as_str() {
        wm.insert("methods".into(), Value::Sequence(vec![method.into()]));
    }
    if !vars.is_empty() {
        wm.insert("vars".into(), Value::Mapping(vars));
    }
    // The specification's precedence: exact path, then the longest prefix, then a method,
    // then more headers, then more query parameters (the host's part is the caller's).
    let method = u8::from(m["method"].as_str().is_none());
    let rank = (
        0,
        kind,
        std::cmp::Reverse(value.len()),
        method * 128 + (127 - (nh.min(15) * 8 + nq.min(7)) as u8),
    );
    Some((wm, rank, prefix))
}

/// A rule's `timeouts` as its backends' upstream settings: `request` (the whole answer) and
/// `backendRequest` (one try; never longer than `request`, the specification validates) bound
/// weir's `total`, every try of the exchange (504 before the answer's head, the connection cut
/// after); the waits for the head and between body reads are lifted to it when it is longer
/// than their 60 s. `0s` turns a limit off. A value weir cannot read makes the rule answer 500
/// (a limit asked for and not kept would be wider than asked).
fn timeouts(t: &Value, c: &mut Converted) -> Result<Mapping, String> {
    let mut limit: Option<u64> = None;
    for key in ["request", "backendRequest"] {
        let Some(v) = t[key].as_str() else { continue };
        let ms = gateway_duration(v).ok_or_else(|| {
            format!(
                "timeouts.{key} `{}` is not a Gateway API duration",
                v.escape_debug()
            )
        })?;
        if ms > 0 {
            limit = Some(limit.map_or(ms, |l| l.min(ms)));
        }
    }
    let mut out = Mapping::new();
    if let Some(ms) = limit {
        let mut m = Mapping::new();
        m.insert("total".into(), format!("{ms}ms").into());
        if ms > 60_000 {
            m.insert("response_header".into(), format!("{ms}ms").into());
            m.insert("idle".into(), format!("{ms}ms").into());
        }
        out.insert("timeouts".into(), Value::Mapping(m));
    }
    if !t.is_null() {
        c.translated += 1;
    }
    Ok(out)
}

/// A Gateway API duration (`1h`, `30s`, `500ms`, `1m30s`: up to four numbers of up to five
/// digits, each with `h`, `m`, `s` or `ms`), in milliseconds.
fn gateway_duration(s: &str) -> Option<u64> {
    let (mut total, mut parts, mut rest) = (0u64, 0, s);
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 5 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1, 2)
        } else {
            match rest.bytes().next()? {
                b'h' => (3_600_000, 1),
                b'm' => (60_000, 1),
                b's' => (1_000, 1),
                _ => return None,
            }
        };
        rest = &rest[len..];
        total += n * unit;
        parts += 1;
    }
    (parts > 0 && parts <= 4).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::gateway_duration;

    #[test]
    fn gateway_durations_are_read_as_the_specification_writes_them() {
        assert_eq!(gateway_duration("500ms"), Some(500));
        assert_eq!(gateway_duration("1m30s"), Some(90_000));
        assert_eq!(gateway_duration("1h"), Some(3_600_000));
        assert_eq!(gateway_duration("0s"), Some(0));
        for bad in [
            "",
            "10",
            "1.5s",
            "s",
            "1d",
            "123456s",
            "1h1h1h1h1h",
            "-1s",
            "1 s",
        ] {
            assert_eq!(gateway_duration(bad), None, "{bad}");
        }
    }
}
