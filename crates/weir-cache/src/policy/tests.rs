//! Table tests for `policy.rs`.

use super::*;
use bytes::Bytes;

const NOW: u64 = 1_700_000_000;

/// Header fields from (name, value) pairs (also used by other modules' tests).
pub(crate) fn h(pairs: &[(&str, &str)]) -> Vec<Header> {
    pairs
        .iter()
        .map(|(n, v)| Header {
            name: Bytes::copy_from_slice(n.as_bytes()),
            value: Bytes::copy_from_slice(v.as_bytes()),
        })
        .collect()
}

fn date(secs: u64) -> String {
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

#[test]
fn storability_table() {
    let rules = StoreRules::default();
    let d = date(NOW);
    type Case = (
        &'static str,
        Method,
        Vec<Header>,
        u16,
        Vec<Header>,
        Result<u64, NoStore>,
    );
    let cases: Vec<Case> = vec![
        (
            "max-age",
            Method::Get,
            h(&[]),
            200,
            h(&[("Cache-Control", "max-age=60")]),
            Ok(60),
        ),
        (
            "s-maxage wins",
            Method::Get,
            h(&[]),
            200,
            h(&[("Cache-Control", "max-age=60, s-maxage=5")]),
            Ok(5),
        ),
        (
            "CDN-Cache-Control wins",
            Method::Get,
            h(&[]),
            200,
            h(&[
                ("Cache-Control", "no-store"),
                ("CDN-Cache-Control", "max-age=30"),
            ]),
            Ok(30),
        ),
        (
            "expires",
            Method::Get,
            h(&[]),
            200,
            h(&[("Date", &d), ("Expires", &date(NOW + 100))]),
            Ok(100),
        ),
        (
            "bad expires",
            Method::Get,
            h(&[]),
            200,
            h(&[("Expires", "0")]),
            Ok(0),
        ),
        (
            "heuristic",
            Method::Get,
            h(&[]),
            200,
            h(&[("Date", &d), ("Last-Modified", &date(NOW - 1000))]),
            Ok(100),
        ),
        (
            "heuristic capped",
            Method::Get,
            h(&[]),
            200,
            h(&[("Date", &d), ("Last-Modified", &date(NOW - 10_000_000))]),
            Ok(86_400),
        ),
        (
            "no freshness",
            Method::Get,
            h(&[]),
            200,
            h(&[]),
            Err(NoStore::NoFreshness),
        ),
        (
            "302 not heuristic",
            Method::Get,
            h(&[]),
            302,
            h(&[("Last-Modified", &date(NOW - 1000))]),
            Err(NoStore::NoFreshness),
        ),
        (
            "404 heuristic",
            Method::Get,
            h(&[]),
            404,
            h(&[("Date", &d), ("Last-Modified", &date(NOW - 50))]),
            Ok(5),
        ),
        (
            "post",
            Method::Post,
            h(&[]),
            200,
            h(&[("Cache-Control", "max-age=60")]),
            Err(NoStore::Method),
        ),
        (
            "no-store",
            Method::Get,
            h(&[]),
            200,
            h(&[("Cache-Control", "max-age=60, no-store")]),
            Err(NoStore::ResponseNoStore),
        ),
        (
            "request no-store",
            Method::Get,
            h(&[("Cache-Control", "no-store")]),
            200,
            h(&[("Cache-Control", "max-age=60")]),
            Err(NoStore::RequestNoStore),
        ),
        (
            "private",
            Method::Get,
            h(&[]),
            200,
            h(&[("Cache-Control", "private, max-age=60")]),
            Err(NoStore::Private),
        ),
        (
            "authorization",
            Method::Get,
            h(&[("Authorization", "x")]),
            200,
            h(&[("Cache-Control", "max-age=60")]),
            Err(NoStore::Authorization),
        ),
        (
            "authorization + public",
            Method::Get,
            h(&[("Authorization", "x")]),
            200,
            h(&[("Cache-Control", "public, max-age=60")]),
            Ok(60),
        ),
        (
            "set-cookie",
            Method::Get,
            h(&[]),
            200,
            h(&[("Cache-Control", "max-age=60"), ("Set-Cookie", "a=b")]),
            Err(NoStore::SetCookie),
        ),
        (
            "vary *",
            Method::Get,
            h(&[]),
            200,
            h(&[("Cache-Control", "max-age=60"), ("Vary", "*")]),
            Err(NoStore::VaryStar),
        ),
    ];
    for (name, m, rq, status, rs, want) in cases {
        let got = storable(&m, &rq, status, &rs, &rules, NOW).map(|s| s.lifetime);
        assert_eq!(got, want, "{name}");
    }
}

/// Issue 33 §3: a configured ttl applies whenever the origin gives no explicit freshness,
/// before the Last-Modified heuristic.
#[test]
fn a_configured_ttl_wins_over_the_heuristic() {
    let rules = StoreRules {
        ttl_by_status: vec![(200, 3600)],
        ..Default::default()
    };
    let lm =
        httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(NOW - 1000));
    let only_lm = h(&[("Last-Modified", lm.as_str())]);
    let got = storable(&Method::Get, &[], 200, &only_lm, &rules, NOW).unwrap();
    assert_eq!(got.lifetime, 3600);
    // Without the rule, the heuristic: a tenth of 1000 s.
    let got = storable(
        &Method::Get,
        &[],
        200,
        &only_lm,
        &StoreRules::default(),
        NOW,
    )
    .unwrap();
    assert_eq!(got.lifetime, 100);
    // Explicit freshness still wins over the rule.
    let explicit = h(&[
        ("Last-Modified", lm.as_str()),
        ("Cache-Control", "max-age=7"),
    ]);
    let got = storable(&Method::Get, &[], 200, &explicit, &rules, NOW).unwrap();
    assert_eq!(got.lifetime, 7);
}

