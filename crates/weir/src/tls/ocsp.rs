//! OCSP stapling (RFC 6960, RFC 6066 §8): for each certificate of a listener with `ocsp:`, a
//! thread asks the certificate's responder (its Authority Information Access URL, or
//! `ocsp.responder`) for its status, or reads a DER response from `ocsp.file`, checks that the
//! answer is a successful response about this certificate, "good", and current, and swaps the
//! certificate's slot (`sni.rs`) for the same certificate carrying the response, which rustls
//! then sends in every handshake. It asks again every `refresh` (or at half the time left to
//! the response's nextUpdate, when sooner); a failure is retried after a minute, and the last
//! good response stays stapled until its nextUpdate passes.
//!
//! Written by hand: the request (a CertID: SHA-1 of the issuer's name and key, and the serial)
//! and the few response fields read are a dozen DER elements, and an HTTP/1.0 POST to a plain
//! `http://` responder (as every public CA's is). The response's signature is not verified
//! here: the client verifies what is stapled (a forged staple can only make its own handshake
//! fail), as nginx does without `ssl_stapling_verify`. ACME certificates are not stapled: Let's
//! Encrypt ended its OCSP service in 2025.

use super::error::TlsError;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::sign::CertifiedKey;
use rustls_pki_types::CertificateDer;

/// What one certificate's staple is fetched from.
#[derive(Debug)]
pub(crate) struct Target {
    pub slot: Weak<ArcSwap<CertifiedKey>>,
    /// `http://host[:port]/path`.
    pub responder: Option<String>,
    pub file: Option<std::path::PathBuf>,
    pub request: Vec<u8>,
    pub serial: Vec<u8>,
    /// For logs.
    pub name: String,
}

/// What a response says that matters here.
#[derive(Debug, PartialEq)]
pub(crate) struct Status {
    pub good: bool,
    /// Unix seconds.
    pub this_update: i64,
    pub next_update: Option<i64>,
}

/// The CertID request for `leaf` issued by `issuer`, and the leaf's serial.
pub(crate) fn request_for(leaf: &[u8], issuer: &[u8]) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let (_, leaf) = x509_parser::parse_x509_certificate(leaf).map_err(TlsError::ocsp)?;
    let (_, issuer) = x509_parser::parse_x509_certificate(issuer).map_err(TlsError::ocsp)?;
    let sha1 = |d: &[u8]| {
        aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, d)
            .as_ref()
            .to_vec()
    };
    let name_hash = sha1(issuer.subject().as_raw());
    let key_hash = sha1(&issuer.public_key().subject_public_key.data);
    let serial = leaf.raw_serial().to_vec();
    // sha1 with a NULL parameter.
    let sha1_alg = tlv(
        0x30,
        &[tlv(0x06, &[0x2b, 0x0e, 0x03, 0x02, 0x1a]), vec![0x05, 0x00]].concat(),
    );
    let cert_id = tlv(
        0x30,
        &[
            sha1_alg,
            tlv(0x04, &name_hash),
            tlv(0x04, &key_hash),
            tlv(0x02, &serial),
        ]
        .concat(),
    );
    let request = tlv(0x30, &tlv(0x30, &tlv(0x30, &tlv(0x30, &cert_id))));
    Ok((request, serial))
}

/// The leaf's OCSP responder URL from its Authority Information Access extension.
pub(crate) fn responder_of(leaf: &[u8]) -> Option<String> {
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).ok()?;
    cert.extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityInfoAccess(aia) => {
                aia.accessdescs.iter().find_map(|d| {
                    match (&d.access_method.to_id_string()[..], &d.access_location) {
                        ("1.3.6.1.5.5.7.48.1", GeneralName::URI(u)) => Some(u.to_string()),
                        _ => None,
                    }
                })
            }
            _ => None,
        })
}

/// Starts the thread that keeps `targets` stapled; it ends once their slots are gone (a
/// reload replaced the listener's certificates).
pub(crate) fn start(targets: Vec<Target>, refresh: Duration) {
    let spawned = std::thread::Builder::new()
        .name("weir-ocsp".into())
        .spawn(move || run(targets, refresh));
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the OCSP stapling thread");
    }
}

fn run(targets: Vec<Target>, refresh: Duration) {
    let mut next = vec![std::time::Instant::now(); targets.len()];
    loop {
        if targets.iter().all(|t| t.slot.strong_count() == 0) {
            return;
        }
        let now = std::time::Instant::now();
        for (t, at) in targets.iter().zip(next.iter_mut()) {
            if *at > now {
                continue;
            }
            let Some(slot) = t.slot.upgrade() else {
                *at = now + Duration::from_secs(86_400 * 365);
                continue;
            };
            *at = now + staple(t, &slot, refresh);
        }
        let soonest = next.iter().min().copied().unwrap_or(now);
        std::thread::sleep(
            soonest
                .saturating_duration_since(std::time::Instant::now())
                .clamp(Duration::from_millis(100), Duration::from_secs(60)),
        );
    }
}

