//! [`AwsBatchBackend`]: the [`WorkerBackend`] for AWS Batch.
//!
//! Ownership lives on the platform: this manager's jobs are named
//! `<manager id>-<32 hex digits>` and tagged with the manager id, so a restarted manager lists
//! them again with one paged `ListJobs` call (`JOB_NAME` prefix filter, then an exact,
//! case-sensitive match on the name, which tells `codalab-worker-…` from
//! `codalab-worker-gpu-…`). With `--job-filter`, every live job in the queue whose name fully
//! matches the regex counts instead, as upstream.

use crate::client::{BatchClient, JobListing, LIVE_STATUSES};
use crate::config::AwsBatchConfig;
use crate::definition::{HostEnvironment, JobDefinitionSpec, Launch, work_root};
use crate::error::BACKEND;
use codalab_wm_backend::backend::WorkerAccount;
use codalab_wm_backend::secret::Credentials;
use codalab_wm_backend::{
    CleanupItem, Error, JobState, LaunchRequest, PendingKind, Result, WorkerBackend, WorkerJob,
    WorkerOptions, WorkerShape,
};
use regex::Regex;
use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};
use tokio::sync::Mutex;

/// The `reason` given to `TerminateJob`; a FAILED job with this status reason was stopped by
/// a manager, so it is reported as [`JobState::Ended`], not as a failure.
pub const STOP_REASON: &str = "stopped by cl-worker-manager";

/// How a FAILED job's status reason starts when its spot instance was reclaimed
/// (`Host EC2 (instance i-0abc…) terminated.`): a preemption, not a failure of the worker.
pub const RECLAIMED_REASON: &str = "Host EC2 (instance ";

/// Whether a FAILED job's status reason says its host was taken away (spot reclaim).
pub fn is_reclaimed(reason: &str) -> bool {
    reason.starts_with(RECLAIMED_REASON) && reason.contains(") terminated")
}

/// What a RUNNABLE job's status reason says of it. AWS Batch names the reason it holds a job
/// at the head of a blocked queue in `statusReason` ("Jobs stuck in a RUNNABLE status" in its
/// user guide): `MISCONFIGURATION:…` (`JOB_RESOURCE_REQUIREMENT`, `SERVICE_ROLE_PERMISSIONS`,
/// `COMPUTE_ENVIRONMENT_MAX_RESOURCE`, …: no compute environment of the queue can ever run
/// it) and `CAPACITY:…` (`INSUFFICIENT_INSTANCE_CAPACITY`: EC2 has none of its instance
/// types). Any other pending job waits its turn.
pub fn pending_kind(reason: Option<&str>) -> PendingKind {
    match reason {
        Some(r) if r.starts_with("MISCONFIGURATION:") => PendingKind::Misconfigured,
        Some(r) if r.starts_with("CAPACITY:") => PendingKind::NoCapacity,
        _ => PendingKind::Queued,
    }
}

/// Submits `cl-worker` jobs to an AWS Batch job queue.
pub struct AwsBatchBackend {
    config: AwsBatchConfig,
    client: BatchClient,
    host: HostEnvironment,
    work_root: String,
    definition: JobDefinitionSpec,
    own_name: Regex,
    filter: Option<Regex>,
    /// The ARN of the job definition revision in use, once found or registered.
    registered: Mutex<Option<String>>,
}

impl fmt::Debug for AwsBatchBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsBatchBackend")
            .field("config", &self.config)
            .field("work_root", &self.work_root)
            .field("spec_hash", &self.definition.hash_tag())
            .finish_non_exhaustive()
    }
}

impl AwsBatchBackend {
    /// The backend for `config`, with the standard AWS credential chain and the manager's
    /// environment (`CODALAB_VERSION`, `CODALAB_SHARED_FILE_SYSTEM` …).
    pub async fn new(
        config: AwsBatchConfig,
        worker: &WorkerOptions,
        credentials: &Credentials,
    ) -> Result<Self> {
        config.validate()?;
        let client = BatchClient::connect(&config).await;
        Self::with_client(
            config,
            worker,
            credentials,
            HostEnvironment::from_process(),
            client,
        )
    }

