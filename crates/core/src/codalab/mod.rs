//! The CodaLab REST client: login, token refresh, identity check and the staged search.
//!
//! The exchanges follow what `cl-worker-manager` 1.7.5 sends (recorded against a real
//! server): the OAuth2 password grant as the `codalab_cli_client`, the `X-Requested-With`
//! header that makes the server answer errors in plain text, and `keywords` repeated once per
//! keyword. Two differences, both deliberate: the search carries `.limit` and `.offset`, so that
//! more than the server's default 10 results can come back, sized to what the pools can take
//! ([`staged`]), and the identity is checked with `GET /rest/user`, because the server runs a
//! request with an invalid token as anonymous instead of failing.

pub mod jsonapi;
pub mod limits;
mod login;
pub mod staged;
pub mod tls;
mod transport;
mod users;
mod workers;

use crate::bundle::StagedBundle;
use crate::error::{Error, Result};
use crate::secret::Credentials;
pub use jsonapi::{SkippedBundle, UserIdentity, parse_user_reply};
use login::Token;
pub use login::{error_reply_message, parse_token_reply};
use reqwest::{Method, RequestBuilder, StatusCode};
pub use staged::{CountEvery, StagedNeed, everything};
use std::time::Duration;
use tokio::sync::Mutex;
use transport::{find_cause, unreachable};
pub use workers::parse_workers_reply;

/// The OAuth2 client the CodaLab CLI (and upstream's worker manager) logs in as.
const CLI_CLIENT_ID: &str = "codalab_cli_client";
/// The largest search page (`.limit`); the server's default is 10. A page of 1,000 bundles is
/// about 1 MB of JSON, which keeps the manager's peak memory small (see BENCH.md).
pub const SEARCH_PAGE_SIZE: usize = 1000;
/// Refresh the token when less than this is left (the Python client uses 10 minutes).
const REFRESH_MARGIN: Duration = Duration::from_secs(600);

/// Options of the HTTP connection to the CodaLab server.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Timeout of one request.
    pub timeout: Duration,
    /// Extra PEM certificates to trust (a private CA).
    pub ca_certificates: Vec<Vec<u8>>,
    /// Accept any certificate. Dangerous; the CLI warns at every start.
    pub insecure_skip_tls_verify: bool,
    /// The largest search page (`.limit`).
    pub search_page_size: usize,
    /// How often the staged total is counted ([`staged::CountEvery::ALWAYS`]: at every read
    /// that stops short of the end of the list).
    pub count_every: staged::CountEvery,
    /// How often a page of the remembered run of bundles that fit no pool is read again
    /// ([`staged::RECHECK_MISFITS_EVERY`]; zero: at every read).
    pub recheck_misfits_every: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            ca_certificates: Vec::new(),
            insecure_skip_tls_verify: false,
            search_page_size: SEARCH_PAGE_SIZE,
            count_every: staged::CountEvery::default(),
            recheck_misfits_every: staged::RECHECK_MISFITS_EVERY,
        }
    }
}

/// A search result: the bundles read, those left out because a field was malformed, and how
/// many match in all.
#[derive(Debug, Clone, Default)]
pub struct SearchResult {
    /// The staged bundles read, oldest first.
    pub bundles: Vec<StagedBundle>,
    /// Bundles left out, with the reason naming the field.
    pub skipped: Vec<SkippedBundle>,
    /// Every bundle matching the keywords, read or not (`.count`, or what was read when the
    /// read reached the end of the list).
    pub total: usize,
    /// Whether the read reached the end of the list (then `bundles` and `skipped` are all).
    pub complete: bool,
    /// Requests made: pages and the count.
    pub requests: usize,
}

/// The largest search page buffer kept between pages (bytes); a larger reply (a server that
/// ignores `.limit`) is read, then its buffer freed.
const PAGE_BUFFER_RETAINED: usize = 8 << 20;

/// A client for one CodaLab server and one user.
#[derive(Debug)]
pub struct CodaLabClient {
    /// The base URL requests go to, as given (it may carry `user:password@`).
    base: String,
    /// The same without any password, for messages.
    server: String,
    credentials: Credentials,
    http: reqwest::Client,
    page_size: usize,
    count_every: staged::CountEvery,
    token: Mutex<Option<Token>>,
    /// Whether the last search returned any bundle (an empty search after a non-empty one
    /// triggers an identity check).
    last_search_nonempty: Mutex<bool>,
    /// Whether a login or search ever succeeded (see [`CodaLabClient::search_bundles`]).
    established: std::sync::atomic::AtomicBool,
    /// The body of the last search page, kept so that each page of every tick reuses one
    /// allocation (a page is ~1 MB at 1,000 bundles).
    page_buffer: Mutex<Vec<u8>>,
    /// The last `.count`, reused while the bundles read stay the same (see [`staged`]).
    last_count: Mutex<Option<staged::LastCount>>,
    /// The run of bundles that fit no pool at the head of the list (see [`staged`]).
    misfit_run: Mutex<Option<staged::run::MisfitRun>>,
    recheck_misfits_every: Duration,
    /// Who the manager is on the server, from the last identity check.
    identity: std::sync::OnceLock<UserIdentity>,
}

