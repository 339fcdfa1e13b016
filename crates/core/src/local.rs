//! The `local` backend: workers as child processes on this machine.
//!
//! Each worker runs in its own process group, with its output in
//! `<state-dir>/<worker-id>.log` and a record `<state-dir>/<worker-id>.json` holding its pid and
//! the kernel's start time of that pid. The record is what makes restart adoption safe: a
//! manager started later lists the workers whose pid is alive *and* has the recorded start
//! time, so a recycled pid is never taken for a worker. Credentials reach the worker through
//! `CODALAB_USERNAME`/`CODALAB_PASSWORD` in its environment, as upstream passes them; of the
//! manager's own environment it gets only [`WorkerOptions::env_names`](crate::WorkerOptions::env_names).
//!
//! The manager reaps its own workers and records how each ended in its record: one that exits
//! non-zero, or is killed by a signal it did not send, is [`JobState::Failed`] (so it counts
//! toward `--exit-after-num-failed` and backs a target-mode pool off). A worker adopted from an
//! earlier manager is not this process's child: its exit status cannot be read, and its end
//! is reported as [`JobState::Ended`]. Records and logs of ended workers are pruned, keeping
//! the last [`KEEP_ENDED`]. The state dir is private and locked by one manager
//! (`state_dir`).

mod record;
mod state_dir;

use record::{
    Exit, WorkerRecord, is_alive, now_seconds, private_file, process_start_ticks, write_atomically,
};

use crate::backend::{JobState, LaunchRequest, WorkerBackend, WorkerJob};
use crate::bundle::WorkerShape;
use crate::error::{Error, Result};
use crate::secret::Credentials;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

const NAME: &str = "local";
/// Records and logs of ended workers kept for inspection; older ones are removed.
pub const KEEP_ENDED: usize = 10;

/// Settings of the local backend: the flags of `cl-worker-manager local` and the `[local]`
/// table of the config file (defaults written once, in the flags).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
pub struct LocalConfig {
    /// CPUs each worker may use; bundles asking more are filtered out
    #[arg(long, default_value_t = 1)]
    pub cpus: u32,
    /// GPUs each worker may use
    #[arg(long, default_value_t = 0)]
    pub gpus: u32,
    /// Memory per worker in MiB
    #[arg(long, default_value_t = 2048)]
    pub memory_mb: u64,
    /// Where worker records and logs are kept [default: $STATE_DIRECTORY/local under systemd, else $XDG_STATE_HOME/codalab-wm/local]
    #[arg(long, default_value_os_t = default_state_dir(), hide_default_value = true)]
    pub state_dir: PathBuf,
}

impl Default for LocalConfig {
    fn default() -> Self {
        crate::describe::defaults()
    }
}

/// The description of the local backend, for the program's list of backends.
pub static KIND: crate::describe::Kind<LocalConfig> = crate::describe::Kind::new();

#[crate::async_trait]
impl crate::describe::BackendConfig for LocalConfig {
    const NAME: &'static str = NAME;
    const TABLE: &'static str = "local";
    const ABOUT: &'static str = "Run workers as child processes on this machine";
    const LONG_ABOUT: Option<&'static str> = Some(
        "Each worker is a `cl-worker` process in its own process group. It gets part of the \
         manager's environment (PATH, HOME, user, locale, TZ, TMPDIR, DOCKER_* (the real cl-worker \
         needs DOCKER_HOST to reach its Docker engine), proxies, CA bundles and the variables \
         named by --worker-env) plus CODALAB_USERNAME/CODALAB_PASSWORD, and writes its output to \
         `<state-dir>/<worker-id>.log`. `cl-worker-manager down local` stops them.",
    );
    const IDENTITY: &'static [&'static str] = &["state_dir"];

    fn shape(&self) -> WorkerShape {
        WorkerShape::from_flags(self.cpus, self.gpus, self.memory_mb)
    }

    /// A pool's own subdirectory of the default state directory.
    fn placement_defaults(
        placement: crate::describe::Placement<'_>,
    ) -> serde_json::Map<String, serde_json::Value> {
        let dir = placement.pool.map(|pool| default_state_dir().join(pool));
        dir.map(|d| ("state_dir".to_owned(), d.display().to_string().into()))
            .into_iter()
            .collect()
    }

    async fn build(
        self,
        context: &crate::describe::BackendContext,
    ) -> Result<Arc<dyn crate::WorkerBackend>> {
        let backend = LocalBackend::new(self, context.credentials.clone())?;
        Ok(Arc::new(backend.read_only(context.read_only)))
    }
}

