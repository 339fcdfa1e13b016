//! The fake's token endpoints: Google's OAuth 2.0 token endpoint for a service account's JWT
//! bearer grant (RFC 7523, signed RS256: the signature is verified with the account's public
//! key) and the metadata server's token of the instance's service account.

use crate::state::FakeState;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use std::time::{SystemTime, UNIX_EPOCH};

/// The grant type of a service account's token request.
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// The metadata server's path of the default service account's token.
pub const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";

/// `POST /token`: a token for a valid, signed, unexpired assertion of a known account.
pub(crate) fn token(state: &mut FakeState, body: &[u8]) -> (StatusCode, Value) {
    match check_grant(state, body) {
        Ok(()) => (StatusCode::OK, issue(state)),
        Err(description) => (
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_grant", "error_description": description}),
        ),
    }
}

/// `GET` of the metadata server's token: needs `Metadata-Flavor: Google`.
pub(crate) fn metadata_token(state: &mut FakeState, headers: &HeaderMap) -> (StatusCode, Value) {
    let flavored = headers
        .get("metadata-flavor")
        .is_some_and(|v| v.as_bytes() == b"Google");
    if !flavored {
        return (
            StatusCode::FORBIDDEN,
            json!({"error": "Missing Metadata-Flavor:Google header."}),
        );
    }
    (StatusCode::OK, issue(state))
}

fn issue(state: &mut FakeState) -> Value {
    let token = format!("ya29.fake-{}", state.next_id());
    state.tokens.insert(token.clone());
    json!({"access_token": token, "expires_in": 3599, "token_type": "Bearer"})
}

fn check_grant(state: &FakeState, body: &[u8]) -> Result<(), String> {
    let form: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    let field = |name: &str| {
        form.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| format!("missing form field `{name}`"))
    };
    if field("grant_type")? != JWT_BEARER {
        return Err(format!("grant_type must be `{JWT_BEARER}`"));
    }
    let assertion = field("assertion")?;
    let parts: Vec<&str> = assertion.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err("the assertion is not a JWT".into());
    };
    let decode = |part: &str| -> Result<Value, String> {
        let bytes = URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|e| format!("bad base64url: {e}"))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("bad JSON: {e}"))
    };
    let (header_json, claims) = (decode(header)?, decode(claims)?);
    if header_json["alg"] != "RS256" {
        return Err("alg must be RS256".into());
    }
    let issuer = claims["iss"].as_str().unwrap_or_default();
    let key = state
        .service_accounts
        .get(issuer)
        .ok_or_else(|| format!("unknown service account `{issuer}`"))?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| "bad signature encoding")?;
    let signed = format!("{header}.{}", parts[1]);
    ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, key)
        .verify(signed.as_bytes(), &signature)
        .map_err(|_| "Invalid JWT Signature.".to_owned())?;
    check_claims(state, &claims)
}

fn check_claims(state: &FakeState, claims: &Value) -> Result<(), String> {
    let token_url = format!("{}/token", state.url);
    if claims["aud"] != token_url.as_str() {
        return Err(format!("aud must be `{token_url}`"));
    }
    let scope = claims["scope"].as_str().unwrap_or_default();
    if !scope.split(' ').any(|s| {
        s == "https://www.googleapis.com/auth/compute"
            || s == "https://www.googleapis.com/auth/cloud-platform"
    }) {
        return Err(format!("scope `{scope}` does not allow Compute Engine"));
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs() as i64;
    let (iat, exp) = (
        claims["iat"].as_i64().unwrap_or(0),
        claims["exp"].as_i64().unwrap_or(0),
    );
    if exp <= now || iat > now + 60 || exp - iat > 3600 {
        return Err("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.".into());
    }
    Ok(())
}
