//! Compute Engine answers to codalab-wm errors, decided once here: 429 and a 403 whose reason
//! is a rate limit are throttling (with `Retry-After`), 5xx and 408 are temporary, anything
//! else is permanent and carries the service's reason and message.

use crate::models::ErrorBody;
use codalab_wm_backend::Error;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use std::time::Duration;

/// The backend name, on the command line and in errors.
pub const BACKEND: &str = "gce";

/// `reason: message [HTTP n]` of an error answer.
pub fn describe(status: StatusCode, body: &[u8]) -> (String, String) {
    let parsed: ErrorBody = serde_json::from_slice(body).unwrap_or_default();
    let reason = parsed
        .error
        .errors
        .first()
        .map(|e| e.reason.clone())
        .unwrap_or_default();
    let message = if parsed.error.message.is_empty() {
        String::from_utf8_lossy(body).chars().take(200).collect()
    } else {
        parsed.error.message
    };
    let text = if reason.is_empty() {
        format!("{message} [HTTP {}]", status.as_u16())
    } else {
        format!("{reason}: {message} [HTTP {}]", status.as_u16())
    };
    (reason, text)
}

/// The error of a non-success answer to `operation`.
pub fn response_error(
    operation: &'static str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
) -> Error {
    let (reason, message) = describe(status, body);
    let rate_limited = status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::FORBIDDEN && reason.to_lowercase().contains("ratelimit"));
    if rate_limited {
        return Error::RateLimited {
            backend: BACKEND.into(),
            message: format!("{operation}: {message}"),
            retry_after: retry_after(headers),
        };
    }
    if status.is_server_error() || status == StatusCode::REQUEST_TIMEOUT {
        Error::backend_temporary(BACKEND, operation, message)
    } else {
        Error::backend(BACKEND, operation, message)
    }
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse().ok().map(Duration::from_secs)
}

/// A request that got no answer (connection refused, timeout): temporary.
pub fn transport_error(operation: &'static str, error: reqwest::Error) -> Error {
    Error::Backend {
        backend: BACKEND.into(),
        operation,
        message: error.to_string(),
        temporary: true,
        source: Some(Box::new(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_answers() {
        let body = br#"{"error":{"code":403,"message":"Quota exceeded","errors":[{"reason":"rateLimitExceeded"}]}}"#;
        let error = response_error(
            "list instances",
            StatusCode::FORBIDDEN,
            &HeaderMap::new(),
            body,
        );
        assert!(matches!(error, Error::RateLimited { .. }), "{error}");
        let error = response_error(
            "list instances",
            StatusCode::SERVICE_UNAVAILABLE,
            &HeaderMap::new(),
            b"down",
        );
        assert!(error.is_temporary() && !error.is_fatal(), "{error}");
        let body = br#"{"error":{"code":400,"message":"Invalid value for field 'resource.machineType'","errors":[{"reason":"invalid"}]}}"#;
        let error = response_error(
            "insert an instance",
            StatusCode::BAD_REQUEST,
            &HeaderMap::new(),
            body,
        );
        assert!(!error.is_temporary());
        assert!(
            error
                .to_string()
                .contains("invalid: Invalid value for field 'resource.machineType' [HTTP 400]"),
            "{error}"
        );
    }
}
