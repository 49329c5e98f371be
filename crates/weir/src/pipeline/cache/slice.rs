//! Requests on a route with `cache.slice` that miss the whole-object store: the representation
//! is kept in fixed-size slices (`weir_cache::slice`), as nginx's `slice` module does.
//!
//! ```text
//! slice of the first byte asked ─ stored piece ──────────────→ the reference piece
//!                                ─ none: fetch it (the client's own range when it fits one
//!                                  slice, else the slice) ─ 206, storable → stored, the reference
//!                                                         ─ a 200 → stored whole, served as usual
//!                                                         ─ anything else → the plain miss path
//! reference → preconditions (304/412), the range against its total (206/416/200)
//!           → head, then slice by slice: stored piece covering what is needed, else fetch only
//!             the bytes it lacks, combine (same strong validator only), store, send, flush
//! ```
//!
//! Pieces of one answer must be one representation (RFC 9111 §3.3): the same total and the same
//! strong `ETag` as the reference. A piece without one answers only ranges it covers alone.
//! When the origin changes the representation between two slices of an answer already under
//! way, the connection is closed (the client sees a truncated body, never a mixed one), as nginx
//! does. `Cache-Status` describes the reference slice.
//!
//! Slices are coalesced ([`take_turn`]): the first miss of a slice fetches it; concurrent misses
//! of the same slice wait for that fetch to end (within the route's `lock_timeout`) and take what
//! it stored, fetching on their own only what it did not bring.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use weir_cache::policy::{evaluate, storable_part, Freshness};
use weir_cache::slice::{self as sl, Extent};
use weir_cache::store::{Lookup, Stats};
use weir_cache::{stored, CacheKey, CachedObject, Directives, FileBody, PurgeSelector, Read};
use weir_http::conditional::{self, RangeSpec};
use weir_http::{Base, Framing, Header, Method, Persistence, Reply, ResponseHead};

use super::answers::cache_error;
use super::hit::{answered_precondition, put_age_and_status, write_stored};
use super::miss::LeaderGuard;
use super::storing::store_response;
use super::{ttl, Stage};
use crate::cache::status::Fwd;
use crate::cache::zone::{FetchPhase, Inflight, Role};
use crate::cache::CacheStatus;
use crate::error::{Error, ErrorKind};
use crate::pipeline::context::CacheState;
use crate::pipeline::downstream::Downstream;
use crate::pipeline::fetch::fetch_whole;
use crate::pipeline::{send_head_filtered, RequestCtx};

/// What a request carries that lookups of pieces need.
pub(super) struct Ask<'a> {
    pub key: &'a CacheKey,
    pub value_of: &'a dyn Fn(&str) -> Option<Bytes>,
    pub req_dirs: &'a Directives,
}

/// What fetching a range brought.
enum Fetched {
    /// A storable 206: its pieces, stored, in order.
    Part(Vec<(u64, Arc<CachedObject>)>),
    /// The origin sent the whole representation (it ignores ranges) within one slice's size.
    Whole(Box<ResponseHead>, Bytes, u64),
    /// Anything else: a status or fields that keep it out of the store.
    Other,
}

