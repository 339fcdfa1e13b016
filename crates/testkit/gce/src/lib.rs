//! # codalab-wm-fake-gce
//!
//! An in-process fake of the Compute Engine REST API (v1) and of Google's OAuth 2.0 token
//! endpoints, for the `gce` backend's tests and the bench. **No emulator exists for Compute
//! Engine** (Google ships emulators for Pub/Sub, Datastore, Firestore, Bigtable and Spanner
//! only), so this fake is what the backend is proven against, and it is validated against
//! Google's own discovery document of the API ([`discovery`], `discovery/compute.v1.json`
//! from the `google-api-python-client` package; see `discovery/README.md`):
//!
//! - every request is routed by the document (HTTP method and path template: an unknown
//!   method is a 404) and checked by it: every query parameter declared, of its type, enum and
//!   pattern; every required parameter present; the body against the method's request schema
//!   (an unknown field, a wrong JSON type, a value outside an enum, a field the schema marks
//!   as required for the method missing: 400 naming the field, as the service answers);
//! - only then does it act, for the calls a worker manager makes: `instances.insert`, `list`,
//!   `aggregatedList` (with `filter` on labels, `maxResults` and `pageToken`), `get`,
//!   `delete`, `zoneOperations.get` and `wait`, `globalOperations.aggregatedList` (the
//!   `compute.instances.preempted` operations); any other method of the document is a 501;
//! - it keeps state: instances go PROVISIONING → RUNNING when their insert operation is done
//!   (or when released, if new instances are held), a delete makes an instance STOPPING and
//!   removes it when its operation is done, and every operation finishes after a number of
//!   further requests ([`FakeCompute::set_operation_steps`]); the test preempts
//!   ([`FakeCompute::preempt`]: deleted with `instanceTerminationAction = DELETE`, else
//!   TERMINATED; a `compute.instances.preempted` operation either way), stops or finishes
//!   instances, exhausts a zone (the insert operation ends in `ZONE_RESOURCE_POOL_EXHAUSTED`)
//!   and queues faults (429, 503 …);
//! - it authenticates: a bearer token it issued, from its OAuth token endpoint (`POST
//!   /token`, a JWT bearer grant signed RS256 by a service account key it knows: the signature
//!   is verified) or its metadata server (`GET
//!   /computeMetadata/v1/instance/service-accounts/default/token` with `Metadata-Flavor:
//!   Google`).
//!
//! How faithful: the request checks are the document's; the answers are shaped by the
//! document's schemas (the fake's own tests check them against it) but hold only the fields
//! a manager reads. There are no images, machine types, networks, disks or quotas of its own
//! (a machine type is not looked up); only injected exhaustion and faults.
#![warn(missing_docs)]

pub mod discovery;
mod oauth;
mod service;
mod state;

pub use state::{FakeInstance, Fault, RecordedRequest};

use ring::signature::KeyPair;
use state::FakeState;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

type Shared = Arc<Mutex<FakeState>>;

/// A throwaway 2048-bit RSA key (PKCS#8 PEM) generated for these tests with `openssl genpkey`
/// and used nowhere else: the test service account's key.
pub const TEST_KEY_PEM: &str = include_str!("test-service-account-key.pem");

/// The test service account's email.
pub const TEST_SERVICE_ACCOUNT: &str = "codalab-wm@test-project.iam.gserviceaccount.com";

/// The DER bytes of a PEM block.
pub fn pem_to_der(pem: &str) -> Vec<u8> {
    use base64::Engine;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("a PEM block")
}