    /// The backend on an existing client, with the environment given explicitly (tests).
    pub fn with_client(
        config: AwsBatchConfig,
        worker: &WorkerOptions,
        credentials: &Credentials,
        host: HostEnvironment,
        client: BatchClient,
    ) -> Result<Self> {
        config.validate()?;
        let work_root = work_root(worker);
        validate_host(&work_root, &host)?;
        let definition =
            JobDefinitionSpec::build(&config, credentials, &host, &work_root).with_hash_tag();
        let own_name = Regex::new(&format!(
            "^{}-[0-9a-f]{{32}}$",
            regex::escape(config.manager_id())
        ))
        .map_err(|e| Error::InvalidConfig(format!("aws_batch.manager_id: {e}")))?;
        let filter = match &config.job_filter {
            Some(filter) => Some(Regex::new(&format!("^(?:{filter})$")).map_err(|e| {
                Error::InvalidConfig(format!("aws_batch.job_filter `{filter}`: {e}"))
            })?),
            None => None,
        };
        if config.codalab_credentials_secret_arn.is_none() {
            tracing::warn!(
                job_definition = %config.job_definition_name,
                "the CodaLab credentials are stored in plain text in the job definition's environment \
                 (as upstream); use --codalab-credentials-secret-arn to keep them in Secrets Manager"
            );
        }
        Ok(Self {
            config,
            client,
            host,
            work_root,
            definition,
            own_name,
            filter,
            registered: Mutex::new(None),
        })
    }

    /// The job definition this backend registers (when no ACTIVE revision carries its hash).
    pub fn job_definition(&self) -> &JobDefinitionSpec {
        &self.definition
    }

    /// The ARN of the job definition revision to submit: found by its hash tag, else
    /// registered; remembered until a submit is refused.
    async fn job_definition_arn(&self) -> Result<String> {
        let mut registered = self.registered.lock().await;
        if let Some(arn) = registered.as_ref() {
            return Ok(arn.clone());
        }
        let name = &self.definition.job_definition_name;
        let hash = self.definition.hash_tag().unwrap_or_default();
        let arn = match self.client.find_job_definition(name, hash).await? {
            Some(arn) => {
                tracing::info!(%arn, "reusing the job definition revision with the same spec");
                arn
            }
            None => {
                let arn = self
                    .client
                    .register_job_definition(&self.definition)
                    .await?;
                tracing::info!(%arn, spec_hash = hash, "registered a job definition revision");
                arn
            }
        };
        *registered = Some(arn.clone());
        Ok(arn)
    }

    async fn list(&self) -> Result<Vec<JobListing>> {
        let queue = &self.config.job_queue;
        let Some(filter) = &self.filter else {
            let prefix = format!("{}-", self.config.manager_id());
            let jobs = self.client.list_jobs_named(queue, &prefix).await?;
            return Ok(jobs
                .into_iter()
                .filter(|job| self.own_name.is_match(&job.name))
                .collect());
        };
        let mut by_id = BTreeMap::new();
        for status in LIVE_STATUSES {
            for job in self.client.list_jobs_in_status(queue, status).await? {
                if filter.is_match(&job.name) {
                    by_id.insert(job.id.clone(), job);
                }
            }
        }
        Ok(by_id.into_values().collect())
    }
}

fn validate_host(work_root: &str, host: &HostEnvironment) -> Result<()> {
    if !work_root.starts_with('/') {
        return Err(Error::InvalidConfig(format!(
            "--worker-work-dir-prefix `{work_root}` must be an absolute path for aws-batch (it is a host volume)"
        )));
    }
    if host.shared_file_system
        && !host
            .bundle_mount
            .as_deref()
            .is_some_and(|m| m.starts_with('/'))
    {
        return Err(Error::InvalidConfig(
            "CODALAB_SHARED_FILE_SYSTEM=true needs CODALAB_BUNDLE_MOUNT set to an absolute host path".into(),
        ));
    }
    Ok(())
}

