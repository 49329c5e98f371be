//! The cache stage of a `proxy` route, as part of the client connection it serves:
//!
//! ```text
//! PURGE ─────────────────────────────────────────────→ purge the key (loopback / purge_from)
//! unsafe method ──→ forward ──→ 2xx/3xx: invalidate the URI, Location, Content-Location
//! bypass rule ────→ forward (Cache-Status: fwd=bypass)
//! lookup ─ fresh / max-stale ─────────────────────────→ serve stored (304 / 206 / HEAD as asked)
//!        ─ stale-while-revalidate ─→ serve stored + background revalidation
//!        ─ must revalidate ─→ conditional fetch ─ 304 → update headers, serve
//!                                               ─ new response → store, serve
//!                                               ─ error/5xx → stale-if-error? serve stale : answer
//!        ─ miss ─ only-if-cached → 504
//!               ─ hit-for-miss → forward
//!               ─ coalesce: leader forwards (tee into the store) / followers wait, then serve
//! ```
//!
//! Hits are written from the stored, pre-encoded head plus `Age`, `Cache-Status`, the route's
//! response edits and `Via`: three buffer copies and the body.
//!
//! Size: about 900 lines, over the project's 700, for the same reason as `forward.rs`. Building,
//! refreshing and invalidating stored objects already live in `weir_cache::stored`; the pipeline
//! issue (10) moves the flow itself into the pipeline.

use std::fmt::Write as _;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use weir_cache::object::exact;
use weir_cache::policy::{self, evaluate, storable, values, Freshness, NoStore};
use weir_cache::store::{Lookup, Stats};
use weir_cache::stored;
use weir_cache::{CacheKey, CachedObject, Directives, PurgeSelector};
use weir_http::conditional::{self, RangeSpec};
use weir_http::response::put_header;
use weir_http::{Method, RequestHead, ResponseHead};

use super::conn::{Conn, ConnError, Next};
use super::forward::{fetch_whole, Exchange, HeadPlan, PlanFn};
use crate::cache::status::Fwd;
use crate::cache::zone::{Inflight, Phase, Role, StreamHead};
use crate::cache::{CacheRoute, CacheStatus, CacheZone};
use crate::proxy::route::ProxyRoute;
use crate::reply::{self, ConnHeader};

impl Conn {
    /// The hit path, without building the (large, boxed) future of the full stage: a fresh stored
    /// response is written at once and `Some(next)` returned; anything else is `None`, for
    /// [`Conn::cached`] to handle.
    pub(super) fn try_fresh_hit(
        &mut self,
        head: &RequestHead,
        p: &ProxyRoute,
        c: &CacheRoute,
        next: Next,
    ) -> Option<Next> {
        if !matches!(head.method, Method::Get | Method::Head) || bypassed(head, c).is_some() {
            return None;
        }
        let zone = self.rt.cfg.cache_zones[c.zone].clone();
        let key = c.key.key(head, "http");
        let Lookup::Found(obj) = zone.store.lookup(&key, |name| {
            vary_value(head, name, c.normalize_accept_encoding)
        }) else {
            return None;
        };
        let age = obj.meta.clock.current_age(zone.now());
        let req_dirs = Directives::parse(values(&head.headers, "cache-control"));
        match evaluate(&obj.meta.storable, age, obj.is_invalidated(), &req_dirs) {
            Freshness::Fresh | Freshness::StaleAllowed => {
                self.serve_hit(head, p, c, &zone, &obj, age, next);
                Some(next)
            }
            _ => None,
        }
    }

    /// Writes a hit: counted, `Cache-Status: hit` with the remaining TTL.
    #[allow(clippy::too_many_arguments)]
    fn serve_hit(
        &mut self,
        head: &RequestHead,
        p: &ProxyRoute,
        c: &CacheRoute,
        zone: &CacheZone,
        obj: &CachedObject,
        age: u64,
        next: Next,
    ) {
        Stats::bump(&zone.store.stats.hits);
        let status = CacheStatus {
            hit: true,
            ttl: Some(ttl(obj, age)),
            ..Default::default()
        };
        self.write_stored(head, p, c, obj, age, status, next);
    }

