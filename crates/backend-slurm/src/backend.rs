//! [`SlurmBackend`]: the [`WorkerBackend`] implementation on `sbatch`, `squeue` and `scancel`.

use crate::config::{Settings, SlurmConfig, Target};
use crate::error::{BACKEND, command_failed, slurm_message};
use crate::script::{JobScript, redact};
use crate::ssh::SshTransport;
use crate::transport::{CallCounter, Invocation, Output, Transport};
use crate::{scratch, squeue};
use codalab_wm_backend::backend::WorkerAccount;
use codalab_wm_backend::secret::Credentials;
use codalab_wm_backend::{
    CleanupItem, Error, JobState, LaunchRequest, PendingKind, Result, WorkerBackend, WorkerJob,
    WorkerShape, async_trait,
};
use std::sync::Arc;
use std::time::SystemTime;

/// Saves the script (read from stdin) in its per-worker directory and submits it, in one
/// command: `sh -c SUBMIT sh DIR FILE [SBATCH-OPTION…]`. The options (the origin's
/// `--comment`) go on the command line, not into the script, whose `#SBATCH` lines are
/// upstream's.
const SUBMIT: &str =
    r#"mkdir -p -- "$1" && cat > "$2" && f=$2 && shift 2 && exec sbatch --parsable "$@" "$f""#;

/// The account [`WorkerBackend::worker_account`] reports, reading the password file with `read`.
fn password_file_account(
    settings: &Settings,
    read: impl Fn(&std::path::Path) -> std::io::Result<String>,
) -> WorkerAccount {
    let Some(file) = &settings.config.password_file else {
        return WorkerAccount::Manager;
    };
    let shown = file.display();
    if let Target::Ssh(_) = settings.target {
        return WorkerAccount::Unknown(format!("--password-file {shown} is on the login node"));
    }
    if file.is_relative() {
        return WorkerAccount::Unknown(format!(
            "--password-file {shown} is relative: each job reads it in its own directory"
        ));
    }
    match read(file) {
        Ok(text) => match text.lines().next().map(str::trim) {
            Some(user) if !user.is_empty() => WorkerAccount::Named(user.to_owned()),
            _ => WorkerAccount::Unknown(format!("--password-file {shown} names no user")),
        },
        Err(e) => WorkerAccount::Unknown(format!("cannot read --password-file {shown}: {e}")),
    }
}

/// Submits CodaLab workers as Slurm batch jobs, locally or on a login node over SSH.
#[derive(Debug)]
pub struct SlurmBackend {
    settings: Settings,
    transport: Transport,
    credentials: Option<Credentials>,
    /// The deployment's origin: the `--comment` of the jobs it submits; jobs of another
    /// origin are not listed. `None`: no comment, every origin listed.
    origin: Option<String>,
    calls: CallCounter,
}

impl SlurmBackend {
    /// A backend for `config`. Without a password file, `credentials` are handed to the
    /// workers through sbatch's environment (`CODALAB_USERNAME`/`CODALAB_PASSWORD`).
    pub fn new(config: &SlurmConfig, credentials: Option<Credentials>) -> Result<Self> {
        let settings = config.validate()?;
        let transport = match &settings.target {
            Target::Local => Transport::Local,
            Target::Ssh(target) => Transport::Ssh(Arc::new(SshTransport::new(target.clone()))),
        };
        Ok(Self {
            settings,
            transport,
            credentials,
            origin: None,
            calls: CallCounter::default(),
        })
    }

    /// This backend for the deployment of `origin` ([`codalab_wm_backend::backend::origin`]):
    /// it marks its jobs with it (`sbatch --comment`) and lists no job of another origin.
    pub fn with_origin(self, origin: Option<String>) -> Self {
        Self { origin, ..self }
    }

    /// The validated settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The SSH transport, when the commands run on a login node.
    pub fn ssh(&self) -> Option<&Arc<SshTransport>> {
        match &self.transport {
            Transport::Ssh(ssh) => Some(ssh),
            Transport::Local => None,
        }
    }

    /// How many Slurm commands (subprocesses or SSH commands) this backend ran so far:
    /// `get_worker_jobs` runs exactly one, whatever the number of jobs.
    pub fn calls(&self) -> u64 {
        self.calls.get()
    }

    async fn run(&self, operation: &'static str, invocation: Invocation) -> Result<Output> {
        self.calls.add();
        let program = invocation.program().to_owned();
        let timeout = std::time::Duration::from_secs(self.settings.config.command_timeout_seconds);
        let output = self.transport.run(operation, invocation, timeout).await?;
        if !output.success() {
            return Err(command_failed(
                operation,
                &program,
                slurm_message(&output.stderr, &output.stdout, output.status),
            ));
        }
        if !output.stderr.trim().is_empty() {
            tracing::warn!(program, stderr = %output.stderr.trim(), "slurm command printed warnings");
        }
        Ok(output)
    }

