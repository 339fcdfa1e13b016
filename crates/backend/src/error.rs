//! The error type of codalab-wm, and the one decision that matters about an error: is it
//! temporary (retry on a later tick, with backoff) or not. And how a settings error is
//! worded ([`invalid`]: the key as the file spells it, where it came from, the nearest known
//! key), for the settings and every backend's table alike.

use std::time::Duration;

/// Boxed error from a platform SDK or transport, kept as the `source` of a [`Error`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with codalab-wm's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, in terms the manager loop can act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CodaLab server refused the credentials (wrong user name or password). Fatal.
    #[error("codalab server {server} refused the credentials of user `{username}`: {message}")]
    Unauthenticated {
        /// The server URL.
        server: String,
        /// The user name that was tried.
        username: String,
        /// What the server said.
        message: String,
    },
    /// The CodaLab server refused the credentials it had accepted before, at a re-login (a
    /// proxy's 401 page, an auth backend down): retried like an outage, and fatal only when
    /// it lasts (the manager turns it into [`Error::Unauthenticated`] past its bound).
    #[error(
        "codalab server {server} refused the credentials of user `{username}`, which it accepted before: {message}"
    )]
    RefusedAgain {
        /// The server URL.
        server: String,
        /// The user name that was tried.
        username: String,
        /// What the server said.
        message: String,
    },
    /// The CodaLab server answered with an HTTP error.
    #[error("codalab server answered {status} to {what}: {message}")]
    Server {
        /// What was being requested (`staged bundle search`, `login` …).
        what: &'static str,
        /// The HTTP status code.
        status: u16,
        /// The first line of the body.
        message: String,
    },
    /// The CodaLab server could not be reached (connection refused, timeout, reset).
    #[error("codalab server {server} unreachable during {what}: {message}")]
    Unreachable {
        /// What was being requested.
        what: &'static str,
        /// The server's `scheme://host:port`.
        server: String,
        /// The transport error with its causes (each once) and a hint when one applies; text,
        /// not a `source`, so that `{:#}` does not print the causes twice.
        message: String,
        /// The client refused to go on (a redirect to another origin, a server certificate it
        /// does not trust): fatal until the client has once worked, temporary after.
        refused: bool,
    },
    /// A reply that does not have the expected shape.
    #[error("invalid reply from {from} to {what}: {message}")]
    InvalidReply {
        /// Who sent it (`codalab server`, `squeue` …).
        from: String,
        /// What was being requested.
        what: String,
        /// What is wrong with it.
        message: String,
    },
    /// The configuration is not usable. Fatal.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The platform asks us to slow down.
    #[error("{backend} is throttling requests{}: {message}", retry_after.map(|d| format!(" (retry after {}s)", d.as_secs())).unwrap_or_default())]
    RateLimited {
        /// The backend name.
        backend: String,
        /// What the platform said.
        message: String,
        /// How long the platform asked us to wait, if it said.
        retry_after: Option<Duration>,
    },
    /// A backend operation failed.
    #[error("{backend} failed to {operation}: {message}")]
    Backend {
        /// The backend name (`slurm-batch`, `aws-batch` …).
        backend: String,
        /// What was being done (`list worker jobs`, `submit a worker job` …).
        operation: &'static str,
        /// What the platform said.
        message: String,
        /// Whether a later try may succeed (timeouts, 5xx, controller not answering).
        temporary: bool,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// The platform has no capacity for a worker now: a Spot stockout, every zone
    /// exhausted. A launch failure (the pool backs off) and a capacity event for the pool's
    /// `fallback` (`codalab_wm_core::pools::fallback`).
    #[error("{backend} has no capacity for a worker now: {message}")]
    NoCapacity {
        /// The backend name.
        backend: String,
        /// What the platform said.
        message: String,
    },
    /// The backend cannot do this.
    #[error("{backend} does not support {operation}")]
    Unsupported {
        /// The backend name.
        backend: String,
        /// The operation.
        operation: &'static str,
    },
}

impl Error {
    /// Whether a later try may succeed, so the loop should retry with backoff instead of
    /// exiting. Decided once here, at the boundary, for every kind of error.
    pub fn is_temporary(&self) -> bool {
        match self {
            Error::Unreachable { .. } | Error::RateLimited { .. } | Error::InvalidReply { .. } => {
                true
            }
            Error::Server { status, .. } => *status >= 500 || *status == 429 || *status == 408,
            Error::Backend { temporary, .. } => *temporary,
            Error::Unauthenticated { .. }
            | Error::RefusedAgain { .. }
            | Error::InvalidConfig(_)
            | Error::Unsupported { .. }
            | Error::NoCapacity { .. } => false,
        }
    }

