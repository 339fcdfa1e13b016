//! # codalab-wm-fake-codalab
//!
//! An in-process fake of the CodaLab REST server (codalab-worksheets 1.7.5's `/rest` API),
//! standing in for a real CodaLab server in transport tests (core, the backends, the CLI), the
//! bench (`bench-harness serve`) and soak runs (`soak-fake`). Not published; production crates
//! never depend on it.
//!
//! It serves exactly the subset a worker manager uses, shaped like the replies recorded from a
//! real CodaLab 1.7.5 server (`crates/core/tests/samples/`): the OAuth2 password and refresh
//! grants, `GET /rest/user`, `GET /rest/workers/info` (the workers set with
//! [`FakeCodaLab::set_workers`]), and `GET /rest/bundles` with `keywords` (`state=staged`,
//! `.mine`, `.limit` with the server's default of 10, `.offset`, `.count`,
//! `request_queue=a,tag=a`, `tags=x`; the order is the order of [`FakeCodaLab::set_bundles`],
//! as the real server's).
//! Like the real server, a request with an invalid token runs as anonymous. Faults can be
//! injected: the next N replies as HTTP errors with a plain-text body, or revoked tokens; and
//! the whole server can be stopped and started again on the same port ([`FakeCodaLab::stop`],
//! [`FakeCodaLab::restart`]), as an outage would.
//!
//! How faithful: the JSON documents and error texts are the recorded server's, but every
//! bundle it serves is a staged `run` bundle (so `state=` is not applied, and nor is any
//! keyword not listed above), there are no worksheets, permissions or worker check-in
//! endpoints (the workers listed are whatever the test sets), and tokens expire only when revoked (`expires_in` is reported, not enforced).
//! The end-to-end tests run against the real server (`cargo xtask services up codalab`).
#![warn(missing_docs)]