    /// The batch script a launch would submit, with the secrets redacted (what `--dry-run`
    /// logs): for a caller that wants to print it.
    pub fn render_script(&self, request: &LaunchRequest<'_>) -> String {
        let script = JobScript::new(&self.settings, request.unique, request.worker);
        redact(&script.text, &self.secrets())
    }

    fn secrets(&self) -> Vec<&str> {
        self.credentials
            .iter()
            .map(|c| c.password.expose())
            .collect()
    }

    /// The jobs with this manager's name prefix, in `partition` or in any, of the origin
    /// `own` (and of none) or, `None`, of every origin.
    async fn list(&self, partition: Option<&str>, own: Option<&str>) -> Result<Vec<WorkerJob>> {
        let mut invocation = Invocation::new(squeue::command(&self.settings.user, partition));
        invocation.env.push(("TZ".into(), "UTC".into()));
        let output = self.run("list worker jobs", invocation).await?;
        let shape = Some(self.worker_shape());
        let prefix = self.settings.job_name_prefix();
        let jobs = squeue::parse_own(&output.stdout, &prefix, own)?;
        Ok(jobs
            .into_iter()
            .map(|job| WorkerJob { shape, ..job })
            .collect())
    }

    fn submit_invocation(&self, script: &JobScript) -> Invocation {
        let mut argv = ["sh", "-c", SUBMIT, "sh", &script.dir, &script.path]
            .map(str::to_owned)
            .to_vec();
        argv.extend(self.origin.as_deref().map(squeue::comment_option));
        let mut invocation = Invocation {
            stdin: Some(script.text.clone().into_bytes()),
            ..Invocation::new(argv)
        };
        if self.settings.config.password_file.is_none()
            && let Some(credentials) = &self.credentials
        {
            invocation.secret_env = vec![
                (
                    "CODALAB_USERNAME".into(),
                    codalab_wm_backend::secret::Secret::new(credentials.username.clone()),
                ),
                ("CODALAB_PASSWORD".into(), credentials.password.clone()),
            ];
        }
        invocation
    }
}

/// The job id in `sbatch --parsable` output (`ID` or `ID;CLUSTER`).
pub fn parse_submitted(stdout: &str) -> Result<String> {
    let id = stdout.trim().split(';').next().unwrap_or_default();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::InvalidReply {
            from: "sbatch".into(),
            what: "submit a worker job".into(),
            message: format!("no job id in {:?}", stdout.trim()),
        });
    }
    Ok(id.to_owned())
}

/// `scancel` of a job that already ended is not an error: the job is stopped.
fn already_gone(message: &str) -> bool {
    message.contains("already completing or completed")
        || message.contains("Invalid job id specified")
}

#[async_trait]
impl WorkerBackend for SlurmBackend {
    fn name(&self) -> &str {
        BACKEND
    }

    fn worker_shape(&self) -> WorkerShape {
        self.settings.worker_shape()
    }

    /// Held: a hold, a dependency, a begin time or unavailable requested nodes
    /// ([`squeue::is_hold`]): Slurm keeps that job back, not the partition's queue. Any other
    /// reason is the queue's (`Resources`, `Priority`, a limit of the account or QOS, which
    /// lifts as its jobs end).
    fn pending_kind(&self, job: &WorkerJob) -> PendingKind {
        match job.reason.as_deref().is_some_and(squeue::is_hold) {
            true => PendingKind::Held,
            false => PendingKind::Queued,
        }
    }

    /// Without a password file, the manager's own account (handed to the job); with one, the
    /// user on its first line, as `cl-worker` reads it, when the manager can read the same
    /// file: an absolute path on this machine. Over SSH, or with a relative path (read in
    /// the job's own directory on a compute node), it cannot tell.
    async fn worker_account(&self) -> Result<WorkerAccount> {
        let read = |path: &std::path::Path| std::fs::read_to_string(path);
        Ok(password_file_account(&self.settings, read))
    }

    /// The jobs of this pool: the job-name prefix in the pool's partition. The partition is
    /// part of the identity: a pool of the same user and job name in another partition is
    /// another pool, whose jobs are neither counted nor stopped here (`down --partition`).
    /// So is the origin: another deployment's jobs (another server or CodaLab user) under the
    /// same name are not listed; jobs without one (upstream's, older versions') are.
    #[tracing::instrument(skip(self), fields(backend = BACKEND))]
    async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> {
        let partition = Some(self.settings.partition.as_str());
        self.list(partition, self.origin.as_deref()).await
    }

