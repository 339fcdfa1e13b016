//! The worker backend trait: what a compute platform must do for the manager.
//!
//! A backend only knows its platform. It reports facts (which of *its own* worker jobs exist,
//! in which state, since when) and starts or stops jobs when told; the policy (`codalab_wm_core::policy`)
//! decides. Ownership comes from the platform (a job name prefix, labels, tags), so a backend
//! created after a restart lists the jobs an earlier process started: there is no local state
//! to lose. Jobs another deployment started under the same names carry another
//! [`origin`] and are not listed.

mod origin;
pub use origin::{is_listed, origin};

use crate::bundle::WorkerShape;
use crate::command::WorkerOptions;
use crate::error::{Error, Result};
use std::fmt::Debug;
use std::time::SystemTime;

/// Where a worker job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Submitted and not started: waiting for resources, or being placed (Slurm PENDING; AWS
    /// Batch SUBMITTED, PENDING, RUNNABLE, STARTING; a Pending pod; a GCE instance
    /// PROVISIONING or STAGING, billed only from RUNNING; an Azure Batch task `active`, not
    /// yet on a node). The manager withdraws a job of its own in this state when its plan no
    /// longer needs it, so a backend maps here only states in which the worker has not started
    /// and the platform bills nothing for the job alone; a booting VM that is billed is
    /// [`JobState::Active`].
    Pending,
    /// Running (or finishing: Slurm COMPLETING still holds its resources).
    Active,
    /// Ended without ever running properly, or failed (Slurm FAILED/BOOT_FAIL, Batch FAILED).
    Failed,
    /// Ended because the platform took its resources away: Slurm PREEMPTED/NODE_FAIL, an AWS
    /// spot reclaim (`Host EC2 (instance …) terminated.`), an evicted pod. (Azure Batch puts a
    /// task of a preempted node back in the queue itself, so it never ends this way.) Not the
    /// worker's fault: no capacity, not a failure (it does not count
    /// toward `--exit-after-num-failed` nor back a pool off); its demand is launched again by
    /// the normal rules.
    Preempted,
    /// Ended normally, cancelled or timed out; no longer capacity.
    Ended,
}

impl JobState {
    /// Whether a job in this state counts as a worker (toward `--max-workers` and capacity).
    pub fn is_capacity(self) -> bool {
        matches!(self, JobState::Pending | JobState::Active)
    }

    /// Whether the job is over (failed, preempted or ended).
    pub fn is_finished(self) -> bool {
        !self.is_capacity()
    }
}

/// Something a backend created besides its worker jobs (a job definition, a credentials
/// Secret, a scratch directory), as [`WorkerBackend::cleanup`] found or removed it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CleanupItem {
    /// What it is: `job definition`, `secret`, `scratch dir`, `task` …
    pub kind: &'static str,
    /// Its name, ARN or path.
    pub name: String,
    /// Whether it was removed (never in a dry run).
    pub removed: bool,
    /// Why removing it failed, when it did.
    pub error: Option<String>,
}

impl CleanupItem {
    /// An item found (and, unless `dry_run`, about to be removed).
    pub fn found(kind: &'static str, name: impl Into<String>) -> Self {
        Self {
            kind,
            name: name.into(),
            removed: false,
            error: None,
        }
    }

    /// This item with the outcome of removing it.
    pub fn outcome(self, result: Result<()>) -> Self {
        match result {
            Ok(()) => Self {
                removed: true,
                ..self
            },
            Err(error) => Self {
                error: Some(error.to_string()),
                ..self
            },
        }
    }
}

/// One worker job on the platform, as the backend sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerJob {
    /// The platform's id for the job (Slurm job id, Batch job id, task id, pod name).
    pub id: String,
    /// The platform's name for the job, when it has one besides the id.
    pub name: String,
    /// Current state.
    pub state: JobState,
    /// When the job was submitted, when the platform says.
    pub submitted_at: Option<SystemTime>,
    /// The resources the job asked for, when known.
    pub shape: Option<WorkerShape>,
    /// The platform's reason for the state (`Resources`, `NonZeroExitCode`, `Evicted` …).
    pub reason: Option<String>,
    /// When the platform itself expects a pending job to start, when it says (Slurm's
    /// `StartTime`, what `squeue --start` prints). A bound from the time limits of the jobs
    /// ahead of it: the job may start sooner, when they end early.
    pub expected_start: Option<SystemTime>,
}

impl WorkerJob {
    /// A job with just an id and a state.
    pub fn new(id: impl Into<String>, state: JobState) -> Self {
        let id = id.into();
        Self {
            name: id.clone(),
            id,
            state,
            submitted_at: None,
            shape: None,
            reason: None,
            expected_start: None,
        }
    }
}