/// A running fake Compute Engine API. Stops when dropped.
#[derive(Debug)]
pub struct FakeCompute {
    url: String,
    state: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeCompute {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeCompute {
    /// Starts a fake serving project `project` on `127.0.0.1:<random port>`.
    pub async fn start(project: &str) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(Mutex::new(FakeState::new(project, &url)));
        let router = axum::Router::new()
            .fallback(service::handle)
            .with_state(state.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self { url, state, server })
    }

    fn state(&self) -> MutexGuard<'_, FakeState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The API root the backend is pointed at: `<url>/compute/v1/`.
    pub fn api_url(&self) -> String {
        format!("{}{}", self.url, discovery::SERVICE_PATH)
    }

    /// The OAuth token endpoint: `<url>/token`.
    pub fn token_url(&self) -> String {
        format!("{}/token", self.url)
    }

    /// Accepts JWT bearer grants from service account `email`, signed with the RSA key whose
    /// PKCS#8 DER is `private_key_der` (the fake keeps only its public half).
    pub fn trust_service_account(&self, email: &str, private_key_der: &[u8]) {
        let pair =
            ring::signature::RsaKeyPair::from_pkcs8(private_key_der).expect("an RSA PKCS#8 key");
        let public = pair.public_key().as_ref().to_vec();
        self.state()
            .service_accounts
            .insert(email.to_owned(), public);
    }

    /// Trusts the test service account ([`TEST_SERVICE_ACCOUNT`], [`TEST_KEY_PEM`]) and
    /// returns its key file, as `gcloud iam service-accounts keys create` writes it, with
    /// `token_uri` pointing at this fake.
    pub fn test_key_file(&self) -> String {
        self.trust_service_account(TEST_SERVICE_ACCOUNT, &pem_to_der(TEST_KEY_PEM));
        serde_json::json!({
            "type": "service_account",
            "project_id": self.state().project,
            "private_key_id": "0123456789abcdef",
            "private_key": TEST_KEY_PEM,
            "client_email": TEST_SERVICE_ACCOUNT,
            "client_id": "100000000000000000001",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": self.token_url(),
        })
        .to_string()
    }

    /// Makes new instances stay PROVISIONING (held) or run once their insert is done.
    pub fn hold_new_instances(&self, hold: bool) {
        self.state().hold = hold;
    }

    /// Lets every held instance run, and new ones run once inserted.
    pub fn release(&self) {
        self.state().release();
    }

    /// The instance named `name` ends: preempted. With `instanceTerminationAction = DELETE`
    /// it is STOPPING, then deleted; else TERMINATED. Records a `compute.instances.preempted`
    /// operation either way.
    pub fn preempt(&self, name: &str) {
        self.state().preempt(name, false);
    }

    /// The instance named `name` is preempted with the old behaviour (`STOP`, whatever its
    /// termination action): TERMINATED, and a `compute.instances.preempted` operation.
    pub fn preempt_stopping(&self, name: &str) {
        self.state().preempt(name, true);
    }

    /// The instance named `name` becomes `status` (TERMINATED when its worker shut it down,
    /// STOPPED or SUSPENDED by hand …).
    pub fn set_status(&self, name: &str, status: &str) {
        self.state().set_status(name, status);
    }

    /// Inserts into `zone` fail with `ZONE_RESOURCE_POOL_EXHAUSTED` (in the operation).
    pub fn exhaust_zone(&self, zone: &str) {
        self.state().exhausted.insert(zone.to_owned());
    }

    /// Every operation is done after `steps` further requests to the fake (default 1; a
    /// `wait` on it counts as one).
    pub fn set_operation_steps(&self, steps: u32) {
        self.state().operation_steps = steps;
    }

    /// At most `size` items per list page (besides `maxResults`).
    pub fn set_page_size(&self, size: usize) {
        self.state().page_size = size.max(1);
    }

    /// Answers the next authenticated API request (of the fault's method, if it names one)
    /// with `fault`.
    pub fn push_fault(&self, fault: Fault) {
        self.state().faults.push_back(fault);
    }

    /// Adds an instance as another client would (labels and status given).
    pub fn insert_instance(&self, zone: &str, name: &str, labels: &[(&str, &str)], status: &str) {
        self.state().insert_foreign(zone, name, labels, status);
    }

    /// Every instance.
    pub fn instances(&self) -> Vec<FakeInstance> {
        self.state().instances.values().cloned().collect()
    }

    /// The instance named `name`, if any.
    pub fn instance(&self, name: &str) -> Option<FakeInstance> {
        self.state()
            .instances
            .values()
            .find(|i| i.name == name)
            .cloned()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state().requests.clone()
    }

    /// Forgets the requests so far.
    pub fn clear_requests(&self) {
        self.state().requests.clear();
    }

    /// The operations not yet done.
    pub fn pending_operations(&self) -> usize {
        self.state()
            .operations
            .values()
            .filter(|o| o.status != "DONE")
            .count()
    }
}