/// Serves a GET or HEAD from slices. `None`: the reference piece could not be had as a stored
/// part; the plain miss path answers.
pub(super) async fn serve<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    ask: &Ask<'_>,
    size: u64,
    persistence: Persistence,
) -> Option<Result<Persistence, Error>> {
    let (head, zone) = (stage.head, stage.zone);
    let start = first_byte(head).map_or(0, |b| sl::slice_of(b, size));
    let mut fetched = Vec::new();
    // Any stored piece tells the total; the first one is where to look when the first byte's
    // slice is not stored (a range beyond the end is then a 416, not a fetch).
    let mut reference = stored_piece(stage, ask, start).await;
    if reference.is_none() && start != 0 {
        reference = stored_piece(stage, ask, 0).await;
    }
    let (reference, hit) = match reference {
        Some(p) => (p, true),
        None if head.method == Method::Head => return None,
        None if ask.req_dirs.only_if_cached => {
            let answered = cache_error(d, ctx, stage, "only-if-cached", persistence);
            return Some(Ok(answered));
        }
        None => {
            // One fetch of this slice at a time: after waiting for another, its piece may be
            // stored (and after leading, one stored just before).
            let _turn = take_turn(stage, ask.key, start).await;
            if let Some(p) = stored_piece(stage, ask, start).await {
                (p, true)
            } else {
                let range = first_contact(head, size).unwrap_or_else(|| {
                    format!("bytes={}-{}", start * size, start * size + size - 1)
                });
                match fetch(ctx, d.peer(), stage, ask, &range, size).await {
                    Ok(Fetched::Part(pieces)) => {
                        let first = pieces.first()?.1.clone();
                        fetched = pieces;
                        (first, false)
                    }
                    Ok(Fetched::Whole(resp, body, request_time)) => {
                        return Some(Ok(serve_whole(
                            d,
                            ctx,
                            stage,
                            ask.key,
                            (&resp, body),
                            request_time,
                            persistence,
                        )));
                    }
                    Ok(Fetched::Other) | Err(_) => return None,
                }
            }
        }
    };
    let e = sl::extent_of(&reference)?;
    let total = e.total;
    let age = reference.meta.clock.current_age(zone.now());
    let status = if hit {
        Stats::bump(&zone.store.stats.hits);
        ctx.cache = CacheState::Hit;
        CacheStatus {
            hit: true,
            ttl: Some(ttl(&reference, age)),
            ..Default::default()
        }
    } else {
        Stats::bump(&zone.store.stats.misses);
        ctx.cache = CacheState::Miss;
        CacheStatus {
            fwd: Some(Fwd::UriMiss),
            fwd_status: Some(206),
            stored: true,
            ttl: Some(ttl(&reference, age)),
            ..Default::default()
        }
    };
    let x_cache = stage.cache.x_cache;
    let render = |out: &mut BytesMut| put_age_and_status(out, age, &status, x_cache);
    if answered_precondition(d, ctx, stage, &reference, &render, persistence) {
        return Some(Ok(persistence));
    }
    let (code, first, last) = match conditional::range(head, total, &reference.validators()) {
        RangeSpec::Bytes(a, b) => (206, a, b),
        RangeSpec::Whole => (200, 0, total - 1),
        RangeSpec::Unsatisfiable => (416, 0, 0),
    };
    // Without a strong validator nothing may be combined: only what the reference holds.
    if code != 416 && !e.covers(first, last) && sl::strong_etag(&reference).is_none() {
        return None;
    }
    let base = representation_head(&reference, code);
    let mut reply = Reply::new(
        code,
        Framing::Length(if code == 416 { 0 } else { last - first + 1 }),
    );
    reply.base = Base::Encoded(&base);
    reply.date = false;
    let range = match code {
        206 => format!("Content-Range: bytes {first}-{last}/{total}\r\n"),
        416 => format!("Content-Range: bytes */{total}\r\n"),
        _ => String::new(),
    };
    reply.add_lines(range.as_bytes());
    reply.render = Some(&render);
    if !stage.own.is_empty() {
        reply.add_lines(stage.own);
    }
    let mut filter_lines = BytesMut::new();
    crate::pipeline::filter_response(ctx, &stage.proxy.filters, &mut reply, &mut filter_lines);
    let persistence = send_head_filtered(d, ctx, &reply, persistence);
    if code == 416 || head.method == Method::Head {
        return Some(Ok(persistence));
    }
    let (from, to) = (sl::slice_of(first, size), sl::slice_of(last, size));
    // A plain-TCP client with no body filter takes stored pieces from the disk tier's files.
    let files = d.sends_files() && !ctx.extra.as_ref().is_some_and(|e| e.filters.transforming);
    for i in from..=to {
        let span = sl::span(i, size, total);
        let need = (first.max(span.0), last.min(span.1));
        let from_file = match files && !fetched.iter().any(|(j, _)| *j == i) {
            true => file_piece(stage, ask, i, &reference).await,
            false => None,
        };
        if let Some((x, body)) = from_file.filter(|(x, _)| x.covers(need.0, need.1)) {
            let len = need.1 - need.0 + 1;
            ctx.bytes_sent += len;
            let at = body.offset + (need.0 - x.first);
            if let Err(e) = d.send_file(&body.file, at, len).await {
                return Some(Err(e));
            }
            fetched.retain(|(j, _)| *j > i);
            continue;
        }
        let have = match piece_for(stage, ask, (i, size), &reference, &fetched).await {
            Ok(p) if sl::extent_of(&p).is_some_and(|x| x.covers(need.0, need.1)) => Ok(p),
            Ok(p) => Err(Some(p)),
            Err(()) => Err(None),
        };
        let piece = match have {
            Ok(p) => p,
            Err(have) => {
                // One fetch of this slice at a time: the one waited for (or one that ended
                // just before this turn) may have stored what is needed.
                let _turn = take_turn(stage, ask.key, i).await;
                let stored = stored_piece(stage, ask, i).await.filter(|p| {
                    sl::same_representation(p, &reference)
                        && sl::extent_of(p).is_some_and(|x| x.covers(need.0, need.1))
                });
                match stored {
                    Some(p) => p,
                    None => match complete(ctx, d.peer(), stage, ask, (i, size), &reference, have)
                        .await
                    {
                        Ok(p) => p,
                        Err(e) => return Some(Err(e)),
                    },
                }
            }
        };
        let x = sl::extent_of(&piece)?;
        let body = piece
            .body
            .slice((need.0 - x.first) as usize..=(need.1 - x.first) as usize);
        crate::pipeline::send_body(d, ctx, &body, i == to);
        fetched.retain(|(j, _)| *j > i);
        if i != to {
            if let Err(e) = d.flush().await {
                return Some(Err(e));
            }
        }
    }
    Some(Ok(persistence))
}

