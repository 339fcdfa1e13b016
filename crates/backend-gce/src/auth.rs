//! Application Default Credentials, the two kinds a manager uses: a service account key file
//! (`--credentials-file` or `GOOGLE_APPLICATION_CREDENTIALS`: a JWT signed RS256 with the
//! account's key, exchanged at its token endpoint, RFC 7523) or, without one, the metadata
//! server's token of the VM's own service account. Tokens are cached until a minute before
//! they expire. The key and the tokens are never logged.
//!
//! RS256 is signed with `ring` (already built for rustls): a maintained, audited
//! implementation of RSASSA-PKCS1-v1_5 with SHA-256, without a JWT crate for one signature.

use crate::error::{BACKEND, transport_error};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use codalab_wm_backend::secret::Secret;
use codalab_wm_backend::{Error, Result};
use serde::Deserialize;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::Mutex;

/// The scope the manager asks for.
pub const COMPUTE_SCOPE: &str = "https://www.googleapis.com/auth/compute";
/// The grant type of a JWT bearer token request.
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// The metadata server's path of the default account's token.
pub const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";
/// How long before its expiry a token is renewed.
const RENEW_BEFORE: Duration = Duration::from_secs(60);

/// A service account key file, as `gcloud iam service-accounts keys create` writes it.
#[derive(Deserialize)]
pub struct KeyFile {
    /// `service_account`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The account.
    pub client_email: String,
    /// The key's id (the JWT's `kid`).
    #[serde(default)]
    pub private_key_id: String,
    /// PKCS#8 PEM.
    pub private_key: String,
    /// The token endpoint.
    #[serde(default)]
    pub token_uri: Option<String>,
}

impl std::fmt::Debug for KeyFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyFile")
            .field("client_email", &self.client_email)
            .field("private_key", &"***")
            .finish()
    }
}

/// Where tokens come from.
#[derive(Debug)]
enum Source {
    ServiceAccount {
        email: String,
        key_id: String,
        key: Arc<ring::signature::RsaKeyPair>,
        token_url: String,
    },
    Metadata {
        url: String,
    },
}

/// A cached OAuth access token source.
#[derive(Debug)]
pub struct TokenSource {
    source: Source,
    http: reqwest::Client,
    /// The token (a [`Secret`]: `Debug` shows `***`) and when it expires.
    cached: Mutex<Option<(Secret, Instant)>>,
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: u64,
}

impl TokenSource {
    /// From a key file's JSON text; `token_url` overrides its `token_uri`.
    pub fn from_key_file(
        text: &str,
        token_url: Option<&str>,
        http: reqwest::Client,
    ) -> Result<Self> {
        let file: KeyFile = serde_json::from_str(text).map_err(|e| {
            Error::InvalidConfig(format!("gce: the credentials file is not a key file: {e}"))
        })?;
        if file.kind != "service_account" {
            return Err(Error::InvalidConfig(format!(
                "gce: the credentials file is of type `{}`; only `service_account` keys (or the metadata server) are supported",
                file.kind
            )));
        }
        let der = pem_to_der(&file.private_key)?;
        let key = ring::signature::RsaKeyPair::from_pkcs8(&der).map_err(|e| {
            Error::InvalidConfig(format!(
                "gce: the key file's private_key is not an RSA PKCS#8 key: {e}"
            ))
        })?;
        let token_url = token_url
            .map(str::to_owned)
            .or(file.token_uri)
            .unwrap_or_else(|| "https://oauth2.googleapis.com/token".to_owned());
        let source = Source::ServiceAccount {
            email: file.client_email,
            key_id: file.private_key_id,
            key: Arc::new(key),
            token_url,
        };
        Ok(Self::new(source, http))
    }

    /// The metadata server at `url` (`http://metadata.google.internal`).
    pub fn metadata(url: &str, http: reqwest::Client) -> Self {
        let url = format!("{}{METADATA_TOKEN_PATH}", url.trim_end_matches('/'));
        Self::new(Source::Metadata { url }, http)
    }

    fn new(source: Source, http: reqwest::Client) -> Self {
        Self {
            source,
            http,
            cached: Mutex::new(None),
        }
    }

    /// A valid access token (cached, or a new one).
    pub async fn token(&self) -> Result<String> {
        let mut cached = self.cached.lock().await;
        if let Some((token, until)) = cached.as_ref()
            && Instant::now() + RENEW_BEFORE < *until
        {
            return Ok(token.expose().to_owned());
        }
        let answer = self.fetch().await?;
        let until = Instant::now() + Duration::from_secs(answer.expires_in.max(60));
        *cached = Some((Secret::new(answer.access_token.clone()), until));
        Ok(answer.access_token)
    }

    /// Forgets the cached token (after a 401).
    pub async fn invalidate(&self) {
        *self.cached.lock().await = None;
    }

    async fn fetch(&self) -> Result<TokenAnswer> {
        let request = match &self.source {
            Source::ServiceAccount {
                email,
                key_id,
                key,
                token_url,
            } => {
                let assertion = jwt(email, key_id, key, token_url, now_seconds())?;
                let form = form_urlencoded::Serializer::new(String::new())
                    .append_pair("grant_type", JWT_BEARER)
                    .append_pair("assertion", &assertion)
                    .finish();
                self.http
                    .post(token_url)
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(form)
            }
            Source::Metadata { url } => self.http.get(url).header("Metadata-Flavor", "Google"),
        };
        let what = "get an access token";
        let response = request.send().await.map_err(|e| transport_error(what, e))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| transport_error(what, e))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            let message = format!(
                "HTTP {}: {}",
                status.as_u16(),
                text.chars().take(200).collect::<String>()
            );
            return Err(if status.is_server_error() || status.as_u16() == 429 {
                Error::backend_temporary(BACKEND, what, message)
            } else {
                Error::backend(BACKEND, what, message)
            });
        }
        serde_json::from_slice(&body).map_err(|e| Error::InvalidReply {
            from: BACKEND.into(),
            what: what.into(),
            message: e.to_string(),
        })
    }
}

fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// The signed JWT (RS256) a service account exchanges for a token, valid one hour from `now`.
pub fn jwt(
    email: &str,
    key_id: &str,
    key: &ring::signature::RsaKeyPair,
    audience: &str,
    now: u64,
) -> Result<String> {
    let header = serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": key_id});
    let claims = serde_json::json!({
        "iss": email, "scope": COMPUTE_SCOPE, "aud": audience, "iat": now, "exp": now + 3600,
    });
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(
        &ring::signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        signed.as_bytes(),
        &mut signature,
    )
    .map_err(|_| Error::backend(BACKEND, "sign the token request", "RSA signing failed"))?;
    Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature)))
}

/// The DER bytes of a PEM private key.
fn pem_to_der(pem: &str) -> Result<Vec<u8>> {
    let body: String = pem
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("-----"))
        .collect();
    STANDARD.decode(body).map_err(|e| {
        Error::InvalidConfig(format!("gce: the key file's private_key is not PEM: {e}"))
    })
}
