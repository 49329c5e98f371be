//! `weir check`: loads a config as `weir run` would (default `/etc/weir/weir.yaml`), tries to
//! bind every address it names (`--no-bind` skips that: a check on another machine, or beside
//! the running weir), warns without failing about what is legal but probably a mistake, and
//! with `--print` prints the config as loaded (variables substituted, includes merged, like
//! `nginx -T`; values of variables named like secrets stay `${NAME}`), then the body limit of
//! each route that sets its own (or whose site does).
//!
//! Warnings: an admin listener off loopback without a token; a route that can never match
//! because an earlier route of its listener matches everything; a listener without routes.

use std::process::ExitCode;

use crate::config::model;
use crate::runtime::{self, RuntimeConfig};

/// The check's options.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Config file (YAML) [default: /etc/weir/weir.yaml].
    #[arg(short, long)]
    config: Option<std::path::PathBuf>,
    /// Do not try to bind the listeners' addresses.
    #[arg(long)]
    no_bind: bool,
    /// Print the config as loaded (variables substituted, includes merged).
    #[arg(long)]
    print: bool,
}

/// `weir check`.
pub fn check(args: &CheckArgs) -> ExitCode {
    let path = args
        .config
        .clone()
        .unwrap_or_else(|| super::control::DEFAULT_CONFIG.into());
    let name = path.display().to_string();
    let source = match crate::config::load_file(&path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("weir: {e}");
            return ExitCode::FAILURE;
        }
    };
    let printed = args.print.then(|| source.printable());
    let mut warned = model_warnings(&source.file, |key| source_line(&source, key));
    let cfg = match runtime::compile(source, &Default::default()) {
        Ok(cfg) => cfg,
        Err(mut e) => {
            e.file.get_or_insert(name);
            eprintln!("weir: {e}");
            return ExitCode::FAILURE;
        }
    };
    warned.extend(warnings(&cfg));
    if !args.no_bind {
        let mut failed = false;
        for l in &cfg.listeners {
            let bindable = match &l.unix {
                Some(u) => crate::server::check_bind_unix(u),
                None => crate::server::check_bind(l.address),
            };
            if let Err(e) = bindable {
                eprintln!(
                    "weir: {name}: {}: cannot bind {}: {e}",
                    l.origin(),
                    l.shown()
                );
                failed = true;
            }
        }
        if failed {
            eprintln!("weir: (`weir check --no-bind` checks the config without binding)");
            return ExitCode::FAILURE;
        }
    }
    for w in warned {
        eprintln!("weir: {name}: warning: {w}");
    }
    if let Some(text) = printed {
        println!("# {name}, as loaded");
        print!("{text}");
        print!("{}", effective_limits(&cfg));
    } else {
        println!("{name}: ok ({})", summary(&cfg));
    }
    ExitCode::SUCCESS
}

/// The limits each route answers under where a route or site sets its own (`--print`): the
/// top-level ones, then each such route's, as comments after the config.
fn effective_limits(cfg: &RuntimeConfig) -> String {
    let mut out = String::new();
    let global = cfg.limits.max_body_bytes;
    let t = &cfg.timeouts;
    for l in &cfg.listeners {
        for r in l.routes.iter() {
            let mut own = Vec::new();
            if let Some(v) = r.max_body_bytes {
                own.push(format!(
                    "max_body_bytes {v} (limits.max_body_bytes {global})"
                ));
            }
            if let Some(v) = r.body_timeout {
                own.push(format!("body_timeout {v:?} (timeouts.body {:?})", t.body));
            }
            if let Some(v) = r.keepalive_timeout {
                own.push(format!(
                    "keepalive_timeout {v:?} (timeouts.keepalive {:?})",
                    t.keepalive
                ));
            }
            if !own.is_empty() {
                out.push_str(&format!(
                    "# effective: {} route {}: {}\n",
                    l.origin(),
                    r.name,
                    own.join(", ")
                ));
            }
        }
    }
    if !out.is_empty() {
        out.insert_str(
            0,
            &format!(
                "# effective limits: max_body_bytes {global}, timeouts.body {:?}, timeouts.keepalive {:?} unless a route says:\n",
                t.body, t.keepalive
            ),
        );
    }
    out
}

fn source_line(source: &crate::config::Source, key: &str) -> String {
    match source.locator.locate(key) {
        (Some(file), Some(line)) => format!("{file}: line {line}: {key}"),
        (None, Some(line)) => format!("line {line}: {key}"),
        _ => key.to_string(),
    }
}

