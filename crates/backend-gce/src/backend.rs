//! [`GceBackend`]: each worker is one Compute Engine instance `cl-worker-<unique>`, labelled
//! with the manager id, pool and origin; one filtered `instances.aggregatedList` per tick
//! (every page) finds them in every zone, so a restarted manager adopts them. An instance
//! labelled with another deployment's origin ([`codalab_wm_backend::backend::origin`]) is not
//! listed: neither counted, stopped, reaped nor deleted by `down`.
//!
//! - States: PROVISIONING/STAGING/PENDING → pending, RUNNING → active, anything else
//!   (STOPPING, SUSPENDED, TERMINATED …) → ended; a Spot VM that ended by preemption →
//!   `Preempted` (one `globalOperations.aggregatedList` of `compute.instances.preempted`,
//!   only in a tick that sees a Spot VM end that this manager did not delete).
//! - Reaping: an own instance STOPPED or TERMINATED (preempted under the old STOP action,
//!   stopped by hand, or powered off by its worker) is deleted, logged and counted, by the
//!   listing after the one that reported it ended.
//! - Launch: the zones in order; an insert whose operation fails with
//!   `ZONE_RESOURCE_POOL_EXHAUSTED` moves to the next zone. A stockout in every zone is a
//!   launch failure, not a temporary error, so the pool backs off instead of retrying every
//!   zone at every tick. The tick waits for an insert at most `insert_wait`: an insert still
//!   running then counts as launched (if it fails later, the instance never appears in a
//!   listing, and the next tick launches again if the demand is still there).
//! - Stop deletes the instance; `down`'s clean-up deletes what is left and waits for every
//!   delete operation.

use crate::auth::TokenSource;
use crate::client::{ComputeClient, DeleteOutcome};
use crate::config::{DEFAULT_METADATA_URL, GceConfig};
use crate::error::BACKEND;
use crate::models::{Instance, Operation};
use crate::spec;
use codalab_wm_backend::backend;
use codalab_wm_backend::bundle::WorkerShape;
use codalab_wm_backend::secret::Credentials;
use codalab_wm_backend::{
    CleanupItem, Error, JobState, LaunchRequest, Result, WorkerBackend, WorkerJob,
};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// The error codes of an insert that a next zone may not have.
pub const EXHAUSTED: &[&str] = &[
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
];

/// What the backend remembers between ticks (all of it can be lost: a restart re-learns it).
#[derive(Debug, Default)]
struct Memory {
    /// Instance → zone, from listings and launches.
    zones: HashMap<String, String>,
    /// Instances this process is deleting.
    deleting: HashSet<String>,
    /// Ended Spot VMs already classified: preempted or not.
    preempted: HashMap<String, bool>,
    /// Delete operations not yet seen done.
    operations: Vec<Operation>,
    /// Instances deleted by [`WorkerBackend::stop_worker_job`].
    stopped: HashSet<String>,
    /// STOPPED/TERMINATED instances the last listing reported: this one reaps them (so the
    /// manager sees each end once, and a single listing, `down --dry-run`'s, deletes nothing).
    reported_stopped: HashSet<String>,
    /// Instances reaped since the manager last asked ([`WorkerBackend::take_reaped`]).
    reaped: Vec<String>,
}

/// Delete operations kept for `down` to wait on; older ones are forgotten (their instances
/// are long gone) so that a manager running for months does not grow.
const MAX_REMEMBERED_OPERATIONS: usize = 1_000;