#[test]
fn rules_override_the_origin() {
    let rules = StoreRules {
        ttl_by_status: vec![(200, 86_400)],
        ignore_origin: true,
        share_set_cookie: false,
    };
    let s = storable(
        &Method::Get,
        &[],
        200,
        &h(&[("Cache-Control", "no-store, private")]),
        &rules,
        NOW,
    )
    .unwrap();
    assert_eq!(s.lifetime, 86_400);
    assert_eq!(
        storable(&Method::Get, &[], 404, &h(&[]), &rules, NOW),
        Err(NoStore::NoFreshness)
    );
    let fallback = StoreRules {
        ttl_by_status: vec![(200, 30)],
        ..Default::default()
    };
    assert_eq!(
        storable(&Method::Get, &[], 200, &h(&[]), &fallback, NOW)
            .unwrap()
            .lifetime,
        30
    );
    assert_eq!(
        storable(
            &Method::Get,
            &[],
            200,
            &h(&[("Cache-Control", "max-age=5")]),
            &fallback,
            NOW
        )
        .unwrap()
        .lifetime,
        5
    );
}

#[test]
fn age_calculation() {
    // Origin said Age: 10, the response took 2 s to arrive, Date is 5 s behind.
    let c = AgeClock::new(NOW - 2, NOW, &h(&[("Age", "10"), ("Date", &date(NOW - 5))]));
    assert_eq!(c.current_age(NOW), 12);
    assert_eq!(c.current_age(NOW + 30), 42);
    let c = AgeClock::new(NOW, NOW, &h(&[("Date", &date(NOW - 20))]));
    assert_eq!(c.current_age(NOW), 20, "apparent age from Date");
}

