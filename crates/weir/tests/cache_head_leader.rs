//! A GET coalesced behind a HEAD miss leader (GET and HEAD share a key): the HEAD leader ends
//! `Complete` without a head to share (its answer has no body), and the GET goes on its own at
//! once. The outsider review of issue 34 found it waiting out the whole `lock_timeout` (older
//! than that issue).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::cachekit::*;

#[test]
fn a_get_behind_a_head_leader_does_not_wait_out_the_lock_timeout() {
    let o = scripted(|req, _| {
        if req.line.starts_with("HEAD") {
            std::thread::sleep(Duration::from_millis(400));
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 5\r\n\r\n".to_string()
        } else {
            resp("200 OK", "Cache-Control: max-age=60\r\n", "hello")
        }
    });
    let c = cache(&o.origin, ", lock_timeout: 4s", "1m");
    let addr = c.srv.addr;
    let head = std::thread::spawn(move || {
        let mut s = common::connect(addr);
        use std::io::Write;
        s.write_all(b"HEAD /x HTTP/1.1\r\nHost: site.test\r\n\r\n")
            .unwrap();
        common::read_response_to(&mut s, true).status
    });
    common::until(
        "the HEAD's fetch reached the origin",
        Duration::from_secs(10),
        || o.origin.accepted() == 1,
    );
    let t = Instant::now();
    let r = get(&c, "/x", "");
    let took = t.elapsed();
    assert_eq!(head.join().unwrap(), 200);
    assert_eq!((r.status, r.text()), (200, "hello".to_string()));
    assert!(
        took < Duration::from_secs(2),
        "the GET waited {took:?} behind a HEAD leader ({})",
        status_of(&r)
    );
}