impl Memory {
    /// Keeps what concerns the `listed` instances (and the delete operations `down` may
    /// wait for, at most [`MAX_REMEMBERED_OPERATIONS`]).
    fn forget_all_but(&mut self, listed: &[Instance]) {
        let names: HashSet<&str> = listed.iter().map(|i| i.name.as_str()).collect();
        self.deleting.retain(|n| names.contains(n.as_str()));
        self.preempted.retain(|n, _| names.contains(n.as_str()));
        self.zones = listed
            .iter()
            .map(|i| (i.name.clone(), i.zone_name().to_owned()))
            .collect();
        let excess = self
            .operations
            .len()
            .saturating_sub(MAX_REMEMBERED_OPERATIONS);
        self.operations.drain(..excess);
        let pending: HashSet<&str> = self
            .operations
            .iter()
            .filter_map(|o| o.target_link.rsplit('/').next())
            .collect();
        self.stopped
            .retain(|n| names.contains(n.as_str()) || pending.contains(n.as_str()));
    }
}

/// Worker jobs as Compute Engine instances.
#[derive(Debug)]
pub struct GceBackend {
    config: GceConfig,
    username: String,
    /// The origin label of this deployment's instances: only those and unlabelled ones are
    /// listed, only those reaped. `None`: every origin is listed, none reaped (`down` without
    /// the workers' user).
    origin: Option<String>,
    client: ComputeClient,
    filter: String,
    memory: Mutex<Memory>,
    reaped: AtomicU64,
    /// A dry run: stopped instances are listed, not reaped.
    read_only: bool,
}

