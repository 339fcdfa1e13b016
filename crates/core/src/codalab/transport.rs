//! What a failed request to the server means: [`unreachable()`] turns a transport error into
//! [`Error::Unreachable`] (or the refused redirect, or the TLS problem, it hides), with the
//! whole cause chain and a hint when an `https://` server speaks plain HTTP.

use super::{limits, tls};
use crate::error::Error;

/// The error of a request for `what` that got no answer.
pub(super) fn unreachable(what: &'static str, error: reqwest::Error) -> Error {
    if let Some(refused) = find_cause::<limits::RedirectRefused>(&error) {
        return refused.to_error(what, error.url().map_or_else(String::new, limits::origin));
    }
    if let Some(error) = tls::classify(what, &error) {
        return error;
    }
    let server = error.url().map_or_else(String::new, limits::origin);
    let https = error.url().is_some_and(|u| u.scheme() == "https");
    let timeout = error.is_timeout();
    let message = cause_chain(&error.without_url());
    let plain_http = message.contains("InvalidContentType") || message.contains("corrupt message");
    let hint = if https && (plain_http || timeout) {
        let http = server.replacen("https://", "http://", 1);
        format!(" (the server speaks plain HTTP? try --server {http})")
    } else {
        String::new()
    };
    Error::Unreachable {
        what,
        server,
        message: format!("{message}{hint}"),
        refused: false,
    }
}

/// The error and its causes, `: `-separated, each once: reqwest's own message ("error sending
/// request") hides the cause, and hyper repeats its cause in its own message.
fn cause_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// The first cause of type `T` in the chain of `error` (looking inside `io::Error`s, whose
/// `source` skips the error they wrap).
pub(super) fn find_cause<'a, T: std::error::Error + 'static>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(found) = current.downcast_ref::<T>() {
            return Some(found);
        }
        let wrapped = current
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref());
        cause = match wrapped {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => current.source(),
        };
    }
    None
}