/// Coalescing of slice `index`: the first miss of it leads (the guard, held while it fetches,
/// releases the others when dropped); a later one waits for the leader to end, at most the
/// route's `lock_timeout`, and gets `None`: either then looks for a stored piece again.
async fn take_turn<'z>(stage: Stage<'z>, key: &CacheKey, index: u64) -> Option<LeaderGuard<'z>> {
    let piece = sl::piece_key(key, index);
    match stage.zone.join(piece.hash) {
        Role::Leader(inflight) => Some(LeaderGuard {
            zone: stage.zone,
            hash: piece.hash,
            inflight,
            phase: FetchPhase::Uncacheable,
        }),
        Role::Follower(inflight) => {
            Stats::bump(&stage.zone.store.stats.coalesced);
            let deadline = tokio::time::Instant::now() + stage.cache.lock_timeout;
            wait_end(&inflight, deadline).await;
            None
        }
    }
}

/// Waits until a leader's fetch ended, or `deadline`.
async fn wait_end(inflight: &Inflight, deadline: tokio::time::Instant) {
    let mut changes = inflight.subscribe();
    while inflight.phase() == FetchPhase::Fetching {
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => {}
            _ => return,
        }
    }
}

/// The status line and the representation's stored fields, without the piece's
/// `Content-Range` (the answer's own follows).
fn representation_head(reference: &CachedObject, code: u16) -> BytesMut {
    let mut out = BytesMut::with_capacity(reference.head.len());
    weir_http::response::put_status_line(&mut out, code);
    for h in &reference.headers {
        if !h.name.eq_ignore_ascii_case(b"content-range") {
            weir_http::response::put_header(&mut out, &h.name, &h.value);
        }
    }
    out
}