impl CodaLabClient {
    /// Who the manager is on the server, once an identity check has read it.
    pub fn identity(&self) -> Option<UserIdentity> {
        self.identity.get().cloned()
    }

    /// A client for `server` (`http[s]://host[:port]`) with default options.
    pub fn new(server: &str, credentials: Credentials) -> Result<Self> {
        Self::with_options(server, credentials, &ClientOptions::default())
    }

    /// A client for `server` with `options`.
    pub fn with_options(
        server: &str,
        credentials: Credentials,
        options: &ClientOptions,
    ) -> Result<Self> {
        let server = server.trim_end_matches('/').to_owned();
        server_url("--server", &server)?;
        let mut builder = reqwest::Client::builder()
            .timeout(options.timeout)
            .connect_timeout(options.timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("codalab-wm/", env!("CARGO_PKG_VERSION")))
            .redirect(limits::redirect_policy())
            .danger_accept_invalid_certs(options.insecure_skip_tls_verify);
        if !options.ca_certificates.is_empty() && !options.insecure_skip_tls_verify {
            let config = tls::client_config(&options.ca_certificates)
                .map_err(|e| Error::InvalidConfig(format!("--ca-cert: {e}")))?;
            builder = builder.use_preconfigured_tls(config);
        }
        let http = builder
            .build()
            .map_err(|e| Error::InvalidConfig(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            base: server.clone(),
            server: crate::secret::redact_url(&server).into_owned(),
            credentials,
            http,
            page_size: options.search_page_size.max(1),
            count_every: options.count_every,
            token: Mutex::new(None),
            last_search_nonempty: Mutex::new(false),
            established: std::sync::atomic::AtomicBool::new(false),
            page_buffer: Mutex::new(Vec::new()),
            last_count: Mutex::new(None),
            misfit_run: Mutex::new(None),
            recheck_misfits_every: options.recheck_misfits_every,
            identity: std::sync::OnceLock::new(),
        })
    }

    /// The server URL, without the password it may carry (for messages).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The user name the client logs in as.
    pub fn username(&self) -> &str {
        &self.credentials.username
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .header("X-Requested-With", "XMLHttpRequest")
    }

    /// Confirms that the token belongs to the configured user (`GET /rest/user`).
    pub async fn check_identity(&self) -> Result<()> {
        let access = {
            let token = self.token.lock().await;
            token.as_ref().map(|t| t.access.clone()).unwrap_or_default()
        };
        let response = self
            .request(Method::GET, "/rest/user")
            .bearer_auth(access.expose())
            .send()
            .await
            .map_err(|e| unreachable("identity check", e))?;
        let status = response.status();
        let body = limits::read_text(response, limits::MAX_USER_BYTES, "identity check").await?;
        if status == StatusCode::UNAUTHORIZED {
            *self.token.lock().await = None;
            return Err(Error::Server {
                what: "identity check",
                status: 401,
                message: first_line(&body),
            });
        }
        if !status.is_success() {
            return Err(Error::Server {
                what: "identity check",
                status: status.as_u16(),
                message: first_line(&body),
            });
        }
        let invalid = |message| Error::InvalidReply {
            from: "codalab server".into(),
            what: "identity check".into(),
            message,
        };
        let document: serde_json::Value = limits::parse_json(&body).map_err(invalid)?;
        match jsonapi::parse_user_name(&document) {
            Some(name) if name == self.credentials.username => {
                if let Some(identity) = jsonapi::parse_user_identity(&document) {
                    let _ = self.identity.set(identity);
                }
                Ok(())
            }
            Some(name) => Err(Error::Unauthenticated {
                server: self.server.clone(),
                username: self.credentials.username.clone(),
                message: format!("the token belongs to user `{name}`"),
            }),
            None => Err(Error::InvalidReply {
                from: "codalab server".into(),
                what: "identity check".into(),
                message: "no data.attributes.user_name".into(),
            }),
        }
    }

    /// Every bundle matching `keywords` (ANDed), oldest first, across pages of the largest
    /// size: [`CodaLabClient::staged_for`] with a need that is never met.
    pub async fn search_bundles(&self, keywords: &[String]) -> Result<SearchResult> {
        self.staged_for(keywords, &everything).await
    }

