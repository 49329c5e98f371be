//! Slices and partial content over real sockets (RFC 9111 §3.3, §3.4; nginx's `slice`): a range
//! miss fills only the slices it needs, a 206 is stored as the part it is and answers the
//! ranges inside it (cache-tests' `partial-store-partial-*` cases), a stored prefix is completed
//! with only the bytes it lacks, parts of two representations are never mixed, and PURGE
//! reaches every slice.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::cachekit::{cache, get, req, resp, scripted, status_of, Scripted};
use common::config_error;

/// Byte `i` of representation `version`.
fn byte(version: usize, i: usize) -> u8 {
    b'a' + ((i + version * 7) % 26) as u8
}

fn body(version: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| byte(version, i)).collect()
}

/// An origin serving `len` bytes that honours one `bytes=` range, with a strong ETag naming the
/// representation's version (`version` may change under a test).
fn ranged_origin(len: usize, version: Arc<AtomicUsize>) -> Scripted {
    scripted(ranged(len, version))
}

/// The answers of [`ranged_origin`].
fn ranged(
    len: usize,
    version: Arc<AtomicUsize>,
) -> impl Fn(&common::origin::SeenRequest, usize) -> String + Send + Sync + 'static {
    move |r, _| {
        let v = version.load(Ordering::SeqCst);
        let full = body(v, len);
        let fields =
            format!("Cache-Control: max-age=600\r\nETag: \"v{v}\"\r\nContent-Type: video/mp4\r\n");
        let Some(range) = r.header("range") else {
            let text = String::from_utf8(full).unwrap();
            return resp("200 OK", &fields, &text);
        };
        let spec = range.strip_prefix("bytes=").unwrap();
        let (a, b) = spec.split_once('-').unwrap();
        let (first, last) = match (a.parse::<usize>(), b.parse::<usize>()) {
            (Ok(a), Ok(b)) => (a, b.min(len - 1)),
            (Ok(a), Err(_)) => (a, len - 1),
            (Err(_), Ok(n)) => (len - n.min(len), len - 1),
            _ => panic!("range {range}"),
        };
        if first >= len {
            let fields = format!("{fields}Content-Range: bytes */{len}\r\n");
            return resp("416 Range Not Satisfiable", &fields, "");
        }
        let part = String::from_utf8(full[first..=last].to_vec()).unwrap();
        resp(
            "206 Partial Content",
            &format!("{fields}Content-Range: bytes {first}-{last}/{len}\r\n"),
            &part,
        )
    }
}

/// The `Range` fields the origin was sent, in order (`-` for none).
fn ranges_seen(o: &Scripted) -> Vec<String> {
    o.seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.header("range").unwrap_or("-").to_string())
        .collect()
}

#[test]
fn a_range_miss_fills_only_the_slices_it_needs() {
    const LEN: usize = 10_240;
    let o = ranged_origin(LEN, Arc::new(AtomicUsize::new(1)));
    let c = cache(&o.origin, ", slice: 2k", "64m");
    let full = body(1, LEN);

    // One range within a slice: forwarded as asked, stored as the part it is.
    let r = get(&c, "/v.mp4", "Range: bytes=4096-5000\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 4096-5000/10240"));
    assert_eq!(r.body, &full[4096..=5000]);
    assert!(status_of(&r).contains("fwd=uri-miss"), "{}", status_of(&r));
    assert_eq!(ranges_seen(&o), ["bytes=4096-5000"]);

    // Inside the stored part: a hit.
    let r = get(&c, "/v.mp4", "Range: bytes=4500-4600\r\n");
    assert_eq!((r.status, &r.body[..]), (206, &full[4500..=4600]));
    assert!(status_of(&r).contains("hit"), "{}", status_of(&r));
    assert_eq!(o.requests(), 1);

    // The rest of that slice: only the missing bytes are fetched, then combined.
    let r = get(&c, "/v.mp4", "Range: bytes=4096-6143\r\n");
    assert_eq!((r.status, &r.body[..]), (206, &full[4096..=6143]));
    assert_eq!(ranges_seen(&o)[1], "bytes=5001-6143");

    // Everything, as a range: the slices around the stored one are fetched, one each.
    let r = get(&c, "/v.mp4", "Range: bytes=0-10239\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.body, full);
    assert_eq!(
        ranges_seen(&o)[2..],
        [
            "bytes=0-2047",
            "bytes=2048-4095",
            "bytes=6144-8191",
            "bytes=8192-"
        ]
    );

    // Now every slice is stored: whole and ranged answers come from them alone.
    let r = get(&c, "/v.mp4", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("10240"));
    assert_eq!(r.header("content-range"), None);
    assert_eq!(r.header("etag"), Some("\"v1\""));
    assert_eq!(r.header("content-type"), Some("video/mp4"));
    assert_eq!(r.body, full);
    let r = get(&c, "/v.mp4", "Range: bytes=-3000\r\n");
    assert_eq!((r.status, &r.body[..]), (206, &full[LEN - 3000..]));
    let r = get(&c, "/v.mp4", "Range: bytes=20000-\r\n");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */10240"));
    let r = get(&c, "/v.mp4", "If-None-Match: \"v1\"\r\n");
    assert_eq!(r.status, 304);
    let raw = "HEAD /v.mp4 HTTP/1.1\r\nHost: site.test\r\n\r\n";
    let r = req(&c, raw);
    assert_eq!((r.status, r.header("content-length")), (200, Some("10240")));
    assert_eq!(o.requests(), 6, "{:?}", ranges_seen(&o));
}