fn default_state_dir() -> PathBuf {
    crate::settings::default_state_dir().join("local")
}

/// Runs `cl-worker` processes on this machine.
#[derive(Debug)]
pub struct LocalBackend {
    config: LocalConfig,
    credentials: Credentials,
    username: String,
    /// This process's workers, by worker id, until reaped.
    children: Mutex<HashMap<String, std::process::Child>>,
    /// The exclusive hold on the state dir, for as long as the backend lives.
    _lock: Arc<state_dir::StateLock>,
    /// A dry run: listing removes no record or log of an ended worker.
    read_only: bool,
}

impl LocalBackend {
    /// A local backend; creates the state directory (0700) and locks it: a state dir that
    /// group or others may write, or that another manager holds, is refused.
    pub fn new(config: LocalConfig, credentials: Credentials) -> Result<Self> {
        let lock = state_dir::prepare(&config.state_dir)?;
        let username = credentials.username.clone();
        Ok(Self {
            config,
            credentials,
            username,
            children: Mutex::new(HashMap::new()),
            _lock: lock,
            read_only: false,
        })
    }

    /// With `read_only` (a dry run), listing removes nothing.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    fn record_path(&self, worker_id: &str) -> PathBuf {
        self.config.state_dir.join(format!("{worker_id}.json"))
    }

    fn log_path(&self, worker_id: &str) -> PathBuf {
        self.config.state_dir.join(format!("{worker_id}.log"))
    }

    fn read_record(&self, worker_id: &str) -> std::io::Result<WorkerRecord> {
        let bytes = std::fs::read(self.record_path(worker_id))?;
        serde_json::from_slice(&bytes).map_err(std::io::Error::other)
    }

    fn write_record(&self, record: &WorkerRecord) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
        write_atomically(&self.record_path(&record.worker_id), &json)
    }

    /// Reaps children of this process that exited, so they do not linger as zombies, and
    /// records how each ended; returns those ends by worker id.
    fn reap(&self) -> HashMap<String, Exit> {
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        let mut ended = Vec::new();
        children.retain(|id, child| match child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                ended.push((id.clone(), status));
                false
            }
            Err(_) => false,
        });
        drop(children);
        let mut exits = HashMap::new();
        for (worker_id, status) in ended {
            let Ok(mut record) = self.read_record(&worker_id) else {
                continue;
            };
            let exit = Exit {
                code: status.code(),
                signal: status.signal(),
                after_seconds: now_seconds().saturating_sub(record.started_at),
            };
            record.exit = Some(exit);
            if let Err(e) = self.write_record(&record) {
                tracing::warn!(worker = %worker_id, error = %e, "cannot record how a local worker ended");
            }
            exits.insert(worker_id, exit);
        }
        exits
    }

    /// Removes the records and logs of ended workers but the last [`KEEP_ENDED`] (none in a
    /// dry run).
    fn prune(&self, jobs: &[WorkerJob]) {
        if self.read_only {
            return;
        }
        let ended: Vec<&WorkerJob> = jobs.iter().filter(|j| j.state.is_finished()).collect();
        for job in ended.iter().take(ended.len().saturating_sub(KEEP_ENDED)) {
            let _ = std::fs::remove_file(self.record_path(&job.id));
            let _ = std::fs::remove_file(self.log_path(&job.id));
        }
    }

    fn records(&self) -> Result<Vec<WorkerRecord>> {
        let entries = std::fs::read_dir(&self.config.state_dir).map_err(|e| {
            Error::backend(
                NAME,
                "list worker jobs",
                format!("reading {}: {e}", self.config.state_dir.display()),
            )
        })?;
        let mut records = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            match std::fs::read(&path).map(|bytes| serde_json::from_slice::<WorkerRecord>(&bytes)) {
                Ok(Ok(record)) => records.push(record),
                Ok(Err(e)) => {
                    tracing::warn!(file = %path.display(), error = %e, "ignoring unreadable worker record")
                }
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "ignoring unreadable worker record")
                }
            }
        }
        records.sort_by_key(|r| r.started_at);
        Ok(records)
    }

    /// The job of `record`, whose process was `alive` when last looked at.
    fn job_of(&self, record: &WorkerRecord, alive: bool) -> WorkerJob {
        let failure = (!alive).then(|| record.failure()).flatten();
        let state = match (alive, &failure) {
            (true, _) => JobState::Active,
            (false, Some(_)) => JobState::Failed,
            (false, None) => JobState::Ended,
        };
        let reason = failure.map(|f| {
            let log = self.log_path(&record.worker_id);
            format!("{f}; its output is in {}", log.display())
        });
        WorkerJob {
            id: record.worker_id.clone(),
            name: format!("pid {}", record.pid),
            state,
            submitted_at: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(record.started_at)),
            shape: None,
            reason,
            expected_start: None,
        }
    }
}

