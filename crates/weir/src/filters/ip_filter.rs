//! `ip`: allow and deny lists of addresses and CIDR networks, inline or from files (read at
//! load, so a reload re-reads them). A denied client gets `status` (403). Deny wins over allow;
//! when any allow rule is given, an address no allow rule names is denied (nginx's `allow`
//! list followed by `deny all`).
//!
//! Checked against the connection's peer address. Behind a trusted proxy, put the rules on
//! that proxy or list its address; `X-Forwarded-For` is not consulted (a client could name
//! any address in it).

use std::net::IpAddr;

use bytes::Bytes;
use ipnet::IpNet;

use super::registry::{plain, Build, Built, Cx};
use super::{Answer, Flow, Phases, Req, State};
use crate::config::{model, BaseDir, CompileError};
use crate::shield::nets::{parse, Nets};

#[derive(Debug)]
pub struct IpFilter {
    allow: Nets,
    deny: Nets,
    status: u16,
}

pub(crate) fn list(
    inline: Vec<String>,
    file: Option<String>,
    key: &str,
    path: &str,
    base: &BaseDir,
) -> Result<Vec<IpNet>, CompileError> {
    let mut out = crate::shield::nets::parse_all(&inline, &format!("{path}.{key}"))?;
    if let Some(f) = file {
        let p = base.0.join(&f);
        let text = std::fs::read_to_string(&p).map_err(|e| {
            (
                format!("{path}.{key}_file"),
                format!("cannot read {}: {e}", p.display()),
            )
        })?;
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            out.push(parse(line).ok_or_else(|| {
                (
                    format!("{path}.{key}_file"),
                    format!(
                        "{}:{}: {line:?} is not an address or CIDR",
                        p.display(),
                        n + 1
                    ),
                )
            })?);
        }
    }
    Ok(out)
}

impl Build<&Cx<'_>> for model::IpRules {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        plain(IpFilter::compile(self, cx.path, cx.base)?)
    }
}

impl IpFilter {
    pub(crate) fn compile(
        r: model::IpRules,
        path: &str,
        base: &BaseDir,
    ) -> Result<IpFilter, CompileError> {
        if !(400..=599).contains(&r.status) {
            return Err((format!("{path}.status"), "must be 400-599".into()));
        }
        let allow = list(r.allow, r.allow_file, "allow", path, base)?;
        let deny = list(r.deny, r.deny_file, "deny", path, base)?;
        Ok(IpFilter {
            allow: Nets::of(&allow),
            deny: Nets::of(&deny),
            status: r.status,
        })
    }

    /// Whether `ip` may pass.
    pub fn admits(&self, ip: IpAddr) -> bool {
        // An IPv4 client on a dual-stack socket arrives as ::ffff:a.b.c.d.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        if self.deny.contains(ip) {
            return false;
        }
        self.allow.is_empty() || self.allow.contains(ip)
    }
}

impl super::Filter for IpFilter {
    fn phases(&self) -> Phases {
        Phases::REQUEST
    }

    fn request(&self, req: &Req<'_>, _: &mut State, _: &mut Option<usize>) -> Flow {
        if self.admits(req.client.ip) {
            Flow::Continue
        } else {
            Flow::Respond(Answer {
                status: self.status,
                fields: Vec::new(),
                body: Bytes::from_static(b"Forbidden\n"),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_wins_then_allow_table() {
        let m: model::IpRules =
            serde_yaml::from_str("{allow: [10.0.0.0/8, '::1'], deny: [10.9.0.0/16]}").unwrap();
        let f = IpFilter::compile(m, "f", &BaseDir(".".into())).unwrap();
        for (ip, want) in [
            ("10.1.2.3", true),
            ("10.9.1.1", false),
            ("192.0.2.1", false),
            ("::1", true),
            ("::ffff:10.1.2.3", true),
        ] {
            assert_eq!(f.admits(ip.parse().unwrap()), want, "{ip}");
        }
        let m: model::IpRules = serde_yaml::from_str("{deny: [bogus]}").unwrap();
        let e = IpFilter::compile(m, "f", &BaseDir(".".into())).unwrap_err();
        assert_eq!(e.0, "f.deny[0]");
    }
}
