//! Kubernetes API errors turned into codalab-wm errors, deciding here, once, which are
//! temporary: 429 is throttling, 5xx, 408 and transport failures (refused, reset, timed out)
//! are temporary, everything else (403 Forbidden, 422 Invalid …) is permanent and carries the
//! API server's `Status` message.

use codalab_wm_backend::error::Error;
use std::time::Duration;

/// The backend name used in errors.
pub(crate) const BACKEND: &str = "kubernetes";

/// Converts a kube client error raised while doing `operation`.
pub(crate) fn from_kube(operation: &'static str, err: kube::Error) -> Error {
    match err {
        kube::Error::Api(status) => from_status(operation, &status),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            Error::Backend {
                backend: BACKEND.to_owned(),
                operation,
                message: format!("api server unreachable: {}", chain(&err)),
                temporary: true,
                source: Some(Box::new(err)),
            }
        }
        kube::Error::SerdeError(_) | kube::Error::FromUtf8(_) => Error::InvalidReply {
            from: "kubernetes api server".to_owned(),
            what: operation.to_owned(),
            message: chain(&err),
        },
        other => Error::Backend {
            backend: BACKEND.to_owned(),
            operation,
            message: chain(&other),
            temporary: false,
            source: Some(Box::new(other)),
        },
    }
}

/// Converts an API `Status` error (non-2xx answer).
pub(crate) fn from_status(operation: &'static str, status: &kube::core::Status) -> Error {
    let message = if status.message.is_empty() {
        format!("{} ({})", status.reason, status.code)
    } else {
        format!("{}: {} ({})", status.reason, status.message, status.code)
    };
    if status.code == 429 {
        let retry_after = status
            .details
            .as_ref()
            .map(|d| d.retry_after_seconds)
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(u64::from(s)));
        return Error::RateLimited {
            backend: BACKEND.to_owned(),
            message,
            retry_after,
        };
    }
    let temporary = status.code >= 500 || status.code == 408;
    Error::Backend {
        backend: BACKEND.to_owned(),
        operation,
        message,
        temporary,
        source: None,
    }
}

/// `err` and its sources, joined with `: ` (hyper's errors say little at the top level).
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{Status, response::StatusDetails};

    fn status(code: u16, reason: &str, message: &str) -> Status {
        Status::failure(message, reason).with_code(code)
    }

    #[test]
    fn classifies_api_errors() {
        let cases = [
            (500, "InternalError", true),
            (503, "ServiceUnavailable", true),
            (504, "Timeout", true),
            (408, "Timeout", true),
            (403, "Forbidden", false),
            (401, "Unauthorized", false),
            (422, "Invalid", false),
            (404, "NotFound", false),
        ];
        for (code, reason, temporary) in cases {
            let err = from_status("list worker pods", &status(code, reason, "m"));
            assert_eq!(err.is_temporary(), temporary, "{code}");
            assert!(matches!(err, Error::Backend { .. }), "{code}");
        }
    }

    #[test]
    fn forbidden_keeps_the_status_message() {
        let message =
            r#"pods is forbidden: User "system:serviceaccount:cl:wm" cannot list resource "pods""#;
        let err = from_status("list worker pods", &status(403, "Forbidden", message));
        assert_eq!(
            err.to_string(),
            format!("kubernetes failed to list worker pods: Forbidden: {message} (403)")
        );
    }

    #[test]
    fn throttling_is_rate_limited_with_retry_after() {
        let details: StatusDetails =
            serde_json::from_value(serde_json::json!({"retryAfterSeconds": 7})).unwrap();
        let err = from_status(
            "create a worker pod",
            &status(429, "TooManyRequests", "slow").with_details(details),
        );
        assert!(matches!(err, Error::RateLimited { .. }), "{err:?}");
        assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
        assert!(err.is_temporary());
    }
}