/// Fetches and staples one response; returns the wait before the next.
fn staple(t: &Target, slot: &ArcSwap<CertifiedKey>, refresh: Duration) -> Duration {
    let now = now_unix();
    let fetched = fetch(t).and_then(|der| {
        let status = parse(&der, &t.serial)?;
        if !status.good {
            return Err(TlsError::ocsp(
                "the responder says the certificate is not good (revoked or unknown)",
            ));
        }
        if status.next_update.is_some_and(|n| n <= now) {
            return Err(TlsError::ocsp("the response is past its nextUpdate"));
        }
        Ok((der, status))
    });
    match fetched {
        Ok((der, status)) => {
            let current = slot.load();
            let mut key = CertifiedKey::clone(&current);
            key.ocsp = Some(der);
            slot.store(Arc::new(key));
            tracing::info!(certificate = %t.name, next_update = ?status.next_update, "OCSP response stapled");
            match status.next_update {
                Some(n) => refresh.min(Duration::from_secs(((n - now) / 2).max(1) as u64)),
                None => refresh,
            }
        }
        Err(e) => {
            let current = slot.load();
            // Keep a stapled response while it is current; drop it once it is not.
            let expired = current
                .ocsp
                .as_deref()
                .and_then(|d| parse(d, &t.serial).ok())
                .is_none_or(|s| s.next_update.is_some_and(|n| n <= now));
            if expired && current.ocsp.is_some() {
                let mut key = CertifiedKey::clone(&current);
                key.ocsp = None;
                slot.store(Arc::new(key));
            }
            tracing::warn!(certificate = %t.name, error = %e, "OCSP stapling: no fresh response; retrying in 60 s");
            Duration::from_secs(60)
        }
    }
}

/// The DER response: read from the file, or POSTed for to the responder.
fn fetch(t: &Target) -> Result<Vec<u8>, TlsError> {
    if let Some(f) = &t.file {
        return std::fs::read(f).map_err(|e| TlsError::file("read", f, e));
    }
    let url = t
        .responder
        .as_deref()
        .ok_or_else(|| TlsError::ocsp("no responder"))?;
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        TlsError::ocsp(format_args!("{url}: only http:// responders are supported"))
    })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = if authority.contains(':') {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let timeout = Duration::from_secs(10);
    let sock = std::net::ToSocketAddrs::to_socket_addrs(&addr)
        .map_err(|e| TlsError::network(&addr, e))?
        .next()
        .ok_or_else(|| TlsError::ocsp(format_args!("{addr}: no address")))?;
    let mut s =
        TcpStream::connect_timeout(&sock, timeout).map_err(|e| TlsError::network(&addr, e))?;
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let head = format!(
        "POST {path} HTTP/1.0\r\nHost: {authority}\r\nContent-Type: application/ocsp-request\r\nContent-Length: {}\r\n\r\n",
        t.request.len()
    );
    s.write_all(&[head.as_bytes(), &t.request].concat())
        .map_err(|e| TlsError::network(&addr, e))?;
    let mut answer = Vec::new();
    s.take(1 << 20)
        .read_to_end(&mut answer)
        .map_err(|e| TlsError::network(&addr, e))?;
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| TlsError::ocsp("no complete HTTP response"))?;
    let status_line = String::from_utf8_lossy(&answer[..split]);
    let code = status_line.split_whitespace().nth(1).unwrap_or("");
    if code != "200" {
        return Err(TlsError::ocsp(format_args!(
            "the responder answered {code}"
        )));
    }
    Ok(answer[split + 4..].to_vec())
}

