//! Cache micro-benchmarks: building a key from a parsed request and looking it up in a store of
//! 10,000 objects (the hit path before the write).
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use weir_cache::object::ObjectMeta;
use weir_cache::policy::{AgeClock, Storable};
use weir_cache::{CachedObject, KeySpec, Lookup, MemoryStore};

fn request(path: &str) -> weir_http::RequestHead {
    let mut b =
        BytesMut::from(format!("GET {path} HTTP/1.1\r\nHost: site.test\r\n\r\n").as_bytes());
    weir_http::parse_request(&mut b, &Default::default())
        .unwrap()
        .unwrap()
}

fn object() -> Arc<CachedObject> {
    let meta = ObjectMeta {
        status: 200,
        storable: Storable {
            lifetime: 600,
            must_revalidate: false,
            no_cache: false,
            stale_while_revalidate: 0,
            stale_if_error: 0,
        },
        clock: AgeClock::default(),
        etag: None,
        last_modified: None,
        modified: 0,
        vary: Vec::new(),
        tags: Vec::new(),
        invalidated: AtomicBool::new(false),
    };
    Arc::new(CachedObject::new(
        meta,
        Bytes::new(),
        Vec::new(),
        Bytes::from(vec![b'x'; 1024]),
    ))
}

fn lookup(c: &mut Criterion) {
    let spec = KeySpec::default();
    let store = MemoryStore::new(256 << 20, 16);
    for i in 0..10_000 {
        store.insert(&spec.key(&request(&format!("/obj/{i}")), "http"), object());
    }
    let req = request("/obj/4242");
    c.bench_function("key + lookup (hit, 10k objects)", |b| {
        b.iter(|| {
            let key = spec.key(&req, "http");
            let found = matches!(store.lookup(&key, |_| None), Lookup::Found(_));
            black_box(found)
        })
    });
}

criterion_group!(benches, lookup);
criterion_main!(benches);