use axum::Router;
use axum::extract::{Form, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// The server's default search limit when no `.limit` is given.
pub const DEFAULT_LIMIT: usize = 10;

/// A staged bundle as the fake serves it.
#[derive(Debug, Clone)]
pub struct FakeBundle {
    /// Bundle uuid.
    pub uuid: String,
    /// Owner user name.
    pub owner: String,
    /// `request_cpus`.
    pub cpus: u32,
    /// `request_gpus`.
    pub gpus: u32,
    /// `request_memory` as typed (`"512m"`, `""`).
    pub memory: String,
    /// `request_queue`.
    pub queue: String,
    /// Tags.
    pub tags: Vec<String>,
}

impl FakeBundle {
    /// A bundle of `owner` asking 1 CPU and 512m, with uuid made from `n`.
    pub fn new(owner: &str, n: u64) -> Self {
        Self {
            uuid: format!("0x{n:032x}"),
            owner: owner.to_owned(),
            cpus: 1,
            gpus: 0,
            memory: "512m".into(),
            queue: String::new(),
            tags: Vec::new(),
        }
    }

    fn resource(&self, state: &str) -> Value {
        json!({
            "type": "bundles",
            "id": self.uuid,
            "attributes": {
                "uuid": self.uuid, "bundle_type": "run", "state": state, "command": "echo hi",
                "args": "run \"echo hi\"",
                "metadata": {
                    "request_cpus": self.cpus, "request_gpus": self.gpus, "request_memory": self.memory,
                    "request_queue": self.queue, "request_disk": "", "request_time": "",
                    "request_docker_image": "", "request_network": false, "request_priority": 0,
                    "tags": self.tags, "name": "run-echo", "description": "", "created": 1795294308,
                    "staged_status": "No worker can meet your bundle's resource requirements. ",
                    "actions": [], "allow_failed_dependencies": false, "exclude_patterns": [],
                    "remote_history": [], "store": ""
                },
                "state_details": "No worker can meet your bundle's resource requirements. ",
                "dependencies": [], "frozen": null, "is_anonymous": false, "permission": 2,
                "permission_spec": "all"
            },
            "relationships": {"owner": {"data": {"type": "users", "id": user_id(&self.owner)}}}
        })
    }
}

/// The id the fake gives user `name` (in bundles' owners and `GET /rest/user`): what a test
/// puts in the `user_id` of a worker that user runs.
pub fn user_id(name: &str) -> String {
    format!(
        "0x{:032x}",
        name.bytes()
            .fold(7u128, |h, b| h.wrapping_mul(31).wrapping_add(u128::from(b)))
    )
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// `GET`, `POST`.
    pub method: String,
    /// The path.
    pub path: String,
    /// The raw query string.
    pub query: String,
}

#[derive(Debug, Default)]
struct FakeState {
    users: HashMap<String, String>,
    tokens: HashMap<String, String>,
    refresh_tokens: HashMap<String, String>,
    bundles: Vec<FakeBundle>,
    /// Bundles running on workers: found only by a `uuid=` search, as their owners' are.
    running: Vec<FakeBundle>,
    workers: Vec<Value>,
    requests: Vec<RecordedRequest>,
    faults: Vec<(u16, String)>,
    workers_faults: Vec<(u16, String)>,
    expires_in: u64,
    next_token: u64,
    refuse_logins: bool,
    /// `GET /rest/users/<id>` answers this HTTP error while set.
    users_fail: Option<u16>,
}

/// A running fake CodaLab server on 127.0.0.1.
#[derive(Debug, Clone)]
pub struct FakeCodaLab {
    addr: SocketAddr,
    state: Arc<Mutex<FakeState>>,
    serving: Arc<Mutex<Option<Serving>>>,
}

/// The serving task and how to stop it.
#[derive(Debug)]
struct Serving {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Serving {
    fn spawn(listener: tokio::net::TcpListener, state: Shared) -> Self {
        let app = Router::new()
            .route("/rest/oauth2/token", post(token))
            .route("/rest/user", get(user))
            .route("/rest/bundles", get(bundles))
            .route("/rest/workers/info", get(workers_info))
            .route("/rest/users/{id}", get(user_by_id))
            .with_state(state);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Self { stop, task }
    }
}

type Shared = Arc<Mutex<FakeState>>;

fn lock(state: &Shared) -> std::sync::MutexGuard<'_, FakeState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl FakeCodaLab {
    /// Starts the fake on a free port of 127.0.0.1 with users `alice`/`alicepw` and
    /// `codalab`/`codalab`.
    pub async fn start() -> std::io::Result<Self> {
        let state: Shared = Arc::default();
        {
            let mut s = lock(&state);
            s.users.insert("alice".into(), "alicepw".into());
            s.users.insert("codalab".into(), "codalab".into());
            s.expires_in = 3600;
        }
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let serving = Serving::spawn(listener, state.clone());
        Ok(Self {
            addr,
            state,
            serving: Arc::new(Mutex::new(Some(serving))),
        })
    }

    /// Stops serving: the port is closed (connections are refused) and open connections are
    /// closed once their request is answered. Returns when the server is down.
    pub async fn stop(&self) {
        let serving = self
            .serving
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(serving) = serving {
            let _ = serving.stop.send(());
            let _ = serving.task.await;
        }
    }

    /// Serves again on the same port, with the same users, tokens and bundles.
    pub async fn restart(&self) -> std::io::Result<()> {
        self.stop().await;
        let listener = tokio::net::TcpListener::bind(self.addr).await?;
        let serving = Serving::spawn(listener, self.state.clone());
        *self.serving.lock().unwrap_or_else(|p| p.into_inner()) = Some(serving);
        Ok(())
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Replaces the staged bundles.
    pub fn set_bundles(&self, bundles: Vec<FakeBundle>) {
        lock(&self.state).bundles = bundles;
    }

    /// Replaces the running bundles: a search by `uuid=` finds them (with the staged ones), as
    /// the manager looks up the owners of the runs on its workers; no other search does.
    pub fn set_running(&self, bundles: Vec<FakeBundle>) {
        lock(&self.state).running = bundles;
    }

    /// Replaces the checked-in workers `GET /rest/workers/info` lists (each a JSON object as
    /// the real server sends: `worker_id`, `run_uuids`, `is_terminating`, `checkin_time` …).
    pub fn set_workers(&self, workers: Vec<Value>) {
        lock(&self.state).workers = workers;
    }

    /// Makes the next `GET /rest/workers/info` replies HTTP errors, one per entry (the other
    /// calls are not affected).
    pub fn inject_workers_faults(&self, faults: Vec<(u16, String)>) {
        lock(&self.state).workers_faults = faults;
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state).requests.clone()
    }

    /// Makes the next replies HTTP errors (`status`, plain-text `body`), one per entry.
    pub fn inject_faults(&self, faults: Vec<(u16, String)>) {
        lock(&self.state).faults = faults;
    }

    /// Invalidates every access and refresh token (as an expiry or a revocation would).
    pub fn revoke_tokens(&self) {
        let mut state = lock(&self.state);
        state.tokens.clear();
        state.refresh_tokens.clear();
    }

    /// While `on`, the token endpoint refuses every grant (401 `invalid_grant`), the right
    /// password too: a proxy's maintenance page, an auth backend down for a spell.
    pub fn refuse_logins(&self, on: bool) {
        lock(&self.state).refuse_logins = on;
    }

    /// While `Some(status)`, `GET /rest/users/<id>` answers that HTTP error (a users table
    /// under a migration, a proxy's 502); `None`: it answers again.
    pub fn fail_users(&self, status: Option<u16>) {
        lock(&self.state).users_fail = status;
    }

    /// Sets `expires_in` of the tokens issued from now on.
    pub fn set_token_lifetime(&self, seconds: u64) {
        lock(&self.state).expires_in = seconds;
    }
}

fn record_and_fault(state: &Shared, method: &str, path: &str, query: &str) -> Option<Response> {
    let mut s = lock(state);
    s.requests.push(RecordedRequest {
        method: method.into(),
        path: path.into(),
        query: query.into(),
    });
    if s.faults.is_empty() {
        return None;
    }
    let (status, body) = s.faults.remove(0);
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    Some((status, [("content-type", "text/html; charset=UTF-8")], body).into_response())
}

fn bearer_user(state: &FakeState, headers: &HeaderMap) -> Option<String> {
    let token = headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?;
    state.tokens.get(token).cloned()
}

async fn token(
    State(state): State<Shared>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if let Some(fault) = record_and_fault(&state, "POST", "/rest/oauth2/token", "") {
        return fault;
    }
    let client_ok = headers.get("authorization").and_then(|v| v.to_str().ok())
        == Some("Basic Y29kYWxhYl9jbGlfY2xpZW50Og==");
    if !client_ok {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    }
    let mut s = lock(&state);
    let user = match form.get("grant_type").map(String::as_str) {
        Some("password") => {
            let (user, password) = (form.get("username"), form.get("password"));
            match (user, password) {
                (Some(u), Some(p)) if s.users.get(u) == Some(p) => Some(u.clone()),
                _ => None,
            }
        }
        Some("refresh_token") => form
            .get("refresh_token")
            .and_then(|t| s.refresh_tokens.remove(t)),
        _ => {
            return (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({"error": "unauthorized_client"})),
            )
                .into_response();
        }
    };
    let Some(user) = user.filter(|_| !s.refuse_logins) else {
        let body =
            json!({"error": "invalid_grant", "error_description": "Invalid credentials given."});
        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    };
    s.next_token += 1;
    let access = format!("access{}", s.next_token);
    let refresh = format!("refresh{}", s.next_token);
    s.tokens.insert(access.clone(), user.clone());
    s.refresh_tokens.insert(refresh.clone(), user);
    let body = json!({"access_token": access, "expires_in": s.expires_in, "token_type": "Bearer",
                      "scope": "default", "refresh_token": refresh});
    axum::Json(body).into_response()
}