/// The worker state of a job in Batch status `status`.
pub fn job_state(status: &str, reason: Option<&str>) -> JobState {
    match status {
        "SUBMITTED" | "PENDING" | "RUNNABLE" | "STARTING" => JobState::Pending,
        "RUNNING" => JobState::Active,
        "SUCCEEDED" => JobState::Ended,
        "FAILED" if reason.is_some_and(|r| r.starts_with(STOP_REASON)) => JobState::Ended,
        "FAILED" if reason.is_some_and(is_reclaimed) => JobState::Preempted,
        "FAILED" => JobState::Failed,
        // A status this code does not know yet: count it, rather than launch too many.
        _ => JobState::Pending,
    }
}

fn worker_job(listing: JobListing) -> WorkerJob {
    let state = job_state(&listing.status, listing.status_reason.as_deref());
    let submitted_at = listing
        .created_at_ms
        .and_then(|ms| u64::try_from(ms).ok())
        .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
    WorkerJob {
        submitted_at,
        reason: listing.status_reason,
        name: listing.name,
        ..WorkerJob::new(listing.id, state)
    }
}

fn is_unique(unique: &str) -> bool {
    unique.len() == 32
        && unique
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

#[async_trait::async_trait]
impl WorkerBackend for AwsBatchBackend {
    fn name(&self) -> &str {
        BACKEND
    }

    fn worker_shape(&self) -> WorkerShape {
        self.config.shape()
    }

    /// A blocked queue's reason ([`pending_kind`]).
    fn pending_kind(&self, job: &WorkerJob) -> PendingKind {
        pending_kind(job.reason.as_deref())
    }

    /// With `codalab_credentials_secret_arn` the jobs read their user name from Secrets
    /// Manager (the secret's `username`): read it too when this manager may, else say why not.
    async fn worker_account(&self) -> codalab_wm_backend::Result<WorkerAccount> {
        let Some(arn) = &self.config.codalab_credentials_secret_arn else {
            return Ok(WorkerAccount::Manager);
        };
        Ok(match self.client.secret_json_key(arn, "username").await {
            Ok(Some(user)) => WorkerAccount::Named(user),
            Ok(None) => WorkerAccount::Unknown(format!(
                "codalab_credentials_secret_arn `{arn}` holds no JSON key `username`"
            )),
            Err(error) => WorkerAccount::Unknown(format!(
                "cannot read codalab_credentials_secret_arn `{arn}` ({error})"
            )),
        })
    }

    async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> {
        let jobs: Vec<WorkerJob> = self.list().await?.into_iter().map(worker_job).collect();
        tracing::debug!(
            queue = %self.config.job_queue,
            workers = %jobs.iter().map(|j| format!("{}:{:?}", j.id, j.state)).collect::<Vec<_>>().join(" "),
            "listed worker jobs"
        );
        Ok(jobs)
    }

    async fn start_worker_job(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob> {
        if !is_unique(request.unique) {
            return Err(Error::backend(
                BACKEND,
                "submit a worker job",
                format!(
                    "worker id `{}` is not 32 lowercase hex digits",
                    request.unique
                ),
            ));
        }
        let launch = Launch::new(request.unique, request.worker, &self.work_root, &self.host);
        if request.dry_run {
            let submit = launch.submit_spec(&self.config, &self.definition.job_definition_name);
            tracing::info!(
                job_definition = %self.definition.redacted_json(),
                submit_job = %serde_json::to_value(&submit).unwrap_or_default(),
                "dry run: would register this job definition (unless an ACTIVE revision has its hash) and submit this job"
            );
            return Ok(WorkerJob::new(
                format!("dry-run-{}", request.unique),
                JobState::Ended,
            ));
        }
        let arn = self.job_definition_arn().await?;
        let submit = launch.submit_spec(&self.config, &arn);
        let id = match self.client.submit_job(&submit).await {
            Ok(id) => id,
            Err(err) => {
                if !err.is_temporary() {
                    // The revision may have been deregistered: look it up again next time.
                    *self.registered.lock().await = None;
                }
                return Err(err);
            }
        };
        tracing::info!(job_id = %id, job_name = %submit.job_name, queue = %submit.job_queue, "submitted a worker job");
        Ok(WorkerJob {
            name: submit.job_name,
            submitted_at: Some(SystemTime::now()),
            shape: Some(self.config.shape()),
            ..WorkerJob::new(id, JobState::Pending)
        })
    }

    async fn stop_worker_job(&self, job: &WorkerJob) -> Result<()> {
        if job.id.starts_with("dry-run-") {
            return Ok(());
        }
        self.client.terminate_job(&job.id, STOP_REASON).await?;
        tracing::info!(job_id = %job.id, "terminated a worker job");
        Ok(())
    }

    /// Deregisters every ACTIVE job definition revision this manager registered (tagged with
    /// its manager id and a spec hash). Jobs need no clean-up: Batch forgets finished jobs.
    async fn cleanup(&self, dry_run: bool) -> Result<Vec<CleanupItem>> {
        let arns = self
            .client
            .owned_job_definitions(self.config.manager_id())
            .await?;
        let mut items = Vec::with_capacity(arns.len());
        for arn in arns {
            let item = CleanupItem::found("job definition", &arn);
            if dry_run {
                items.push(item);
                continue;
            }
            let result = self.client.deregister_job_definition(&arn).await;
            tracing::info!(%arn, ok = result.is_ok(), "deregistered a job definition revision");
            items.push(item.outcome(result));
        }
        *self.registered.lock().await = None;
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reasons AWS Batch's user guide gives for a RUNNABLE job at the head of a blocked
    /// queue, and reasons it is not.
    #[test]
    fn a_blocked_queues_reason_says_whether_the_job_can_ever_start() {
        let cases = [
            (
                "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT - The job resource requirement (vCPU/memory/GPU) is higher than that can be met by the CE(s) attached to the job queue.",
                PendingKind::Misconfigured,
            ),
            (
                "MISCONFIGURATION:SERVICE_ROLE_PERMISSIONS - Batch service role has a permission issue.",
                PendingKind::Misconfigured,
            ),
            (
                "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Service cannot fulfill the capacity requested for instance type [p3.2xlarge]",
                PendingKind::NoCapacity,
            ),
            ("", PendingKind::Queued),
            ("Waiting for capacity", PendingKind::Queued),
        ];
        for (reason, kind) in cases {
            assert_eq!(pending_kind(Some(reason)), kind, "{reason}");
        }
        assert_eq!(pending_kind(None), PendingKind::Queued);
    }

    #[test]
    fn maps_every_batch_status() {
        let cases = [
            ("SUBMITTED", None, JobState::Pending),
            ("PENDING", None, JobState::Pending),
            ("RUNNABLE", None, JobState::Pending),
            ("STARTING", None, JobState::Pending),
            ("RUNNING", None, JobState::Active),
            ("SUCCEEDED", None, JobState::Ended),
            (
                "FAILED",
                Some("Essential container in task exited"),
                JobState::Failed,
            ),
            ("FAILED", None, JobState::Failed),
            ("FAILED", Some(STOP_REASON), JobState::Ended),
            (
                "FAILED",
                Some("Host EC2 (instance i-0123456789abcdef0) terminated."),
                JobState::Preempted,
            ),
            ("FAILED", Some("Host EC2 lost"), JobState::Failed),
            ("SOMETHING_NEW", None, JobState::Pending),
        ];
        for (status, reason, expected) in cases {
            assert_eq!(job_state(status, reason), expected, "{status} {reason:?}");
        }
    }

    #[test]
    fn listing_becomes_a_worker_job() {
        let job = worker_job(JobListing {
            id: "j-1".into(),
            name: "codalab-worker-0123".into(),
            status: "RUNNING".into(),
            status_reason: None,
            created_at_ms: Some(1_700_000_000_123),
        });
        assert_eq!(job.id, "j-1");
        assert_eq!(job.name, "codalab-worker-0123");
        assert_eq!(job.state, JobState::Active);
        assert_eq!(
            job.submitted_at,
            Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123))
        );
    }

    #[test]
    fn worker_ids_must_be_unique_hex() {
        assert!(is_unique(&codalab_wm_backend::backend::new_unique()));
        assert!(!is_unique("0123"));
        assert!(!is_unique(&"A".repeat(32)));
    }
}
