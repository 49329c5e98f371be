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
