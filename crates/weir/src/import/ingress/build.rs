//! The weir config an import is written in: listeners, the upstream of a Service port (made
//! once), TLS certificates expected from Secrets, hosts on a match, and the 503 a route answers
//! with for what it cannot keep. Shared by the Ingress conversion (`mod.rs`) and the Gateway
//! API's (`../gateway/`).

use serde_yaml::{Mapping, Value};

use super::annotations::Annotated;
use super::{Converted, Options, Route};

/// The certificate of TLS Secret `ns/secret`, expected as files under the secrets directory
/// (noted once, with how to write them). Against a cluster (`Options::cluster`) the Secret
/// must exist with both keys: `false` (noted) when it does not, and nothing is added. With
/// `names`, the certificate is chosen for those hosts only (TLS's SNI), not for every name it
/// holds: another owner's host never gets it.
pub(in crate::import) fn tls_certificate(
    id: &str,
    (ns, secret): (&str, &str),
    names: &[String],
    certificates: &mut Vec<Value>,
    c: &mut Converted,
) -> bool {
    c.referenced
        .insert(("Secret", ns.to_string(), secret.to_string()));
    if let Some(view) = &c.cluster {
        if !view.has_secret(ns, secret, &["tls.crt", "tls.key"]) {
            c.skipped.push(format!(
                "{id}: InvalidCertificateRef: TLS Secret {ns}/{secret} not found, or without tls.crt and tls.key"
            ));
            return false;
        }
    }
    let base = crate::import::cluster::secret_file(
        &c.secrets_dir,
        "tls",
        (ns, secret),
        c.cluster.as_deref(),
    );
    let mut cert = Mapping::new();
    cert.insert("cert".into(), format!("{base}.crt").into());
    cert.insert("key".into(), format!("{base}.key").into());
    if !names.is_empty() {
        cert.insert(
            "names".into(),
            Value::Sequence(names.iter().map(|n| n.clone().into()).collect()),
        );
    }
    let cert = Value::Mapping(cert);
    if !certificates.contains(&cert) {
        certificates.push(cert);
        c.secrets_used.push((ns.to_string(), secret.to_string()));
        if c.cluster.is_none() {
            c.skipped.push(format!(
                "{id}: TLS Secret {ns}/{secret}: write its tls.crt and tls.key to {base}.crt and {base}.key (kubectl get secret -n {ns} {secret} -o jsonpath='{{.data.tls\\.crt}}' | base64 -d)"
            ));
        }
    }
    true
}

/// A backend's Service name and port (a number; against a cluster also a port's name, which
/// its Service resolves).
pub(super) fn service_port(
    svc: &Value,
    ns: &str,
    c: &Converted,
) -> Result<(String, String), String> {
    let service = svc["name"]
        .as_str()
        .ok_or("a backend without a service name")?;
    match (&svc["port"]["number"], svc["port"]["name"].as_str()) {
        (Value::Number(n), _) => Ok((service.to_string(), n.to_string())),
        (_, Some(named)) if c.cluster.is_some() => Ok((service.to_string(), named.to_string())),
        (_, Some(named)) => Err(format!(
            "the named port {named} of Service {ns}/{service} (give its number)"
        )),
        _ => Err(format!("Service {ns}/{service} without a port")),
    }
}

/// The upstream for a Service port with no annotations' settings (`gateway.rs`).
pub(in crate::import) fn service_upstream(
    backend: (&str, &str, &str),
    settings: Mapping,
    upstreams: &mut Mapping,
    opts: &Options,
    c: &mut Converted,
) -> Result<String, String> {
    upstream_with(backend, settings, upstreams, opts, c)
}

/// The upstream for a Service port (made once): `NAMESPACE.SERVICE.PORT`. Against a
/// cluster, of the port's ready endpoints, or why there are none.
pub(super) fn upstream_for(
    (ns, service, port): (&str, &str, &str),
    a: &Annotated,
    upstreams: &mut Mapping,
    opts: &Options,
    c: &mut Converted,
) -> Result<String, String> {
    let mut settings = Mapping::new();
    a.upstream(&mut settings);
    let up = upstream_with((ns, service, port), settings, upstreams, opts, c)?;
    for (name, u) in &a.auth_upstreams {
        if !upstreams.contains_key(name.as_str()) {
            upstreams.insert(name.clone().into(), Value::Mapping(u.clone()));
        }
    }
    Ok(up)
}

