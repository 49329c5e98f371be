//! model → RuntimeConfig: resolve addresses, check cross-field rules, precompile routes and
//! actions, and take zones and server state from the registry. Errors are `(key path,
//! message)`; the caller adds the line.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;

use super::listen_address::{listener_id, resolve, same_socket, unix_listen};
use super::{Limits, ListenerConfig, LogSettings, Registry, RuntimeConfig, Timeouts};
use crate::config::{check_header_value, model, BaseDir, CompileError};
use crate::routes::RouteTable;

pub(crate) fn compile(
    mut file: model::File,
    base: &BaseDir,
    registry: &Arc<Registry>,
) -> Result<RuntimeConfig, CompileError> {
    // The maps' variables, known to every value compiled below (and forgotten after).
    let _maps = crate::vars::map::install(&file.maps)?;
    let workers = match file.workers {
        model::Workers::Auto => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        model::Workers::Count(n) => n,
    };
    let server_header = match file.server_header.trim() {
        "" | "off" => None,
        v => {
            check_header_value(v).map_err(|m| ("server_header".to_string(), m))?;
            Some(Bytes::copy_from_slice(v.as_bytes()))
        }
    };
    let l = &file.limits;
    let field = |name: &str| format!("limits.{name}");
    if l.max_header_bytes.0 < 256 {
        return Err((
            field("max_header_bytes"),
            "must be at least 256 bytes".into(),
        ));
    }
    if l.max_uri_bytes.0 < 16 || l.max_uri_bytes.0 > l.max_header_bytes.0 {
        return Err((
            field("max_uri_bytes"),
            "must be between 16 bytes and max_header_bytes".into(),
        ));
    }
    if l.max_connections == 0 {
        return Err((field("max_connections"), "must be at least 1".into()));
    }
    let limits = Limits {
        head: weir_http::Limits {
            max_head_bytes: l.max_header_bytes.0 as usize,
            max_uri_bytes: l.max_uri_bytes.0 as usize,
            normalize_path: true,
            keep_encoded_slashes: l.encoded_slashes == model::EncodedSlashes::Keep,
            keep_semicolons: l.semicolons == model::EncodedSlashes::Keep,
            keep_utf8: l.utf8_paths == model::EncodedSlashes::Keep,
            underscores: match l.underscores_in_headers {
                model::UnderscoresInHeaders::Allow => weir_http::Underscores::Allow,
                model::UnderscoresInHeaders::Drop => weir_http::Underscores::Drop,
                model::UnderscoresInHeaders::Reject => weir_http::Underscores::Reject,
            },
        },
        max_body_bytes: l.max_body_bytes.0,
        body_ceiling: l.max_body_bytes.0,
        max_connections: l.max_connections,
        max_requests_per_connection: l.max_requests_per_connection,
        backlog: l.backlog,
    };
    let t = &file.timeouts;
    for (name, d) in [
        ("header", t.header),
        ("body", t.body),
        ("keepalive", t.keepalive),
        ("write", t.write),
    ] {
        if d.0.is_zero() {
            return Err((
                format!("timeouts.{name}"),
                "must be greater than zero".into(),
            ));
        }
    }
    let timeouts = Timeouts {
        header: t.header.0,
        body: t.body.0,
        keepalive: t.keepalive.0,
        write: t.write.0,
        shutdown: t.shutdown.0,
    };

    let mut upstreams = Vec::with_capacity(file.upstreams.len());
    let mut upstream_index = std::collections::HashMap::new();
    for (name, u) in file.upstreams {
        let up = crate::proxy::upstream::Upstream::compile(
            &name,
            u,
            &format!("upstreams.{name}"),
            &**registry,
            base,
        )?;
        upstream_index.insert(name, upstreams.len());
        upstreams.push(Arc::new(up));
    }
    let sharded = file.cache_zones.values().any(|z| z.cluster.is_some());
    let (cluster, peers) = compile_cluster(
        file.cluster.take(),
        (&file.listeners, file.admin.as_ref(), sharded),
        registry,
        base,
    )?;
    if let Some(up) = peers {
        upstream_index.insert(
            crate::cluster::shard::PEERS_UPSTREAM.to_string(),
            upstreams.len(),
        );
        upstreams.push(Arc::new(up));
    }
    let mut zone_shards = Vec::with_capacity(file.cache_zones.len());
    let mut cache_zones = Vec::with_capacity(file.cache_zones.len());
    let mut zone_index = std::collections::HashMap::new();
    for (name, z) in file.cache_zones {
        if z.max_size.0 < 64 * 1024 {
            return Err((
                format!("cache_zones.{name}.max_size"),
                "must be at least 64k".into(),
            ));
        }
        if z.shards == 0 || z.shards > 1024 {
            return Err((
                format!("cache_zones.{name}.shards"),
                "must be between 1 and 1024".into(),
            ));
        }
        let disk = match z.disk {
            Some(d) => Some(disk_config(d, &name, base, &cache_zones)?),
            None => None,
        };
        // The largest object: a memory shard, or with a disk tier, a segment of it.
        let largest =
            (z.max_size.0 / z.shards as u64).max(disk.as_ref().map_or(0, |d| d.segment_size));
        zone_index.insert(name.clone(), (cache_zones.len(), largest));
        zone_shards.push(match (&z.cluster, &cluster) {
            (None, _) => None,
            (Some(zc), Some(c)) => {
                let path = format!("cache_zones.{name}.cluster");
                let peers = upstream_index.get(crate::cluster::shard::PEERS_UPSTREAM);
                // Alone in the cluster (no peers upstream): every key is this node's.
                match peers {
                    Some(&up) => Some(Arc::new(crate::cluster::shard::Shard::compile(
                        zc, &path, c, up,
                    )?)),
                    None => None,
                }
            }
            (Some(_), None) => {
                return Err((
                    format!("cache_zones.{name}.cluster"),
                    "a sharded zone needs a `cluster:` section (the node's name and etcd)".into(),
                ))
            }
        });
        let zone = registry
            .zone(&name, z.max_size.0, z.shards, disk)
            .map_err(|e| (format!("cache_zones.{name}.disk.path"), e))?;
        let hot = z.cluster.as_ref().and_then(|c| c.local_hot).map(|s| s.0);
        if hot.is_some_and(|h| h < 64 * 1024) {
            return Err((
                format!("cache_zones.{name}.cluster.local_hot"),
                "must be at least 64k".into(),
            ));
        }
        zone.set_hot(hot);
        cache_zones.push(zone);
    }
    let shield = match file.shield {
        Some(s) => Some(Arc::new(crate::shield::Shield::compile(
            s,
            &registry.shield,
        )?)),
        None => None,
    };
    let logs =
        crate::access_log::LogCompiler::new(&registry.sinks, registry.metrics.log_dropped.clone());
    let default_log = logs.slot(file.access_log.as_ref(), "access_log", None)?;
    let filters = crate::filters::compile::Compiler::new(
        file.filters,
        &upstream_index,
        upstreams
            .iter()
            .map(|u| crate::filters::compile::UpstreamInfo {
                servers: u.servers.iter().map(|s| s.name.clone()).collect(),
                shadow: crate::proxy::shadow::ShadowUpstream::of(u),
            })
            .collect(),
        registry.filter_state.clone(),
        (shield.clone(), cluster.clone()),
        base,
    )?;
    let mut kv_stores = std::collections::HashMap::new();
    for (name, k) in file.kv_stores {
        let settings = kv_settings(k, &name, base)?;
        let store = registry
            .kv_store(&name, settings)
            .map_err(|e| (format!("kv_stores.{name}.disk.path"), e))?;
        kv_stores.insert(name, store);
    }
    let refs = crate::actions::Refs {
        upstreams: &upstream_index,
        zones: &zone_index,
        logs: &logs,
        filters: &filters,
        kv: &kv_stores,
    };
    let mut listeners = Vec::with_capacity(file.listeners.len());
    let mut acme_all = Vec::new();
    let mut file_certs = Vec::new();
    // Plain-HTTP listeners answer HTTP-01 when some listener obtains certificates by it.
    let http01 = file.listeners.iter().any(|l| {
        let site_acme = l.sites.iter().filter_map(|s| s.tls.as_ref()?.acme.as_ref());
        l.tls
            .as_ref()
            .and_then(|t| t.acme.as_ref())
            .into_iter()
            .chain(site_acme)
            .any(|a| a.challenge == "http-01")
    });
    for (i, l) in file.listeners.into_iter().enumerate() {
        let path = format!("listeners[{i}]");
        let unix = unix_listen(&l, &path)?;
        let address = match &unix {
            Some(_) => super::UNIX_PEER,
            None => resolve(&l.address).map_err(|m| (format!("{path}.address"), m))?,
        };
        if let Some(twice) = listeners.iter().find(|x: &&ListenerConfig| match &unix {
            Some(u) => x.unix.as_ref().is_some_and(|x| x.path == u.path),
            None => x.unix.is_none() && x.address == address && address.port() != 0,
        }) {
            return Err((
                format!("{path}.address"),
                format!("{} is listed twice", twice.shown()),
            ));
        }
        let defer_secs = if unix.is_none() && l.defer_accept.unwrap_or(l.tcp.is_none()) {
            super::defer_secs(timeouts.header)
        } else {
            0
        };
        let log = logs.slot(
            l.access_log.as_ref(),
            &format!("{path}.access_log"),
            default_log,
        )?;
        let tcp = match &l.tcp {
            Some(t) => {
                tcp_only(&l, &path)?;
                Some(Arc::new(crate::tcp::TcpConfig::compile(
                    t,
                    &format!("{path}.tcp"),
                    &upstream_index,
                    &upstreams,
                )?))
            }
            None => None,
        };
        let mut l = l;
        let flat = crate::routes::sites::flatten(
            std::mem::take(&mut l.routes),
            std::mem::take(&mut l.sites),
            &path,
        )?;
        let tls13 = l
            .tls
            .as_ref()
            .is_none_or(|t| t.protocols.iter().any(|p| p == "tls1.3"));
        let tls = super::listener_tls::compile(
            l.tls.take(),
            super::listener_tls::FromSites {
                certificates: flat.certificates,
                acme: flat.acme,
            },
            tcp.is_some(),
            &path,
            (base, registry),
            &mut acme_all,
            &mut file_certs,
        )?;
        let (tls, on_demand) = match tls {
            Some(t) => (Some(t.config), t.on_demand),
            None => (None, None),
        };
        let quic = super::listener_tls::quic(
            &l,
            (tls.as_deref(), on_demand.is_some(), tls13),
            address,
            (&file.http3, timeouts.keepalive),
            &path,
        )?;
        let listener_filters = filters.list(l.filters, &path, &upstream_index, base, None)?;
        let error_pages = crate::actions::error_pages::ErrorPages::compile(
            &l.error_pages,
            &format!("{path}.error_pages"),
            base,
            None,
        )?;
        let mut routes = RouteTable::compile(
            flat.routes,
            &path,
            base,
            server_header.as_ref(),
            &refs,
            crate::routes::ListenerDefaults {
                access_log: log,
                filters: &listener_filters,
                error_pages: error_pages.as_ref(),
            },
        )?;
        if http01 && tls.is_none() {
            routes.prepend_acme(registry.acme_challenges.clone(), log);
        }
        listeners.push(ListenerConfig {
            id: listener_id(&listeners, address, false, unix.as_deref()),
            address,
            unix,
            admin: false,
            defer_secs,
            routes: Arc::new(routes),
            access_log: log,
            tls,
            on_demand,
            h2c: l.h2c,
            quic,
            proxy_protocol: match &l.proxy_protocol {
                Some(p) => Some(Arc::new(crate::shield::nets::compile(
                    &p.trusted,
                    &format!("{path}.proxy_protocol.trusted"),
                )?)),
                None => None,
            },
            tcp,
            error_pages,
            key: format!("{path}.address"),
            line: None,
        });
    }
    let mut admin_settings = None;
    if let Some(admin) = &file.admin {
        registry.start_history();
        let address = resolve(&admin.address).map_err(|m| ("admin.address".to_string(), m))?;
        // One port cannot be both (`run` would fail to bind the second).
        if let Some(l) = listeners.iter().find(|l| same_socket(l.address, address)) {
            return Err((
                "admin.address".to_string(),
                format!(
                    "{address} is also the address of {}",
                    l.key.trim_end_matches(".address")
                ),
            ));
        }
        let settings = super::admin_settings::AdminSettings::compile(admin, address, base, &|v| {
            std::env::var(v).ok()
        })?;
        // Scrapes and dashboards would flood the access log: admin requests are logged only
        // when asked for.
        let log = if settings.access_log {
            default_log
        } else {
            None
        };
        admin_settings = Some(settings);
        listeners.push(ListenerConfig {
            id: listener_id(&listeners, address, true, None),
            address,
            unix: None,
            admin: true,
            defer_secs: 0,
            routes: Arc::new(RouteTable::admin(log)),
            access_log: default_log,
            tls: None,
            on_demand: None,
            h2c: false,
            quic: None,
            proxy_protocol: None,
            error_pages: None,
            tcp: None,
            key: "admin.address".to_string(),
            line: None,
        });
    }
    let log = LogSettings::compile(&file.log)?;
    let request_id = crate::filters::request_id::RequestIdSettings::compile(&file.request_id)?;
    let tracing = file
        .tracing
        .as_ref()
        .map(crate::trace::context::TraceSettings::compile)
        .transpose()?;
    let access_logs = logs.finish();
    let server_line = match &server_header {
        Some(v) => Bytes::from([&b"Server: "[..], v, b"\r\n"].concat()),
        None => Bytes::new(),
    };
    let filters = filters.into_all();
    let mut by_index: Vec<(&String, &usize)> = upstream_index.iter().collect();
    by_index.sort_by_key(|(_, i)| **i);
    let subrequests = by_index
        .into_iter()
        .map(|(name, _)| {
            let bare = model::Proxy {
                upstream: name.clone(),
                host: "preserve".into(),
                strip_prefix: None,
                add_prefix: None,
                regex_replace: None,
                request_headers: Default::default(),
                response_headers: Default::default(),
                forwarded: model::Forwarded {
                    x_forwarded: false,
                    forwarded: false,
                    trusted_proxies: Vec::new(),
                },
                via: false,
                upgrade: false,
                stream_idle: crate::config::units::Dur(std::time::Duration::from_secs(300)),
            };
            crate::proxy::route::ProxyRoute::compile(
                bare,
                &format!("upstreams.{name}"),
                &upstream_index,
                Vec::new(),
                (name, None),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let watch = file.reload.watch.then_some(file.reload.debounce.0);
    let pid_file = file.pid_file.as_ref().map(|p| base.0.join(p));
    let kubernetes = file
        .providers
        .as_ref()
        .and_then(|p| p.kubernetes.as_ref())
        .map(|k| crate::config::kubernetes::Settings::compile(k, &base.0))
        .transpose()?;
    // What a connection may read before its request is routed: the largest body any route
    // takes (a route's own limit is applied once it is chosen, `pipeline::route_body_limit`).
    let mut limits = limits;
    limits.body_ceiling = listeners
        .iter()
        .flat_map(|l| l.routes.iter())
        .filter_map(|r| r.max_body_bytes)
        .fold(limits.max_body_bytes, u64::max);
    Ok(RuntimeConfig {
        pid_file,
        kubernetes,
        cluster,
        zone_shards,
        watch,
        shield,
        subrequests,
        workers,
        server_header,
        server_line,
        limits,
        timeouts,
        listeners,
        upstreams,
        cache_zones,
        acme: acme_all,
        certificates: file_certs,
        kv_stores: kv_stores.into_values().collect(),
        registry: registry.clone(),
        access_logs,
        metrics: file.metrics,
        request_id,
        tracing,
        log,
        http2: check_http2(file.http2)?,
        http3: file.http3,
        admin: admin_settings,
        filters,
    })
}

/// Checks the `http2:` limits against RFC 9113's ranges.
fn check_http2(h: model::Http2) -> Result<model::Http2, CompileError> {
    const MAX_WINDOW: u64 = (1 << 31) - 1;
    let bad = |key: &str, m: &str| Err((format!("http2.{key}"), m.to_string()));
    if h.max_concurrent_streams == 0 {
        return bad("max_concurrent_streams", "must be at least 1");
    }
    if !(16_384..=16_777_215).contains(&h.max_frame_size.0) {
        return bad("max_frame_size", "must be between 16KiB and 16MiB - 1");
    }
    if h.initial_window_size.0 > MAX_WINDOW || h.connection_window_size.0 > MAX_WINDOW {
        let key = if h.initial_window_size.0 > MAX_WINDOW {
            "initial_window_size"
        } else {
            "connection_window_size"
        };
        return bad(key, "must be below 2GiB");
    }
    if h.max_header_list_size.0 > u64::from(u32::MAX) {
        return bad("max_header_list_size", "must be below 4GiB");
    }
    if h.max_control_frames_per_second == 0 {
        return bad("max_control_frames_per_second", "must be at least 1");
    }
    Ok(h)
}

/// A key-value store's settings, checked.
fn kv_settings(
    k: crate::config::model::KvStoreConfig,
    name: &str,
    base: &BaseDir,
) -> Result<crate::kv::KvSettings, CompileError> {
    let key = |k: &str| format!("kv_stores.{name}.{k}");
    if k.max_size.0 < 64 * 1024 {
        return Err((key("max_size"), "must be at least 64k".into()));
    }
    let max_value_size = k.max_value_size.map_or(1 << 20, |s| s.0);
    if max_value_size == 0 || max_value_size > k.max_size.0 {
        return Err((
            key("max_value_size"),
            "must be between 1 and max_size".into(),
        ));
    }
    let disk = match k.disk {
        Some(d) if d.path.trim().is_empty() => {
            return Err((key("disk.path"), "must name a directory".into()))
        }
        Some(d) => Some(crate::kv::log::LogSettings {
            path: base.0.join(&d.path),
            sync: d.sync,
        }),
        None => None,
    };
    Ok(crate::kv::KvSettings {
        max_size: k.max_size.0,
        max_value_size,
        default_ttl: k.default_ttl.map_or(0, |d| d.0.as_secs()),
        disk,
    })
}

/// A zone's disk tier settings, checked: a directory no other zone uses, a sane size.
fn disk_config(
    d: crate::config::model::DiskTier,
    zone: &str,
    base: &BaseDir,
    others: &[Arc<crate::cache::CacheZone>],
) -> Result<weir_cache::DiskConfig, CompileError> {
    let key = |k: &str| format!("cache_zones.{zone}.disk.{k}");
    if d.path.trim().is_empty() {
        return Err((key("path"), "must name a directory".into()));
    }
    let path = base.0.join(&d.path);
    if others
        .iter()
        .filter_map(|z| z.disk.as_ref())
        .any(|t| t.config().path == path)
    {
        return Err((
            key("path"),
            format!("{} is another zone's disk", path.display()),
        ));
    }
    if d.max_size.0 < 1 << 20 {
        return Err((key("max_size"), "must be at least 1m".into()));
    }
    let mut cfg = weir_cache::DiskConfig::new(path, d.max_size.0);
    if let Some(t) = d.io_threads {
        if !(1..=64).contains(&t) {
            return Err((key("io_threads"), "must be between 1 and 64".into()));
        }
        cfg.io_threads = t;
    }
    if let Some(q) = d.write_queue {
        cfg.write_queue = q.0.max(1 << 20);
    }
    if let Some(s) = d.segment_size {
        if !(1 << 20..=1 << 31).contains(&s.0) {
            return Err((key("segment_size"), "must be between 1m and 2g".into()));
        }
        cfg.segment_size = s.0;
    }
    if let Some(m) = d.min_free {
        cfg.min_free = m.0;
    }
    Ok(cfg)
}

/// Compiles `cluster:` (taken out of `file`) and, when a zone is sharded and there are other
/// members, the peers upstream.
fn compile_cluster(
    c: Option<crate::config::model_cluster::Cluster>,
    (listeners, admin, sharded): (&[model::Listener], Option<&model::Admin>, bool),
    registry: &Arc<Registry>,
    base: &BaseDir,
) -> Result<
    (
        Option<Arc<crate::cluster::Cluster>>,
        Option<crate::proxy::upstream::Upstream>,
    ),
    CompileError,
> {
    let Some(c) = c else {
        return Ok((None, None));
    };
    let listen = listeners
        .first()
        .and_then(|l| l.address.parse::<SocketAddr>().ok());
    let admin = admin.and_then(|a| a.address.parse::<SocketAddr>().ok());
    let cluster = crate::cluster::Cluster::compile(c, listen, admin, &registry.cluster)?;
    let peers = match crate::cluster::shard::peers_upstream(&cluster).filter(|_| sharded) {
        Some(m) => Some(crate::proxy::upstream::Upstream::compile(
            crate::cluster::shard::PEERS_UPSTREAM,
            m,
            "cluster",
            &**registry,
            base,
        )?),
        None => None,
    };
    Ok((Some(Arc::new(cluster)), peers))
}

/// A TCP listener relays bytes: the HTTP keys of a listener mean nothing on it.
fn tcp_only(l: &model::Listener, path: &str) -> Result<(), CompileError> {
    let http = [
        ("routes", !l.routes.is_empty()),
        ("filters", !l.filters.is_empty()),
        ("h2c", l.h2c),
        ("quic", l.quic),
        ("error_pages", !l.error_pages.is_empty()),
        ("sites", !l.sites.is_empty()),
    ];
    match http.iter().find(|(_, given)| *given) {
        Some((key, _)) => Err((
            format!("{path}.{key}"),
            format!("a `tcp:` listener relays bytes and serves no HTTP: remove `{key}` (or put it on another listener)"),
        )),
        None => Ok(()),
    }
}
