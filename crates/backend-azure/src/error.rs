//! Turning Batch responses and transport failures into codalab-wm errors, deciding once here
//! whether a later try may succeed: 429 and 503 are throttling (with `Retry-After`), other 5xx
//! and 408 are temporary, everything else is permanent and carries the service's `code` and
//! `message`.

use crate::models::BatchError;
use codalab_wm_backend::Error;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use std::time::{Duration, SystemTime};

/// The backend name used in errors.
pub(crate) const BACKEND: &str = "azure-batch";

/// The `BatchError` in an error body, or an empty one when the body is not JSON.
pub fn parse_batch_error(body: &[u8]) -> BatchError {
    serde_json::from_slice(body).unwrap_or_default()
}

/// The error code of a Batch error body (`TaskExists` …), when it has one.
pub fn error_code(body: &[u8]) -> Option<String> {
    parse_batch_error(body).code
}

/// How long `Retry-After` asks to wait: seconds or an HTTP date (relative to `now`).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A one-line description of an error response: `Code: message (key: value; …) [HTTP 409]`.
pub fn describe(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> String {
    let error = parse_batch_error(body);
    let mut text = match (
        &error.code,
        error.message.as_ref().and_then(|m| m.value.as_deref()),
    ) {
        (Some(code), Some(message)) => format!("{code}: {}", first_line(message)),
        (Some(code), None) => code.clone(),
        (None, Some(message)) => first_line(message).to_owned(),
        (None, None) => first_line(&String::from_utf8_lossy(body))
            .chars()
            .take(200)
            .collect(),
    };
    let details: Vec<String> = error
        .values
        .iter()
        .filter_map(|d| {
            Some(format!(
                "{}: {}",
                d.key.as_deref()?,
                first_line(d.value.as_deref()?)
            ))
        })
        .collect();
    if !details.is_empty() {
        text.push_str(&format!(" ({})", details.join("; ")));
    }
    text.push_str(&format!(" [HTTP {}", status.as_u16()));
    if let Some(id) = headers.get("request-id").and_then(|v| v.to_str().ok()) {
        text.push_str(&format!(", request-id {id}"));
    }
    text.push(']');
    text.trim_start().to_owned()
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("").trim()
}

/// The error for a non-success response to `operation`.
pub fn response_error(
    operation: &'static str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
) -> Error {
    let message = describe(status, headers, body);
    match status.as_u16() {
        429 | 503 => Error::RateLimited {
            backend: BACKEND.into(),
            message: format!("{operation}: {message}"),
            retry_after: retry_after(headers, SystemTime::now()),
        },
        408 | 500..=599 => Error::backend_temporary(BACKEND, operation, message),
        _ => Error::backend(BACKEND, operation, message),
    }
}

/// The error for a request that got no usable response (connection refused, timeout, reset,
/// or a body that could not be read). Temporary.
pub fn transport_error(operation: &'static str, error: reqwest::Error) -> Error {
    Error::Backend {
        backend: BACKEND.into(),
        operation,
        message: format!("request failed: {}", without_url(&error)),
        temporary: true,
        source: Some(Box::new(error.without_url())),
    }
}

/// A reply that is not what the spec says.
pub fn invalid_reply(operation: &str, message: impl Into<String>) -> Error {
    Error::InvalidReply {
        from: BACKEND.into(),
        what: operation.into(),
        message: message.into(),
    }
}

/// The transport error's text without the URL (next links carry tokens).
fn without_url(error: &reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "transport error"
    };
    let mut text = kind.to_owned();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    const TASK_EXISTS: &str = r#"{"odata.metadata":"m","code":"TaskExists","message":{"lang":"en-US",
        "value":"The specified task already exists.\nRequestId:1\nTime:2"}}"#;

    #[test]
    fn carries_code_message_details_and_request_id() {
        let body = br#"{"code":"AuthenticationFailed","message":{"value":"Server failed to authenticate the request."},
            "values":[{"key":"AuthenticationErrorDetail","value":"The MAC signature found in the HTTP request is not the same"}]}"#;
        let err = response_error(
            "list worker jobs",
            StatusCode::FORBIDDEN,
            &headers(&[("request-id", "r-1")]),
            body,
        );
        assert!(!err.is_temporary());
        assert_eq!(
            err.to_string(),
            "azure-batch failed to list worker jobs: AuthenticationFailed: Server failed to authenticate the \
             request. (AuthenticationErrorDetail: The MAC signature found in the HTTP request is not the same) \
             [HTTP 403, request-id r-1]"
        );
        let err = response_error(
            "submit a worker job",
            StatusCode::CONFLICT,
            &HeaderMap::new(),
            TASK_EXISTS.as_bytes(),
        );
        assert_eq!(
            err.to_string(),
            "azure-batch failed to submit a worker job: TaskExists: The specified task already exists. [HTTP 409]"
        );
        assert_eq!(
            error_code(TASK_EXISTS.as_bytes()).as_deref(),
            Some("TaskExists")
        );
    }

    #[test]
    fn throttling_honours_retry_after_in_seconds_or_as_a_date() {
        let err = response_error(
            "x",
            StatusCode::TOO_MANY_REQUESTS,
            &headers(&[("retry-after", "7")]),
            b"",
        );
        assert!(err.is_temporary());
        assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
        let err = response_error(
            "x",
            StatusCode::SERVICE_UNAVAILABLE,
            &HeaderMap::new(),
            br#"{"code":"ServerBusy"}"#,
        );
        assert!(
            matches!(
                err,
                Error::RateLimited {
                    retry_after: None,
                    ..
                }
            ),
            "{err:?}"
        );
        let now = httpdate::parse_http_date("Fri, 17 Feb 2017 00:00:00 GMT").unwrap();
        let later = headers(&[("retry-after", "Fri, 17 Feb 2017 00:00:30 GMT")]);
        assert_eq!(retry_after(&later, now), Some(Duration::from_secs(30)));
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
    }

    #[test]
    fn other_server_errors_are_temporary_and_client_errors_permanent() {
        for status in [500, 502, 504, 408] {
            let err = response_error(
                "x",
                StatusCode::from_u16(status).unwrap(),
                &HeaderMap::new(),
                b"",
            );
            assert!(err.is_temporary(), "{status}");
            assert!(err.retry_after().is_none());
        }
        for status in [400, 401, 403, 404, 409] {
            let err = response_error(
                "x",
                StatusCode::from_u16(status).unwrap(),
                &HeaderMap::new(),
                b"oops",
            );
            assert!(!err.is_temporary(), "{status}");
            assert!(err.to_string().contains("oops"), "{err}");
        }
    }
}
