//! The keys a `jwt` filter verifies with: an HMAC secret, a PEM public key, a JWK or a JWKS
//! (RFC 7517), each key with its family (HMAC, RSA, EC, EdDSA), its `kid` and, when the JWK
//! names one, its algorithm. A token is checked only with keys of its algorithm's family
//! (no HS/RS confusion: an RSA public key is never used as an HMAC secret).

use std::str::FromStr;

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey};

/// One verification key.
#[derive(Clone)]
pub struct Key {
    pub kid: Option<String>,
    /// The only algorithm this key may verify, when its JWK says.
    pub alg: Option<Algorithm>,
    pub key: DecodingKey,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .field("family", &self.key.family())
            .finish()
    }
}

impl Key {
    /// Whether this key may verify a token of `alg` with key id `kid`.
    pub fn fits(&self, alg: Algorithm, kid: Option<&str>) -> bool {
        self.key.family() == alg.family()
            && self.alg.is_none_or(|a| a == alg)
            && match (kid, &self.kid) {
                (Some(want), Some(have)) => want == have,
                _ => true,
            }
    }
}

/// A JWK as a key; `None` for key types weir cannot use (skipped in a set).
pub fn from_jwk(jwk: &Jwk) -> Result<Key, String> {
    let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("unusable JWK: {e}"))?;
    let alg = match &jwk.common.key_algorithm {
        Some(a) => Some(
            Algorithm::from_str(&format!("{a:?}"))
                .map_err(|_| format!("a JWK for {a:?}, which cannot verify a JWT"))?,
        ),
        None => None,
    };
    Ok(Key {
        kid: jwk.common.key_id.clone(),
        alg,
        key,
    })
}

/// The keys of a JWKS document. Keys weir cannot use (other types, encryption keys) are
/// skipped; a document with none is an error.
pub fn from_jwks(text: &[u8]) -> Result<Vec<Key>, String> {
    let set: JwkSet = serde_json::from_slice(text).map_err(|e| format!("not a JWKS: {e}"))?;
    let keys: Vec<Key> = set
        .keys
        .iter()
        .filter(|k| {
            !matches!(
                k.common.public_key_use,
                Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
            )
        })
        .filter_map(|k| from_jwk(k).ok())
        .collect();
    if keys.is_empty() {
        return Err("a JWKS with no key weir can verify with".into());
    }
    Ok(keys)
}

/// The keys of a file: a JWKS, a JWK, or a PEM public key (RSA, EC or Ed25519).
pub fn from_file(text: &[u8]) -> Result<Vec<Key>, String> {
    let trimmed = text.trim_ascii_start();
    if trimmed.starts_with(b"{") {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(trimmed) {
            if v.get("keys").is_some() {
                return from_jwks(trimmed);
            }
        }
        let jwk: Jwk = serde_json::from_slice(trimmed).map_err(|e| format!("not a JWK: {e}"))?;
        return Ok(vec![from_jwk(&jwk)?]);
    }
    let pem = std::str::from_utf8(text).map_err(|_| "neither JSON nor PEM".to_string())?;
    let key = if pem.contains("BEGIN RSA PUBLIC KEY") {
        DecodingKey::from_rsa_pem(text)
    } else {
        DecodingKey::from_rsa_pem(text)
            .or_else(|_| DecodingKey::from_ec_pem(text))
            .or_else(|_| DecodingKey::from_ed_pem(text))
    }
    .map_err(|e| format!("not a PEM public key weir can use: {e}"))?;
    Ok(vec![Key {
        kid: None,
        alg: None,
        key,
    }])
}

/// An HMAC secret as a key.
pub fn secret(s: &str, base64: bool) -> Result<Key, String> {
    let key = if base64 {
        DecodingKey::from_base64_secret(s).map_err(|e| format!("not base64: {e}"))?
    } else {
        DecodingKey::from_secret(s.as_bytes())
    };
    Ok(Key {
        kid: None,
        alg: None,
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A_PAYLOAD: &str = "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ";

    /// The published examples: RFC 7515 A.1 (HS256), A.2 (RS256), A.3 (ES256) and RFC 8037
    /// A.4 (EdDSA), each key read as a JWK file as weir reads one, each signature verified,
    /// and a changed signature refused.
    #[test]
    fn rfc_examples_verify() {
        let table = [
            (
                r#"{"kty":"oct","k":"AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow"}"#,
                Algorithm::HS256,
                format!("eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9.{A_PAYLOAD}"),
                "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
            ),
            (
                r#"{"kty":"RSA","n":"ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ","e":"AQAB"}"#,
                Algorithm::RS256,
                format!("eyJhbGciOiJSUzI1NiJ9.{A_PAYLOAD}"),
                "cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw",
            ),
            (
                r#"{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}"#,
                Algorithm::ES256,
                format!("eyJhbGciOiJFUzI1NiJ9.{A_PAYLOAD}"),
                "DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q",
            ),
            (
                r#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#,
                Algorithm::EdDSA,
                "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc".to_string(),
                "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg",
            ),
        ];
        for (jwk, alg, input, sig) in table {
            let keys = from_file(jwk.as_bytes()).unwrap();
            assert_eq!(keys.len(), 1);
            let k = &keys[0];
            assert!(k.fits(alg, None), "{alg:?}");
            // No other family's algorithm may use this key.
            for other in [
                Algorithm::HS256,
                Algorithm::RS256,
                Algorithm::ES256,
                Algorithm::EdDSA,
            ] {
                assert_eq!(
                    k.fits(other, None),
                    other.family() == alg.family(),
                    "{alg:?} key for {other:?}"
                );
            }
            assert!(
                jsonwebtoken::crypto::verify(sig, input.as_bytes(), &k.key, alg).unwrap(),
                "{alg:?}"
            );
            let mut changed = sig.to_string();
            changed.replace_range(..2, if sig.starts_with("AA") { "BB" } else { "AA" });
            assert!(
                !jsonwebtoken::crypto::verify(&changed, input.as_bytes(), &k.key, alg)
                    .unwrap_or(false),
                "{alg:?} with a changed signature"
            );
        }
    }

    #[test]
    fn kids_pick_keys_and_bad_files_say_why() {
        let set = r#"{"keys":[{"kty":"oct","kid":"a","k":"c2VjcmV0"},{"kty":"oct","kid":"b","alg":"HS512","k":"b3RoZXI"},{"kty":"RSA","use":"enc","n":"AQAB","e":"AQAB"}]}"#;
        let keys = from_file(set.as_bytes()).unwrap();
        assert_eq!(keys.len(), 2, "the encryption key is skipped");
        assert!(
            keys[0].fits(Algorithm::HS256, Some("a")) && !keys[0].fits(Algorithm::HS256, Some("b"))
        );
        assert!(
            !keys[1].fits(Algorithm::HS256, Some("b")),
            "the JWK says HS512"
        );
        assert!(keys[1].fits(Algorithm::HS512, None));
        assert!(
            from_file(b"-----BEGIN PUBLIC KEY-----\nbm9wZQ==\n-----END PUBLIC KEY-----\n").is_err()
        );
        assert!(from_jwks(br#"{"keys":[]}"#).unwrap_err().contains("no key"));
    }
}