/// A fresh stored piece of slice `index` (memory, then disk).
async fn stored_piece(stage: Stage<'_>, ask: &Ask<'_>, index: u64) -> Option<Arc<CachedObject>> {
    let zone = stage.zone;
    let key = sl::piece_key(ask.key, index);
    let piece = match zone.store.lookup(&key, ask.value_of) {
        Lookup::Found(p) => p,
        _ => match zone.lookup_lower(&key, ask.value_of, false).await? {
            weir_cache::Read::Whole(p) => p,
            weir_cache::Read::File(..) => return None,
        },
    };
    let age = piece.meta.clock.current_age(zone.now());
    match evaluate(
        &piece.meta.storable,
        age,
        piece.is_invalidated(),
        ask.req_dirs,
    ) {
        Freshness::Fresh | Freshness::StaleAllowed => Some(piece),
        _ => None,
    }
}

/// Slice `index`'s stored piece as its place in a lower tier's file (`sendfile`), when it is
/// there, fresh, of the reference's representation, and not in memory (a memory piece, or one
/// the tier reads whole and moves up, is served the usual way).
async fn file_piece(
    stage: Stage<'_>,
    ask: &Ask<'_>,
    index: u64,
    reference: &CachedObject,
) -> Option<(Extent, FileBody)> {
    let zone = stage.zone;
    if !zone.has_lower() {
        return None;
    }
    let key = sl::piece_key(ask.key, index);
    if !matches!(zone.store.lookup(&key, ask.value_of), Lookup::Miss) {
        return None;
    }
    let Read::File(piece, body) = zone.lookup_lower(&key, ask.value_of, true).await? else {
        return None;
    };
    let age = piece.meta.clock.current_age(zone.now());
    let fresh = matches!(
        evaluate(
            &piece.meta.storable,
            age,
            piece.is_invalidated(),
            ask.req_dirs
        ),
        Freshness::Fresh | Freshness::StaleAllowed
    );
    let x = sl::extent_of(&piece)?;
    (fresh && sl::same_representation(&piece, reference) && x.len() == body.len)
        .then_some((x, body))
}

/// The piece of slice `i` this answer may use: fetched for it, or stored and of the
/// reference's representation. `Ok` with a piece that may not cover all that is needed;
/// `Err(())`: nothing usable.
async fn piece_for(
    stage: Stage<'_>,
    ask: &Ask<'_>,
    (i, size): (u64, u64),
    reference: &Arc<CachedObject>,
    fetched: &[(u64, Arc<CachedObject>)],
) -> Result<Arc<CachedObject>, ()> {
    if let Some((_, p)) = fetched.iter().find(|(j, _)| *j == i) {
        return Ok(p.clone());
    }
    if sl::extent_of(reference).is_some_and(|e| sl::slice_of(e.first, size) == i) {
        return Ok(reference.clone());
    }
    match stored_piece(stage, ask, i).await {
        Some(p) if sl::same_representation(&p, reference) => Ok(p),
        _ => Err(()),
    }
}

/// Fetches the bytes slice `i` lacks (all of it without `have`, else what `have` does not
/// hold) and combines them with `have`.
async fn complete(
    ctx: &mut RequestCtx,
    peer: std::net::SocketAddr,
    stage: Stage<'_>,
    ask: &Ask<'_>,
    (i, size): (u64, u64),
    reference: &Arc<CachedObject>,
    have: Option<Arc<CachedObject>>,
) -> Result<Arc<CachedObject>, Error> {
    let total = sl::extent_of(reference).map_or(0, |e| e.total);
    let held = have.as_deref().and_then(sl::extent_of);
    let (a, b) = sl::missing(sl::span(i, size, total), held);
    let got = fetch_slice(ctx, peer, stage, ask, (i, size), reference, (a, b, total)).await?;
    let (Some(x), Some(h), Some(have)) = (sl::extent_of(&got), held, have) else {
        return Ok(got);
    };
    match sl::combine((h, &have.body), (x, &got.body)) {
        Some((union, body)) => Ok(store_piece(stage, ask, i, &got, union, body)),
        None => Ok(got),
    }
}