    /// Serves `head` through the cache stage `c` of proxy route `p`.
    pub(super) async fn cached(
        &mut self,
        head: &RequestHead,
        route_index: usize,
        p: &ProxyRoute,
        c: &CacheRoute,
        next: Next,
    ) -> Result<Next, ConnError> {
        let rt = self.rt.clone();
        let zone = rt.cfg.cache_zones[c.zone].clone();
        if matches!(&head.method, Method::Other(m) if &m[..] == b"PURGE") {
            return Ok(self.purge_request(head, c, &zone, next));
        }
        if !matches!(head.method, Method::Get | Method::Head) {
            let store_post = c.store_post_responses && head.method == Method::Post;
            let request_time = zone.now();
            let plan = if store_post {
                post_plan(head, c, &zone)
            } else {
                status_plan(Fwd::Bypass, Some("method"), c.x_cache)
            };
            let mut ex = Exchange {
                plan: Some(plan),
                ..Default::default()
            };
            let next = self.forward(head, p, next, &mut ex).await?;
            if !matches!(head.method, Method::Options | Method::Trace) {
                invalidate_after_unsafe(&zone, head, ex.response.as_ref());
            }
            if let (Some(resp), Some(body)) = (ex.response.as_ref(), ex.body.take()) {
                // Only a post_plan captures: the response is reusable for GETs of this URI.
                let key = c.key.get_key(head, "http");
                store_response(head, c, &zone, &key, resp, exact(body), request_time);
            }
            return Ok(next);
        }
        if let Some(why) = bypassed(head, c) {
            let mut ex = Exchange {
                plan: Some(status_plan(Fwd::Bypass, Some(why), c.x_cache)),
                ..Default::default()
            };
            return self.forward(head, p, next, &mut ex).await;
        }
        let key = c.key.key(head, "http");
        let req_dirs = Directives::parse(values(&head.headers, "cache-control"));
        let lookup = zone.store.lookup(&key, |name| {
            vary_value(head, name, c.normalize_accept_encoding)
        });
        let fwd_on_miss = match lookup {
            Lookup::Found(obj) => {
                return self
                    .serve_found(head, (route_index, p), c, &zone, &key, obj, &req_dirs, next)
                    .await
            }
            Lookup::VariantMiss => Fwd::VaryMiss,
            Lookup::Miss => Fwd::UriMiss,
        };
        Stats::bump(&zone.store.stats.misses);
        if req_dirs.only_if_cached {
            return Ok(self.cache_error(head, c, 504, "only-if-cached", next));
        }
        if zone.is_hit_for_miss(key.hash) {
            let mut ex = Exchange {
                plan: Some(status_plan(fwd_on_miss, Some("hit-for-miss"), c.x_cache)),
                ..Default::default()
            };
            return self.forward(head, p, next, &mut ex).await;
        }
        match zone.join(key.hash) {
            Role::Leader(inflight) => {
                let guard = LeaderGuard {
                    zone: &zone,
                    hash: key.hash,
                    inflight,
                    phase: Phase::Uncacheable,
                };
                self.fetch_and_store(head, p, c, &zone, &key, fwd_on_miss, next, guard)
                    .await
            }
            Role::Follower(inflight) => {
                Stats::bump(&zone.store.stats.coalesced);
                match self
                    .follow(head, p, c, &inflight, fwd_on_miss, next)
                    .await?
                {
                    Some(next) => Ok(next),
                    None => {
                        let mut ex = Exchange {
                            plan: Some(status_plan(
                                fwd_on_miss,
                                Some("collapsed-uncacheable"),
                                c.x_cache,
                            )),
                            ..Default::default()
                        };
                        self.forward(head, p, next, &mut ex).await
                    }
                }
            }
        }
    }

