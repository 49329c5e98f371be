//! One ACME issuance with `instant-acme` (why that crate: `acme.rs`): the account (created
//! once, its credentials kept in `storage/`), an order for the names, each authorization
//! answered by HTTP-01 or TLS-ALPN-01 through [`Challenges`](super::acme::Challenges), or by
//! DNS-01 through the section's `dns`: RFC 2136 updates ([`dns_update`](super::dns_update)) or
//! the `dns.exec` command (`present` before, `cleanup` after, on every way out), then a CSR for
//! a fresh ECDSA P-256 key, the certificate chain, and [`AcmeCerts::install`].

use super::error::TlsError;
use std::sync::Arc;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use rustls::sign::CertifiedKey;

use super::acme::AcmeCerts;

/// [`obtain`] as a task of its own: a panic in it (a dependency's assertion, say) fails this
/// attempt, logged and retried like any failure, instead of ending the thread that renews the
/// section's certificates. Call from within a tokio runtime.
pub(super) async fn obtain_guarded(certs: &Arc<AcmeCerts>) -> Result<(), TlsError> {
    let certs = certs.clone();
    match tokio::spawn(async move { obtain(&certs).await }).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => Err(TlsError::acme(
            "the attempt panicked (see the log); retried",
        )),
        Err(e) => Err(TlsError::acme(format_args!("the attempt ended: {e}"))),
    }
}

/// Obtains a certificate for `certs`' names and installs it, within [`limit`]: instant-acme
/// sets no time limit of its own, and a CA that accepts a connection and never answers would
/// otherwise hold this attempt (and the renewals or on-demand orders waiting behind it)
/// forever.
pub(super) async fn obtain(certs: &AcmeCerts) -> Result<(), TlsError> {
    // DNS-01 records set by this attempt, removed whatever happens.
    let mut records = Vec::new();
    let limit = limit(certs);
    let result = match tokio::time::timeout(limit, attempt(certs, &mut records)).await {
        Ok(r) => r,
        Err(_) => Err(TlsError::acme(format_args!(
            "the CA did not finish the order within {limit:?}"
        ))),
    };
    if let Some(dns) = &certs.settings.dns {
        for (fqdn, value) in &records {
            if let Err(e) = hook(dns, "cleanup", fqdn, value).await {
                tracing::warn!(fqdn, error = %e, "ACME DNS-01 cleanup failed");
            }
        }
    }
    result
}

/// How long one attempt may take: `order_timeout` (5 minutes) for the CA, plus DNS-01's
/// propagation wait and its two record changes.
pub(super) fn limit(certs: &AcmeCerts) -> Duration {
    let dns = certs
        .settings
        .dns
        .as_ref()
        .map_or(Duration::ZERO, |d| d.propagation.0 + d.timeout.0 * 2);
    certs.settings.order_timeout.0 + dns
}