#[test]
fn a_stored_part_answers_the_ranges_inside_it() {
    // cache-tests' partial-store-partial-reuse-partial(-byterange, -absent, -suffix): the
    // origin answers every request with bytes 4-9 of 10, no validator. (cache-tests sends five
    // bytes for that six-byte range; a part whose length disagrees with its Content-Range is
    // never stored, so this origin sends six.)
    let o = scripted(|_, _| {
        resp(
            "206 Partial Content",
            "Cache-Control: max-age=3600\r\nContent-Range: bytes 4-9/10\r\n",
            "012345",
        )
    });
    let c = cache(&o.origin, ", slice: 1m", "64m");
    let r = get(&c, "/p", "Range: bytes=-5\r\n");
    assert_eq!((r.status, r.text().as_str()), (206, "12345"));
    assert_eq!(
        ranges_seen(&o),
        ["bytes=-5"],
        "the range is forwarded as asked"
    );
    for (range, want, content_range) in [
        ("bytes=-5", "12345", "bytes 5-9/10"),
        ("bytes=4-9", "012345", "bytes 4-9/10"),
        ("bytes=6-8", "234", "bytes 6-8/10"),
        ("bytes=6-", "2345", "bytes 6-9/10"),
        ("bytes=-1", "5", "bytes 9-9/10"),
    ] {
        let r = get(&c, "/p", &format!("Range: {range}\r\n"));
        assert_eq!((r.status, r.text().as_str()), (206, want), "{range}");
        assert_eq!(r.header("content-range"), Some(content_range), "{range}");
        assert!(status_of(&r).contains("hit"), "{range}: {}", status_of(&r));
    }
    assert_eq!(o.requests(), 1);
    // The whole representation is not there, and without a strong validator nothing may be
    // combined: the request goes to the origin, and no part is ever served as complete.
    let r = get(&c, "/p", "");
    assert_eq!(o.requests(), 2);
    assert_ne!(r.status, 200);
}

#[test]
fn a_stored_prefix_is_completed_with_only_the_bytes_it_lacks() {
    // cache-tests' partial-store-partial-complete, with the strong validator combining needs.
    let o = ranged_origin(10, Arc::new(AtomicUsize::new(1)));
    let c = cache(&o.origin, ", slice: 1m", "64m");
    let full = body(1, 10);
    let r = get(&c, "/c", "Range: bytes=0-4\r\n");
    assert_eq!((r.status, &r.body[..]), (206, &full[..5]));
    let r = get(&c, "/c", "");
    assert_eq!((r.status, &r.body[..]), (200, &full[..]));
    assert_eq!(ranges_seen(&o), ["bytes=0-4", "bytes=5-"]);
    let r = get(&c, "/c", "");
    assert_eq!((r.status, &r.body[..]), (200, &full[..]));
    assert!(status_of(&r).contains("hit"), "{}", status_of(&r));
    assert_eq!(o.requests(), 2);
}

#[test]
fn parts_of_two_representations_are_never_mixed() {
    const LEN: usize = 6144;
    let version = Arc::new(AtomicUsize::new(1));
    let o = ranged_origin(LEN, version.clone());
    let c = cache(&o.origin, ", slice: 2k", "64m");
    let r = get(&c, "/m", "Range: bytes=0-2047\r\n");
    assert_eq!(r.body, &body(1, LEN)[..2048]);
    version.store(2, Ordering::SeqCst);
    // Slice 0 is v1's, slice 1 comes back as v2's: the answer stops short and the connection
    // closes; the client never gets a body made of both.
    let mut s = c.srv.connect();
    s.write_all(b"GET /m HTTP/1.1\r\nHost: site.test\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(raw.starts_with(b"HTTP/1.1 200"));
    assert_eq!(
        &raw[head_end..],
        &body(1, LEN)[..2048],
        "v1's slice, then closed"
    );
    // The stale parts were dropped: the next answer is v2's, whole.
    let r = get(&c, "/m", "");
    assert_eq!((r.status, &r.body[..]), (200, &body(2, LEN)[..]));
    assert_eq!(r.header("etag"), Some("\"v2\""));
}

#[test]
fn concurrent_misses_of_one_slice_make_one_origin_request() {
    const LEN: usize = 6144;
    let answer = ranged(LEN, Arc::new(AtomicUsize::new(1)));
    // A slow origin, so that the clients' misses overlap.
    let o = scripted(move |r, n| {
        std::thread::sleep(std::time::Duration::from_millis(300));
        answer(r, n)
    });
    let c = cache(&o.origin, ", slice: 2k", "64m");
    let full = body(1, LEN);
    let together = |extra: &'static str| {
        let answers: Vec<_> = std::thread::scope(|s| {
            let c = &c;
            let clients: Vec<_> = (0..4)
                .map(|_| s.spawn(move || get(c, "/co", extra)))
                .collect();
            clients.into_iter().map(|t| t.join().unwrap()).collect()
        });
        answers
    };
    // Four misses of one range inside slice 0: one origin request.
    for r in together("Range: bytes=0-1023\r\n") {
        assert_eq!((r.status, &r.body[..]), (206, &full[..1024]));
    }
    assert_eq!(ranges_seen(&o), ["bytes=0-1023"]);
    // Four whole GETs: each slice's missing bytes are fetched once, not once per client.
    for r in together("") {
        assert_eq!((r.status, &r.body[..]), (200, &full[..]));
    }
    assert_eq!(
        ranges_seen(&o),
        [
            "bytes=0-1023",
            "bytes=1024-2047",
            "bytes=2048-4095",
            "bytes=4096-"
        ],
        "one origin request per slice"
    );
}