    /// A coalesced follower: streams the leader's response as it arrives. `Ok(None)`: the leader's
    /// answer is not shareable (or never came within `lock_timeout`), fetch on your own.
    async fn follow(
        &mut self,
        head: &RequestHead,
        p: &ProxyRoute,
        c: &CacheRoute,
        inflight: &Inflight,
        fwd: Fwd,
        next: Next,
    ) -> Result<Option<Next>, ConnError> {
        let mut changes = inflight.subscribe();
        let head_deadline = tokio::time::Instant::now() + c.lock_timeout;
        let shared = loop {
            match inflight.snapshot(0) {
                (Phase::Uncacheable, ..) => return Ok(None),
                (Phase::Aborted, None, _) => return Ok(None),
                (_, Some(h), _) => break h,
                _ => {}
            }
            match tokio::time::timeout_at(head_deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                // Timed out, or the leader vanished: go on your own.
                _ => return Ok(None),
            }
        };
        let idle = self.rt.cfg.upstreams[p.upstream].idle_read_timeout;
        // Framing for this client: the known length, else chunks (1.1) or the close (1.0).
        let chunked = shared.content_length.is_none() && head.version == weir_http::Version::Http11;
        let next = if shared.content_length.is_none() && !chunked {
            Next::Close
        } else {
            next
        };
        self.out.put_slice(&weir_cache::object::encode_head(
            shared.status,
            &shared.reason,
            &shared.headers,
            shared.content_length,
        ));
        if chunked {
            self.out.put_slice(b"Transfer-Encoding: chunked\r\n");
        }
        let status = CacheStatus {
            fwd: Some(fwd),
            fwd_status: Some(shared.status),
            collapsed: true,
            stored: true,
            ..Default::default()
        };
        tail(
            &mut self.out,
            p,
            c,
            0,
            &status,
            ConnHeader::for_response(next != Next::KeepAlive, head.version),
        );
        if head.method == Method::Head {
            return Ok(Some(next));
        }
        let mut sent = 0;
        loop {
            let (phase, _, chunks) = inflight.snapshot(sent);
            sent += chunks.len();
            for chunk in chunks {
                if chunked {
                    let _ = write!(self.out, "{:x}\r\n", chunk.len());
                }
                self.out.put_slice(&chunk);
                if chunked {
                    self.out.put_slice(b"\r\n");
                }
            }
            match phase {
                Phase::Complete => {
                    if chunked {
                        self.out.put_slice(b"0\r\n\r\n");
                    }
                    return Ok(Some(next));
                }
                Phase::Aborted | Phase::Uncacheable => return Err(ConnError::UpstreamAborted),
                Phase::Fetching | Phase::Streaming => {}
            }
            self.flush().await?;
            match tokio::time::timeout(idle, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => return Err(ConnError::UpstreamAborted),
            }
        }
    }

    /// A stored response exists: serve, revalidate, or refetch per RFC 9111.
    #[allow(clippy::too_many_arguments)]
    async fn serve_found(
        &mut self,
        head: &RequestHead,
        (route_index, p): (usize, &ProxyRoute),
        c: &CacheRoute,
        zone: &Arc<CacheZone>,
        key: &CacheKey,
        obj: Arc<CachedObject>,
        req_dirs: &Directives,
        next: Next,
    ) -> Result<Next, ConnError> {
        let now = zone.now();
        let age = obj.meta.clock.current_age(now);
        match evaluate(&obj.meta.storable, age, obj.is_invalidated(), req_dirs) {
            Freshness::Fresh | Freshness::StaleAllowed => {
                self.serve_hit(head, p, c, zone, &obj, age, next);
                Ok(next)
            }
            Freshness::StaleWhileRevalidate => {
                Stats::bump(&zone.store.stats.hits);
                Stats::bump(&zone.store.stats.stale);
                let status = CacheStatus {
                    hit: true,
                    ttl: Some(ttl(&obj, age)),
                    detail: Some("stale-while-revalidate"),
                    ..Default::default()
                };
                self.write_stored(head, p, c, &obj, age, status, next);
                self.revalidate_in_background(head, route_index, zone, key, obj);
                Ok(next)
            }
            Freshness::Revalidate { if_error } => {
                Stats::bump(&zone.store.stats.stale);
                if req_dirs.only_if_cached {
                    return Ok(self.cache_error(head, c, 504, "only-if-cached", next));
                }
                let rt = self.rt.clone();
                let validators = stored::revalidation_fields(&obj);
                let request_time = zone.now();
                match fetch_whole(&rt, self.peer.ip(), head, p, &validators, c.max_object_size)
                    .await
                {
                    Ok((resp, _)) if resp.status == 304 => {
                        Stats::bump(&zone.store.stats.revalidated);
                        let updated = Arc::new(stored::refreshed(
                            &obj,
                            &resp.headers,
                            (request_time, zone.now()),
                            &c.rules,
                        ));
                        zone.store.insert(key, updated.clone());
                        let age = updated.meta.clock.current_age(zone.now());
                        let status = CacheStatus {
                            fwd: Some(Fwd::Stale),
                            fwd_status: Some(304),
                            ttl: Some(ttl(&updated, age)),
                            stored: true,
                            ..Default::default()
                        };
                        self.write_stored(head, p, c, &updated, age, status, next);
                        Ok(next)
                    }
                    Ok((resp, _)) if resp.status >= 500 && if_error => {
                        Ok(self.serve_stale_on_error(head, p, c, &obj, zone, next))
                    }
                    Ok((resp, body)) => {
                        let fresh =
                            store_response(head, c, zone, key, &resp, body.clone(), request_time);
                        let obj = fresh.unwrap_or_else(|| {
                            Arc::new(stored::build(
                                &head.headers,
                                &resp,
                                body,
                                (request_time, zone.now()),
                                c.normalize_accept_encoding,
                                None,
                            ))
                        });
                        let age = obj.meta.clock.current_age(zone.now());
                        let status = CacheStatus {
                            fwd: Some(Fwd::Stale),
                            fwd_status: Some(resp.status),
                            stored: obj.meta.storable.lifetime > 0,
                            ttl: Some(ttl(&obj, age)),
                            ..Default::default()
                        };
                        self.write_stored(head, p, c, &obj, age, status, next);
                        Ok(next)
                    }
                    Err(_) if if_error => {
                        Ok(self.serve_stale_on_error(head, p, c, &obj, zone, next))
                    }
                    // Too large to revalidate in memory, or the origin failed: a plain forward
                    // answers (and maps the failure to 502/503/504 as usual).
                    Err(_) => {
                        let mut ex = Exchange {
                            plan: Some(status_plan(Fwd::Stale, None, c.x_cache)),
                            ..Default::default()
                        };
                        self.forward(head, p, next, &mut ex).await
                    }
                }
            }
        }
    }