async fn workers_info(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let mut s = lock(&state);
    s.requests.push(RecordedRequest {
        method: "GET".into(),
        path: "/rest/workers/info".into(),
        query: String::new(),
    });
    if !s.workers_faults.is_empty() {
        let (status, body) = s.workers_faults.remove(0);
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (status, body).into_response();
    }
    match bearer_user(&s, &headers) {
        Some(_) => {
            axum::Json(json!({"data": s.workers, "meta": {"version": "1.7.5"}})).into_response()
        }
        None => (StatusCode::UNAUTHORIZED, "User is not authenticated.").into_response(),
    }
}

/// `GET /rest/users/<id>` as the root user sees it (its `parallel_run_quota`: 2 for everyone).
async fn user_by_id(
    State(state): State<Shared>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    let path = format!("/rest/users/{id}");
    if let Some(fault) = record_and_fault(&state, "GET", &path, "") {
        return fault;
    }
    if let Some(status) = lock(&state).users_fail {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
        return (status, "Bad Gateway").into_response();
    }
    axum::Json(json!({"data": {"type": "users", "id": id,
        "attributes": {"user_name": format!("user{id}"), "parallel_run_quota": 2}}}))
    .into_response()
}

async fn user(State(state): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(fault) = record_and_fault(&state, "GET", "/rest/user", "") {
        return fault;
    }
    let s = lock(&state);
    match bearer_user(&s, &headers) {
        Some(name) => axum::Json(json!({"data": {"type": "users", "id": user_id(&name),
            "attributes": {"user_name": name, "is_root_user": name == "codalab"}},
            "meta": {"version": "1.7.5"}}))
        .into_response(),
        None => (StatusCode::UNAUTHORIZED, "User is not authenticated.").into_response(),
    }
}

