//! DNS-01 through RFC 2136 dynamic updates (`dns: { rfc2136: ... }`): the `_acme-challenge` TXT
//! record added (class IN, TTL 60) before the CA looks and that one record deleted (class NONE)
//! after, each UPDATE signed with the section's TSIG key (RFC 8945) and sent to the primary over
//! TCP; the answer must be signed by the same key (a MAC over our request's MAC and the answer,
//! within the 300 s fudge) before its RCODE is believed. Without `zone`, the zone is found as
//! nsupdate finds it: a signed SOA query for the name, the owner of the SOA in the answer or
//! authority section, else the same for the parent, up to the root.
//!
//! The messages and the TSIG are hickory-proto's (0.26, feature `dnssec-aws-lc-rs`: its HMAC
//! is aws-lc-rs, which weir already links, with the same features; no ring). Measured on this
//! 2-core machine before choosing it: 4 crates added (hickory-proto, tinyvec, critical-section,
//! portable-atomic; idna, url, time, rand, thiserror, bitflags are already in the tree),
//! hickory-proto compiling in 4.7 s (debug) / 6.4 s (release), and about 470 KB on a stripped
//! fat-LTO binary for the update + TSIG path (a scratch binary that builds, signs and verifies
//! one UPDATE: 868 KB, against 398 KB for one that only computes an aws-lc-rs HMAC). Its
//! encoding of these messages is byte for byte nsupdate's (the tests below). What is written
//! here is weir's edge: the key (`tsig_key.rs`), the TCP exchange, the zone lookup, and errors
//! that name the server, the zone and the RCODE or TSIG error.

use super::error::TlsError;
use std::time::Duration;

use hickory_proto::op::{update_message, Message, MessageType, Query};
use hickory_proto::rr::rdata::tsig::TsigError;
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::{Name, RData, Record, RecordSet, RecordType, TSigVerifier, TSigner};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::tsig_key::{self, Key};
use crate::config::model::Rfc2136;

/// The seconds of clock difference a signature is good for (RFC 8945 §10).
const FUDGE: u16 = 300;
/// The TTL of the TXT records added.
const TTL: u32 = 60;

/// What an UPDATE does to the TXT record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Add it (other TXT records of the name stay: a wildcard and its base name share one).
    Add,
    /// Delete that record only (class NONE, RFC 2136 §2.5.4).
    Delete,
}

/// Adds or deletes the TXT record `value` at `fqdn` as `s` says, within `timeout`.
pub(crate) async fn run(
    s: &Rfc2136,
    change: Change,
    fqdn: &str,
    value: &str,
    timeout: Duration,
) -> Result<(), TlsError> {
    let key = tsig_key::from_settings(s)
        .map_err(|(k, m)| TlsError::config(format_args!("dns.rfc2136.{k}: {m}")))?;
    let signer = signer(&key)?;
    let server = server_addr(&s.server)?;
    let fqdn = name(fqdn)?;
    let what = match change {
        Change::Add => "adding",
        Change::Delete => "deleting",
    };
    let work = async {
        let zone = match &s.zone {
            Some(z) => name(z)?,
            None => find_zone(&server, &signer, &fqdn).await?,
        };
        // hickory-proto asserts this (a panic, in release builds too): an error instead.
        if !zone.zone_of(&fqdn) {
            return Err(TlsError::dns(format_args!(
                "RFC 2136: {fqdn} is not in the zone {zone}"
            )));
        }
        let msg = update(fastrand::u16(..), &zone, change, &fqdn, value);
        let answer = exchange(&server, &msg, &signer).await.map_err(|e| {
            TlsError::dns(format_args!(
                "RFC 2136 update at {server}, zone {zone}: {e}"
            ))
        })?;
        match u16::from(answer.metadata.response_code) {
            0 => {
                tracing::info!(%server, %zone, %fqdn, "RFC 2136: {what} the TXT record done");
                Ok(())
            }
            rcode => Err(TlsError::dns(format_args!(
                "RFC 2136 update at {server}, zone {zone}: {}{}",
                rcode_name(rcode),
                match rcode {
                    5 => " (the server refuses this key or address updates of the zone: its allow-update / update-policy)",
                    9 => " (the server is not authoritative for the zone)",
                    10 => " (the name is outside the zone)",
                    _ => "",
                }
            ))),
        }
    };
    tokio::time::timeout(timeout, work).await.map_err(|_| {
        TlsError::new(
            super::error::Kind::Network,
            format_args!("RFC 2136: {what} {fqdn} TXT at {server}: no answer within {timeout:?}"),
        )
    })?
}