#[test]
fn freshness_verdicts() {
    let base = Storable {
        lifetime: 60,
        must_revalidate: false,
        no_cache: false,
        stale_while_revalidate: 0,
        stale_if_error: 0,
    };
    let req = |s: &str| Directives::parse([s.as_bytes()]);
    let none = req("");
    let cases: Vec<(&str, Storable, u64, bool, Directives, Freshness)> = vec![
        (
            "fresh",
            base.clone(),
            10,
            false,
            none.clone(),
            Freshness::Fresh,
        ),
        (
            "stale",
            base.clone(),
            60,
            false,
            none.clone(),
            Freshness::Revalidate { if_error: false },
        ),
        (
            "min-fresh",
            base.clone(),
            50,
            false,
            req("min-fresh=20"),
            Freshness::Revalidate { if_error: false },
        ),
        (
            "request max-age",
            base.clone(),
            30,
            false,
            req("max-age=10"),
            Freshness::Revalidate { if_error: false },
        ),
        (
            "request no-cache",
            base.clone(),
            1,
            false,
            req("no-cache"),
            Freshness::Revalidate { if_error: false },
        ),
        (
            "max-stale any",
            base.clone(),
            500,
            false,
            req("max-stale"),
            Freshness::StaleAllowed,
        ),
        (
            "max-stale bounded",
            base.clone(),
            100,
            false,
            req("max-stale=30"),
            Freshness::Revalidate { if_error: false },
        ),
        (
            "max-stale within",
            base.clone(),
            80,
            false,
            req("max-stale=30"),
            Freshness::StaleAllowed,
        ),
        (
            "swr",
            Storable {
                stale_while_revalidate: 30,
                ..base.clone()
            },
            70,
            false,
            none.clone(),
            Freshness::StaleWhileRevalidate,
        ),
        (
            "swr expired",
            Storable {
                stale_while_revalidate: 30,
                ..base.clone()
            },
            95,
            false,
            none.clone(),
            Freshness::Revalidate { if_error: false },
        ),
        (
            "sie",
            Storable {
                stale_if_error: 100,
                ..base.clone()
            },
            90,
            false,
            none.clone(),
            Freshness::Revalidate { if_error: true },
        ),
        (
            "must-revalidate beats max-stale",
            Storable {
                must_revalidate: true,
                ..base.clone()
            },
            70,
            false,
            req("max-stale"),
            Freshness::Revalidate { if_error: false },
        ),
        (
            "response no-cache",
            Storable {
                no_cache: true,
                ..base.clone()
            },
            1,
            false,
            none.clone(),
            Freshness::Revalidate { if_error: false },
        ),
        (
            "soft purged",
            base.clone(),
            1,
            true,
            none.clone(),
            Freshness::Revalidate { if_error: false },
        ),
        (
            "forever",
            Storable {
                lifetime: u64::MAX,
                ..base.clone()
            },
            1 << 40,
            false,
            none.clone(),
            Freshness::Fresh,
        ),
    ];
    for (name, s, age, inval, r, want) in cases {
        assert_eq!(evaluate(&s, age, inval, &r), want, "{name}");
    }
}

/// (status, response fields, reusable)
type PostCase<'a> = (u16, &'a [(&'a str, &'a str)], bool);

#[test]
fn post_responses_reusable_for_gets() {
    let cases: &[PostCase] = &[
        (
            200,
            &[
                ("Cache-Control", "max-age=60"),
                ("Content-Location", "/p?x=1"),
            ],
            true,
        ),
        (
            200,
            &[
                ("Expires", "Mon, 01 Jan 2024 00:00:00 GMT"),
                ("Content-Location", "http://H.test/p?x=1"),
            ],
            true,
        ),
        (
            200,
            &[
                ("Cache-Control", "max-age=60"),
                ("Content-Location", "/other"),
            ],
            false,
        ),
        (
            200,
            &[
                ("Cache-Control", "max-age=60"),
                ("Content-Location", "http://evil.test/p?x=1"),
            ],
            false,
        ),
        (200, &[("Cache-Control", "max-age=60")], false),
        (
            200,
            &[
                ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT"),
                ("Content-Location", "/p?x=1"),
            ],
            false,
        ),
        (
            201,
            &[
                ("Cache-Control", "max-age=60"),
                ("Content-Location", "/p?x=1"),
            ],
            false,
        ),
    ];
    for (status, headers, want) in cases {
        assert_eq!(
            post_response_reusable(b"/p?x=1", b"h.test", *status, &h(headers)),
            *want,
            "{status} {headers:?}"
        );
    }
}
