//! The admin listener's access settings (`admin:`), compiled: allowed Host names, the bearer
//! token (read from its file or environment variable at load), whether admin requests are
//! logged. The checks that use them are `admin/guard.rs`.

use std::net::SocketAddr;

use crate::config::{model, BaseDir, CompileError};

/// The admin listener's access settings, compiled.
#[derive(Debug, Clone)]
pub struct AdminSettings {
    pub address: SocketAddr,
    /// Lowercased, without a trailing dot.
    allowed_hosts: Vec<Vec<u8>>,
    token: Option<String>,
    /// Admin requests go to the access log.
    pub access_log: bool,
}

impl AdminSettings {
    pub(crate) fn compile(
        a: &model::Admin,
        address: SocketAddr,
        base: &BaseDir,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<AdminSettings, CompileError> {
        let token = match (&a.token_file, &a.token_env) {
            (Some(_), Some(_)) => {
                return Err((
                    "admin.token_env".into(),
                    "give token_file or token_env, not both".into(),
                ))
            }
            (Some(f), None) => {
                let path = base.0.join(f);
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    (
                        "admin.token_file".to_string(),
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                Some(text.trim().to_string())
            }
            (None, Some(var)) => Some(
                env(var)
                    .ok_or_else(|| {
                        (
                            "admin.token_env".to_string(),
                            format!("environment variable {var} is not set"),
                        )
                    })?
                    .trim()
                    .to_string(),
            ),
            (None, None) => None,
        };
        if token.as_deref().is_some_and(|t| t.len() < 16) {
            let key = if a.token_file.is_some() {
                "admin.token_file"
            } else {
                "admin.token_env"
            };
            return Err((
                key.into(),
                "the token must be at least 16 characters".into(),
            ));
        }
        Ok(AdminSettings {
            address,
            allowed_hosts: a
                .allowed_hosts
                .iter()
                .map(|h| h.trim_end_matches('.').to_ascii_lowercase().into_bytes())
                .collect(),
            token,
            access_log: a.access_log,
        })
    }

    /// The bearer token, when one is required.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Host names the API answers to besides loopback and IP literals.
    pub fn allowed_hosts(&self) -> &[Vec<u8>] {
        &self.allowed_hosts
    }

    /// Whether a token is required.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }
}