/// `server` with its port (53 when absent), as `TcpStream::connect` takes it.
pub(crate) fn server_addr(server: &str) -> Result<String, TlsError> {
    if let Ok(a) = server.parse::<std::net::SocketAddr>() {
        return Ok(a.to_string());
    }
    if let Ok(ip) = server.parse::<std::net::IpAddr>() {
        return Ok(std::net::SocketAddr::new(ip, 53).to_string());
    }
    let (host, port) = match server.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                TlsError::config(format_args!(
                    "{server:?}: the port is not a number from 1 to 65535"
                ))
            })?,
        ),
        None => (server, 53),
    };
    if host.is_empty() || host.contains([':', '/', ' ', '[', ']']) {
        return Err(TlsError::config(format_args!(
            "{server:?} is not host:port (`127.0.0.1:53`, `ns1.example.com`, `[::1]:53`)"
        )));
    }
    Ok(format!("{host}:{port}"))
}

/// A domain name, made absolute.
pub(crate) fn name(n: &str) -> Result<Name, TlsError> {
    let mut name = Name::from_ascii(n).map_err(|e| TlsError::config(format_args!("{n:?}: {e}")))?;
    name.set_fqdn(true);
    if name.is_root() {
        return Err(TlsError::config(format_args!("{n:?}: not the root")));
    }
    Ok(name)
}

fn signer(key: &Key) -> Result<TSigner, TlsError> {
    TSigner::new(
        key.secret.clone(),
        key.algorithm.hickory(),
        name(&key.name)?,
        FUDGE,
    )
    .map_err(|e| TlsError::dns(format_args!("TSIG key {}: {e}", key.name)))
}

/// The UPDATE of `zone` that adds or deletes the TXT record `value` at `fqdn`.
pub(crate) fn update(id: u16, zone: &Name, change: Change, fqdn: &Name, value: &str) -> Message {
    let mut rrset = RecordSet::with_ttl(fqdn.clone(), RecordType::TXT, TTL);
    rrset.insert(
        Record::from_rdata(
            fqdn.clone(),
            TTL,
            RData::TXT(TXT::new(vec![value.to_string()])),
        ),
        0,
    );
    let mut msg = match change {
        Change::Add => update_message::append(rrset, zone.clone(), false, false),
        Change::Delete => update_message::delete_by_rdata(rrset, zone.clone(), false),
    };
    msg.metadata.id = id;
    msg
}

/// A query for the SOA of `name`.
pub(crate) fn soa_query(id: u16, name: &Name) -> Message {
    let mut msg = Message::query();
    msg.metadata.id = id;
    msg.add_query(Query::query(name.clone(), RecordType::SOA));
    msg
}

/// The zone of `fqdn` at `server`: the owner of the SOA its answer gives for `fqdn`, else for
/// each parent in turn.
async fn find_zone(server: &str, signer: &TSigner, fqdn: &Name) -> Result<Name, TlsError> {
    let mut asked = fqdn.clone();
    loop {
        let answer = exchange(server, &soa_query(fastrand::u16(..), &asked), signer)
            .await
            .map_err(|e| {
                TlsError::dns(format_args!(
                    "RFC 2136: finding the zone of {fqdn} at {server}: {e}"
                ))
            })?;
        if let Some(zone) = zone_of(&answer, fqdn) {
            return Ok(zone);
        }
        if asked.num_labels() <= 1 {
            return Err(TlsError::dns(format_args!(
                "RFC 2136: {server} gives no SOA for {fqdn} or its parents (it serves no zone of it; set `zone`)"
            )));
        }
        asked = asked.base_name();
    }
}

/// The zone an answer to a SOA query names: the owner of its SOA record, if that is `fqdn` or
/// one of its parents (a zone elsewhere could not hold the record).
fn zone_of(answer: &Message, fqdn: &Name) -> Option<Name> {
    // NOERROR (the name exists, or the zone's apex) or NXDOMAIN (a name the zone lacks); a
    // REFUSED or SERVFAIL says nothing.
    if !matches!(u16::from(answer.metadata.response_code), 0 | 3) {
        return None;
    }
    answer
        .answers
        .iter()
        .chain(&answer.authorities)
        .find(|r| r.record_type() == RecordType::SOA && r.name.zone_of(fqdn))
        .map(|r| r.name.clone())
}