impl GceBackend {
    /// A backend from a validated `config`; workers log in as the `credentials`' user, with
    /// the password the instance reads from Secret Manager.
    pub fn new(config: GceConfig, credentials: &Credentials) -> Result<Self> {
        config.validate()?;
        let http = ComputeClient::http_client(config.request_timeout())?;
        let auth = match config.credentials_file.as_deref().filter(|f| !f.is_empty()) {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Error::InvalidConfig(format!("gce: cannot read credentials_file `{path}`: {e}"))
                })?;
                TokenSource::from_key_file(&text, config.token_url.as_deref(), http.clone())?
            }
            None => TokenSource::metadata(&metadata_url(&config), http.clone()),
        };
        let client = ComputeClient::new(http, &config.api_endpoint, &config.project, auth);
        if config.service_account == "default" {
            tracing::warn!(
                "gce: the instances run as the project's default compute service account, often \
                 an Editor of the project: give them a dedicated --service-account with only \
                 secretAccessor on the password secret (bundles cannot reach its token: the \
                 startup script closes the metadata server to containers)"
            );
        }
        Ok(Self {
            filter: spec::ownership_filter(&config),
            username: credentials.username.clone(),
            origin: Some(backend::origin("", &credentials.username)),
            config,
            client,
            memory: Mutex::default(),
            reaped: AtomicU64::new(0),
            read_only: false,
        })
    }

    /// A backend that deletes nothing while listing (a dry run): it logs the stopped
    /// instances it would reap instead.
    pub fn read_only(self, read_only: bool) -> Self {
        Self { read_only, ..self }
    }

    /// This backend for workers that use `server`: its origin label says so, and it lists
    /// no instance of another origin (another deployment's under the same labels).
    pub fn for_server(self, server: &str) -> Self {
        let origin = backend::origin(server, &self.username);
        self.with_origin(Some(origin))
    }

    /// This backend with the deployment's `origin` (`None`: list every origin, reap none).
    pub fn with_origin(self, origin: Option<String>) -> Self {
        Self { origin, ..self }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many stopped instances this backend has deleted.
    pub fn reaped(&self) -> u64 {
        self.reaped.load(Ordering::Relaxed)
    }

    /// The client, for calls the backend does not wrap.
    pub fn client(&self) -> &ComputeClient {
        &self.client
    }

    /// The insert body of `request` in `zone`.
    pub fn instance_for(
        &self,
        request: &LaunchRequest<'_>,
        zone: &str,
    ) -> crate::models::InstanceResource {
        let script =
            spec::startup_script(&self.config, &self.username, request.worker, request.unique);
        let mut instance = spec::instance_resource(&self.config, zone, request.unique, script);
        if let Some(origin) = &self.origin {
            (instance.labels).insert(spec::ORIGIN_LABEL.to_owned(), origin.clone());
        }
        instance
    }

    /// Own instances, by the labels (the filter), the name prefix and the origin label (none,
    /// or this deployment's).
    async fn own_instances(&self) -> Result<Vec<Instance>> {
        let instances = self.client.list_instances(&self.filter).await?;
        let own: Vec<Instance> = instances
            .into_iter()
            .filter(|i| i.name.starts_with(spec::NAME_PREFIX))
            .filter(|i| i.labels.get(spec::MANAGER_LABEL) == Some(&self.config.manager_id))
            .filter(|i| i.labels.get(spec::POOL_LABEL) == Some(&self.config.pool))
            .filter(|i| {
                let marked = i.labels.get(spec::ORIGIN_LABEL).map(String::as_str);
                backend::is_listed(self.origin.as_deref(), marked)
            })
            .collect();
        self.memory().forget_all_but(&own);
        Ok(own)
    }

    /// Classifies the ended Spot VMs not yet classified and not deleted by this process:
    /// one listing of the preemption operations, only when there are such.
    async fn classify_preemptions(&self, instances: &[Instance]) -> Result<()> {
        let unknown: Vec<&Instance> = {
            let memory = self.memory();
            instances
                .iter()
                .filter(|i| i.is_spot() && job_state(&i.status) == JobState::Ended)
                .filter(|i| {
                    !memory.deleting.contains(&i.name) && !memory.preempted.contains_key(&i.name)
                })
                .collect()
        };
        if unknown.is_empty() {
            return Ok(());
        }
        let targets = self.client.preempted_targets().await?;
        let mut memory = self.memory();
        for instance in unknown {
            let suffix = format!(
                "/zones/{}/instances/{}",
                instance.zone_name(),
                instance.name
            );
            let preempted = targets.iter().any(|t| t.ends_with(&suffix));
            memory.preempted.insert(instance.name.clone(), preempted);
        }
        Ok(())
    }

    /// The worker job of a listed instance.
    fn worker_job(&self, instance: &Instance) -> WorkerJob {
        let preempted = self.memory().preempted.get(&instance.name) == Some(&true);
        let state = match job_state(&instance.status) {
            JobState::Ended if preempted => JobState::Preempted,
            state => state,
        };
        WorkerJob {
            id: instance.name.clone(),
            name: instance.name.clone(),
            state,
            submitted_at: instance
                .creation_timestamp
                .as_deref()
                .and_then(parse_rfc3339),
            shape: Some(self.config.worker_shape()),
            reason: (state != JobState::Pending && state != JobState::Active).then(|| {
                format!(
                    "{} in {}{}",
                    instance.status,
                    instance.zone_name(),
                    if preempted { " (preempted)" } else { "" }
                )
            }),
            expected_start: None,
        }
    }

    /// Deletes own STOPPED/TERMINATED instances an earlier listing reported and not being
    /// deleted yet; logs and counts them. Own: of this deployment's origin, so an instance
    /// made before origins existed (listed, counted) is never deleted by the reaper; `down`
    /// still removes it.
    async fn reap(&self, instances: &[Instance]) {
        let stopped = |i: &&Instance| {
            matches!(i.status.as_str(), "STOPPED" | "TERMINATED")
                && self.origin.is_some()
                && i.labels.get(spec::ORIGIN_LABEL) == self.origin.as_ref()
        };
        let due: Vec<&Instance> = {
            let mut memory = self.memory();
            let due = instances
                .iter()
                .filter(stopped)
                .filter(|i| memory.reported_stopped.contains(&i.name))
                .filter(|i| !memory.deleting.contains(&i.name))
                .collect();
            memory.reported_stopped = instances
                .iter()
                .filter(stopped)
                .map(|i| i.name.clone())
                .collect();
            due
        };
        for instance in due {
            if self.read_only {
                tracing::info!(instance = %instance.name, status = %instance.status, "dry run: would reap a stopped worker instance");
                continue;
            }
            match self.delete(instance.zone_name(), &instance.name).await {
                Ok(_) => {
                    let total = self.reaped.fetch_add(1, Ordering::Relaxed) + 1;
                    self.memory().reaped.push(instance.name.clone());
                    tracing::info!(instance = %instance.name, zone = instance.zone_name(), status = %instance.status, reaped_total = total, "reaped a stopped worker instance");
                }
                Err(error) => {
                    tracing::warn!(instance = %instance.name, %error, "could not delete a stopped worker instance; trying again next tick")
                }
            }
        }
    }

    /// Deletes an instance, remembering its operation.
    async fn delete(&self, zone: &str, name: &str) -> Result<DeleteOutcome> {
        let outcome = self.client.delete(zone, name).await?;
        let mut memory = self.memory();
        memory.deleting.insert(name.to_owned());
        if let DeleteOutcome::Started(operation) = &outcome {
            memory.operations.push(operation.clone());
        }
        Ok(outcome)
    }

    /// Inserts in the first zone with capacity: the zone.
    async fn launch(&self, request: &LaunchRequest<'_>) -> Result<String> {
        let mut exhausted = Vec::new();
        for zone in &self.config.zones {
            let instance = self.instance_for(request, zone);
            tracing::info!(instance = %instance.name, %zone, machine_type = %self.config.machine_type, "inserting a worker instance");
            let operation = self.client.insert(zone, &instance).await?;
            let operation = self
                .client
                .wait(&operation, self.config.insert_wait())
                .await?;
            match operation.first_error() {
                None => return Ok(zone.clone()),
                Some((code, message)) if EXHAUSTED.contains(&code) => {
                    tracing::warn!(%zone, code, message, "zone has no capacity; trying the next zone");
                    exhausted.push(zone.as_str());
                }
                Some((code, message)) => {
                    return Err(Error::backend(
                        BACKEND,
                        "insert an instance",
                        format!("{code}: {message} (zone {zone})"),
                    ));
                }
            }
        }
        // No capacity, not temporary: a temporary error is retried at the next tick without
        // backoff, and a stockout usually lasts longer than a tick. It is a capacity event
        // for the pool's `fallback`.
        Err(Error::NoCapacity {
            backend: BACKEND.into(),
            message: format!(
                "ZONE_RESOURCE_POOL_EXHAUSTED in every zone ({})",
                exhausted.join(", ")
            ),
        })
    }

    /// Waits for every remembered delete operation: each instance with the outcome.
    async fn wait_for_deletes(&self) -> Vec<(String, Result<()>)> {
        let operations = std::mem::take(&mut self.memory().operations);
        let mut outcomes = Vec::new();
        for operation in operations {
            let name = operation.target_link.rsplit('/').next().unwrap_or("");
            let timeout = self.config.operation_timeout();
            let failed = |why: String| Err(Error::backend(BACKEND, "delete an instance", why));
            let outcome = match self.client.wait(&operation, timeout).await {
                Ok(done) if done.status == "DONE" => match done.first_error() {
                    Some((code, message)) => failed(format!("{code}: {message}")),
                    None => Ok(()),
                },
                Ok(_) => failed("the delete operation is not done yet".into()),
                Err(error) => Err(error),
            };
            outcomes.push((name.to_owned(), outcome));
        }
        outcomes
    }
}

