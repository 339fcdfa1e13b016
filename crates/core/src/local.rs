//! The `local` backend: workers as child processes on this machine.
//!
//! Each worker runs in its own process group, with its output in
//! `<state-dir>/<worker-id>.log` and a record `<state-dir>/<worker-id>.json` holding its pid and
//! the kernel's start time of that pid. The record is what makes restart adoption safe: a
//! manager started later lists the workers whose pid is alive *and* has the recorded start
//! time, so a recycled pid is never taken for a worker. Credentials reach the worker through
//! `CODALAB_USERNAME`/`CODALAB_PASSWORD` in its environment, as upstream passes them.

use crate::backend::{JobState, LaunchRequest, WorkerBackend, WorkerJob};
use crate::bundle::WorkerShape;
use crate::error::{Error, Result};
use crate::secret::Credentials;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

const NAME: &str = "local";
/// Records of ended workers kept for inspection; older ones are removed.
const KEEP_ENDED: usize = 50;

/// Settings of the local backend (`[local]` in the config file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalConfig {
    /// CPUs each worker may use (for the prefilter).
    pub cpus: u32,
    /// GPUs each worker may use (for the prefilter).
    pub gpus: u32,
    /// Memory per worker in MiB (for the prefilter).
    pub memory_mb: u64,
    /// Where worker records and logs are kept.
    pub state_dir: PathBuf,
}

impl Default for LocalConfig {
    fn default() -> Self {
        Self {
            cpus: 1,
            gpus: 0,
            memory_mb: 2048,
            state_dir: default_state_dir(),
        }
    }
}

fn default_state_dir() -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("codalab-wm/local")
}

/// What is recorded about a started worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WorkerRecord {
    worker_id: String,
    pid: u32,
    /// Field 22 of `/proc/<pid>/stat` when the worker started.
    start_ticks: u64,
    /// Seconds since the epoch.
    started_at: u64,
    argv: Vec<String>,
}

/// Runs `cl-worker` processes on this machine.
#[derive(Debug)]
pub struct LocalBackend {
    config: LocalConfig,
    credentials: Credentials,
    username: String,
    children: Mutex<HashMap<u32, std::process::Child>>,
}

impl LocalBackend {
    /// A local backend; creates the state directory.
    pub fn new(config: LocalConfig, credentials: Credentials) -> Result<Self> {
        std::fs::create_dir_all(&config.state_dir).map_err(|e| {
            Error::InvalidConfig(format!(
                "cannot create local state dir {}: {e}",
                config.state_dir.display()
            ))
        })?;
        let username = credentials.username.clone();
        Ok(Self {
            config,
            credentials,
            username,
            children: Mutex::new(HashMap::new()),
        })
    }

    fn record_path(&self, worker_id: &str) -> PathBuf {
        self.config.state_dir.join(format!("{worker_id}.json"))
    }

    /// Reaps children of this process that exited, so they do not linger as zombies.
    fn reap(&self) {
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        children.retain(|_, child| matches!(child.try_wait(), Ok(None)));
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

    fn job_of(record: &WorkerRecord) -> WorkerJob {
        let alive = process_start_ticks(record.pid) == Some(record.start_ticks);
        WorkerJob {
            id: record.worker_id.clone(),
            name: format!("pid {}", record.pid),
            state: if alive {
                JobState::Active
            } else {
                JobState::Ended
            },
            submitted_at: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(record.started_at)),
            shape: None,
            reason: None,
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
        self.reap();
        let records = self.records()?;
        let jobs: Vec<WorkerJob> = records.iter().map(Self::job_of).collect();
        let ended: Vec<&WorkerJob> = jobs.iter().filter(|j| j.state == JobState::Ended).collect();
        for job in ended.iter().take(ended.len().saturating_sub(KEEP_ENDED)) {
            let _ = std::fs::remove_file(self.record_path(&job.id));
        }
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
        let log_path = self.config.state_dir.join(format!("{worker_id}.log"));
        let fail = |what: &str, e: std::io::Error| {
            Error::backend(NAME, "start a worker job", format!("{what}: {e}"))
        };
        let log = std::fs::File::create(&log_path)
            .map_err(|e| fail(&format!("creating {}", log_path.display()), e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| fail("duplicating the log file", e))?;
        let mut command = std::process::Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .current_dir(&self.config.state_dir)
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
        let started_at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let record = WorkerRecord {
            worker_id: worker_id.to_owned(),
            pid,
            start_ticks,
            started_at,
            argv,
        };
        let json = serde_json::to_vec_pretty(&record)
            .map_err(|e| Error::backend(NAME, "start a worker job", e.to_string()))?;
        write_atomically(&self.record_path(worker_id), &json)
            .map_err(|e| fail("writing the worker record", e))?;
        self.children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(pid, child);
        Ok(Self::job_of(&record))
    }

    fn job_output(&self, job: &WorkerJob) -> Option<String> {
        let log = self.config.state_dir.join(format!("{}.log", job.id));
        (!job.id.starts_with("dry-run-")).then(|| log.display().to_string())
    }

    async fn stop_worker_job(&self, job: &WorkerJob) -> Result<()> {
        let bytes = std::fs::read(self.record_path(&job.id)).map_err(|e| {
            Error::backend(
                NAME,
                "stop a worker job",
                format!("no record of worker {}: {e}", job.id),
            )
        })?;
        let record: WorkerRecord = serde_json::from_slice(&bytes).map_err(|e| {
            Error::backend(
                NAME,
                "stop a worker job",
                format!("record of {}: {e}", job.id),
            )
        })?;
        if process_start_ticks(record.pid) != Some(record.start_ticks) {
            return Ok(());
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

/// The start time (field 22 of `/proc/<pid>/stat`) of a live, non-zombie process.
fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    if matches!(fields.first(), Some(&"Z") | Some(&"X") | None) {
        return None;
    }
    fields.get(19)?.parse().ok()
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(tmp, path)
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

    #[test]
    fn shell_join_quotes() {
        let argv = vec!["a".to_string(), "b c".into(), "it's".into(), "".into()];
        assert_eq!(shell_join(&argv), r"a 'b c' 'it'\''s' ''");
    }
}