#[test]
fn pieces_on_disk_go_out_with_sendfile() {
    const LEN: usize = 4 * 65536;
    let o = ranged_origin(LEN, Arc::new(AtomicUsize::new(1)));
    let dir = std::env::temp_dir().join(format!("weir-slices-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A memory tier too small for one piece: every piece lives on disk only.
    let zone = format!("64k, disk: {{ path: '{}', max_size: 64m }}", dir.display());
    let c = cache(&o.origin, ", slice: 64k", &zone);
    let full = body(1, LEN);
    let r = get(&c, "/big.mp4", "");
    assert_eq!((r.status, r.body.len()), (200, LEN));
    assert!(r.body == full);
    let disk = c.zone.disk.clone().unwrap();
    let count = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    common::until(
        "the four slices written to disk",
        std::time::Duration::from_secs(10),
        || count(&disk.stats().writes) >= 4,
    );
    // Read whole (and checked) once, then from the file.
    for round in 0..3 {
        let r = get(&c, "/big.mp4", "");
        assert_eq!((r.status, r.body.len()), (200, LEN), "round {round}");
        assert!(r.body == full, "round {round}: the body differs");
        let r = get(&c, "/big.mp4", "Range: bytes=60000-140000\r\n");
        assert_eq!((r.status, &r.body[..]), (206, &full[60000..=140000]));
    }
    assert!(
        count(&disk.stats().file_hits) >= 6,
        "pieces sent from the file: {}",
        count(&disk.stats().file_hits)
    );
    assert_eq!(o.requests(), 4, "{:?}", ranges_seen(&o));
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn purge_reaches_every_slice() {
    let o = ranged_origin(4096, Arc::new(AtomicUsize::new(1)));
    let c = cache(&o.origin, ", slice: 1k", "64m");
    let r = get(&c, "/u", "");
    assert_eq!(r.status, 200);
    assert_eq!(o.requests(), 4);
    get(&c, "/u", "Range: bytes=3000-3001\r\n");
    assert_eq!(o.requests(), 4);
    let r = req(&c, "PURGE /u HTTP/1.1\r\nHost: site.test\r\n\r\n");
    assert_eq!(r.status, 200, "{}", r.text());
    get(&c, "/u", "Range: bytes=3000-3001\r\n");
    assert_eq!(o.requests(), 5);
}

#[test]
fn an_origin_without_ranges_is_cached_whole() {
    let o = scripted(|_, _| resp("200 OK", "Cache-Control: max-age=600\r\n", "0123456789"));
    let c = cache(&o.origin, ", slice: 1k", "64m");
    let r = get(&c, "/w", "Range: bytes=2-3\r\n");
    assert_eq!((r.status, r.text().as_str()), (206, "23"));
    let r = get(&c, "/w", "");
    assert_eq!((r.status, r.text().as_str()), (200, "0123456789"));
    assert!(status_of(&r).contains("hit"), "{}", status_of(&r));
    assert_eq!(o.requests(), 1);
}

#[test]
fn slice_sizes_are_checked() {
    let yaml = |slice: &str| {
        format!("cache_zones:\n  z: {{ max_size: 64m }}\nupstreams:\n  o: {{ servers: ['127.0.0.1:9'] }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: o }}\n        cache: {{ zone: z, slice: {slice} }}\n")
    };
    let e = config_error(&yaml("100"));
    assert!(e.contains("cache.slice") && e.contains("too small"), "{e}");
    let e = config_error(&yaml("16m"));
    assert!(
        e.contains("cache.slice") && e.contains("max_object_size"),
        "{e}"
    );
}