    #[tracing::instrument(skip(self, request), fields(backend = BACKEND, unique = request.unique))]
    async fn start_worker_job(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob> {
        let script = JobScript::new(&self.settings, request.unique, request.worker);
        if request.dry_run {
            let text = self.render_script(request);
            let comment = self.origin.as_deref().map(squeue::comment_option);
            let worker_id = &script.worker_id;
            tracing::info!(%worker_id, path = %script.path, sbatch_option = comment, "dry run: would submit a batch script (printed on stdout)");
            let title = format!("dry run: the batch script of {worker_id}");
            tracing::info!(target: codalab_wm_backend::BLOCK_TARGET, %title, %text);
            let job = WorkerJob::new(format!("dry-run-{}", request.unique), JobState::Ended);
            return Ok(WorkerJob {
                name: script.worker_id,
                ..job
            });
        }
        if matches!(self.transport, Transport::Local) {
            // `mkdir -p` in the submit command does this too; doing it here first gives a
            // clear error naming the directory.
            std::fs::create_dir_all(&script.dir).map_err(|e| {
                Error::backend(
                    BACKEND,
                    "submit a worker job",
                    format!("cannot create slurm work dir {}: {e}", script.dir),
                )
            })?;
        }
        let output = self
            .run("submit a worker job", self.submit_invocation(&script))
            .await?;
        let id = parse_submitted(&output.stdout)?;
        tracing::info!(job_id = %id, worker_id = %script.worker_id, "submitted worker job");
        Ok(WorkerJob {
            id,
            name: script.worker_id,
            state: JobState::Pending,
            submitted_at: Some(SystemTime::now()),
            shape: Some(self.worker_shape()),
            reason: None,
            expected_start: None,
        })
    }

    #[tracing::instrument(skip(self, job), fields(backend = BACKEND, job_id = %job.id))]
    async fn stop_worker_job(&self, job: &WorkerJob) -> Result<()> {
        let invocation = Invocation::new(vec!["scancel".into(), job.id.clone()]);
        match self.run("stop a worker job", invocation).await {
            Err(Error::Backend { message, .. }) if already_gone(&message) => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// The scratch directories (`--slurm-work-dir/<worker id>`) of this manager's workers
    /// whose job is over, listed and removed where the Slurm commands run (locally or on the
    /// login node).
    #[tracing::instrument(skip(self), fields(backend = BACKEND))]
    async fn cleanup(&self, dry_run: bool) -> Result<Vec<CleanupItem>> {
        // Every partition's and origin's jobs of this name: the directories are not per
        // partition nor origin, and a job alive in another partition (another pool) or of
        // another deployment keeps its own. A dry run lists what `down` removes once it has
        // stopped this pool's jobs: their directories too.
        let mut jobs = self.list(None, None).await?;
        if dry_run {
            let own: Vec<String> = (self.get_worker_jobs().await?.into_iter())
                .map(|j| j.id)
                .collect();
            jobs.retain(|j| !own.contains(&j.id));
        }
        let base = self.settings.config.slurm_work_dir.to_string_lossy();
        let base = base.trim_end_matches('/');
        let listing = self
            .run(
                "list scratch directories",
                Invocation::new(scratch::list_command(base)),
            )
            .await?;
        let prefix = self.settings.job_name_prefix();
        let dirs: Vec<String> = scratch::finished_worker_dirs(&listing.stdout, &prefix, &jobs)
            .into_iter()
            .map(|name| format!("{base}/{name}"))
            .collect();
        let items = dirs.iter().map(|d| CleanupItem::found("scratch dir", d));
        if dry_run || dirs.is_empty() {
            return Ok(items.collect());
        }
        let removed = self
            .run(
                "remove scratch directories",
                Invocation::new(scratch::remove_command(&dirs)),
            )
            .await
            .err()
            .map(|e| e.to_string());
        tracing::info!(
            count = dirs.len(),
            error = removed.as_deref(),
            "removed the scratch directories of finished workers"
        );
        Ok(items
            .map(|item| CleanupItem {
                removed: removed.is_none(),
                error: removed.clone(),
                ..item
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codalab_wm_backend::WorkerOptions;
    use codalab_wm_backend::secret::Secret;

    fn backend(config: SlurmConfig) -> SlurmBackend {
        let config = SlurmConfig {
            partition: Some("cpu".into()),
            user: Some("alice".into()),
            ..config
        };
        let credentials = Credentials {
            username: "alice".into(),
            password: Secret::new("hunter2"),
        };
        SlurmBackend::new(&config, Some(credentials)).unwrap()
    }

    /// The workers' account, as the manager can tell it (refused at start when another named
    /// user: `codalab_wm_backend::backend::check_worker_account`).
    #[test]
    fn the_workers_account_is_the_password_files_first_line_when_the_manager_can_read_it() {
        use std::path::{Path, PathBuf};
        let with = |file: Option<&str>, ssh: bool| {
            let config = SlurmConfig {
                password_file: file.map(PathBuf::from),
                ssh_host: ssh.then(|| "login".to_owned()),
                ..SlurmConfig::default()
            };
            backend(config).settings.clone()
        };
        let read = |path: &Path| match path.to_str() {
            Some("/etc/codalab/pw") => Ok("codalab\nsecret\n".to_owned()),
            Some("/etc/codalab/empty") => Ok(String::new()),
            _ => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
        };
        let account = |file, ssh| password_file_account(&with(file, ssh), read);
        assert_eq!(account(None, false), WorkerAccount::Manager);
        assert_eq!(
            account(Some("/etc/codalab/pw"), false),
            WorkerAccount::Named("codalab".into())
        );
        for (file, ssh, why) in [
            ("/etc/codalab/pw", true, "is on the login node"),
            ("pw", false, "is relative"),
            ("/etc/codalab/empty", false, "names no user"),
            ("/missing", false, "cannot read --password-file /missing"),
        ] {
            let WorkerAccount::Unknown(text) = account(Some(file), ssh) else {
                panic!("{file} {ssh}: not unknown");
            };
            assert!(text.contains(why), "{text}");
        }
    }

    #[test]
    fn sbatch_output() {
        assert_eq!(parse_submitted("42\n").unwrap(), "42");
        assert_eq!(parse_submitted("42;cluster\n").unwrap(), "42");
        let err = parse_submitted("Submitted batch job 42").unwrap_err();
        assert!(
            err.to_string()
                .contains("no job id in \"Submitted batch job 42\""),
            "{err}"
        );
    }

    #[test]
    fn credentials_go_to_the_environment_only_without_a_password_file() {
        let script = JobScript::new(
            backend(SlurmConfig::default()).settings(),
            "u",
            &WorkerOptions::default(),
        );
        let invocation = backend(SlurmConfig::default()).submit_invocation(&script);
        let names: Vec<_> = invocation
            .secret_env
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(names, ["CODALAB_USERNAME", "CODALAB_PASSWORD"]);
        assert!(!format!("{invocation:?}").contains("hunter2"));
        assert!(!invocation.shell_line().contains("hunter2"));
        let with_file = backend(SlurmConfig {
            password_file: Some("/pw".into()),
            ..SlurmConfig::default()
        });
        assert!(with_file.submit_invocation(&script).secret_env.is_empty());
    }

    /// The origin goes on sbatch's command line (after the script's `#SBATCH` lines, which
    /// stay upstream's), and the script is still the last word.
    #[test]
    fn the_origin_is_a_comment_on_the_command_line() {
        let worker = WorkerOptions::default();
        let plain = backend(SlurmConfig::default());
        let script = JobScript::new(plain.settings(), "u", &worker);
        let argv = plain.submit_invocation(&script).argv;
        assert_eq!(argv[4..], [script.dir.clone(), script.path.clone()]);
        let marked = plain.with_origin(Some("00000000000000aa".into()));
        let argv = marked.submit_invocation(&script).argv;
        assert_eq!(
            argv[4..],
            [
                script.dir.clone(),
                script.path.clone(),
                "--comment=codalab-wm-origin=00000000000000aa".into()
            ]
        );
        assert!(!script.text.contains("comment"), "{}", script.text);
    }

    #[tokio::test]
    async fn dry_run_submits_nothing() {
        let backend = backend(SlurmConfig::default());
        let worker = WorkerOptions::default();
        let request = LaunchRequest {
            unique: "abc",
            worker: &worker,
            dry_run: true,
        };
        let job = backend.start_worker_job(&request).await.unwrap();
        assert_eq!(
            (job.id.as_str(), job.state),
            ("dry-run-abc", JobState::Ended)
        );
        assert_eq!(job.name, "alice-codalab-slurm-worker-abc");
        assert_eq!(backend.calls(), 0);
        let script = backend.render_script(&request);
        assert!(
            script.contains("#SBATCH --job-name=alice-codalab-slurm-worker-abc\n"),
            "{script}"
        );
        assert!(!script.contains("hunter2"));
    }

    #[test]
    fn scancel_of_a_finished_job_is_fine() {
        assert!(already_gone(
            "`scancel`: scancel: error: Kill job error on job id 5: Job/step already completing or completed"
        ));
        assert!(!already_gone(
            "`scancel`: scancel: error: Unable to contact slurm controller"
        ));
    }
}