/// Signs `msg`, sends it over TCP and returns the answer once its signature is verified.
async fn exchange(server: &str, msg: &Message, signer: &TSigner) -> Result<Message, TlsError> {
    let (bytes, verifier) = sign(msg, signer, now())?;
    let len = u16::try_from(bytes.len()).map_err(|_| TlsError::dns("a message over 64 KiB"))?;
    let mut tcp = tokio::net::TcpStream::connect(server)
        .await
        .map_err(|e| TlsError::network("connecting", e))?;
    let mut framed = len.to_be_bytes().to_vec();
    framed.extend_from_slice(&bytes);
    tcp.write_all(&framed)
        .await
        .map_err(|e| TlsError::network("sending", e))?;
    let mut len = [0u8; 2];
    tcp.read_exact(&mut len)
        .await
        .map_err(|e| TlsError::network("reading the answer", e))?;
    let mut answer = vec![0u8; u16::from_be_bytes(len) as usize];
    tcp.read_exact(&mut answer)
        .await
        .map_err(|e| TlsError::network("reading the answer", e))?;
    verify(&answer, msg.metadata.id, verifier)
}

/// `msg` signed at `time`, in wire format, and what verifies its answer.
fn sign(msg: &Message, signer: &TSigner, time: u64) -> Result<(Vec<u8>, TSigVerifier), TlsError> {
    let mut msg = msg.clone();
    let (tsig, verifier) = signer
        .sign_message(&msg, time)
        .map_err(|e| TlsError::dns(format_args!("signing: {e}")))?;
    let verifier = verifier.ok_or_else(|| TlsError::dns("signing: no verifier"))?;
    msg.set_signature(tsig);
    let bytes = msg
        .to_vec()
        .map_err(|e| TlsError::dns(format_args!("encoding: {e}")))?;
    Ok((bytes, verifier))
}

/// The answer `bytes` to request `id`, once its TSIG proves it comes from the key's holder.
fn verify(bytes: &[u8], id: u16, mut verifier: TSigVerifier) -> Result<Message, TlsError> {
    let answer = Message::from_vec(bytes)
        .map_err(|e| TlsError::dns(format_args!("a malformed answer: {e}")))?;
    if answer.metadata.message_type != MessageType::Response {
        return Err(TlsError::dns("a message that is not a response (QR=0)"));
    }
    if answer.metadata.id != id {
        return Err(TlsError::dns(format_args!(
            "an answer with ID {} to request {id}",
            answer.metadata.id
        )));
    }
    let rcode = rcode_name(u16::from(answer.metadata.response_code));
    let Some(tsig) = answer.signature() else {
        return Err(TlsError::dns(format_args!(
            "{rcode}, in an unsigned answer (no TSIG): not believed"
        )));
    };
    // RFC 8945 §4.2: class ANY, TTL 0. hickory-proto's MAC takes these as constants, not as
    // received, so they are checked here (a flipped bit there would otherwise pass).
    if tsig.dns_class != hickory_proto::rr::DNSClass::ANY || tsig.ttl != 0 {
        return Err(TlsError::dns(format_args!(
            "{rcode}, in an answer whose TSIG record is of class {} and TTL {}: not believed",
            tsig.dns_class, tsig.ttl
        )));
    }
    if let Some(error) = &tsig.data.error {
        let why = match error {
            TsigError::BadSig => "BADSIG: the server's secret or algorithm for this key differs",
            TsigError::BadKey => "BADKEY: the server has no key of this name and algorithm",
            TsigError::BadTime => "BADTIME: its clock and ours differ by more than 300 s",
            TsigError::BadTrunc => "BADTRUNC",
            TsigError::Unknown(_) => "an unknown TSIG error",
        };
        return Err(TlsError::dns(format_args!(
            "{rcode}: the server refused the signature of TSIG key {} ({why})",
            tsig.name
        )));
    }
    verifier.verify(bytes).map_err(|e| {
        TlsError::dns(format_args!(
            "{rcode}, in an answer whose TSIG does not verify ({e}): not believed"
        ))
    })?;
    Ok(answer)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// An RCODE's name (RFC 1035, RFC 2136).
fn rcode_name(rcode: u16) -> String {
    match rcode {
        0 => "NOERROR".into(),
        1 => "FORMERR".into(),
        2 => "SERVFAIL".into(),
        3 => "NXDOMAIN".into(),
        4 => "NOTIMP".into(),
        5 => "REFUSED".into(),
        6 => "YXDOMAIN".into(),
        7 => "YXRRSET".into(),
        8 => "NXRRSET".into(),
        9 => "NOTAUTH".into(),
        10 => "NOTZONE".into(),
        n => format!("RCODE {n}"),
    }
}

#[cfg(test)]
#[path = "dns_update_tests.rs"]
mod tests;