/// Fetches `a..=b` of slice `i`; it must be a part of the reference's representation.
async fn fetch_slice(
    ctx: &mut RequestCtx,
    peer: std::net::SocketAddr,
    stage: Stage<'_>,
    ask: &Ask<'_>,
    (i, size): (u64, u64),
    reference: &Arc<CachedObject>,
    (a, b, total): (u64, u64, u64),
) -> Result<Arc<CachedObject>, Error> {
    // The representation changed under the stored parts: they are dropped, so the next request
    // starts afresh, and this answer is cut short.
    let changed = || {
        stage
            .zone
            .purge_now(&PurgeSelector::Url(ask.key.url().to_vec()), false);
        Error::with(
            ErrorKind::UpstreamAborted,
            format!("slice {i} of the representation could not be had unchanged"),
        )
    };
    let Fetched::Part(pieces) =
        fetch(ctx, peer, stage, ask, &sl::range_value(a, b, total), size).await?
    else {
        return Err(changed());
    };
    let piece = pieces
        .into_iter()
        .find(|(j, _)| *j == i)
        .map(|(_, p)| p)
        .filter(|p| sl::same_representation(p, reference))
        .ok_or_else(changed)?;
    if !sl::extent_of(&piece).is_some_and(|x| x.covers(a, b)) {
        return Err(changed());
    }
    Ok(piece)
}

/// Fetches `range` from the route's upstream, whole (at most one slice's bytes), and stores
/// what it brings, cut into pieces.
async fn fetch(
    ctx: &mut RequestCtx,
    peer: std::net::SocketAddr,
    stage: Stage<'_>,
    ask: &Ask<'_>,
    range: &str,
    size: u64,
) -> Result<Fetched, Error> {
    let (head, proxy, settings, zone) = (stage.head, stage.proxy, stage.cache, stage.zone);
    let extra = format!("Range: {range}\r\n");
    let request_time = zone.now();
    let limit = usize::try_from(size).unwrap_or(usize::MAX);
    let (resp, body) = fetch_whole(ctx, peer, head, proxy, extra.as_bytes(), limit).await?;
    if resp.status == 200 {
        return Ok(Fetched::Whole(Box::new(resp), body, request_time));
    }
    let part = resp.header("content-range").and_then(sl::content_range);
    let Some(e) = part.filter(|e| resp.status == 206 && e.len() == body.len() as u64) else {
        return Ok(Fetched::Other);
    };
    let Ok(s) = storable_part(
        &Method::Get,
        head.headers(),
        resp.headers(),
        &settings.rules,
        zone.now(),
    ) else {
        return Ok(Fetched::Other);
    };
    if !proxy.filters.before_store(&resp) {
        return Ok(Fetched::Other);
    }
    let now = zone.now();
    let mut pieces = Vec::new();
    for (i, x, bytes) in sl::cut(e, &body, size) {
        let part_head = with_range(&resp, x);
        let obj = Arc::new(stored::build(
            head.headers(),
            &part_head,
            bytes,
            (request_time, now),
            settings.normalize_accept_encoding,
            Some(s.clone()),
        ));
        // A stored part of the same slice and representation is combined with this one.
        let key = sl::piece_key(ask.key, i);
        let obj = match zone.store.lookup(&key, ask.value_of) {
            Lookup::Found(old) if sl::same_representation(&old, &obj) => {
                match sl::extent_of(&old).and_then(|o| sl::combine((o, &old.body), (x, &obj.body)))
                {
                    Some((union, body)) => store_piece(stage, ask, i, &obj, union, body),
                    None => stored_as_is(stage, &key, obj),
                }
            }
            _ => stored_as_is(stage, &key, obj),
        };
        pieces.push((i, obj));
    }
    Ok(Fetched::Part(pieces))
}

fn stored_as_is(stage: Stage<'_>, key: &CacheKey, obj: Arc<CachedObject>) -> Arc<CachedObject> {
    stage.zone.store_object(key, &obj);
    obj
}

