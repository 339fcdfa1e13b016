//! How requests are authorised: Shared Key (the account key) or a Microsoft Entra ID bearer
//! token from the client-credentials flow, cached until shortly before it expires.

use crate::config::EntraConfig;
use crate::error::{BACKEND, describe, invalid_reply, transport_error};
use crate::sign::SharedKeyCredential;
use codalab_wm_backend::Error;
use codalab_wm_backend::secret::Secret;
use serde::Deserialize;
use std::fmt;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// A token is renewed this long before it expires.
const RENEW_BEFORE_EXPIRY: Duration = Duration::from_secs(300);

/// The credential a [`BatchClient`](crate::client::BatchClient) authorises requests with.
#[derive(Debug)]
pub enum Auth {
    /// Sign each request with the account key.
    SharedKey(SharedKeyCredential),
    /// Send an Entra ID bearer token.
    Entra(EntraTokenSource),
}

/// Gets and caches Entra ID tokens with the client-credentials grant.
pub struct EntraTokenSource {
    config: EntraConfig,
    http: reqwest::Client,
    cached: Mutex<Option<(Secret, Instant)>>,
}

impl fmt::Debug for EntraTokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntraTokenSource")
            .field("token_url", &self.config.token_url())
            .field("client_id", &self.config.client_id)
            .field("scope", &self.config.scope())
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

impl EntraTokenSource {
    /// A token source for the application in `config`, using `http` for the token requests.
    pub fn new(config: EntraConfig, http: reqwest::Client) -> Self {
        Self {
            config,
            http,
            cached: Mutex::new(None),
        }
    }

    /// A valid access token, from the cache or freshly requested.
    pub async fn token(&self) -> Result<Secret, Error> {
        let mut cached = self.cached.lock().await;
        if let Some((token, renew_at)) = cached.as_ref()
            && Instant::now() < *renew_at
        {
            return Ok(token.clone());
        }
        let (token, lifetime) = self.request_token().await?;
        let renew_at = Instant::now()
            + lifetime
                .saturating_sub(RENEW_BEFORE_EXPIRY)
                .max(lifetime / 2);
        *cached = Some((token.clone(), renew_at));
        Ok(token)
    }

    async fn request_token(&self) -> Result<(Secret, Duration), Error> {
        const OPERATION: &str = "get an Entra ID token";
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "client_credentials")
            .append_pair("client_id", &self.config.client_id)
            .append_pair("client_secret", self.config.client_secret.expose())
            .append_pair("scope", self.config.scope())
            .finish();
        let response = self
            .http
            .post(self.config.token_url())
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| transport_error(OPERATION, e))?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| transport_error(OPERATION, e))?;
        if !status.is_success() {
            let message = token_error(&bytes).unwrap_or_else(|| describe(status, &headers, &bytes));
            return Err(if status.is_server_error() || status.as_u16() == 429 {
                Error::backend_temporary(BACKEND, OPERATION, message)
            } else {
                Error::backend(BACKEND, OPERATION, message)
            });
        }
        let token: TokenResponse = serde_json::from_slice(&bytes)
            .map_err(|e| invalid_reply(OPERATION, format!("not a token response: {e}")))?;
        let lifetime = Duration::from_secs(token.expires_in.unwrap_or(3600));
        Ok((Secret::new(token.access_token), lifetime))
    }
}

/// The OAuth error of a token endpoint reply (`invalid_client: AADSTS7000215 …`).
fn token_error(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let error = value.get("error")?.as_str()?;
    let description = value
        .get("error_description")
        .and_then(|d| d.as_str())
        .unwrap_or("");
    Some(
        format!("{error}: {}", description.lines().next().unwrap_or(""))
            .trim_end_matches(": ")
            .to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_errors_read_like_the_endpoint_says() {
        let body = br#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret.\r\nTrace ID: x"}"#;
        assert_eq!(
            token_error(body).as_deref(),
            Some("invalid_client: AADSTS7000215: Invalid client secret.")
        );
        assert_eq!(
            token_error(br#"{"error":"unauthorized_client"}"#).as_deref(),
            Some("unauthorized_client")
        );
        assert_eq!(token_error(b"<html>"), None);
    }

    #[test]
    fn debug_hides_the_client_secret() {
        let source = EntraTokenSource::new(
            EntraConfig {
                tenant_id: "t".into(),
                client_id: "c".into(),
                client_secret: Secret::new("TOP-SECRET"),
                token_url: None,
                scope: None,
            },
            reqwest::Client::new(),
        );
        assert!(!format!("{source:?}").contains("TOP-SECRET"));
    }
}