    /// Marks the client established after a success; before that, makes a refusal fatal.
    fn settle<T>(&self, result: Result<T>) -> Result<T> {
        use std::sync::atomic::Ordering;
        match result {
            Ok(value) => {
                self.established.store(true, Ordering::Relaxed);
                Ok(value)
            }
            Err(Error::Unreachable {
                refused: true,
                message,
                ..
            }) if !self.established.load(Ordering::Relaxed) => Err(Error::InvalidConfig(message)),
            Err(error) => Err(error),
        }
    }

    /// One page: `limit` bundles after the first `offset`. Unlike upstream, without
    /// `include=owner`: the owner's id comes with every bundle (`relationships.owner`, what the
    /// dispatch order and quotas use); only the owners' names would need it, and the server's
    /// users query and rendering cost ~15 % of a page of 10.
    async fn search_page(
        &self,
        keywords: &[String],
        offset: usize,
        limit: usize,
    ) -> Result<(Vec<StagedBundle>, Vec<SkippedBundle>)> {
        let query = page_query(keywords, offset, limit);
        let response = self.search_request(&query).await?;
        let mut body = self.page_buffer.lock().await;
        let page = read_page(response, &mut body).await;
        // Every path, errors included, leaves at most the retained size behind.
        if body.capacity() > PAGE_BUFFER_RETAINED {
            *body = Vec::new();
        }
        page
    }

    /// How many bundles match `keywords` (`.count`: the server counts, and renders none).
    async fn count(&self, keywords: &[String]) -> Result<usize> {
        let mut query: Vec<(&str, String)> =
            keywords.iter().map(|k| ("keywords", k.clone())).collect();
        query.push(("keywords", ".count".into()));
        let response = self.search_request(&query).await?;
        let status = response.status();
        let what = "staged bundle count";
        let body = limits::read_text(response, limits::MAX_COUNT_BYTES, what).await?;
        if !status.is_success() {
            return Err(Error::Server {
                what,
                status: status.as_u16(),
                message: first_line(&body),
            });
        }
        jsonapi::parse_count(&body).map_err(|message| Error::InvalidReply {
            from: "codalab server".into(),
            what: what.into(),
            message,
        })
    }

    /// Fails, as a configuration error, when the staged search of `keywords` would send a
    /// request line longer than the server accepts ([`longest_search_line`]); `shorten` names
    /// the settings that make it long.
    pub fn check_search(&self, keywords: &[String], shorten: &str) -> Result<()> {
        let line = longest_search_line(&self.base, keywords, self.page_size)?;
        if line <= limits::MAX_REQUEST_LINE_BYTES {
            return Ok(());
        }
        Err(Error::InvalidConfig(limits::request_line_too_long(
            line, shorten,
        )))
    }

    /// Sends `GET /rest/bundles` with `query` and our token.
    async fn search_request(&self, query: &[(&str, String)]) -> Result<reqwest::Response> {
        let access = self.access_token().await?;
        let request = self
            .request(Method::GET, "/rest/bundles")
            .bearer_auth(access.expose())
            .query(query)
            .build()
            .map_err(|e| unreachable("staged bundle search", e))?;
        limits::check_request_line(request.url())?;
        self.http
            .execute(request)
            .await
            .map_err(|e| unreachable("staged bundle search", e))
    }
}

/// The query of one search page: `limit` bundles matching `keywords` after the first `offset`.
fn page_query(keywords: &[String], offset: usize, limit: usize) -> Vec<(&'static str, String)> {
    let mut query: Vec<(&str, String)> = vec![("worksheet", "None".into())];
    query.extend(keywords.iter().map(|k| ("keywords", k.clone())));
    query.push(("keywords", format!(".limit={limit}")));
    if offset > 0 {
        query.push(("keywords", format!(".offset={offset}")));
    }
    query
}

/// The longest request line (bytes) the staged search of `keywords` sends to `server` in pages
/// of at most `page_size` ([`SEARCH_PAGE_SIZE`]): its largest page at the largest offset (the
/// `.count` request is shorter). Compared
/// with [`limits::MAX_REQUEST_LINE_BYTES`] when the settings are read, so that a search the
/// server would refuse is refused at start, by `config check` and by a reload, not at a tick.
pub fn longest_search_line(server: &str, keywords: &[String], page_size: usize) -> Result<usize> {
    let mut url = server_url("--server", server.trim_end_matches('/'))?;
    url.set_path(&format!(
        "{}/rest/bundles",
        url.path().trim_end_matches('/')
    ));
    url.query_pairs_mut()
        .extend_pairs(page_query(keywords, usize::MAX, page_size));
    Ok(limits::request_line_len(&url))
}

