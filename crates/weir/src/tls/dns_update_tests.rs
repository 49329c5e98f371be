//! Vectors from bind9 9.18: `nsupdate -v -k key.conf` talking to `named` through a recording
//! TCP relay on loopback, with the key `tsig-keygen -a hmac-sha256 weir-acme` wrote (`SECRET`).
//! Each `Q_` is what nsupdate sent, each `R_` what named answered.

use super::super::tsig_key::Algorithm;
use super::*;

const SECRET: &str = "U2NNRaXrhyYTcMDOMAL+kzOnraQeav1AKoBrblwEm7A=";
const FQDN: &str = "_acme-challenge.bind9.weir.test.";
const ZONE: &str = "bind9.weir.test.";

/// `update add _acme-challenge.bind9.weir.test. 60 IN TXT "valueA"` without a `zone` line:
/// nsupdate first asks the SOA of the name (signed), then sends the UPDATE; time 0x6b088247.
const Q_SOA: &str = "861e000000010000000000010f5f61636d652d6368616c6c656e67650562696e643904776569720474657374000006000109776569722d61636d650000fa00ff00000000003d0b686d61632d7368613235360000006b088247012c0020ea70e973dc89c5ec3314af8e00b8d3e23dfb59eb36c62fd63e98116af9293b8e861e00000000";
const R_SOA: &str = "861e840000010000000100010f5f61636d652d6368616c6c656e67650562696e6439047765697204746573740000060001c01c000600010000003c0021026e73c01c0561646d696ec01c000000010000003c0000003c000002580000003c09776569722d61636d650000fa00ff00000000003d0b686d61632d7368613235360000006b088247012c0020e85b1a8e26b00c2e089252fc24c7ccb4c3c3ba56647d1e7bc5bc5bf4cfa8dee7861e00000000";
const Q_ADD: &str = "0600280000010000000100010562696e64390477656972047465737400000600010f5f61636d652d6368616c6c656e6765c00c001000010000003c00070676616c75654109776569722d61636d650000fa00ff00000000003d0b686d61632d7368613235360000006b088247012c00200d81dfc941399cf67da6fcd5de7d6ae542990c400f6b24e24ae767de87fc6e49060000000000";
const R_ADD: &str = "0600a80000010000000000010562696e643904776569720474657374000006000109776569722d61636d650000fa00ff00000000003d0b686d61632d7368613235360000006b088247012c0020859ac63fa6a012fc72769b468dfadc72a26f3fbc8971dacecf93626950058238060000000000";
/// `zone bind9.weir.test` + `update delete _acme-challenge.bind9.weir.test. TXT "valueA"`, at
/// 0x6b08824b.
const Q_DELETE: &str = "e583280000010000000100010562696e64390477656972047465737400000600010f5f61636d652d6368616c6c656e6765c00c001000fe0000000000070676616c75654109776569722d61636d650000fa00ff00000000003d0b686d61632d7368613235360000006b08824b012c0020532b80ad512c95f978950c31a1e0227b875a27654faa56c99cee41f4574bd34ae58300000000";
const R_DELETE: &str = "e583a80000010000000000010562696e643904776569720474657374000006000109776569722d61636d650000fa00ff00000000003d0b686d61632d7368613235360000006b08824b012c0020c2143fdee8a07d08ba7b27f80145abb5d7a2a9de2ab12f8c8a86395bbd365b34e58300000000";
/// The add of "valueB" at 0x6b08824b, signed with a secret whose first byte differs: named
/// answers NOTAUTH with an unsigned TSIG record carrying BADSIG.
const R_BADSIG: &str = "2080a80900010000000000010562696e643904776569720474657374000006000109776569722d61636d650000fa00ff00000000001d0b686d61632d7368613235360000006b08824b012c0000208000100000";

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn key(secret: &str) -> TSigner {
    use base64::Engine;
    signer(&Key {
        name: "weir-acme".into(),
        algorithm: Algorithm::Sha256,
        secret: base64::engine::general_purpose::STANDARD
            .decode(secret)
            .unwrap(),
    })
    .unwrap()
}

fn add(id: u16, value: &str) -> Message {
    update(
        id,
        &name(ZONE).unwrap(),
        Change::Add,
        &name(FQDN).unwrap(),
        value,
    )
}

#[test]
fn the_messages_are_byte_for_byte_nsupdates() {
    let k = key(SECRET);
    let soa = soa_query(0x861e, &name(FQDN).unwrap());
    assert_eq!(hex(&sign(&soa, &k, 0x6b08_8247).unwrap().0), Q_SOA);
    assert_eq!(
        hex(&sign(&add(0x0600, "valueA"), &k, 0x6b08_8247).unwrap().0),
        Q_ADD
    );
    // The zone without its final dot: the same message.
    let delete = update(
        0xe583,
        &name("bind9.weir.test").unwrap(),
        Change::Delete,
        &name(FQDN).unwrap(),
        "valueA",
    );
    assert_eq!(hex(&sign(&delete, &k, 0x6b08_824b).unwrap().0), Q_DELETE);
}

/// The verifier of a request, as signed when it was captured.
fn verifier(msg: &Message, secret: &str, time: u64) -> TSigVerifier {
    sign(msg, &key(secret), time).unwrap().1
}