/// Stores `like` (a piece of slice `i`) with the combined extent `union` and its bytes.
fn store_piece(
    stage: Stage<'_>,
    ask: &Ask<'_>,
    i: u64,
    like: &CachedObject,
    union: Extent,
    body: Bytes,
) -> Arc<CachedObject> {
    let mut headers: Vec<Header> = like
        .headers
        .iter()
        .filter(|h| !h.name.eq_ignore_ascii_case(b"content-range"))
        .cloned()
        .collect();
    headers.push(range_field(union));
    let meta = weir_cache::ObjectMeta {
        vary: like.meta.vary.clone(),
        tags: like.meta.tags.clone(),
        etag: like.meta.etag.clone(),
        last_modified: like.meta.last_modified.clone(),
        invalidated: std::sync::atomic::AtomicBool::new(false),
        storable: like.meta.storable.clone(),
        ..like.meta
    };
    let obj = Arc::new(CachedObject::new(meta, like.reason.clone(), headers, body));
    stage.zone.store_object(&sl::piece_key(ask.key, i), &obj);
    obj
}

fn range_field(e: Extent) -> Header {
    Header {
        name: Bytes::from_static(b"Content-Range"),
        value: Bytes::from(format!("bytes {}-{}/{}", e.first, e.last, e.total)),
    }
}

/// `resp` with its `Content-Range` set to `e` (one piece of it).
fn with_range(resp: &ResponseHead, e: Extent) -> ResponseHead {
    let mut headers: Vec<Header> = resp
        .headers()
        .iter()
        .filter(|h| !h.name.eq_ignore_ascii_case(b"content-range"))
        .cloned()
        .collect();
    headers.push(range_field(e));
    resp.with_headers(headers)
}

/// The origin answered a range with the whole representation: stored (if it may be) and served
/// as any stored response is, the client's range cut from it.
fn serve_whole<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    key: &CacheKey,
    (resp, body): (&ResponseHead, Bytes),
    request_time: u64,
    persistence: Persistence,
) -> Persistence {
    let zone = stage.zone;
    Stats::bump(&zone.store.stats.misses);
    ctx.cache = CacheState::Miss;
    let stored = store_response(stage, key, resp, body.clone(), request_time);
    let obj = stored.clone().unwrap_or_else(|| {
        Arc::new(stored::build(
            stage.head.headers(),
            resp,
            body,
            (request_time, zone.now()),
            stage.cache.normalize_accept_encoding,
            None,
        ))
    });
    let age = obj.meta.clock.current_age(zone.now());
    let status = CacheStatus {
        fwd: Some(Fwd::UriMiss),
        fwd_status: Some(resp.status),
        stored: stored.is_some(),
        ttl: Some(ttl(&obj, age)),
        ..Default::default()
    };
    write_stored(d, ctx, stage, &obj, age, &status, persistence);
    persistence
}

/// The first byte of a single `bytes=N-…` range.
fn first_byte(head: &weir_http::RequestHead) -> Option<u64> {
    let spec = head.header("range")?.trim_ascii().strip_prefix(b"bytes=")?;
    if spec.contains(&b',') {
        return None;
    }
    let dash = spec.iter().position(|b| *b == b'-')?;
    std::str::from_utf8(spec[..dash].trim_ascii())
        .ok()?
        .parse()
        .ok()
}

/// The client's own range, forwarded as is when it is one range no longer than a slice (its
/// answer is then stored as the part it is); `None`: ask for the whole slice.
fn first_contact(head: &weir_http::RequestHead, size: u64) -> Option<String> {
    let v = head.header("range")?.trim_ascii();
    let spec = v.strip_prefix(b"bytes=")?;
    if spec.contains(&b',') {
        return None;
    }
    let text = std::str::from_utf8(spec).ok()?;
    let (a, b) = text.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    let fits = match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(a), Ok(b)) => b >= a && b - a < size,
        (Err(_), Ok(n)) if a.is_empty() => n > 0 && n <= size,
        _ => false,
    };
    fits.then(|| format!("bytes={a}-{b}"))
}