#[async_trait::async_trait]
impl WorkerBackend for LocalBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn worker_shape(&self) -> WorkerShape {
        WorkerShape::from_flags(self.config.cpus, self.config.gpus, self.config.memory_mb)
    }

    async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> {
        let mut records = self.records()?;
        // Liveness first, then reaping: a worker dead at the first look is reaped and its
        // exit status known at the second.
        let alive: Vec<bool> = records.iter().map(is_alive).collect();
        let exits = self.reap();
        for record in &mut records {
            if let Some(exit) = exits.get(&record.worker_id) {
                record.exit = Some(*exit);
            }
        }
        let jobs: Vec<WorkerJob> = (records.iter().zip(alive))
            .map(|(record, alive)| self.job_of(record, alive))
            .collect();
        self.prune(&jobs);
        Ok(jobs)
    }

    async fn start_worker_job(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob> {
        let worker_id = request.unique;
        let work_dir = request.worker.work_dir(&format!(
            "{}-codalab-LocalWorkerManager-scratch/workdir",
            self.username
        ));
        let argv = request.worker.build_command(worker_id, &work_dir);
        if request.dry_run {
            tracing::info!(
                command = %shell_join(&argv),
                env = "CODALAB_USERNAME=<user> CODALAB_PASSWORD=***",
                "dry run: would start a local worker"
            );
            return Ok(WorkerJob::new(
                format!("dry-run-{worker_id}"),
                JobState::Ended,
            ));
        }
        let log_path = self.log_path(worker_id);
        let fail = |what: &str, e: std::io::Error| {
            Error::backend(NAME, "start a worker job", format!("{what}: {e}"))
        };
        let log = private_file(&log_path)
            .map_err(|e| fail(&format!("creating {}", log_path.display()), e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| fail("duplicating the log file", e))?;
        let mut command = std::process::Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .current_dir(&self.config.state_dir)
            // Only what a worker needs of the manager's environment (no other pool's keys).
            .env_clear()
            .envs(request.worker.inherited_env())
            .env("CODALAB_USERNAME", &self.credentials.username)
            .env("CODALAB_PASSWORD", self.credentials.password.expose())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command
            .spawn()
            .map_err(|e| fail(&format!("running `{}`", argv[0]), e))?;
        let pid = child.id();
        let start_ticks = process_start_ticks(pid).unwrap_or_default();
        let record = WorkerRecord {
            worker_id: worker_id.to_owned(),
            pid,
            start_ticks,
            started_at: now_seconds(),
            argv,
            stopped: false,
            exit: None,
        };
        self.children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(worker_id.to_owned(), child);
        self.write_record(&record)
            .map_err(|e| fail("writing the worker record", e))?;
        // Started: active even if it already ended (the next listing tells how it ended).
        Ok(WorkerJob {
            state: JobState::Active,
            ..self.job_of(&record, true)
        })
    }

    fn job_output(&self, job: &WorkerJob) -> Option<String> {
        let log = self.config.state_dir.join(format!("{}.log", job.id));
        (!job.id.starts_with("dry-run-")).then(|| log.display().to_string())
    }

    async fn stop_worker_job(&self, job: &WorkerJob) -> Result<()> {
        let mut record = self.read_record(&job.id).map_err(|e| {
            Error::backend(
                NAME,
                "stop a worker job",
                format!("no readable record of worker {}: {e}", job.id),
            )
        })?;
        if !is_alive(&record) {
            return Ok(());
        }
        record.stopped = true;
        if let Err(e) = self.write_record(&record) {
            tracing::warn!(worker = %job.id, error = %e, "cannot note the stop in the worker record");
        }
        // The worker leads its own process group: signal the whole group.
        let status = tokio::process::Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", record.pid)])
            .status()
            .await
            .map_err(|e| Error::backend(NAME, "stop a worker job", format!("running kill: {e}")))?;
        if !status.success() && process_start_ticks(record.pid) == Some(record.start_ticks) {
            return Err(Error::backend(
                NAME,
                "stop a worker job",
                format!("kill -TERM -{} failed ({status})", record.pid),
            ));
        }
        Ok(())
    }
}

fn shell_join(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::WorkerOptions;
    use crate::secret::Secret;
    use std::path::Path;

    fn backend(dir: &Path) -> LocalBackend {
        let config = LocalConfig {
            state_dir: dir.to_path_buf(),
            ..LocalConfig::default()
        };
        LocalBackend::new(
            config,
            Credentials {
                username: "alice".into(),
                password: Secret::new("pw-123"),
            },
        )
        .unwrap()
    }

    /// A stand-in worker: a shell script that records argv and the credential env, then waits.
    fn stand_in(dir: &Path) -> String {
        let path = dir.join("fake-cl-worker-stand-in.sh");
        std::fs::write(
            &path,
            "#!/bin/sh\necho \"$@\" > \"$0.argv\"\necho \"$CODALAB_USERNAME:$CODALAB_PASSWORD\" > \"$0.env\"\nexec sleep 300\n",
        )
        .unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        path.display().to_string()
    }

    #[test]
    fn start_ticks_of_this_process() {
        assert!(process_start_ticks(std::process::id()).is_some());
        assert_eq!(process_start_ticks(u32::MAX), None);
    }

    #[tokio::test]
    async fn starts_lists_adopts_and_stops_a_worker() {
        let dir = tempfile::tempdir().unwrap();
        let worker = WorkerOptions {
            executable: stand_in(dir.path()),
            server: "http://127.0.0.1:9".into(),
            ..Default::default()
        };
        let first = backend(dir.path());
        let request = LaunchRequest {
            unique: "abc123",
            worker: &worker,
            dry_run: false,
        };
        let job = first.start_worker_job(&request).await.unwrap();
        assert_eq!(job.state, JobState::Active);

        // The stand-in records what it got before we look (bounded wait for its files).
        let env_file = PathBuf::from(format!("{}.env", worker.executable));
        for _ in 0..500 {
            if std::fs::read_to_string(&env_file).is_ok_and(|s| s.ends_with('\n')) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        // A second backend (a restarted manager) finds the worker through its record.
        let second = backend(dir.path());
        let jobs = second.get_worker_jobs().await.unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(
            (jobs[0].id.as_str(), jobs[0].state),
            ("abc123", JobState::Active)
        );

        second.stop_worker_job(&jobs[0]).await.unwrap();
        let mut state = JobState::Active;
        for _ in 0..200 {
            first.reap();
            state = second.get_worker_jobs().await.unwrap()[0].state;
            if state == JobState::Ended {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(state, JobState::Ended);
        let argv = std::fs::read_to_string(format!("{}.argv", worker.executable)).unwrap();
        assert!(argv.contains("--id host-abc123"), "{argv}");
        let env = std::fs::read_to_string(format!("{}.env", worker.executable)).unwrap();
        assert_eq!(env.trim(), "alice:pw-123");
    }

    #[tokio::test]
    async fn a_recycled_pid_is_not_a_worker() {
        let dir = tempfile::tempdir().unwrap();
        let record = WorkerRecord {
            worker_id: "old".into(),
            pid: std::process::id(),
            start_ticks: 1,
            started_at: 0,
            argv: vec![],
            stopped: false,
            exit: None,
        };
        std::fs::write(
            dir.path().join("old.json"),
            serde_json::to_vec(&record).unwrap(),
        )
        .unwrap();
        let jobs = backend(dir.path()).get_worker_jobs().await.unwrap();
        assert_eq!(jobs[0].state, JobState::Ended);
    }

    #[tokio::test]
    async fn dry_run_starts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let worker = WorkerOptions::default();
        let backend = backend(dir.path());
        let job = backend
            .start_worker_job(&LaunchRequest {
                unique: "d1",
                worker: &worker,
                dry_run: true,
            })
            .await
            .unwrap();
        assert_eq!(
            (job.id.as_str(), job.state),
            ("dry-run-d1", JobState::Ended)
        );
        assert!(backend.get_worker_jobs().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_missing_executable_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let worker = WorkerOptions {
            executable: "/nonexistent/cl-worker".into(),
            ..Default::default()
        };
        let err = backend(dir.path())
            .start_worker_job(&LaunchRequest {
                unique: "x",
                worker: &worker,
                dry_run: false,
            })
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("running `/nonexistent/cl-worker`"),
            "{err}"
        );
        assert!(!err.is_temporary());
    }

    /// Lists until no worker is active (bounded: 10 s).
    async fn list_when_all_ended(backend: &LocalBackend) -> Vec<WorkerJob> {
        for _ in 0..500 {
            let jobs = backend.get_worker_jobs().await.unwrap();
            if jobs.iter().all(|j| j.state.is_finished()) {
                return jobs;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("workers still running");
    }

    #[tokio::test]
    async fn a_worker_exiting_non_zero_is_failed_and_ended_ones_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let failing = dir.path().join("failing.sh");
        std::fs::write(&failing, "#!/bin/sh\necho oops\nexit 1\n").unwrap();
        std::fs::set_permissions(
            &failing,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let state = dir.path().join("state");
        let mut backend = backend(&state);
        let worker = WorkerOptions {
            executable: failing.display().to_string(),
            ..Default::default()
        };
        for i in 0..KEEP_ENDED + 3 {
            let unique = format!("w{i:02}");
            let request = LaunchRequest {
                unique: &unique,
                worker: &worker,
                dry_run: false,
            };
            backend.start_worker_job(&request).await.unwrap();
        }
        backend.read_only = true;
        list_when_all_ended(&backend).await;
        let records = || {
            let names = std::fs::read_dir(&state)
                .unwrap()
                .map(|e| e.unwrap().file_name());
            names
                .filter(|n| n.to_string_lossy().ends_with(".json"))
                .count()
        };
        assert_eq!(records(), KEEP_ENDED + 3, "a dry run removes nothing");
        backend.read_only = false;
        let jobs = list_when_all_ended(&backend).await;
        assert!(jobs.iter().all(|j| j.state == JobState::Failed), "{jobs:?}");
        let reason = jobs[0].reason.as_deref().unwrap();
        assert!(
            reason.starts_with("exited with status 1 after "),
            "{reason}"
        );
        assert!(reason.contains(".log"), "{reason}");
        let files: Vec<String> = std::fs::read_dir(&state)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let count = |ext: &str| files.iter().filter(|f| f.ends_with(ext)).count();
        assert_eq!(
            (count(".json"), count(".log")),
            (KEEP_ENDED, KEEP_ENDED),
            "{files:?}"
        );
        let log = state.join(format!("w{:02}.log", KEEP_ENDED + 2));
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "oops\n");
        let mode = std::fs::metadata(&log).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
    }

    #[test]
    fn shell_join_quotes() {
        let argv = vec!["a".to_string(), "b c".into(), "it's".into(), "".into()];
        assert_eq!(shell_join(&argv), r"a 'b c' 'it'\''s' ''");
    }
}
