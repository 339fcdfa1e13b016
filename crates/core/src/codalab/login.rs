//! Logging in: the OAuth2 password grant as the `codalab_cli_client`, the token kept and
//! refreshed before it expires (with the refresh token, else by logging in again), and what a
//! refused login means: fatal before the server first took the credentials, retried after.

use super::{
    CLI_CLIENT_ID, CodaLabClient, REFRESH_MARGIN, first_line, limits, transport::unreachable,
};
use crate::error::{Error, Result};
use crate::secret::Secret;
use base64::Engine as _;
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub(super) struct Token {
    pub(super) access: Secret,
    refresh: Option<Secret>,
    /// When the token must be refreshed (expiry minus the margin).
    refresh_at: Instant,
}

#[derive(Deserialize)]
struct TokenReply {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
    #[serde(default)]
    refresh_token: Option<String>,
}

impl CodaLabClient {
    /// Logs in with the password grant and confirms the identity with `GET /rest/user`.
    pub async fn login(&self) -> Result<()> {
        let result = self.login_once().await;
        self.settle(result)
    }

    pub(super) async fn login_once(&self) -> Result<()> {
        let form = [
            ("grant_type", "password"),
            ("username", self.credentials.username.as_str()),
            ("password", self.credentials.password.expose()),
        ];
        let token = self.token_request(&form).await?;
        *self.token.lock().await = Some(token);
        self.check_identity().await
    }

    async fn token_request(&self, form: &[(&str, &str)]) -> Result<Token> {
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{CLI_CLIENT_ID}:"));
        let response = self
            .request(Method::POST, "/rest/oauth2/token")
            .header("Authorization", format!("Basic {basic}"))
            .form(form)
            .send()
            .await
            .map_err(|e| unreachable("login", e))?;
        let status = response.status();
        let body = limits::read_text(response, limits::MAX_TOKEN_BYTES, "login").await?;
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::BAD_REQUEST {
            return Err(self.refused(oauth_error(&body)));
        }
        if !status.is_success() {
            return Err(Error::Server {
                what: "login",
                status: status.as_u16(),
                message: first_line(&body),
            });
        }
        let reply = parse_token(&body).map_err(|e| Error::InvalidReply {
            from: "codalab server".into(),
            what: "login".into(),
            message: format!("token reply is not the expected JSON: {e}"),
        })?;
        let lifetime = Duration::from_secs(reply.expires_in.unwrap_or(3600));
        let margin = REFRESH_MARGIN.min(lifetime / 2);
        Ok(Token {
            access: Secret::new(reply.access_token),
            refresh: reply.refresh_token.map(Secret::new),
            refresh_at: Instant::now() + lifetime - margin,
        })
    }

    /// A valid access token: logs in when there is none, refreshes it when it nears expiry
    /// (with the refresh token, else by logging in again).
    pub(super) async fn access_token(&self) -> Result<Secret> {
        let (due, refresh) = {
            let token = self.token.lock().await;
            match token.as_ref() {
                None => (true, None),
                Some(t) => (Instant::now() >= t.refresh_at, t.refresh.clone()),
            }
        };
        if due {
            let refreshed = match refresh {
                Some(refresh) => {
                    let form = [
                        ("grant_type", "refresh_token"),
                        ("refresh_token", refresh.expose()),
                    ];
                    match self.token_request(&form).await {
                        Ok(token) => Some(token),
                        Err(e) if e.is_temporary() => return Err(e),
                        Err(e) => {
                            tracing::info!(error = %e, "token refresh refused; logging in again");
                            None
                        }
                    }
                }
                None => None,
            };
            match refreshed {
                Some(token) => *self.token.lock().await = Some(token),
                None => self.login_once().await?,
            }
        }
        let token = self.token.lock().await;
        Ok(token.as_ref().map(|t| t.access.clone()).unwrap_or_default())
    }

    /// A refused login: fatal before the server first took the credentials; after that, maybe
    /// the server's passing trouble ([`Error::RefusedAgain`]).
    fn refused(&self, message: String) -> Error {
        let (server, username) = (self.server.clone(), self.credentials.username.clone());
        match self.established.load(std::sync::atomic::Ordering::Relaxed) {
            true => Error::RefusedAgain {
                server,
                username,
                message,
            },
            false => Error::Unauthenticated {
                server,
                username,
                message,
            },
        }
    }
}

/// Reads a token reply body as the client does: the depth bound, then the typed model.
fn parse_token(body: &str) -> std::result::Result<TokenReply, String> {
    limits::parse_json(body)
}

/// Whether a token reply body is one the client accepts (the `token` fuzz target).
pub fn parse_token_reply(body: &str) -> std::result::Result<(), String> {
    parse_token(body).map(|_| ())
}

/// What an error reply says, as the client words it: the OAuth2 error of a token reply, else
/// the first line of the body (the `token` fuzz target).
pub fn error_reply_message(body: &str) -> String {
    oauth_error(body)
}

pub(super) fn oauth_error(body: &str) -> String {
    #[derive(Deserialize)]
    struct OAuthError {
        error: String,
        #[serde(default)]
        error_description: Option<String>,
    }
    match limits::parse_json::<OAuthError>(body) {
        Ok(e) => match e.error_description {
            Some(description) => format!("{} ({})", description, e.error),
            None => e.error,
        }
        .chars()
        .take(200)
        .collect(),
        Err(_) => first_line(body),
    }
}