/// The upstream for a Service port with `settings` (protocol, TLS, timeouts, affinity).
fn upstream_with(
    (ns, service, port): (&str, &str, &str),
    settings: Mapping,
    upstreams: &mut Mapping,
    opts: &Options,
    c: &mut Converted,
) -> Result<String, String> {
    c.referenced
        .insert(("Service", ns.to_string(), service.to_string()));
    // The settings are in its name when there are any: two objects naming one Service port
    // with different settings get two upstreams, neither the other's (the second attack
    // review of issue 56: the first one's settings were silently everyone's).
    let up = match settings.is_empty() {
        true => format!("{ns}.{service}.{port}"),
        false => {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            serde_yaml::to_string(&settings)
                .unwrap_or_default()
                .hash(&mut h);
            // 64 bits: 32 were found to collide in minutes (the attack review of
            // 2026-11-30: a route's `timeouts` chosen to take an Ingress's HTTPS upstream).
            format!("{ns}.{service}.{port}.{:016x}", h.finish())
        }
    };
    // And never shared by settings that differ, whatever the name.
    if let Some(Value::Mapping(have)) = upstreams.get(up.as_str()) {
        let theirs: Mapping = have
            .iter()
            .filter(|(k, _)| k.as_str() != Some("servers"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if theirs != settings {
            return Err(format!(
                "Service {ns}/{service} port {port}: its upstream's name is taken by other settings"
            ));
        }
    }
    if !upstreams.contains_key(up.as_str()) {
        let servers: Vec<Value> = match &c.cluster {
            Some(view) => view
                .servers(ns, service, port)?
                .into_iter()
                .map(Value::from)
                .collect(),
            None => vec![opts
                .service_address
                .replace("{service}", service)
                .replace("{namespace}", ns)
                .replace("{port}", port)
                .into()],
        };
        let mut u = Mapping::new();
        u.insert("servers".into(), Value::Sequence(servers));
        for (k, v) in settings {
            u.insert(k, v);
        }
        upstreams.insert(up.clone().into(), Value::Mapping(u));
        c.translated += 1;
    }
    Ok(up)
}

pub(super) fn listener(address: &str, tls: Option<Mapping>, routes: Vec<Route>) -> Value {
    let mut l = Mapping::new();
    l.insert("address".into(), address.into());
    if let Some(tls) = tls {
        l.insert("tls".into(), Value::Mapping(tls));
    }
    let mut routes: Vec<Value> = routes.into_iter().map(|r| Value::Mapping(r.body)).collect();
    if routes.is_empty() {
        let mut r = Mapping::new();
        let mut respond = Mapping::new();
        respond.insert("status".into(), 404.into());
        r.insert("respond".into(), Value::Mapping(respond));
        routes.push(Value::Mapping(r));
    }
    l.insert("routes".into(), Value::Sequence(routes));
    Value::Mapping(l)
}

pub(super) fn add_hosts(m: &mut Mapping, hosts: &[String]) {
    match hosts {
        [] => {}
        [one] => {
            m.insert("host".into(), one.clone().into());
        }
        many => {
            m.insert(
                "host".into(),
                Value::Sequence(many.iter().map(|h| h.clone().into()).collect()),
            );
        }
    }
}

/// A 503 route action with a note saying why.
pub(super) fn refusal(c: &mut Converted, why: &str) -> Mapping {
    let mut respond = Mapping::new();
    respond.insert("status".into(), 503.into());
    respond.insert("body".into(), "not translated by weir import\n".into());
    let mut action = Mapping::new();
    action.insert(
        format!("{}{}", super::super::nginx::NOTE_KEY, c.notes.len()).into(),
        c.notes.len().into(),
    );
    c.notes.push(why.to_string());
    action.insert("respond".into(), Value::Mapping(respond));
    action
}

/// The listeners of a conversion: the plain one (h2c when a GRPCRoute is on it), the TLS one
/// when there are certificates, and the TCP one of TLSRoutes (routes by server name, and the
/// upstream of the names none takes).
pub(super) fn listeners(
    (mut routes, mut tls_routes): (Vec<Route>, Vec<Route>),
    certificates: Vec<Value>,
    (passthrough, passthrough_default): (Vec<Value>, Option<String>),
    h2c: bool,
) -> Vec<Value> {
    routes.sort_by_key(|r| r.rank);
    tls_routes.sort_by_key(|r| r.rank);
    let mut listeners = vec![listener(super::LISTEN, None, routes)];
    if h2c {
        if let Value::Mapping(l) = &mut listeners[0] {
            l.insert("h2c".into(), true.into());
        }
    }
    if !certificates.is_empty() {
        let mut tls = Mapping::new();
        tls.insert("certificates".into(), Value::Sequence(certificates));
        listeners.push(listener(super::LISTEN_TLS, Some(tls), tls_routes));
    }
    if !passthrough.is_empty() || passthrough_default.is_some() {
        let mut tcp = Mapping::new();
        if let Some(up) = passthrough_default {
            tcp.insert("upstream".into(), up.into());
        }
        if !passthrough.is_empty() {
            tcp.insert("routes".into(), Value::Sequence(passthrough));
        }
        let mut l = Mapping::new();
        l.insert("address".into(), super::LISTEN_PASSTHROUGH.into());
        l.insert("tcp".into(), Value::Mapping(tcp));
        listeners.push(Value::Mapping(l));
    }
    listeners
}

/// Every host an Ingress of `class` (or without one) names, with the Ingress's
/// `creationTimestamp`: a newer Gateway route does not get it (the second attack review of
/// issue 56), an older one does.
pub(super) fn ingress_hosts(objects: &[Value], class: &str) -> Vec<(String, String)> {
    objects
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("Ingress"))
        .filter(|o| super::class_of(o).is_none_or(|k| k == class))
        .flat_map(|o| {
            let age = o["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or("")
                .to_string();
            o["spec"]["rules"]
                .as_sequence()
                .into_iter()
                .flatten()
                .filter_map(move |r| {
                    r["host"]
                        .as_str()
                        .map(|h| (h.to_ascii_lowercase(), age.clone()))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two objects' settings for one Service port never share an upstream, even when their
    /// names collide (the attack review of 2026-11-30 forged a 32-bit collision).
    #[test]
    fn an_upstream_name_taken_by_other_settings_is_refused() {
        let opts = Options {
            class: "nginx".into(),
            service_address: "127.0.0.1:{port}".into(),
            secrets_dir: "/tmp".into(),
            cluster: None,
        };
        let (mut c, mut upstreams) = (Converted::default(), Mapping::new());
        let mut tls = Mapping::new();
        tls.insert("tls".into(), Value::Mapping(Mapping::new()));
        let name = upstream_with(
            ("web", "app", "80"),
            tls.clone(),
            &mut upstreams,
            &opts,
            &mut c,
        )
        .unwrap();
        assert!(name.starts_with("web.app.80."), "{name}");
        assert_eq!(name.len(), "web.app.80.".len() + 16, "{name}");
        // The same settings share it.
        assert_eq!(
            upstream_with(
                ("web", "app", "80"),
                tls.clone(),
                &mut upstreams,
                &opts,
                &mut c
            ),
            Ok(name.clone())
        );
        // Another object's settings under the same name (a forged collision): refused.
        let Some(Value::Mapping(u)) = upstreams.get_mut(name.as_str()) else {
            panic!()
        };
        u.remove("tls");
        u.insert("protocol".into(), "h2".into());
        let err =
            upstream_with(("web", "app", "80"), tls, &mut upstreams, &opts, &mut c).unwrap_err();
        assert!(err.contains("taken by other settings"), "{err}");
    }
}