/// What a platform says of one of its pending jobs ([`WorkerBackend::pending_kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PendingKind {
    /// Queued for capacity, or the platform says nothing: it starts when there is room.
    #[default]
    Queued,
    /// Held by the platform by itself, not for capacity (Slurm's `JobHeldAdmin`,
    /// `Dependency`, `BeginTime` …): it counts toward `max` but is no starting worker,
    /// stretches no estimated wait and spills nothing.
    Held,
    /// The platform says it will never start as submitted, whatever the capacity: the pool is
    /// misconfigured (an AWS Batch `MISCONFIGURATION:` status reason, a pod whose image cannot
    /// be pulled). The manager withdraws it and counts a misconfiguration failure.
    Misconfigured,
    /// The platform says it has no capacity for it and will not make some (an AWS Batch
    /// `CAPACITY:` status reason, cluster-autoscaler's `NotTriggerScaleUp`). The manager
    /// withdraws it and counts a capacity failure, as a job pending past `pending_timeout`.
    NoCapacity,
}

impl PendingKind {
    /// Whether the platform says the job will not start as it is (misconfigured, or no
    /// capacity to be had).
    pub fn is_blocked(self) -> bool {
        matches!(self, PendingKind::Misconfigured | PendingKind::NoCapacity)
    }
}

/// The CodaLab account a backend's workers log in as ([`WorkerBackend::worker_account`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerAccount {
    /// The manager's own credentials.
    Manager,
    /// Another source of credentials (a Secret given by name …) holding this user name.
    Named(String),
    /// Another source of credentials the backend cannot read: why.
    Unknown(String),
}

/// The root account: its worker list holds every worker, whatever account it logs in as.
pub const ROOT_USERNAME: &str = "codalab";

