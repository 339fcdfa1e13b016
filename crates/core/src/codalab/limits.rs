//! The bounds the client holds a CodaLab server to, whatever it sends: the size of every
//! reply body, the nesting depth of every JSON document, and where a redirect may lead.
//!
//! One home for each bound; the book's "Security and limits" page (`docs/src/operate/security.md`)
//! lists them.

use crate::error::{Error, Result};

/// The largest search page body (bytes). A page of 1,000 bundles (`.limit=1000`) is about
/// 1 MB from a real CodaLab 1.7.5 server; 32 MiB leaves room for bundles with long metadata
/// and for a server that ignores `.limit` and sends ~30,000 bundles in one page.
pub const MAX_SEARCH_PAGE_BYTES: usize = 32 << 20;
/// The largest token reply body (bytes): a token reply is ~200 bytes.
pub const MAX_TOKEN_BYTES: usize = 64 << 10;
/// The largest `/rest/user` reply body (bytes): ~1 KB from a real server.
pub const MAX_USER_BYTES: usize = 1 << 20;
/// The largest `.count` reply body (bytes): ~50 bytes from a real server.
pub const MAX_COUNT_BYTES: usize = 64 << 10;
/// The largest `/rest/workers/info` reply body (bytes): ~500 bytes per worker from a real
/// server, so 8 MiB holds some 16,000 workers.
pub const MAX_WORKERS_INFO_BYTES: usize = 8 << 20;
/// The deepest nesting of arrays and objects accepted in a reply: exactly what serde_json's
/// recursion limit accepts (it refuses 128 levels). The CodaLab replies the manager reads nest 6 deep; the check runs before any parser,
/// so that a deeply nested document cannot overflow the stack of a recursive one.
pub const MAX_JSON_DEPTH: usize = 127;
/// The longest request line CodaLab's REST server accepts: it runs under gunicorn, which
/// answers `400 Request Line is too large (4116 > 4094)` past it (measured on 1.7.5).
pub const MAX_REQUEST_LINE_BYTES: usize = 4094;
/// Same-origin redirects followed at most (other redirects are refused, see [`redirect_policy`]).
const MAX_REDIRECTS: usize = 5;

