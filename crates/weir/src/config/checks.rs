//! Validation shared by the parts of the config that carry header names and values, and the
//! trusted-peer lists of the fields weir keeps from its clients' proxies.

/// A `trust_from` list (addresses or CIDRs) at config key `key`; an entry that is neither is
/// named by its index.
pub(crate) fn trusted_peers(
    list: &[String],
    key: &str,
) -> Result<Vec<ipnet::IpNet>, super::CompileError> {
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            t.parse::<ipnet::IpNet>()
                .or_else(|_| t.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    (
                        format!("{key}[{i}]"),
                        format!("{t:?} is not an address or CIDR"),
                    )
                })
        })
        .collect()
}

/// Header values must not be able to break the response framing.
pub(crate) fn check_header_value(v: &str) -> Result<(), String> {
    if v.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err("header values must not contain control characters or line breaks".into());
    }
    Ok(())
}

/// Header names must be RFC 9110 tokens.
pub(crate) fn check_header_name(n: &str) -> Result<(), String> {
    let ok = !n.is_empty()
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!("{n:?} is not a valid header name"))
    }
}

/// Libraries whose log lines a client can cause (a rapid-reset connection, a bad SNI, a
/// renegotiation attempt): logged at `error` unless the filter names them. weir counts those
/// events itself (`/metrics`) and logs them rate-limited.
const CLIENT_DRIVEN: [&str; 3] = ["h2", "rustls", "tokio_rustls"];

/// A log level or `RUST_LOG`-style filter: `info`, `warn,weir::proxy=debug`. Stricter than
/// `EnvFilter` alone, which reads a lone misspelt level (`infoo`) as a target name and
/// silently logs nothing. The targets of [`CLIENT_DRIVEN`] default to `error`.
pub fn log_filter(spec: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let is_level = |l: &str| LEVELS.iter().any(|x| x.eq_ignore_ascii_case(l.trim()));
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let level = part.rsplit_once('=').map_or(part, |(_, l)| l);
        if !is_level(level) {
            return Err(format!(
                "invalid log level {spec:?}: {level:?} is not one of {}",
                LEVELS.join(", ")
            ));
        }
    }
    let mut full = spec.to_string();
    // kube-rs logs every failed API request at `error`, unthrottled and without its cause;
    // the Kubernetes provider logs the same failures rate-limited, with the cause.
    if !spec
        .split(',')
        .any(|p| p.trim().split('=').next() == Some("kube_client"))
    {
        full.push_str(",kube_client=off");
    }
    for target in CLIENT_DRIVEN {
        let named = spec
            .split(',')
            .any(|p| p.trim().split('=').next() == Some(target));
        if !named {
            full.push_str(&format!(",{target}=error"));
        }
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(&full)
        .map_err(|e| format!("invalid log level {spec:?}: {e}"))
}