/// Refuses workers that log in as another account than `manager` (the manager would never
/// see their check-ins), unless the manager is [`ROOT_USERNAME`]; warns when the backend
/// cannot tell. Called when the manager starts (not by `down`, which needs no account).
pub async fn check_worker_account(backend: &dyn WorkerBackend, manager: &str) -> Result<()> {
    match backend.worker_account().await? {
        WorkerAccount::Named(user) => match account_mismatch(&user, manager) {
            Some(why) => Err(Error::InvalidConfig(format!("{}: {why}", backend.name()))),
            None => Ok(()),
        },
        WorkerAccount::Unknown(why) if manager != ROOT_USERNAME => {
            tracing::warn!(
                backend = backend.name(),
                "cannot check that the workers log in as `{manager}`: {why}; if they do not, \
                 the manager never sees their check-ins and backs the pool off"
            );
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Why workers that log in as `workers` cannot be seen by a manager logged in as `manager`,
/// if they cannot (the root account sees every worker). Said at start and by `config check`.
pub fn account_mismatch(workers: &str, manager: &str) -> Option<String> {
    if workers == manager || manager == ROOT_USERNAME {
        return None;
    }
    let root = match workers == ROOT_USERNAME {
        true => String::new(),
        false => format!(" (or as `{ROOT_USERNAME}`, which sees every worker)"),
    };
    Some(format!(
        "the workers log in as CodaLab user `{workers}` but the manager as `{manager}`, whose \
         worker list never shows theirs: give the workers the manager's account, or run the \
         manager as `{workers}`{root}"
    ))
}

/// What the manager asks a backend to start.
#[derive(Debug, Clone, Copy)]
pub struct LaunchRequest<'a> {
    /// 32 lowercase hex characters unique to this launch. Backends make their worker id from
    /// it (Slurm: `<user>-<job-name>-<unique>`; others use it as is).
    pub unique: &'a str,
    /// The `cl-worker` settings; build the argv with [`WorkerOptions::build_command`].
    pub worker: &'a WorkerOptions,
    /// Only render what would be submitted (log it with secrets redacted) and submit nothing.
    /// The backend returns a job in state [`JobState::Ended`] with id `dry-run-<unique>`.
    pub dry_run: bool,
}

/// A compute platform that runs `cl-worker` jobs.
///
/// Implementations must be cheap to call once per tick: list all own jobs in as few platform
/// calls as the platform allows (one `squeue`, one paged list), and never turn a platform
/// error into "zero workers": return the error, and the manager skips the tick.
#[async_trait::async_trait]
pub trait WorkerBackend: Send + Sync + Debug + 'static {
    /// The backend's name as used on the command line (`slurm-batch`, `aws-batch`, `local` …).
    fn name(&self) -> &str;

    /// The resources each worker job gets (used by the prefilter).
    fn worker_shape(&self) -> WorkerShape;

    /// The worker jobs this manager owns, in every state the platform still reports.
    async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>>;

    /// Starts one worker job and returns it as submitted.
    async fn start_worker_job(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob>;

    /// Where the output of `job` goes, when this manager knows (the `local` backend's log
    /// file); said in the "started a worker job" line.
    fn job_output(&self, _job: &WorkerJob) -> Option<String> {
        None
    }

    /// What the platform's reason for pending `job` means ([`PendingKind`]): queued for
    /// capacity, held by the platform by itself, or blocked for good (misconfigured, or no
    /// capacity to be had). The backend says which of its reasons are which; queued by
    /// default.
    fn pending_kind(&self, _job: &WorkerJob) -> PendingKind {
        PendingKind::Queued
    }

    /// The ids of jobs the platform had stopped (a preempted VM left STOPPED, …) that this
    /// backend deleted since the last call, so the manager reports them (`worker_reaped`).
    /// Most platforms clean up themselves: none by default.
    fn take_reaped(&self) -> Vec<String> {
        Vec::new()
    }

    /// The account the workers log in as, when it is not the manager's (a credentials Secret
    /// given by name); read from the platform at start ([`check_worker_account`]).
    async fn worker_account(&self) -> Result<WorkerAccount> {
        Ok(WorkerAccount::Manager)
    }

    /// Stops a worker job (cancel, terminate, delete). The job may linger in a final state.
    async fn stop_worker_job(&self, _job: &WorkerJob) -> Result<()> {
        Err(Error::Unsupported {
            backend: self.name().to_owned(),
            operation: "stopping a worker job",
        })
    }

    /// Removes what this backend created besides worker jobs and no live worker job needs
    /// any more (job definitions it registered, a credentials Secret it created, scratch
    /// directories of finished workers), or with `dry_run` only lists what a real clean-up
    /// would remove after `down` stopped every live worker job (so a job's scratch directory
    /// is listed while the job still runs: the dry run and the real `down` agree). Ownership comes
    /// from the same names, labels and tags as [`WorkerBackend::get_worker_jobs`], so no
    /// running manager is needed (`cl-worker-manager down`). A removal that fails is
    /// reported in its item, not returned; an error means nothing could be listed.
    async fn cleanup(&self, _dry_run: bool) -> Result<Vec<CleanupItem>> {
        Err(Error::Unsupported {
            backend: self.name().to_owned(),
            operation: "cleaning up created resources",
        })
    }
}

/// A fresh 32-hex-digit unique id for a launch.
pub fn new_unique() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pending_and_active_are_capacity() {
        assert!(JobState::Pending.is_capacity());
        assert!(JobState::Active.is_capacity());
        assert!(!JobState::Failed.is_capacity());
        assert!(!JobState::Ended.is_capacity());
        assert!(!JobState::Preempted.is_capacity());
        assert!(JobState::Preempted.is_finished());
    }

    #[test]
    fn unique_ids_are_hex() {
        let id = new_unique();
        assert_eq!(id.len(), 32);
        assert!(
            id.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(id, new_unique());
    }

    /// A backend whose workers log in as `account` (nothing else is called).
    #[derive(Debug)]
    struct Account(WorkerAccount);

    #[async_trait::async_trait]
    impl WorkerBackend for Account {
        fn name(&self) -> &str {
            "test"
        }
        fn worker_shape(&self) -> WorkerShape {
            WorkerShape::default()
        }
        async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> {
            Ok(Vec::new())
        }
        async fn start_worker_job(&self, _: &LaunchRequest<'_>) -> Result<WorkerJob> {
            unreachable!("the check starts nothing")
        }
        async fn worker_account(&self) -> Result<WorkerAccount> {
            Ok(self.0.clone())
        }
    }

    #[tokio::test]
    async fn only_a_named_other_account_is_refused_and_root_sees_every_worker() {
        let check = |account, manager: &'static str| async move {
            check_worker_account(&Account(account), manager).await
        };
        let bob = || WorkerAccount::Named("bob".into());
        let err = check(bob(), "alice").await.unwrap_err();
        assert!(err.is_fatal(), "{err}");
        assert!(
            err.to_string().contains("`bob` but the manager as `alice`"),
            "{err}"
        );
        check(bob(), "bob").await.unwrap();
        check(bob(), ROOT_USERNAME).await.unwrap();
        check(WorkerAccount::Manager, "alice").await.unwrap();
        let unknown = WorkerAccount::Unknown("no right to read it".into());
        check(unknown, "alice")
            .await
            .expect("a warning, not a refusal");
    }
}