/// Reads the whole body of `response` into `body` (cleared first), failing as soon as it
/// grows past `cap` bytes: a reply that never ends, or a huge one, costs at most `cap`.
pub(crate) async fn read_body(
    mut response: reqwest::Response,
    cap: usize,
    what: &'static str,
    body: &mut Vec<u8>,
) -> Result<()> {
    body.clear();
    let announced = response.content_length().unwrap_or(0);
    if announced > cap as u64 {
        return Err(too_large(what, cap));
    }
    body.reserve(usize::try_from(announced).unwrap_or(0).min(8 << 20));
    // A body error carries no URL; the message names the server from it.
    let url = response.url().clone();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| super::unreachable(what, e.with_url(url.clone())))?
    {
        if body.len() + chunk.len() > cap {
            return Err(too_large(what, cap));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(())
}

/// [`read_body`] into a new string (invalid UTF-8 replaced).
pub(crate) async fn read_text(
    response: reqwest::Response,
    cap: usize,
    what: &'static str,
) -> Result<String> {
    let mut body = Vec::new();
    read_body(response, cap, what, &mut body).await?;
    Ok(match String::from_utf8(body) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

fn too_large(what: &'static str, cap: usize) -> Error {
    Error::InvalidReply {
        from: "codalab server".into(),
        what: what.into(),
        message: format!(
            "reply body larger than the limit of {} (the request was abandoned)",
            human_bytes(cap)
        ),
    }
}

fn human_bytes(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// Fails when `body` nests arrays and objects deeper than [`MAX_JSON_DEPTH`]. A linear scan
/// that jumps over strings with `memchr` (most of a search page is strings), so it costs a
/// small fraction of the parse; it does not validate the JSON, the parser does.
pub fn check_json_depth(body: &[u8]) -> std::result::Result<(), String> {
    let mut depth = 0usize;
    let mut at = 0;
    while let Some(&byte) = body.get(at) {
        match byte {
            b'"' => match string_end(body, at + 1) {
                Some(end) => at = end,
                // Unterminated: nothing nests after it; the parser refuses the body.
                None => return Ok(()),
            },
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return Err(format!(
                        "JSON nested deeper than {MAX_JSON_DEPTH} levels (refused unparsed)"
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        at += 1;
    }
    Ok(())
}

/// The index of the `"` that closes the string whose content starts at `from`.
fn string_end(body: &[u8], mut from: usize) -> Option<usize> {
    loop {
        let offset = memchr::memchr2(b'"', b'\\', body.get(from..)?)?;
        if body[from + offset] == b'"' {
            return Some(from + offset);
        }
        from += offset + 2;
    }
}

/// Fails, as a fatal configuration error, when the request line of `url` (`GET <target>
/// HTTP/1.1`) is longer than the server accepts: the search keywords (`--search`, and
/// `--worker-tag` twice with `--worker-tag-exclusive`) are in the URL, and a server that
/// refuses or drops the request would otherwise look like a server error or an outage. The
/// settings are checked against the longest search when they are read
/// ([`super::longest_search_line`]), so this is the last guard, for library callers.
pub(crate) fn check_request_line(url: &reqwest::Url) -> Result<()> {
    let line = request_line_len(url);
    if line <= MAX_REQUEST_LINE_BYTES {
        return Ok(());
    }
    Err(Error::InvalidConfig(request_line_too_long(
        line,
        "--worker-tag (sent twice with --worker-tag-exclusive) or --search",
    )))
}

/// The length of `GET <target> HTTP/1.1` for `url`.
pub(crate) fn request_line_len(url: &reqwest::Url) -> usize {
    let target = url.path().len() + url.query().map_or(0, |q| q.len() + 1);
    "GET ".len() + target + " HTTP/1.1".len()
}

/// What is wrong with a search whose request line is `line` bytes long, and what to shorten.
pub fn request_line_too_long(line: usize, shorten: &str) -> String {
    format!(
        "the staged bundle search would be a request line of {line} bytes, longer than the \
         {MAX_REQUEST_LINE_BYTES} bytes CodaLab's server accepts: shorten {shorten}"
    )
}

/// Parses a small JSON reply (token, user) after the depth check.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    body: &str,
) -> std::result::Result<T, String> {
    check_json_depth(body.as_bytes())?;
    serde_json::from_str(body).map_err(|e| e.to_string())
}

/// A redirect the client refused to follow (see [`Refused`]).
#[derive(Debug)]
pub(crate) struct RedirectRefused {
    from: String,
    to: String,
    credentials: bool,
}

impl std::fmt::Display for RedirectRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.credentials {
            write!(
                f,
                "the server redirected the login ({}) to {}; refused: the password and tokens \
                 are never sent on a redirect",
                self.from, self.to
            )
        } else {
            write!(
                f,
                "the server redirected {} to another origin, {}; refused: the access token is \
                 never sent to another origin",
                self.from, self.to
            )
        }
    }
}

impl std::error::Error for RedirectRefused {}

impl RedirectRefused {
    /// The error the client returns, naming both ends and what to do.
    pub(crate) fn to_error(&self, what: &'static str, server: String) -> Error {
        Refused(format!(
            "{self}; if {} is the right server, give it as --server",
            self.to
        ))
        .into_error(what, server)
    }
}

/// A request the client refused to complete (a redirect elsewhere, a server certificate it
/// does not trust): fatal at start, temporary once the client has worked (see
/// `CodaLabClient::search_bundles`); the message says what to do.
#[derive(Debug)]
pub(crate) struct Refused(pub(crate) String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl Refused {
    pub(crate) fn into_error(self, what: &'static str, server: String) -> Error {
        Error::Unreachable {
            what,
            server,
            message: self.0,
            refused: true,
        }
    }
}

/// `scheme://host[:port]` of `url`, without credentials, path or query.
pub(crate) fn origin(url: &reqwest::Url) -> String {
    match url.port() {
        Some(port) => format!("{}://{}:{port}", url.scheme(), url.host_str().unwrap_or("")),
        None => format!("{}://{}", url.scheme(), url.host_str().unwrap_or("")),
    }
}

/// The redirect rule of every request to the CodaLab server: token requests (they carry the
/// password or the refresh token) follow no redirect at all; other requests (they carry the
/// access token) follow a few redirects within the same origin (scheme, host and port), never
/// one to another origin, https to http included.
pub(crate) fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let first = attempt.previous().first().cloned();
        let Some(first) = first else {
            return attempt.follow();
        };
        let refused = |credentials| RedirectRefused {
            from: format!("{}{}", origin(&first), first.path()),
            to: origin(attempt.url()),
            credentials,
        };
        if first.path().ends_with("/rest/oauth2/token") {
            let error = refused(true);
            return attempt.error(error);
        }
        if origin(&first) != origin(attempt.url()) {
            let error = refused(false);
            return attempt.error(error);
        }
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        attempt.follow()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_is_counted_outside_strings_only() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(check_json_depth(deep.as_bytes()).is_err());
        // The same bound as serde_json's.
        for depth in [MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1] {
            let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let ours = check_json_depth(text.as_bytes()).is_ok();
            assert_eq!(ours, depth == MAX_JSON_DEPTH);
            assert_eq!(
                ours,
                serde_json::from_str::<serde_json::Value>(&text).is_ok()
            );
        }
        let in_string = format!("{{\"a\": \"{}\\\"{}\"}}", "[".repeat(300), "{".repeat(300));
        assert!(check_json_depth(in_string.as_bytes()).is_ok());
        // Escaped quotes and backslashes inside strings, and a string cut at the end.
        let escapes = format!("[\"a\\\\\", \"\\\"[[\", {}]", "[".repeat(200));
        assert!(check_json_depth(escapes.as_bytes()).is_err(), "{escapes}");
        assert!(check_json_depth(b"[\"abc\\").is_ok());
        assert!(check_json_depth(b"\"").is_ok());
        let unbalanced_closers = format!("{}{}", "]".repeat(300), "[".repeat(100));
        assert!(check_json_depth(unbalanced_closers.as_bytes()).is_ok());
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(MAX_SEARCH_PAGE_BYTES), "32 MiB");
        assert_eq!(human_bytes(MAX_TOKEN_BYTES), "64 KiB");
        assert_eq!(human_bytes(100), "100 bytes");
    }
}