#[test]
fn nameds_signed_answers_verify() {
    let soa = soa_query(0x861e, &name(FQDN).unwrap());
    let answer = verify(&unhex(R_SOA), 0x861e, verifier(&soa, SECRET, 0x6b08_8247)).unwrap();
    // The zone, found as nsupdate finds it: the owner of the SOA in the authority section.
    let fqdn = name(FQDN).unwrap();
    assert_eq!(zone_of(&answer, &fqdn), Some(name(ZONE).unwrap()));
    // The same SOA does not name the zone of a name outside it.
    assert_eq!(zone_of(&answer, &name("other.example").unwrap()), None);
    let answer = verify(
        &unhex(R_ADD),
        0x0600,
        verifier(&add(0x0600, "valueA"), SECRET, 0x6b08_8247),
    )
    .unwrap();
    assert_eq!(u16::from(answer.metadata.response_code), 0);
    let delete = update(
        0xe583,
        &name(ZONE).unwrap(),
        Change::Delete,
        &name(FQDN).unwrap(),
        "valueA",
    );
    verify(
        &unhex(R_DELETE),
        0xe583,
        verifier(&delete, SECRET, 0x6b08_824b),
    )
    .unwrap();
}

#[test]
fn any_flipped_byte_of_a_signed_answer_is_refused() {
    let good = unhex(R_ADD);
    let request = add(0x0600, "valueA");
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x01;
        let v = verifier(&request, SECRET, 0x6b08_8247);
        assert!(
            verify(&bad, 0x0600, v).is_err(),
            "byte {i} flipped and still accepted"
        );
    }
    // Nor the right answer to another request, nor one checked with another secret.
    let e = verify(
        &good,
        0x0600,
        verifier(&add(0x0600, "valueB"), SECRET, 0x6b08_8247),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("NOERROR, in an answer whose TSIG does not verify"),
        "{e}"
    );
    let other = "V2NNRaXrhyYTcMDOMAL+kzOnraQeav1AKoBrblwEm7A=";
    let e = verify(&good, 0x0600, verifier(&request, other, 0x6b08_8247))
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not verify"), "{e}");
    // An answer to another ID.
    let e = verify(&good, 0x0601, verifier(&request, SECRET, 0x6b08_8247))
        .unwrap_err()
        .to_string();
    assert!(e.contains("ID 1536 to request 1537"), "{e}");
}

#[test]
fn unsigned_answers_are_refused() {
    let good = unhex(R_ADD);
    // The TSIG record cut off, ARCOUNT 0.
    let mut unsigned = good[..good.len() - (11 + 10 + 0x3d)].to_vec();
    unsigned[11] = 0;
    let v = verifier(&add(0x0600, "valueA"), SECRET, 0x6b08_8247);
    let e = verify(&unsigned, 0x0600, v).unwrap_err().to_string();
    assert_eq!(e, "NOERROR, in an unsigned answer (no TSIG): not believed");
}

#[test]
fn a_wrong_secret_is_reported_as_named_says() {
    let other = "V2NNRaXrhyYTcMDOMAL+kzOnraQeav1AKoBrblwEm7A=";
    let v = verifier(&add(0x2080, "valueB"), other, 0x6b08_824b);
    let e = verify(&unhex(R_BADSIG), 0x2080, v).unwrap_err().to_string();
    assert!(
        e.starts_with("NOTAUTH: the server refused the signature of TSIG key weir-acme. (BADSIG:"),
        "{e}"
    );
}

#[test]
fn refused_answers_name_no_zone() {
    let mut m = Message::from_vec(&unhex(R_SOA)).unwrap();
    m.metadata.response_code = hickory_proto::op::ResponseCode::Refused;
    assert_eq!(zone_of(&m, &name(FQDN).unwrap()), None);
}

#[test]
fn servers_and_names() {
    for (given, want) in [
        ("127.0.0.1", Ok("127.0.0.1:53")),
        ("127.0.0.1:5353", Ok("127.0.0.1:5353")),
        ("::1", Ok("[::1]:53")),
        ("[::1]:5353", Ok("[::1]:5353")),
        ("ns1.example.com", Ok("ns1.example.com:53")),
        ("ns1.example.com:1053", Ok("ns1.example.com:1053")),
        ("ns1.example.com:0", Err("the port")),
        ("ns1.example.com:dns", Err("the port")),
        (":53", Err("not host:port")),
        ("", Err("not host:port")),
        ("a b", Err("not host:port")),
    ] {
        match (server_addr(given), want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want),
            (Err(got), Err(want)) => assert!(got.to_string().contains(want), "{given}: {got}"),
            (got, want) => panic!("{given}: {got:?}, not {want:?}"),
        }
    }
    assert_eq!(name("example.com").unwrap().to_string(), "example.com.");
    assert!(name(".").is_err());
    assert!(name("a..b").is_err());
}

/// A server that takes the connection and never answers: the update ends at `timeout`, saying
/// so.
#[tokio::test]
async fn a_silent_server_times_out() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(s);
    });
    let s = Rfc2136 {
        server: addr.to_string(),
        zone: Some("bind9.weir.test".into()),
        key_name: Some("weir-acme".into()),
        key_secret: Some(SECRET.into()),
        key_file: None,
        algorithm: None,
    };
    let e = run(&s, Change::Add, FQDN, "v", Duration::from_millis(300))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!("RFC 2136: adding {FQDN} TXT at {addr}: no answer within 300ms")
    );
    held.abort();
    // A bad secret is named by its key before anything is sent.
    let e = run(
        &Rfc2136 {
            key_secret: Some("***".into()),
            ..s
        },
        Change::Add,
        FQDN,
        "v",
        Duration::from_millis(300),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("dns.rfc2136.key_secret: not base64"), "{e}");
}