/// What `weir check` warns about in the compiled config.
pub(super) fn warnings(cfg: &RuntimeConfig) -> Vec<String> {
    let mut out = Vec::new();
    // Routes that authenticate and still share cached objects across consumers.
    for l in &cfg.listeners {
        for r in l.routes.iter() {
            if let crate::actions::Action::Proxy(p) = &r.action {
                if p.cache.as_ref().is_some_and(|c| c.shared_across_consumers) {
                    out.push(format!(
                        "listener {}: route {}: cache.shared: the route authenticates, and one consumer's cached response is served to every other",
                        l.address, r.name
                    ));
                }
            }
        }
    }
    // A disk directory another process holds (this one's own tier may have just taken it).
    for z in &cfg.cache_zones {
        let Some(d) = &z.disk else { continue };
        let path = &d.config().path;
        match weir_cache::disk::log::lock_holder(path) {
            Some(pid) if pid != std::process::id() => out.push(format!(
                "cache_zones.{}.disk.path {}: held by another process (pid {pid}): a weir started now waits for it, its lookups misses until then",
                z.name,
                path.display()
            )),
            _ => {}
        }
    }
    if let Some(a) = &cfg.admin {
        if !a.address.ip().is_loopback() && !a.has_token() {
            out.push(format!(
                "admin.address {} is not on loopback and the admin API has no token: anyone who reaches it can purge and reload (set admin.token_file or admin.token_env)",
                a.address
            ));
        }
    }
    out
}

/// What `weir check` warns about in the config as written; `at` names a key's place.
fn model_warnings(file: &model::File, at: impl Fn(&str) -> String) -> Vec<String> {
    let mut out = Vec::new();
    for (name, kv) in &file.kv_stores {
        let body = file.limits.max_body_bytes.0;
        if let Some(v) = kv.max_value_size.filter(|v| v.0 > body) {
            out.push(format!(
                "{}: kv store {name}: max_value_size {} is more than limits.max_body_bytes {body}: larger bodies get 413 before the store sees them (raise limits.max_body_bytes)",
                at(&format!("kv_stores.{name}.max_value_size")),
                v.0
            ));
        }
    }
    for (i, l) in file.listeners.iter().enumerate() {
        let acme = l
            .tls
            .as_ref()
            .and_then(|t| t.acme.as_ref())
            .map(|a| (format!("listeners[{i}].tls.acme"), a))
            .into_iter()
            .chain(l.sites.iter().enumerate().filter_map(|(j, site)| {
                let a = site.tls.as_ref()?.acme.as_ref()?;
                Some((format!("listeners[{i}].sites[{j}].tls.acme"), a))
            }));
        for (key, a) in acme {
            if let Some(od) = &a.on_demand {
                out.extend(on_demand_warnings(od, &key, &at));
            }
        }
        if l.routes.is_empty() && l.tcp.is_none() && l.sites.is_empty() {
            out.push(format!(
                "{}: listener {} has no routes: every request gets 404",
                at(&format!("listeners[{i}]")),
                l.address
            ));
        }
        if let Some(j) = l.routes.iter().position(catches_all) {
            for k in j + 1..l.routes.len() {
                let name = l.routes[k]
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("routes[{k}]"));
                out.push(format!(
                    "{}: route {name} can never match: routes[{j}] before it matches every request",
                    at(&format!("listeners[{i}].routes[{k}]"))
                ));
            }
        }
    }
    out
}

/// What is legal but risky in an `on_demand` section: a wildcard `allow` without `ask` (any
/// client has a certificate ordered for any name it makes up under it), and a rate over a
/// public CA's limits.
fn on_demand_warnings(
    od: &model::OnDemand,
    key: &str,
    at: &impl Fn(&str) -> String,
) -> Vec<String> {
    let mut out = Vec::new();
    if od.ask.is_none() {
        if let Some(w) = od.allow.iter().find(|p| p.starts_with("*.")) {
            out.push(format!(
                "{}: allow {w:?} without ask: any client can have a certificate ordered for a name it makes up under it (random names spend `rate` and `max_names`); add `ask` to approve real names",
                at(&format!("{key}.on_demand.allow"))
            ));
        }
    }
    // Let's Encrypt: 300 new orders per 3 hours per account.
    let per = od.per.0.as_secs_f64().max(0.001);
    let in_3h = f64::from(od.rate) + f64::from(od.rate) * (3.0 * 3600.0) / per;
    if in_3h > 300.0 {
        out.push(format!(
            "{}: rate {} per {:?} allows {in_3h:.0} new orders in 3 hours, over Let's Encrypt's 300 per 3 hours per account: a public CA will refuse orders",
            at(&format!("{key}.on_demand.rate")),
            od.rate,
            od.per.0
        ));
    }
    out
}

/// A route whose match holds for every request.
fn catches_all(r: &model::Route) -> bool {
    let m = &r.matcher;
    m.host.is_empty()
        && m.sni.is_empty()
        && m.client_subject.is_none()
        && m.path.is_none()
        && m.path_prefix
            .as_deref()
            .is_none_or(|p| p == "/" || p.is_empty())
        && m.path_regex.is_none()
        && m.methods.is_empty()
        && m.headers.is_empty()
}

pub(super) fn summary(cfg: &RuntimeConfig) -> String {
    let listeners: Vec<String> = cfg.listeners.iter().map(|l| l.shown()).collect();
    format!(
        "{} worker(s), listeners: {}",
        cfg.workers,
        listeners.join(", ")
    )
}