    fn serve_stale_on_error(
        &mut self,
        head: &RequestHead,
        p: &ProxyRoute,
        c: &CacheRoute,
        obj: &Arc<CachedObject>,
        zone: &CacheZone,
        next: Next,
    ) -> Next {
        Stats::bump(&zone.store.stats.hits);
        let age = obj.meta.clock.current_age(zone.now());
        let status = CacheStatus {
            hit: true,
            ttl: Some(ttl(obj, age)),
            detail: Some("stale-if-error"),
            ..Default::default()
        };
        self.write_stored(head, p, c, obj, age, status, next);
        next
    }

    /// The coalescing leader: forward, relaying to the client while copying the body, then store.
    #[allow(clippy::too_many_arguments)]
    async fn fetch_and_store(
        &mut self,
        head: &RequestHead,
        p: &ProxyRoute,
        c: &CacheRoute,
        zone: &Arc<CacheZone>,
        key: &CacheKey,
        fwd: Fwd,
        next: Next,
        mut guard: LeaderGuard<'_>,
    ) -> Result<Next, ConnError> {
        let request_time = zone.now();
        let decision = std::cell::Cell::new(None);
        let inflight = guard.inflight.clone();
        let plan = |resp: &ResponseHead| {
            let verdict = storable(
                &head.method,
                &head.headers,
                resp.status,
                &resp.headers,
                &c.rules,
                zone.now(),
            );
            let mut st = CacheStatus {
                fwd: Some(fwd),
                fwd_status: Some(resp.status),
                ..Default::default()
            };
            let length = match resp.body {
                weir_http::BodyKind::Length(n) => Some(n),
                weir_http::BodyKind::Empty => Some(0),
                _ => None,
            };
            let verdict = match verdict {
                Ok(_) if length.is_some_and(|n| n > c.max_object_size as u64) => {
                    Err(NoStore::TooLarge)
                }
                v => v,
            };
            let mut tee = None;
            let capture = match &verdict {
                Ok(_) => {
                    st.stored = true;
                    // Followers can share the body only of a GET (a HEAD's has none).
                    if head.method == Method::Get {
                        inflight.publish_head(StreamHead {
                            status: resp.status,
                            reason: resp.reason.clone(),
                            headers: stored::stored_headers(&resp.headers),
                            content_length: length,
                        });
                        tee = Some(inflight.clone());
                    }
                    Some(c.max_object_size)
                }
                Err(why) => {
                    st.detail = Some(why.as_str());
                    None
                }
            };
            decision.set(Some(verdict.is_ok()));
            let mut extra = BytesMut::new();
            st.render(&mut extra, c.x_cache);
            HeadPlan {
                extra,
                capture,
                tee,
                zone: Some(zone.clone()),
            }
        };
        let mut ex = Exchange {
            plan: Some(Box::new(plan)),
            strip_conditionals: true,
            ..Default::default()
        };
        let next = self.forward(head, p, next, &mut ex).await?;
        let (resp, body) = (ex.response.take(), ex.body.take());
        let stored = match (resp, body, decision.get()) {
            (Some(resp), Some(body), Some(true)) => {
                // Every chunk reached the followers, stored or not.
                guard.phase = Phase::Complete;
                store_response(head, c, zone, key, &resp, exact(body), request_time).is_some()
            }
            (Some(_), _, Some(false)) => {
                zone.mark_hit_for_miss(key.hash, c.hit_for_miss);
                false
            }
            _ => false,
        };
        if stored {
            zone.clear_hit_for_miss(key.hash);
        }
        drop(guard);
        Ok(next)
    }

