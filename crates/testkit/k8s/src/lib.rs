//! # codalab-wm-fake-k8s
//!
//! A fake Kubernetes API server, in process, standing in for a real cluster's API server
//! (kube-apiserver with its kubelets) in the Kubernetes backend's transport tests
//! (`codalab-wm-k8s`) and in the bench (`bench-harness k8s-fake`). Not published; production
//! crates never depend on it.
//!
//! It speaks real **plain HTTP** (no TLS) on `127.0.0.1:<free port>` and real Kubernetes JSON
//! (k8s-openapi types, `Status` error objects), so the real `kube::Client` talks to it through
//! hyper, its URL and query encoding and its error decoding. It checks no credentials: an
//! `Authorization` header is accepted and ignored, and so is its absence, so any HTTP client
//! (`curl`, the Python `kubernetes` client with `host = url`) can call it. It serves the
//! subset the backend uses:
//!
//! - pods: list, in a namespace or across all (label and field selectors, each optional),
//!   create (fills uid, resourceVersion, creationTimestamp, phase `Pending`; 409
//!   AlreadyExists; 422 Invalid for a subset of pod validation, GPU limit rules included),
//!   get, delete (404, uid and resourceVersion preconditions → 409, graceful deletion of
//!   scheduled running pods sets `deletionTimestamp`);
//! - secrets: create, get, replace, delete;
//! - watches of pods and of every object below (`?watch=1`, bookmarks, `410 Gone` after
//!   [`FakeApiServer::compact`]; `watch.rs`);
//! - CustomResourceDefinitions, and the custom resources they define as soon as they are
//!   created, with the status subresource, `metadata.generation`, `resourceVersion` conflicts,
//!   merge and JSON patches, finalizers and `deletionTimestamp`; `coordination.k8s.io/v1`
//!   Leases; Events (`events.k8s.io/v1`, and core `v1` which also shows the former, as
//!   `kubectl describe` reads them) (`objects.rs`, `events.rs`);
//! - what `kubectl` reads: discovery and server-side `Table`s (`discovery.rs`; no OpenAPI
//!   document, so kubectl needs `--validate=false`);
//! - `GET /version`;
//! - hooks playing other clients and the kubelet ([`FakeApiServer::insert_pod`],
//!   [`FakeApiServer::add_pod`], [`FakeApiServer::set_phase`], [`FakeApiServer::remove_pod`],
//!   or an automatic kubelet that runs pending pods one request later), injecting faults (any
//!   status, throttling with `Retry-After`, a garbage body, a slow answer, no answer at all)
//!   and reading back what was stored and every request served ([`FakeApiServer::requests`],
//!   [`FakeApiServer::request_count`]).
//!
//! The hooks neither go through HTTP nor count as requests.
//!
//! How faithful: the JSON is the real API's (k8s-openapi types, real `Status` reasons and
//! codes), and the checks it makes are the API server's own rules for what the backend sends
//! (names, labels, selectors, a subset of pod validation). It has no authentication or RBAC,
//! no scheduler (pods run when the test or the automatic kubelet says so), no admission
//! webhooks or quotas, no schema validation or defaulting of custom resources (the CRD's
//! schema is checked offline by `codalab-wm-operator`'s tests), no garbage collection by
//! owner references, and no other resources than those above; the backend's
//! manifests are checked against the official schemas separately (`codalab-wm-k8s`'s
//! `tests/schema.rs`).
//!
//! ```no_run
//! # async fn example() {
//! use codalab_wm_fake_k8s::FakeApiServer;
//! let fake = FakeApiServer::start().await;
//! fake.add_pod("default", "cl-worker-1", [("app", "cl-worker")], "Running");
//! let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
//! # let _ = client;
//! # }
//! ```
#![warn(missing_docs)]

mod discovery;
mod events;
mod handlers;
mod objects;
mod patch;
mod rules;
mod selectors;
mod watch;
mod world;

/// The HTTP method type [`FakeApiServer::inject`] filters on (re-exported from `http`).
pub use axum::http::Method;

use k8s_openapi::api::core::v1::{Pod, Secret};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use world::{InjectedFault, World, apply_phase, now};

/// The container of the pods [`FakeApiServer::add_pod`] stores: the backend's worker container
/// (`codalab_wm_k8s::manifest::CONTAINER_NAME`, which a test of that crate compares with this).
pub const WORKER_CONTAINER: &str = "cl-worker";

/// A fault the server answers with instead of serving a request.
#[derive(Debug, Clone)]
pub enum Fault {
    /// A `Status` error with this code (reason and message as the API server words them).
    Status(u16),
    /// 429 with `Retry-After` and `details.retryAfterSeconds`.
    Throttle {
        /// The `Retry-After` header and `details.retryAfterSeconds`.
        retry_after_seconds: u32,
    },
    /// 200 with a body that is not JSON.
    Garbage,
}

/// The fake API server; cheap to clone, every clone drives the same world.
#[derive(Debug, Clone)]
pub struct FakeApiServer {
    url: String,
    world: Arc<Mutex<World>>,
}

impl FakeApiServer {
    /// Starts a server on a free loopback port, served by a task of the current tokio runtime
    /// (which must keep running for the server to answer).
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start() -> Self {
        let world = Arc::new(Mutex::new(World::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("local addr"));
        let app = axum::Router::new()
            .fallback(handlers::handle)
            .with_state(world.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.expect("fake api server") });
        Self { url, world }
    }

    /// The base URL, `http://127.0.0.1:<port>` (plain HTTP; use it as `cluster_host`).
    pub fn url(&self) -> &str {
        &self.url
    }