fn metadata_url(config: &GceConfig) -> String {
    if let Some(url) = config.metadata_url.as_deref().filter(|u| !u.is_empty()) {
        return url.to_owned();
    }
    match std::env::var("GCE_METADATA_HOST")
        .ok()
        .filter(|h| !h.is_empty())
    {
        Some(host) => format!("http://{host}"),
        None => DEFAULT_METADATA_URL.to_owned(),
    }
}

/// The job state of an instance status. `REPAIRING`, `SUSPENDING` and `SUSPENDED` VMs come
/// back `RUNNING` with their worker: active (toward `max`), not ended.
pub fn job_state(status: &str) -> JobState {
    match status {
        "PROVISIONING" | "STAGING" | "PENDING" => JobState::Pending,
        "RUNNING" | "REPAIRING" | "SUSPENDING" | "SUSPENDED" => JobState::Active,
        _ => JobState::Ended,
    }
}

/// `2026-11-23T10:00:00.000-08:00` → a time (seconds; the offset applied).
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let (date, rest) = text.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (time, offset) = match rest.find(['Z', '+', '-']) {
        Some(i) => rest.split_at(i),
        None => (rest, "Z"),
    };
    let mut t = time.split(':');
    let (h, min) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let s = t.next()?.split('.').next()?.parse::<i64>().ok()?;
    let offset_s = match offset {
        "Z" => 0,
        o => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            let (oh, om) = o[1..].split_once(':')?;
            sign * (oh.parse::<i64>().ok()? * 3600 + om.parse::<i64>().ok()? * 60)
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    let secs = days * 86_400 + h * 3600 + min * 60 + s - offset_s;
    let secs = u64::try_from(secs).ok()?;
    Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

#[async_trait::async_trait]
impl WorkerBackend for GceBackend {
    fn name(&self) -> &str {
        BACKEND
    }

    fn take_reaped(&self) -> Vec<String> {
        std::mem::take(&mut self.memory().reaped)
    }

    fn worker_shape(&self) -> WorkerShape {
        self.config.worker_shape()
    }

    #[tracing::instrument(skip(self), fields(backend = BACKEND, project = %self.config.project, pool = %self.config.pool))]
    async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> {
        let instances = self.own_instances().await?;
        self.classify_preemptions(&instances).await?;
        let jobs = instances.iter().map(|i| self.worker_job(i)).collect();
        self.reap(&instances).await;
        Ok(jobs)
    }

    #[tracing::instrument(skip_all, fields(backend = BACKEND, project = %self.config.project, unique = request.unique))]
    async fn start_worker_job(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob> {
        if request.dry_run {
            let zone = self.config.zones.first().map_or("", String::as_str);
            let shown =
                serde_json::to_string(&self.instance_for(request, zone)).unwrap_or_default();
            tracing::info!(instance = %shown, "dry run: would insert this instance");
            let mut job = WorkerJob::new(format!("dry-run-{}", request.unique), JobState::Ended);
            job.shape = Some(self.worker_shape());
            return Ok(job);
        }
        let zone = self.launch(request).await?;
        let name = spec::instance_name(request.unique);
        self.memory().zones.insert(name.clone(), zone);
        let mut job = WorkerJob::new(name, JobState::Pending);
        job.submitted_at = Some(SystemTime::now());
        job.shape = Some(self.worker_shape());
        Ok(job)
    }

    #[tracing::instrument(skip_all, fields(backend = BACKEND, instance = %job.id))]
    async fn stop_worker_job(&self, job: &WorkerJob) -> Result<()> {
        if !job.id.starts_with(spec::NAME_PREFIX) {
            return Err(Error::backend(
                BACKEND,
                "stop a worker job",
                format!("`{}` is not a worker instance", job.id),
            ));
        }
        let known = self.memory().zones.get(&job.id).cloned();
        let zone = match known {
            Some(zone) => zone,
            None => {
                let instances = self.own_instances().await?;
                match instances.iter().find(|i| i.name == job.id) {
                    Some(instance) => instance.zone_name().to_owned(),
                    None => return Ok(()),
                }
            }
        };
        self.memory().stopped.insert(job.id.clone());
        match self.delete(&zone, &job.id).await? {
            DeleteOutcome::Started(_) => tracing::info!(%zone, "deleting worker instance"),
            DeleteOutcome::NotFound => tracing::info!(%zone, "worker instance was already gone"),
        }
        Ok(())
    }

    /// Deletes every own instance not being deleted yet (a dry run lists the ended ones:
    /// `down` lists the live ones as jobs) and waits for every delete operation.
    #[tracing::instrument(skip_all, fields(backend = BACKEND, project = %self.config.project, pool = %self.config.pool))]
    async fn cleanup(&self, dry_run: bool) -> Result<Vec<CleanupItem>> {
        let instances = self.own_instances().await?;
        if dry_run {
            let memory = self.memory();
            let ended = instances
                .iter()
                .filter(|i| !job_state(&i.status).is_capacity());
            let items = ended
                .filter(|i| !memory.deleting.contains(&i.name))
                .map(|i| CleanupItem::found("instance", &i.name));
            return Ok(items.collect());
        }
        let mut items = Vec::new();
        for instance in &instances {
            if self.memory().deleting.contains(&instance.name) {
                continue;
            }
            if let Err(error) = self.delete(instance.zone_name(), &instance.name).await {
                items.push(CleanupItem::found("instance", &instance.name).outcome(Err(error)));
            }
        }
        // Instances `down` stopped are its job rows; report the others and every failure.
        let stopped = self.memory().stopped.clone();
        for (name, outcome) in self.wait_for_deletes().await {
            if !stopped.contains(&name) || outcome.is_err() {
                items.push(CleanupItem::found("instance", name).outcome(outcome));
            }
        }
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn instance_statuses_map_to_job_states() {
        let cases = [
            ("PROVISIONING", JobState::Pending),
            ("STAGING", JobState::Pending),
            ("PENDING", JobState::Pending),
            ("RUNNING", JobState::Active),
            ("STOPPING", JobState::Ended),
            // Review 2026-11-27 §17: a VM under host repair, or suspended, comes back
            // RUNNING with its worker; it still counts toward max, not as ended (a busy
            // worker under repair is not replaced beyond max).
            ("SUSPENDING", JobState::Active),
            ("SUSPENDED", JobState::Active),
            ("REPAIRING", JobState::Active),
            ("STOPPED", JobState::Ended),
            ("TERMINATED", JobState::Ended),
        ];
        for (status, expected) in cases {
            assert_eq!(job_state(status), expected, "{status}");
        }
    }

    #[test]
    fn memory_keeps_only_what_concerns_listed_instances_and_recent_deletes() {
        let op = |name: &str| Operation {
            target_link: format!("https://compute/zones/z/instances/{name}"),
            ..Operation::default()
        };
        let listed = Instance {
            name: "cl-worker-listed".into(),
            zone: "https://compute/zones/z".into(),
            ..Instance::default()
        };
        let mut memory = Memory {
            operations: (0..1_005).map(|n| op(&format!("cl-worker-{n}"))).collect(),
            ..Memory::default()
        };
        for name in [
            "cl-worker-listed",
            "cl-worker-0",
            "cl-worker-1004",
            "cl-worker-gone",
        ] {
            memory.stopped.insert(name.into());
            memory.deleting.insert(name.into());
            memory.zones.insert(name.into(), "z".into());
        }
        memory.forget_all_but(std::slice::from_ref(&listed));
        assert_eq!(memory.operations.len(), MAX_REMEMBERED_OPERATIONS);
        let mut stopped: Vec<&str> = memory.stopped.iter().map(String::as_str).collect();
        stopped.sort_unstable();
        assert_eq!(
            stopped,
            ["cl-worker-1004", "cl-worker-listed"],
            "listed or still awaited"
        );
        assert_eq!(memory.deleting.len(), 1);
        assert_eq!(memory.zones.len(), 1);
    }

    #[test]
    fn creation_timestamps_parse_with_their_offset() {
        let at = |s| {
            parse_rfc3339(s)
                .unwrap()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
        };
        assert_eq!(at("1970-01-01T00:00:10Z"), Duration::from_secs(10));
        assert_eq!(
            at("2017-02-17T00:00:00.000-08:00"),
            Duration::from_secs(1_487_318_400)
        );
        assert_eq!(
            at("2017-02-17T09:00:00+01:00"),
            Duration::from_secs(1_487_318_400)
        );
        assert!(parse_rfc3339("yesterday").is_none());
    }
}