async fn bundles(
    State(state): State<Shared>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let query = query.unwrap_or_default();
    if let Some(fault) = record_and_fault(&state, "GET", "/rest/bundles", &query) {
        return fault;
    }
    let keywords: Vec<String> = form_pairs(&query)
        .filter(|(k, _)| k == "keywords")
        .map(|(_, v)| v)
        .collect();
    if keywords.is_empty() {
        return (
            StatusCode::BAD_REQUEST,
            "Request must include either 'keywords' or 'specs' query parameter",
        )
            .into_response();
    }
    let s = lock(&state);
    let me = bearer_user(&s, &headers);
    let mut limit = DEFAULT_LIMIT;
    let mut offset = 0;
    let mut count = false;
    let mut matches = searched(&s, &keywords);
    for keyword in &keywords {
        if keyword == ".mine" {
            matches.retain(|(b, _)| Some(&b.owner) == me.as_ref());
        } else if keyword == ".count" {
            count = true;
        } else if let Some(n) = keyword.strip_prefix(".limit=") {
            match n.parse() {
                Ok(n) => limit = n,
                Err(_) => return internal_error(n),
            }
        } else if let Some(n) = keyword.strip_prefix(".offset=") {
            match n.parse() {
                Ok(n) => offset = n,
                Err(_) => return internal_error(n),
            }
        } else if let Some(values) = keyword.strip_prefix("request_queue=") {
            let allowed: Vec<&str> = values
                .split(',')
                .map(|v| v.strip_prefix("tag=").unwrap_or(v))
                .collect();
            matches.retain(|(b, _)| allowed.contains(&b.queue.as_str()));
        } else if let Some(tag) = keyword.strip_prefix("tags=") {
            matches.retain(|(b, _)| b.tags.iter().any(|t| t == tag));
        }
    }
    if count {
        return axum::Json(json!({"meta": {"result": matches.len(), "version": "1.7.5"}}))
            .into_response();
    }
    let page: Vec<(&FakeBundle, &str)> = matches.into_iter().skip(offset).take(limit).collect();
    let mut owners: Vec<&str> = page.iter().map(|(b, _)| b.owner.as_str()).collect();
    owners.sort_unstable();
    owners.dedup();
    let included: Vec<Value> = owners
        .iter()
        .map(|o| json!({"type": "users", "id": user_id(o), "attributes": {"user_name": o, "first_name": "",
            "last_name": "", "affiliation": "", "url": null, "avatar_id": null, "has_access": true,
            "date_joined": "Sat Nov 21 20:51:29 2026"}}))
        .collect();
    let data: Vec<Value> = page.iter().map(|(b, state)| b.resource(state)).collect();
    let mut document = json!({"data": data, "meta": {"version": "1.7.5"}});
    if !included.is_empty() {
        document["included"] = Value::Array(included);
    }
    axum::Json(document).into_response()
}

/// The bundles a search starts from, with their state: the staged ones; for a search by
/// `uuid=`, those of the uuids among the staged and the running ones.
fn searched<'a>(s: &'a FakeState, keywords: &[String]) -> Vec<(&'a FakeBundle, &'static str)> {
    let uuids: Option<Vec<&str>> = (keywords.iter())
        .find_map(|k| k.strip_prefix("uuid="))
        .map(|list| list.split(',').collect());
    match &uuids {
        None => s.bundles.iter().map(|b| (b, "staged")).collect(),
        Some(uuids) => (s.bundles.iter().map(|b| (b, "staged")))
            .chain(s.running.iter().map(|b| (b, "running")))
            .filter(|(b, _)| uuids.contains(&b.uuid.as_str()))
            .collect(),
    }
}

fn internal_error(value: &str) -> Response {
    let body = format!(
        "Unexpected Internal Error (invalid literal for int() with base 10: '{value}'). The administrators have been notified."
    );
    (StatusCode::INTERNAL_SERVER_ERROR, body).into_response()
}

/// Decodes `application/x-www-form-urlencoded` pairs.
fn form_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(k), decode(v))
    })
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match u8::from_str_radix(&text[i + 1..i + 3], 16) {
                Ok(b) => {
                    out.push(b);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