/// Sets (`present`) or removes (`cleanup`) the TXT record `value` at `fqdn`, within
/// `dns.timeout`: by an RFC 2136 update, or by running `dns.exec ACTION FQDN VALUE`.
async fn hook(
    dns: &crate::config::model::AcmeDns,
    action: &str,
    fqdn: &str,
    value: &str,
) -> Result<(), TlsError> {
    use super::dns_update::Change;
    if let Some(r) = &dns.rfc2136 {
        let change = if action == "present" {
            Change::Add
        } else {
            Change::Delete
        };
        return super::dns_update::run(r, change, fqdn, value, dns.timeout.0).await;
    }
    let exec = dns.exec.as_deref().unwrap_or_default();
    let Some(program) = exec.first() else {
        return Err(TlsError::config("dns: neither `rfc2136` nor `exec`"));
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(&exec[1..])
        .args([action, fqdn, value])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(dns.timeout.0, cmd.output())
        .await
        .map_err(|_| TlsError::dns(format_args!("{program} {action}: timed out")))?
        .map_err(|e| TlsError::dns(format_args!("{program} {action}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        let said = String::from_utf8_lossy(&out.stderr);
        Err(TlsError::dns(format_args!(
            "{program} {action} {fqdn}: {}: {}",
            out.status,
            said.trim().chars().take(300).collect::<String>()
        )))
    }
}

async fn attempt(certs: &AcmeCerts, records: &mut Vec<(String, String)>) -> Result<(), TlsError> {
    let acct = account(certs).await?;
    let kind = match certs.settings.challenge.as_str() {
        "http-01" => ChallengeType::Http01,
        "dns-01" => ChallengeType::Dns01,
        _ => ChallengeType::TlsAlpn01,
    };
    let identifiers: Vec<Identifier> = certs
        .names()
        .iter()
        .map(|n| Identifier::Dns(n.clone()))
        .collect();
    let mut order = match acct.new_order(&NewOrder::new(&identifiers)).await {
        Ok(o) => o,
        // The CA forgot the account (a test CA restarted, or it was deactivated): make a new
        // one, once.
        Err(instant_acme::Error::Api(p))
            if p.r#type.as_deref() == Some("urn:ietf:params:acme:error:accountDoesNotExist") =>
        {
            tracing::warn!(directory = %certs.settings.directory, "the CA does not know the stored ACME account: creating another");
            let _ = std::fs::remove_file(certs.account_file());
            account(certs)
                .await?
                .new_order(&NewOrder::new(&identifiers))
                .await
                .map_err(|e| TlsError::acme(format_args!("new order: {}", why(&e))))?
        }
        Err(e) => return Err(TlsError::acme(format_args!("new order: {}", why(&e)))),
    };
    // What this attempt answers, taken back whatever happens.
    let mut answered = Answered {
        certs,
        http: Vec::new(),
        alpn: Vec::new(),
    };
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz =
            authz.map_err(|e| TlsError::acme(format_args!("authorization: {}", why(&e))))?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(TlsError::acme(format_args!("authorization is {other:?}"))),
        }
        let mut challenge = authz.challenge(kind.clone()).ok_or_else(|| {
            TlsError::acme(format_args!(
                "the CA offers no {} challenge",
                certs.settings.challenge
            ))
        })?;
        let name = challenge.identifier().to_string();
        let key_auth = challenge.key_authorization();
        match kind {
            ChallengeType::Dns01 => {
                let Some(dns) = &certs.settings.dns else {
                    return Err(TlsError::acme("dns-01 without a `dns` section"));
                };
                // `*.example.com` is proved on example.com's record.
                let fqdn = format!("_acme-challenge.{}.", name.trim_start_matches("*."));
                let value = key_auth.dns_value();
                // Listed first: an answer lost or late after the server applied the change must
                // not leave the record (deleting one that is not there changes nothing).
                records.push((fqdn.clone(), value.clone()));
                hook(dns, "present", &fqdn, &value).await?;
                if !dns.propagation.0.is_zero() {
                    tokio::time::sleep(dns.propagation.0).await;
                }
            }
            ChallengeType::Http01 => {
                certs
                    .challenges
                    .set_http(&challenge.token, Some(key_auth.as_str().to_string()));
                answered.http.push(challenge.token.clone());
            }
            _ => {
                let cert = alpn_certificate(&name, key_auth.digest().as_ref())?;
                certs.challenges.set_alpn(&name, Some(cert));
                answered.alpn.push(name.clone());
            }
        }
        tracing::debug!(name, challenge = %certs.settings.challenge, "ACME challenge ready");
        challenge
            .set_ready()
            .await
            .map_err(|e| TlsError::acme(format_args!("challenge for {name}: {}", why(&e))))?;
    }
    let patience = RetryPolicy::new()
        .initial_delay(Duration::from_millis(250))
        .timeout(Duration::from_secs(90));
    let status = order
        .poll_ready(&patience)
        .await
        .map_err(|e| TlsError::acme(format_args!("waiting for validation: {}", why(&e))))?;
    if status != OrderStatus::Ready {
        return Err(TlsError::acme(format_args!(
            "the order is {status:?} after validation (is {} reachable from the CA on port {}?)",
            certs.names().join(", "),
            if kind == ChallengeType::Http01 {
                80
            } else {
                443
            }
        )));
    }
    let key =
        rcgen::KeyPair::generate().map_err(|e| TlsError::certificate(format_args!("key: {e}")))?;
    let mut params = rcgen::CertificateParams::new(certs.names().to_vec())
        .map_err(|e| TlsError::certificate(format_args!("CSR: {e}")))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params
        .serialize_request(&key)
        .map_err(|e| TlsError::certificate(format_args!("CSR: {e}")))?;
    order
        .finalize_csr(csr.der())
        .await
        .map_err(|e| TlsError::acme(format_args!("finalize: {}", why(&e))))?;
    let chain = order
        .poll_certificate(&patience)
        .await
        .map_err(|e| TlsError::acme(format_args!("certificate: {}", why(&e))))?;
    drop(answered);
    certs.install(&chain, &key.serialize_pem())
}

/// Takes the challenge answers of one attempt back when it ends.
struct Answered<'a> {
    certs: &'a AcmeCerts,
    http: Vec<String>,
    alpn: Vec<String>,
}

impl Drop for Answered<'_> {
    fn drop(&mut self) {
        for t in &self.http {
            self.certs.challenges.set_http(t, None);
        }
        for n in &self.alpn {
            self.certs.challenges.set_alpn(n, None);
        }
    }
}

/// One account creation at a time in the process: two sections sharing a storage directory
/// share the account instead of racing to create two. Held only while an account is created
/// (within [`ACCOUNT_LIMIT`]), never while one is used.
static ACCOUNT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The longest an account creation may hold [`ACCOUNT`].
const ACCOUNT_LIMIT: Duration = Duration::from_secs(60);