    /// Whether the manager must stop (credentials refused, unusable configuration).
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Error::Unauthenticated { .. } | Error::InvalidConfig(_)
        )
    }

    /// A permanent backend error with a message.
    pub fn backend(
        backend: impl Into<String>,
        operation: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Error::Backend {
            backend: backend.into(),
            operation,
            message: message.into(),
            temporary: false,
            source: None,
        }
    }

    /// A temporary backend error with a message.
    pub fn backend_temporary(
        backend: impl Into<String>,
        operation: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Error::Backend {
            backend: backend.into(),
            operation,
            message: message.into(),
            temporary: true,
            source: None,
        }
    }

    /// How long the platform asked us to wait before the next try, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Prefix of the environment variables that set configuration keys (`__` separates tables).
pub const ENV_PREFIX: &str = "CODALAB_WM_";

/// Every error of a figment extraction, one a line, each naming the key under `table` (the
/// backend table being read, or `None` for the top level) and its source.
pub fn invalid(error: figment::Error, table: Option<&str>) -> Error {
    let lines: Vec<String> = error.into_iter().map(|e| one(&e, table)).collect();
    let what = table.map_or_else(String::new, |t| format!("[{t}] settings: "));
    match lines.as_slice() {
        [line] => Error::InvalidConfig(format!("{what}{line}")),
        _ => Error::InvalidConfig(format!(
            "{what}{} errors:\n  {}",
            lines.len(),
            lines.join("\n  ")
        )),
    }
}

fn one(error: &figment::Error, table: Option<&str>) -> String {
    let mut path: Vec<&str> = table.into_iter().collect();
    path.extend(error.path.iter().map(String::as_str));
    let key = path.join(".");
    let what = match &error.kind {
        figment::error::Kind::UnknownField(field, expected) => {
            let mut key = path.clone();
            if key.last() != Some(&field.as_str()) {
                key.push(field);
            }
            format!(
                "`{}` is not a setting{}",
                key.join("."),
                suggestion(field, expected)
            )
        }
        kind if key.is_empty() => kind.to_string(),
        kind => format!("`{key}`: {kind}"),
    };
    format!("{what}{}", source(error, &path))
}

/// ` (in FILE)`, ` (from CODALAB_WM_X__Y)` for the key at `path`, or nothing (flags, defaults).
fn source(error: &figment::Error, path: &[&str]) -> String {
    let Some(metadata) = &error.metadata else {
        return String::new();
    };
    if let Some(figment::Source::File(path)) = &metadata.source {
        return format!(" (in {})", path.display());
    }
    if metadata.name.contains("environment") {
        let name: Vec<String> = path.iter().map(|k| k.to_ascii_uppercase()).collect();
        return format!(" (from {ENV_PREFIX}{})", name.join("__"));
    }
    String::new()
}

/// ` (did you mean `FIELD`?)` for the field of `fields` nearest to `key`, or nothing.
pub fn suggestion(key: &str, fields: &[&str]) -> String {
    fields
        .iter()
        .map(|f| (distance(key, f), f))
        .filter(|(d, f)| *d <= 2.max(f.len() / 4) || f.starts_with(key) || key.starts_with(*f))
        .min()
        .map_or_else(String::new, |(_, f)| format!(" (did you mean `{f}`?)"))
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = (previous + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(current + 1);
            previous = current;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_errors() {
        let server = |status| Error::Server {
            what: "x",
            status,
            message: String::new(),
        };
        assert!(server(500).is_temporary());
        assert!(server(503).is_temporary());
        assert!(server(429).is_temporary());
        assert!(!server(400).is_temporary());
        assert!(!server(404).is_temporary());
        assert!(
            Error::backend_temporary("slurm-batch", "list worker jobs", "timeout").is_temporary()
        );
        assert!(
            !Error::backend("slurm-batch", "submit a worker job", "bad partition").is_temporary()
        );
        assert!(Error::InvalidConfig("x".into()).is_fatal());
        assert!(!Error::InvalidConfig("x".into()).is_temporary());
    }

    #[test]
    fn messages_name_the_thing() {
        let err = Error::backend(
            "slurm-batch",
            "submit a worker job",
            "Invalid partition name specified",
        );
        assert_eq!(
            err.to_string(),
            "slurm-batch failed to submit a worker job: Invalid partition name specified"
        );
        let err = Error::RateLimited {
            backend: "aws-batch".into(),
            message: "slow down".into(),
            retry_after: Some(Duration::from_secs(3)),
        };
        assert_eq!(
            err.to_string(),
            "aws-batch is throttling requests (retry after 3s): slow down"
        );
    }
}