    /// Spawns a conditional fetch that refreshes `obj` without making anyone wait. The task owns
    /// what it uses: the route table (`Arc`) and the route's index in it.
    fn revalidate_in_background(
        &self,
        head: &RequestHead,
        route_index: usize,
        zone: &Arc<CacheZone>,
        key: &CacheKey,
        obj: Arc<CachedObject>,
    ) {
        // Joining as leader keeps concurrent stale hits from starting more refreshes. Nothing is
        // published: a miss that follows this key fetches on its own.
        let Role::Leader(inflight) = zone.join(key.hash) else {
            return;
        };
        let (rt, zone, key, head, peer) = (
            self.rt.clone(),
            zone.clone(),
            key.clone(),
            head.clone(),
            self.peer.ip(),
        );
        let routes = self.routes().clone();
        tokio::task::spawn_local(async move {
            let _guard = LeaderGuard {
                zone: &zone,
                hash: key.hash,
                inflight,
                phase: Phase::Uncacheable,
            };
            let Some(crate::actions::Action::Proxy(p)) = routes.get(route_index).map(|r| &r.action)
            else {
                return;
            };
            let Some(c) = p.cache.as_ref() else { return };
            let request_time = zone.now();
            match fetch_whole(
                &rt,
                peer,
                &head,
                p,
                &stored::revalidation_fields(&obj),
                c.max_object_size,
            )
            .await
            {
                Ok((resp, _)) if resp.status == 304 => {
                    Stats::bump(&zone.store.stats.revalidated);
                    zone.store.insert(
                        &key,
                        Arc::new(stored::refreshed(
                            &obj,
                            &resp.headers,
                            (request_time, zone.now()),
                            &c.rules,
                        )),
                    );
                }
                Ok((resp, body)) if resp.status < 500 => {
                    store_response(&head, c, &zone, &key, &resp, body, request_time);
                }
                Ok(_) | Err(_) => {}
            }
        });
    }

    /// Writes a stored response, honouring the request's conditionals, range and method.
    #[allow(clippy::too_many_arguments)]
    fn write_stored(
        &mut self,
        head: &RequestHead,
        p: &ProxyRoute,
        c: &CacheRoute,
        obj: &CachedObject,
        age: u64,
        status: CacheStatus,
        next: Next,
    ) {
        let conn = ConnHeader::for_response(next != Next::KeepAlive, head.version);
        let out = &mut self.out;
        // Conditionals and ranges apply to a stored 200 only; the rules are the static files'.
        let validators = obj.validators();
        let complete = obj.meta.status == 200;
        if complete && conditional::not_modified(head, &validators) {
            out.put_slice(b"HTTP/1.1 304 Not Modified\r\n");
            for h in obj.headers.iter().filter(|h| stored::keeps_on_304(&h.name)) {
                put_header(out, &h.name, &h.value);
            }
            tail(out, p, c, age, &status, conn);
            return;
        }
        let head_only = head.method == Method::Head;
        let size = obj.body.len() as u64;
        match complete.then(|| conditional::range(head, size, &validators)) {
            Some(RangeSpec::Bytes(start, end)) => {
                out.put_slice(b"HTTP/1.1 206 Partial Content\r\n");
                for h in &obj.headers {
                    put_header(out, &h.name, &h.value);
                }
                let _ = write!(
                    out,
                    "Content-Range: bytes {start}-{end}/{size}\r\nContent-Length: {}\r\n",
                    end - start + 1
                );
                tail(out, p, c, age, &status, conn);
                if !head_only {
                    self.put_body(&obj.body.slice(start as usize..=end as usize));
                }
                return;
            }
            Some(RangeSpec::Unsatisfiable) => {
                let _ = write!(
                    out,
                    "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{size}\r\nContent-Length: 0\r\n"
                );
                tail(out, p, c, age, &status, conn);
                return;
            }
            Some(RangeSpec::Whole) | None => {}
        }
        out.put_slice(&obj.head);
        tail(out, p, c, age, &status, conn);
        if !head_only {
            self.put_body(&obj.body);
        }
    }