/// The account: from the stored credentials, else created (and its credentials stored).
async fn account(certs: &AcmeCerts) -> Result<Account, TlsError> {
    let file = certs.account_file();
    if let Some(account) = stored_account(certs, &file).await {
        return account;
    }
    let _one = ACCOUNT.lock().await;
    // Created by another section while this one waited.
    if let Some(account) = stored_account(certs, &file).await {
        return account;
    }
    match tokio::time::timeout(ACCOUNT_LIMIT, create_account(certs, &file)).await {
        Ok(r) => r,
        Err(_) => Err(TlsError::acme(format_args!(
            "account at {}: no answer within {ACCOUNT_LIMIT:?}",
            certs.settings.directory
        ))),
    }
}

fn builder(certs: &AcmeCerts) -> Result<instant_acme::AccountBuilder, TlsError> {
    match &certs.directory_ca {
        Some(ca) => Account::builder_with_root(ca),
        None => Account::builder(),
    }
    .map_err(|e| TlsError::acme(format_args!("HTTP client: {}", why(&e))))
}

/// The account from its stored credentials, if they are stored.
async fn stored_account(
    certs: &AcmeCerts,
    file: &std::path::Path,
) -> Option<Result<Account, TlsError>> {
    let text = std::fs::read_to_string(file).ok()?;
    let creds: AccountCredentials = match serde_json::from_str(&text) {
        Ok(c) => c,
        Err(e) => return Some(Err(TlsError::acme(format_args!("{}: {e}", file.display())))),
    };
    Some(match builder(certs) {
        Ok(b) => b.from_credentials(creds).await.map_err(|e| {
            TlsError::acme(format_args!("account from {}: {}", file.display(), why(&e)))
        }),
        Err(e) => Err(e),
    })
}

/// Creates an account at the CA and stores its credentials in `file`.
async fn create_account(certs: &AcmeCerts, file: &std::path::Path) -> Result<Account, TlsError> {
    let builder = || builder(certs);
    let contact: Vec<String> = certs
        .settings
        .email
        .iter()
        .map(|e| format!("mailto:{e}"))
        .collect();
    let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
    let (account, creds) = builder()?
        .create(
            &NewAccount {
                contact: &contact,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            certs.settings.directory.clone(),
            None,
        )
        .await
        .map_err(|e| {
            TlsError::acme(format_args!(
                "account at {}: {}",
                certs.settings.directory,
                why(&e)
            ))
        })?;
    let json = serde_json::to_vec(&creds).map_err(TlsError::acme)?;
    super::acme::write_private(file, &json)?;
    tracing::info!(directory = %certs.settings.directory, id = account.id(), "ACME account created");
    Ok(account)
}

/// The TLS-ALPN-01 certificate for `name` (RFC 8737): self-signed, for `name` only, with the
/// critical acmeIdentifier extension holding the SHA-256 of the key authorization.
fn alpn_certificate(name: &str, digest: &[u8]) -> Result<Arc<CertifiedKey>, TlsError> {
    let key = rcgen::KeyPair::generate().map_err(TlsError::certificate)?;
    let mut params =
        rcgen::CertificateParams::new(vec![name.to_string()]).map_err(TlsError::certificate)?;
    params
        .custom_extensions
        .push(rcgen::CustomExtension::new_acme_identifier(digest));
    let cert = params.self_signed(&key).map_err(TlsError::certificate)?;
    let der = rustls_pki_types::PrivateKeyDer::try_from(key.serialize_der())
        .map_err(TlsError::certificate)?;
    // Not `CertifiedKey::from_der`: its key check parses the certificate with webpki, which
    // refuses the critical acmeIdentifier extension this certificate must carry.
    let signer = super::provider()
        .key_provider
        .load_private_key(der)
        .map_err(TlsError::certificate)?;
    Ok(Arc::new(CertifiedKey::new(
        vec![cert.der().clone()],
        signer,
    )))
}

/// An error with its causes: instant-acme's `client error (Connect)` alone hides the reason a
/// connection to the CA failed (`invalid peer certificate: UnknownIssuer`, say), which is in
/// its sources; a certificate problem is named as such.
pub(super) fn why(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cert = false;
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cert |= cause.downcast_ref::<rustls::Error>().is_some_and(|r| {
            matches!(
                r,
                rustls::Error::InvalidCertificate(_) | rustls::Error::InvalidCertRevocationList(_)
            )
        }) || text.contains("certificate");
        next = cause.source();
    }
    if cert {
        out.push_str(
            " (the CA's TLS certificate does not verify: for a private or test CA, name its root in `directory_ca`)",
        );
    }
    out
}