/// Reads one search page into `body` (cleared first) and parses it.
async fn read_page(
    response: reqwest::Response,
    body: &mut Vec<u8>,
) -> Result<(Vec<StagedBundle>, Vec<SkippedBundle>)> {
    let status = response.status();
    let what = "staged bundle search";
    limits::read_body(response, limits::MAX_SEARCH_PAGE_BYTES, what, body).await?;
    if !status.is_success() {
        return Err(Error::Server {
            what: "staged bundle search",
            status: status.as_u16(),
            message: first_line(&String::from_utf8_lossy(body)),
        });
    }
    jsonapi::parse_bundles_slice(body).map_err(|message| Error::InvalidReply {
        from: "codalab server".into(),
        what: "staged bundle search".into(),
        message,
    })
}

/// The keywords of the staged search, as upstream builds them.
pub fn staged_keywords(
    search: &[String],
    username: &str,
    tag: Option<&str>,
    tag_exclusive: bool,
) -> Vec<String> {
    let mut keywords = vec!["state=staged".to_owned()];
    keywords.extend(search.iter().cloned());
    if username != "codalab" {
        keywords.push(".mine".into());
    }
    if let Some(tag) = tag.filter(|t| !t.is_empty() && tag_exclusive) {
        keywords.push(format!("request_queue={tag},tag={tag}"));
    }
    keywords
}

/// Keeps the first of bundles with the same uuid, in order: a bundle can be on two pages when
/// the staged set shifts between the requests of one search (offset paging).
fn dedup_by_uuid(bundles: &mut Vec<StagedBundle>) {
    let mut seen =
        rustc_hash::FxHashSet::with_capacity_and_hasher(bundles.len(), Default::default());
    let keep: Vec<bool> = bundles
        .iter()
        .map(|b| seen.insert(b.uuid.as_str()))
        .collect();
    if keep.iter().all(|k| *k) {
        return;
    }
    let mut keep = keep.into_iter();
    bundles.retain(|_| keep.next().unwrap_or(false));
}

fn first_line(body: &str) -> String {
    let text = match (body.find("<pre>"), body.find("</pre>")) {
        (Some(start), Some(end)) if start < end => &body[start + 5..end],
        _ => body,
    };
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("(empty body)");
    let mut line: String = line.chars().take(200).collect();
    if line.starts_with('<') {
        line = line.replace(['<', '>'], " ").trim().to_owned();
    }
    line
}

/// `server`, given by `flag`, as an http(s) URL with a host; the error names the flag.
pub fn server_url(flag: &str, server: &str) -> Result<reqwest::Url> {
    let shown = crate::secret::redact_url(server);
    let url = reqwest::Url::parse(server)
        .map_err(|e| Error::InvalidConfig(format!("{flag} `{shown}` is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(Error::InvalidConfig(format!(
            "{flag} `{shown}` must look like http[s]://<host>[:<port>]"
        )));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::login::oauth_error;
    use super::*;
    use crate::secret::Secret;

    #[test]
    fn keywords_like_upstream() {
        assert_eq!(
            staged_keywords(&[], "alice", None, false),
            ["state=staged", ".mine"]
        );
        assert_eq!(
            staged_keywords(&[], "codalab", Some("gpuq"), false),
            ["state=staged"]
        );
        assert_eq!(
            staged_keywords(&["tags=exp1".into()], "codalab", Some("gpuq"), true),
            ["state=staged", "tags=exp1", "request_queue=gpuq,tag=gpuq"]
        );
        assert_eq!(
            staged_keywords(&[], "alice", None, true),
            ["state=staged", ".mine"]
        );
    }

    #[test]
    fn first_line_of_error_bodies() {
        assert_eq!(
            first_line("User is not authenticated."),
            "User is not authenticated."
        );
        assert_eq!(
            first_line("\n\nUnexpected Internal Error (x).\nmore"),
            "Unexpected Internal Error (x)."
        );
        assert_eq!(
            first_line("<html><body><h1>Error</h1><pre>Bundle 0x0 not found</pre></body></html>"),
            "Bundle 0x0 not found"
        );
        assert_eq!(first_line(""), "(empty body)");
    }

    #[test]
    fn oauth_errors() {
        let body =
            r#"{"error": "invalid_grant", "error_description": "Invalid credentials given."}"#;
        assert_eq!(
            oauth_error(body),
            "Invalid credentials given. (invalid_grant)"
        );
        assert_eq!(
            oauth_error(r#"{"error": "invalid_client"}"#),
            "invalid_client"
        );
    }

    #[test]
    fn rejects_bad_server_urls() {
        let credentials = Credentials {
            username: "a".into(),
            password: Secret::new("p"),
        };
        for bad in ["worksheets.codalab.org", "ftp://x", "http://"] {
            let err = CodaLabClient::new(bad, credentials.clone()).unwrap_err();
            assert!(err.to_string().contains("--server"), "{bad}: {err}");
        }
        assert!(CodaLabClient::new("http://127.0.0.1:2900/", credentials).is_ok());
    }
}