    fn purge_request(
        &mut self,
        head: &RequestHead,
        c: &CacheRoute,
        zone: &CacheZone,
        next: Next,
    ) -> Next {
        let server = self.rt.cfg.server_header.clone();
        let conn = ConnHeader::for_response(next != Next::KeepAlive, head.version);
        if !c.may_purge(self.peer.ip()) {
            tracing::warn!(peer = %self.peer, "PURGE refused");
            reply::error(&mut self.out, 403, server.as_deref(), &[], conn, false);
            return next;
        }
        let key = c.key.key(head, "http");
        let n = zone
            .store
            .purge(&PurgeSelector::Url(key.url().to_vec()), false);
        let body = format!(r#"{{"purged":{n}}}"#);
        reply::json(
            &mut self.out,
            if n > 0 { 200 } else { 404 },
            server.as_deref(),
            body.as_bytes(),
            conn,
            false,
        );
        next
    }

    fn cache_error(
        &mut self,
        head: &RequestHead,
        c: &CacheRoute,
        status: u16,
        detail: &'static str,
        next: Next,
    ) -> Next {
        let server = self.rt.cfg.server_header.clone();
        let conn = ConnHeader::for_response(next != Next::KeepAlive, head.version);
        let mut line = BytesMut::new();
        CacheStatus {
            detail: Some(detail),
            ..Default::default()
        }
        .render(&mut line, c.x_cache);
        let line = line.freeze();
        let text = &line[..line.len() - 2];
        let (name, value) = text.split_at(text.iter().position(|b| *b == b':').unwrap_or(0));
        reply::error(
            &mut self.out,
            status,
            server.as_deref(),
            &[(name, value[1..].trim_ascii())],
            conn,
            head.method == Method::Head,
        );
        next
    }
}

/// Releases coalesced followers when the leader ends, however it ends: a leader that published a
/// head and did not complete leaves them `Aborted`, one that did not get that far `Uncacheable`.
struct LeaderGuard<'a> {
    zone: &'a CacheZone,
    hash: u64,
    inflight: Arc<Inflight>,
    phase: Phase,
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        self.zone.finish(self.hash, &self.inflight, self.phase);
    }
}

/// A plan that only adds `Cache-Status` (no storing).
fn status_plan<'a>(fwd: Fwd, detail: Option<&'static str>, x_cache: bool) -> PlanFn<'a> {
    Box::new(move |resp: &ResponseHead| {
        let mut extra = BytesMut::new();
        CacheStatus {
            fwd: Some(fwd),
            fwd_status: Some(resp.status),
            detail,
            ..Default::default()
        }
        .render(&mut extra, x_cache);
        HeadPlan {
            extra,
            ..Default::default()
        }
    })
}

/// The plan for a POST on a route with `store_post_responses`: `Cache-Status` as for any unsafe
/// method, and a copy of the body when the response may serve later GETs (RFC 9110 §9.3.3).
fn post_plan<'a>(head: &RequestHead, c: &CacheRoute, zone: &Arc<CacheZone>) -> PlanFn<'a> {
    let zone = Some(zone.clone());
    let mut uri = head.path().to_vec();
    if let Some(q) = head.query() {
        uri.push(b'?');
        uri.extend_from_slice(q);
    }
    let authority = head.authority_bytes().unwrap_or_default();
    let (limit, x_cache) = (c.max_object_size, c.x_cache);
    Box::new(move |resp: &ResponseHead| {
        let reusable = policy::post_response_reusable(&uri, &authority, resp.status, &resp.headers);
        let mut extra = BytesMut::new();
        CacheStatus {
            fwd: Some(Fwd::Bypass),
            fwd_status: Some(resp.status),
            detail: Some("method"),
            stored: reusable,
            ..Default::default()
        }
        .render(&mut extra, x_cache);
        HeadPlan {
            extra,
            capture: reusable.then_some(limit),
            tee: None,
            zone: zone.clone(),
        }
    })
}