/// Reads a DER OCSPResponse: successful, about `serial`, its status and times.
pub(crate) fn parse(der: &[u8], serial: &[u8]) -> Result<Status, TlsError> {
    let bad = |what: &str| TlsError::ocsp(format_args!("malformed OCSP response ({what})"));
    let (resp, _) = read(der, 0x30).ok_or_else(|| bad("outer"))?;
    let (status, rest) = read(resp, 0x0a).ok_or_else(|| bad("status"))?;
    if status != [0] {
        return Err(TlsError::ocsp(format_args!(
            "the responder refused (OCSP status {status:?})"
        )));
    }
    let (bytes, _) = read(rest, 0xa0).ok_or_else(|| bad("responseBytes"))?;
    let (bytes, _) = read(bytes, 0x30).ok_or_else(|| bad("responseBytes"))?;
    let (_, rest) = read(bytes, 0x06).ok_or_else(|| bad("responseType"))?;
    let (basic, _) = read(rest, 0x04).ok_or_else(|| bad("response"))?;
    let (basic, _) = read(basic, 0x30).ok_or_else(|| bad("BasicOCSPResponse"))?;
    let (data, _) = read(basic, 0x30).ok_or_else(|| bad("tbsResponseData"))?;
    let mut rest = data;
    if rest.first() == Some(&0xa0) {
        rest = read(rest, 0xa0).ok_or_else(|| bad("version"))?.1;
    }
    // responderID, [1] or [2].
    rest = skip(rest).ok_or_else(|| bad("responderID"))?;
    let (_, rest) = read(rest, 0x18).ok_or_else(|| bad("producedAt"))?;
    let (mut responses, _) = read(rest, 0x30).ok_or_else(|| bad("responses"))?;
    while !responses.is_empty() {
        let (single, after) = read(responses, 0x30).ok_or_else(|| bad("SingleResponse"))?;
        responses = after;
        let (cert_id, rest) = read(single, 0x30).ok_or_else(|| bad("certID"))?;
        let mut id = cert_id;
        for _ in 0..3 {
            id = skip(id).ok_or_else(|| bad("certID"))?;
        }
        let (this_serial, _) = read(id, 0x02).ok_or_else(|| bad("serial"))?;
        if this_serial != serial {
            continue;
        }
        let good = rest.first() == Some(&0x80);
        let rest = skip(rest).ok_or_else(|| bad("certStatus"))?;
        let (this_update, rest) = read(rest, 0x18).ok_or_else(|| bad("thisUpdate"))?;
        let next_update = match read(rest, 0xa0) {
            Some((n, _)) => Some(time(read(n, 0x18).ok_or_else(|| bad("nextUpdate"))?.0)?),
            None => None,
        };
        return Ok(Status {
            good,
            this_update: time(this_update)?,
            next_update,
        });
    }
    Err(TlsError::ocsp("the response is not about this certificate"))
}

/// The content of the DER element at the start of `d` if its tag is `tag`, and what follows.
fn read(d: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    if *d.first()? != tag {
        return None;
    }
    element(d)
}

/// Skips one element of any tag.
fn skip(d: &[u8]) -> Option<&[u8]> {
    element(d).map(|(_, rest)| rest)
}

fn element(d: &[u8]) -> Option<(&[u8], &[u8])> {
    let first = *d.get(1)?;
    let (len, start) = if first < 0x80 {
        (first as usize, 2)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 {
            return None;
        }
        let len = d
            .get(2..2 + n)?
            .iter()
            .fold(0usize, |a, b| a << 8 | *b as usize);
        (len, 2 + n)
    };
    let end = start.checked_add(len)?;
    Some((d.get(start..end)?, &d[end..]))
}

/// A DER element: tag, length, content.
fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// A GeneralizedTime (`YYYYMMDDHHMMSSZ`) as Unix seconds.
fn time(t: &[u8]) -> Result<i64, TlsError> {
    let s = std::str::from_utf8(t).map_err(|_| TlsError::ocsp("bad time"))?;
    let n = |a: usize, b: usize| {
        s.get(a..b)
            .and_then(|v| v.parse::<i64>().ok())
            .ok_or_else(|| TlsError::ocsp("bad time"))
    };
    let (y, m, d) = (n(0, 4)?, n(4, 6)?, n(6, 8)?);
    let (hh, mm, ss) = (n(8, 10)?, n(10, 12)?, n(12, 14)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The issuer certificate of a chain: the second element, else `issuer`.
pub(crate) fn issuer_of<'a>(
    chain: &'a [CertificateDer<'static>],
    issuer: Option<&'a CertificateDer<'static>>,
) -> Option<&'a CertificateDer<'static>> {
    chain.get(1).or(issuer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generalized_times_read_as_unix_seconds() {
        assert_eq!(time(b"19700101000000Z").ok(), Some(0));
        assert_eq!(time(b"20261124120000Z").ok(), Some(1_795_521_600));
        assert_eq!(time(b"20000301000000Z").ok(), Some(951_868_800));
        assert!(time(b"2026").is_err());
    }

    #[test]
    fn der_lengths_short_and_long() {
        let short = tlv(0x04, &[1, 2, 3]);
        assert_eq!(short, [0x04, 3, 1, 2, 3]);
        let long = tlv(0x04, &[7; 300]);
        assert_eq!(&long[..4], &[0x04, 0x82, 0x01, 0x2c]);
        assert_eq!(
            read(&long, 0x04).map(|(c, r)| (c.len(), r.len())),
            Some((300, 0))
        );
        assert_eq!(read(&long, 0x30), None);
        assert_eq!(
            element(&[0x04, 0x85, 0, 0, 0, 0, 1]),
            None,
            "lengths past 4 bytes"
        );
        assert_eq!(element(&[0x04, 5, 1]), None, "truncated");
    }

    #[test]
    fn a_refusal_and_garbage_are_errors() {
        // OCSPResponse { responseStatus: tryLater (3) }
        let refused = tlv(0x30, &tlv(0x0a, &[3]));
        assert!(parse(&refused, &[1])
            .unwrap_err()
            .to_string()
            .contains("refused"));
        assert!(parse(b"not der", &[1]).is_err());
    }
}
