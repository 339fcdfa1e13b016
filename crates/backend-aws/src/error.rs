//! Turning AWS SDK errors into codalab-wm's [`Error`], deciding once whether a later try may
//! succeed: throttling is [`Error::RateLimited`], 5xx, timeouts and connection failures are
//! temporary, everything else (a `ClientException` such as an unknown queue, access denied,
//! an invalid request) is permanent and keeps the platform's message.

use aws_sdk_batch::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use codalab_wm_backend::Error;
use std::time::Duration;

/// The backend name used in errors.
pub const BACKEND: &str = "aws-batch";

/// Error codes AWS uses for "slow down" (the ones the SDK's own retry treats as throttling).
const THROTTLING_CODES: &[&str] = &[
    "TooManyRequestsException",
    "ThrottlingException",
    "Throttling",
    "ThrottledException",
    "RequestThrottledException",
    "RequestLimitExceeded",
    "SlowDown",
    "PriorRequestNotComplete",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "EC2ThrottledException",
    "TransactionInProgressException",
];

/// Error codes that are temporary although they are not throttling or 5xx.
const TRANSIENT_CODES: &[&str] = &[
    "RequestTimeout",
    "RequestTimeoutException",
    "ExpiredToken",
    "ExpiredTokenException",
    "ServerException",
];

/// What kind of failure an answer from the platform is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The platform asks us to slow down.
    Throttled,
    /// A later try may succeed.
    Temporary,
    /// Retrying the same request will fail the same way.
    Permanent,
}

/// Classifies a service answer by its error code and HTTP status.
pub fn classify(code: Option<&str>, status: Option<u16>) -> Kind {
    if status == Some(429) || code.is_some_and(|c| THROTTLING_CODES.contains(&c)) {
        Kind::Throttled
    } else if status.is_some_and(|s| s >= 500)
        || matches!(status, Some(408))
        || code.is_some_and(|c| TRANSIENT_CODES.contains(&c))
    {
        Kind::Temporary
    } else {
        Kind::Permanent
    }
}

/// Converts an SDK error from `operation` (`list worker jobs`, `submit a worker job` …).
pub fn from_sdk<E>(operation: &'static str, err: SdkError<E>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let (kind, message, retry_after) = match &err {
        SdkError::ServiceError(context) => {
            let status = context.raw().status().as_u16();
            let code = context.err().code();
            let message = match (code, context.err().message()) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(code), None) => format!("{code} (HTTP {status})"),
                (None, Some(message)) => format!("HTTP {status}: {message}"),
                (None, None) => format!("HTTP {status} without an error code"),
            };
            let retry_after = context
                .raw()
                .headers()
                .get("retry-after")
                .and_then(parse_retry_after);
            (classify(code, Some(status)), message, retry_after)
        }
        SdkError::TimeoutError(_) => (Kind::Temporary, "timed out".to_owned(), None),
        SdkError::DispatchFailure(failure) => {
            let kind = if failure.is_user() {
                Kind::Permanent
            } else {
                Kind::Temporary
            };
            (kind, DisplayErrorContext(&err).to_string(), None)
        }
        SdkError::ResponseError(_) => {
            (Kind::Temporary, DisplayErrorContext(&err).to_string(), None)
        }
        _ => (Kind::Permanent, DisplayErrorContext(&err).to_string(), None),
    };
    match kind {
        Kind::Throttled => Error::RateLimited {
            backend: BACKEND.to_owned(),
            message,
            retry_after,
        },
        Kind::Temporary | Kind::Permanent => Error::Backend {
            backend: BACKEND.to_owned(),
            operation,
            message,
            temporary: kind == Kind::Temporary,
            source: Some(Box::new(err)),
        },
    }
}

/// A `Retry-After` header in seconds (the HTTP-date form is not used by AWS).
fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// An answer that lacks a field the API promises (`jobId`, `jobDefinitionArn` …).
pub fn missing(operation: &'static str, field: &str) -> Error {
    Error::InvalidReply {
        from: BACKEND.to_owned(),
        what: operation.to_owned(),
        message: format!("the answer has no {field}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_by_code_and_status() {
        let cases = [
            (Some("TooManyRequestsException"), Some(429), Kind::Throttled),
            (Some("TooManyRequestsException"), Some(400), Kind::Throttled),
            (None, Some(429), Kind::Throttled),
            (Some("ThrottlingException"), Some(400), Kind::Throttled),
            (Some("ServerException"), Some(500), Kind::Temporary),
            (None, Some(503), Kind::Temporary),
            (None, Some(502), Kind::Temporary),
            (Some("ExpiredTokenException"), Some(403), Kind::Temporary),
            (Some("ClientException"), Some(400), Kind::Permanent),
            (Some("AccessDeniedException"), Some(403), Kind::Permanent),
            (
                Some("UnrecognizedClientException"),
                Some(403),
                Kind::Permanent,
            ),
            (None, Some(404), Kind::Permanent),
        ];
        for (code, status, expected) in cases {
            assert_eq!(classify(code, status), expected, "{code:?} {status:?}");
        }
    }

    #[test]
    fn retry_after_in_seconds() {
        assert_eq!(parse_retry_after(" 3 "), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }
}