/// Age, Cache-Status, the route's response edits, Via, the connection field, the blank line.
fn tail(
    out: &mut BytesMut,
    p: &ProxyRoute,
    c: &CacheRoute,
    age: u64,
    status: &CacheStatus,
    conn: ConnHeader,
) {
    out.put_slice(b"Age: ");
    out.put_slice(itoa::Buffer::new().format(age).as_bytes());
    out.put_slice(b"\r\n");
    status.render(out, c.x_cache);
    for (n, v) in p.response_edits.added() {
        put_header(out, n, v);
    }
    if p.via {
        out.put_slice(b"Via: 1.1 weir\r\n");
    }
    out.put_slice(conn.as_bytes());
    out.put_slice(b"\r\n");
}

fn ttl(obj: &CachedObject, age: u64) -> i64 {
    let lifetime = if obj.is_invalidated() {
        0
    } else {
        obj.meta.storable.lifetime
    };
    if lifetime == u64::MAX {
        return i64::MAX;
    }
    lifetime as i64 - age as i64
}

/// Why a request skips the cache, if it does.
fn bypassed(head: &RequestHead, c: &CacheRoute) -> Option<&'static str> {
    if c.bypass_get || (c.bypass_head && head.method == Method::Head) {
        return Some("bypass-method");
    }
    if c.bypass_headers.iter().any(|h| head.header(h).is_some()) {
        return Some("bypass-header");
    }
    if c.bypass_cookies
        .iter()
        .any(|name| head.cookie(name).is_some())
    {
        return Some("bypass-cookie");
    }
    None
}

/// The request's value of a Vary field, as stored and compared (normalised: see
/// `weir_cache::vary`).
fn vary_value(head: &RequestHead, name: &str, normalize_ae: bool) -> Option<Bytes> {
    weir_cache::vary::request_value(&head.headers, name, normalize_ae)
}

/// Stores a response if the policy allows; returns the stored object.
fn store_response(
    head: &RequestHead,
    c: &CacheRoute,
    zone: &CacheZone,
    key: &CacheKey,
    resp: &ResponseHead,
    body: Bytes,
    request_time: u64,
) -> Option<Arc<CachedObject>> {
    let now = zone.now();
    // A POST gets here only when its response was found reusable for GETs (`post_plan`): it
    // is then judged as the GET it will answer.
    let method = match head.method {
        Method::Post => &Method::Get,
        ref m => m,
    };
    let s = storable(
        method,
        &head.headers,
        resp.status,
        &resp.headers,
        &c.rules,
        now,
    )
    .ok()?;
    if body.len() > c.max_object_size || head.method == Method::Head {
        return None;
    }
    let obj = Arc::new(stored::build(
        &head.headers,
        resp,
        body,
        (request_time, now),
        c.normalize_accept_encoding,
        Some(s),
    ));
    zone.store.insert(key, obj.clone()).then_some(obj)
}

/// RFC 9111 §4.4: a successful unsafe request invalidates the target URI and the same-origin
/// Location and Content-Location (`weir_cache::stored::invalidated_urls`).
fn invalidate_after_unsafe(zone: &CacheZone, head: &RequestHead, resp: Option<&ResponseHead>) {
    let Some(resp) = resp else { return };
    let mut target = head.path().to_vec();
    if let Some(q) = head.query() {
        target.push(b'?');
        target.extend_from_slice(q);
    }
    let locations = [
        resp.header("location").map(|v| &v[..]),
        resp.header("content-location").map(|v| &v[..]),
    ];
    let authority = head.authority().unwrap_or_default();
    for u in stored::invalidated_urls(authority, &target, resp.status, locations) {
        zone.store.purge(&PurgeSelector::Url(u), false);
    }
}
