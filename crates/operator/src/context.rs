//! What every reconcile step of the operator gets and how it fails: the handles ([`Context`]:
//! the API server, the Event recorder, the lease, the CodaLab clients, each pool's check-in
//! clocks), [`ReconcileError`], and Events on a pool. The reconcile ([`crate::reconcile`]),
//! the finalizer and the pool resources all use them, so none of those imports another for
//! them (`cargo xtask architecture` holds the operator's modules free of import cycles).

use crate::crd::CodaLabWorkerPool;
use crate::memory::{Clocks, Remembered};
use codalab_wm_core::backend::WorkerJob;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// What every reconcile shares.
pub struct Context {
    /// The API server.
    pub client: kube::Client,
    /// Events on the pools.
    pub recorder: Recorder,
    /// Whether this replica holds the lease (asked again before each pod create or delete).
    pub leader: crate::lease::Leadership,
    /// Time between two reconciles of a pool.
    pub sync: Duration,
    /// One logged-in CodaLab client per (server, credentials Secret).
    pub(crate) codalab: crate::clients::Clients,
    /// What `/metrics` serves.
    pub metrics: Arc<crate::metrics::OperatorMetrics>,
    /// Each pool's check-in clocks (`namespace/name`), this process's only.
    pub(crate) clocks: std::sync::Mutex<HashMap<String, Clocks>>,
    /// The servers pools may send credentials to (`--allowed-servers`; default: any).
    pub allowed_servers: crate::access::AllowedServers,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("sync", &self.sync)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context for `client`.
    pub fn new(
        client: kube::Client,
        recorder: Recorder,
        leader: crate::lease::Leadership,
        sync: Duration,
    ) -> Self {
        Self {
            client,
            recorder,
            leader,
            sync,
            codalab: Default::default(),
            metrics: Arc::default(),
            clocks: std::sync::Mutex::default(),
            allowed_servers: Default::default(),
        }
    }
}

/// A reconcile's error (the controller logs it and retries after the sync period).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReconcileError(pub(crate) String);

/// A [`ReconcileError`] saying what failed (`what`) and why.
pub(crate) fn err(what: &str, e: impl std::fmt::Display) -> ReconcileError {
    ReconcileError(format!("{what}: {e}"))
}

impl Context {
    /// Notes this reconcile's worker-list read and pods in `pool`'s clocks: when the run of
    /// fresh reads began (`None`: the read failed), when each running pod was first seen
    /// running, and the pods this process has seen checked in. More than three sync periods
    /// without a read end the run.
    pub(crate) fn tick_clocks(
        &self,
        pool: &CodaLabWorkerPool,
        read: bool,
        jobs: &[WorkerJob],
        now: Duration,
    ) -> (
        Option<Duration>,
        HashMap<String, Duration>,
        std::collections::BTreeSet<String>,
    ) {
        let mut all = self.clocks.lock().unwrap_or_else(|e| e.into_inner());
        let clocks = all.entry(pool_key(pool)).or_default();
        let fresh_since = clocks.read(read, now, self.sync * 3);
        let running = clocks.running(jobs, now).clone();
        (fresh_since, running, clocks.checked_in().clone())
    }

    /// Keeps `memory`'s checked-in pods in `pool`'s clocks, before the status write.
    pub(crate) fn remember_checkins(&self, pool: &CodaLabWorkerPool, memory: &Remembered) {
        let mut all = self.clocks.lock().unwrap_or_else(|e| e.into_inner());
        all.entry(pool_key(pool)).or_default().remember(memory);
    }

    /// Forgets `pool`'s clocks (the pool is deleted).
    pub(crate) fn forget_clocks(&self, pool: &CodaLabWorkerPool) {
        let mut all = self.clocks.lock().unwrap_or_else(|e| e.into_inner());
        all.remove(&pool_key(pool));
    }
}

/// A pool's key in the clocks: `namespace/name`.
fn pool_key(pool: &CodaLabWorkerPool) -> String {
    format!(
        "{}/{}",
        pool.namespace().unwrap_or_default(),
        pool.name_any()
    )
}

/// Publishes an Event on the pool; a failure is logged, never fatal.
pub(crate) async fn publish(
    ctx: &Context,
    pool: &CodaLabWorkerPool,
    type_: EventType,
    reason: &str,
    note: String,
) {
    tracing::info!(pool = %pool.name_any(), reason, %note, "event");
    ctx.metrics.event(reason);
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Reconcile".to_owned(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &pool.object_ref(&())).await {
        tracing::warn!(pool = %pool.name_any(), %error, "cannot record an event");
    }
}