    fn world(&self) -> MutexGuard<'_, World> {
        self.world
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every request served so far, oldest first, as `METHOD /path?query` with the query as
    /// sent (percent-encoded), e.g.
    /// `GET /api/v1/namespaces/default/pods?labelSelector=app%3Dcl-worker`. Requests answered
    /// with an injected fault are included; hook calls are not.
    pub fn requests(&self) -> Vec<String> {
        self.world().requests.clone()
    }

    /// How many requests were served so far (the length of [`requests`](Self::requests),
    /// without copying them): read it before and after a call to count the call's requests.
    pub fn request_count(&self) -> usize {
        self.world().requests.len()
    }

    /// The pods of `namespace`, by name.
    pub fn pods(&self, namespace: &str) -> BTreeMap<String, Pod> {
        let world = self.world();
        world
            .pods
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|((_, n), p)| (n.clone(), p.clone()))
            .collect()
    }

    /// Secret `name` of `namespace`.
    pub fn secret(&self, namespace: &str, name: &str) -> Option<Secret> {
        self.world()
            .secrets
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Stores `pod` as is (a pod some other client created), filling uid, resourceVersion and
    /// namespace; replaces a pod of the same name. No validation, no request counted.
    ///
    /// # Panics
    ///
    /// When `pod` has no `metadata.name`.
    pub fn insert_pod(&self, namespace: &str, pod: Pod) {
        self.world().insert_pod(namespace, pod);
    }

    /// Stores a pod `name` with `labels`, as another client would have created it and the
    /// kubelet then reported `phase` (`Pending`, `Running`, `Succeeded`, `Failed`): one
    /// container [`WORKER_CONTAINER`], a creationTimestamp of now, and for a phase past `Pending` a
    /// node and the container's state. Replaces a pod of the same name; no request counted.
    /// Cheap (one lock, no HTTP), so thousands of pods are quick to set up.
    ///
    /// The backend's own pods carry `codalab_wm_k8s::WorkerTemplate::labels`
    /// (`backend.template().labels()`).
    pub fn add_pod<K, V>(
        &self,
        namespace: &str,
        name: &str,
        labels: impl IntoIterator<Item = (K, V)>,
        phase: &str,
    ) where
        K: Into<String>,
        V: Into<String>,
    {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.to_owned());
        pod.metadata.labels = Some(
            labels
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        );
        pod.metadata.creation_timestamp = Some(now());
        let spec = pod.spec.get_or_insert_with(Default::default);
        spec.containers = vec![k8s_openapi::api::core::v1::Container {
            name: WORKER_CONTAINER.to_owned(),
            image: Some("codalab/worker:fake".to_owned()),
            ..Default::default()
        }];
        spec.restart_policy = Some("Never".to_owned());
        let mut world = self.world();
        let rv = world.next_rv();
        apply_phase(&mut pod, phase, rv);
        world.insert_pod(namespace, pod);
    }

    /// Plays the kubelet: pod `name` reports `phase`.
    pub fn set_phase(&self, namespace: &str, name: &str, phase: &str) {
        let mut world = self.world();
        let rv = world.next_rv();
        let pod = world
            .pods
            .get_mut(&(namespace.to_owned(), name.to_owned()))
            .expect("no such pod");
        apply_phase(pod, phase, rv);
        let pod = pod.clone();
        world.record_pod("MODIFIED", &pod);
    }

    /// Plays the kubelet confirming a graceful deletion: the pod is gone.
    pub fn remove_pod(&self, namespace: &str, name: &str) {
        self.world()
            .remove_pod(&(namespace.to_owned(), name.to_owned()));
    }

    /// Turns the automatic kubelet on or off: before each request, terminating pods vanish and
    /// pending pods start running (unless [`hold`](Self::hold) is on).
    pub fn auto_kubelet(&self, on: bool) {
        self.world().auto_kubelet = on;
    }

    /// Makes the automatic kubelet leave pending pods pending (no node has room).
    pub fn hold(&self, on: bool) {
        self.world().hold = on;
    }

    /// Answers the next `times` requests (of `method`, or any) with `fault`.
    pub fn inject(&self, fault: Fault, method: Option<Method>, times: usize) {
        self.world().faults.push_back(InjectedFault {
            fault,
            method,
            remaining: times,
        });
    }

    /// Holds the next `times` requests of `method` whose body contains `needle` unanswered,
    /// as a half-open connection or an overloaded API server does: the request is logged and
    /// then nothing comes back until the client gives up. E.g. a Lease renew by replica `a`:
    /// `hang(Method::PUT, r#""holderIdentity":"a""#, usize::MAX)`.
    pub fn hang(&self, method: Method, needle: &str, times: usize) {
        self.world().hangs.push(world::Hang {
            method,
            needle: needle.to_owned(),
            remaining: times,
        });
    }

    /// Object `name` of `resource` (`group/plural`: `codalab.org/codalabworkerpools`,
    /// `coordination.k8s.io/leases`, `events.k8s.io/events`) in `namespace` (empty for
    /// cluster-scoped objects), as stored.
    pub fn object(&self, resource: &str, namespace: &str, name: &str) -> Option<serde_json::Value> {
        self.world()
            .objects
            .get(&(resource.to_owned(), namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Every stored object of `resource` (`group/plural`), in any namespace.
    pub fn objects(&self, resource: &str) -> Vec<serde_json::Value> {
        self.world()
            .objects
            .iter()
            .filter(|((r, _, _), _)| r == resource)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// Forgets the change log (as etcd compaction does): a watch from a resourceVersion
    /// before now gets `410 Gone` and the client must list again.
    pub fn compact(&self) {
        self.world().compact();
    }

    /// Delays every answer by `delay` (a slow or hanging API server).
    pub fn set_delay(&self, delay: Option<Duration>) {
        self.world().delay = delay;
    }
}
