//! What the chaos scenarios drive and watch: the real `cl-worker-manager` process, the Slurm
//! jobs it owns (seen with `squeue`), its JSON log, and the CodaLab service (bundles, tokens).

use super::event::Event;
use super::moto;
use crate::services::repo_root;
use anyhow::{Context, Result, bail};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The CodaLab user the scenarios run as (others' tests mostly use alice).
pub const USER: &str = "bob";
/// Its password (scenarios check that it never reaches a log).
pub const PASSWORD: &str = "bobpw";
/// Workers per manager.
pub const MAX_WORKERS: usize = 2;

/// One run of the manager binary, logging JSON to a file.
#[derive(Debug)]
pub struct ManagerProcess {
    child: Child,
    /// Its log (stderr; stdout goes to the same file).
    pub log: PathBuf,
    /// Set when we killed or stopped it on purpose.
    expected_exit: bool,
}

/// Settings shared by the managers of one scenario.
#[derive(Debug, Clone)]
pub struct ManagerSpec {
    /// The CodaLab URL (the proxy).
    pub server: String,
    /// Search keyword selecting this run's bundles (`tags=…`).
    pub tag: String,
    /// Slurm `--job-name`; jobs are `<user>-<job_name>-<id>`.
    pub job_name: String,
    /// Scratch directory (scripts, logs), under the run's directory, which holds the binary.
    pub dir: PathBuf,
    /// Where the workers go.
    pub backend: Backend,
}

/// The backend a scenario's manager uses.
#[derive(Debug, Clone)]
pub enum Backend {
    /// The real Slurm cluster (jobs named `<user>-<job_name>-<id>`).
    Slurm,
    /// AWS Batch on moto at `endpoint` (jobs named `<job_name>-<id>`, queue
    /// [`moto::QUEUE`]).
    Aws {
        /// The moto URL the manager uses (a fault proxy in front of moto).
        endpoint: String,
    },
    /// Compute Engine on the in-repo fake at `api` (a fault proxy in front of it); the job
    /// name is the manager id its instances are labelled with.
    Gce { api: String },
}

impl ManagerSpec {
    /// Starts the manager; its log is `<dir>/<label>.log`.
    pub fn spawn(&self, label: &str) -> Result<ManagerProcess> {
        self.spawn_with(label, &[])
    }

    /// [`Self::spawn`] with more global flags (`extra`, before the backend's).
    pub fn spawn_with(&self, label: &str, extra: &[&str]) -> Result<ManagerProcess> {
        let worker = stand_in_worker(&self.dir)?;
        let mut command = manager_command(&self.dir, &self.server);
        command
            .args(extra)
            .args(["--min-workers", "0"])
            .args(["--max-workers", &MAX_WORKERS.to_string()])
            .args(["--sleep-time", "1", "--min-seconds-between-workers", "0"])
            .args(["--search", &self.tag, "--verbose"])
            .args(["--worker-executable", &worker.display().to_string()]);
        match &self.backend {
            Backend::Slurm => command
                .args([
                    "slurm-batch",
                    "--partition",
                    "cpu",
                    "--cpus",
                    "1",
                    "--gpus",
                    "0",
                ])
                .args(["--memory-mb", "64", "--job-name", &self.job_name])
                .args([
                    "--slurm-work-dir",
                    &self.dir.join("slurm").display().to_string(),
                ]),
            Backend::Aws { endpoint } => command
                .args(["aws-batch", "--job-definition-name", &self.job_name])
                .args(["--job-queue", moto::QUEUE])
                .env("AWS_ENDPOINT_URL", endpoint)
                .env("AWS_ACCESS_KEY_ID", "test")
                .env("AWS_SECRET_ACCESS_KEY", "test")
                .env("AWS_REGION", "us-east-1")
                .env("AWS_EC2_METADATA_DISABLED", "true"),
            Backend::Gce { api } => command
                .args([
                    "gce",
                    "--project",
                    super::gce::PROJECT,
                    "--zones",
                    "us-central1-a",
                ])
                .args([
                    "--password-secret",
                    "codalab-password",
                    "--manager-id",
                    &self.job_name,
                ])
                .env("CODALAB_WM_GCE__API_ENDPOINT", format!("{api}/compute/v1/"))
                .env("CODALAB_WM_GCE__METADATA_URL", api),
        };
        command
            .env("CODALAB_USERNAME", USER)
            .env("CODALAB_PASSWORD", PASSWORD);
        start(command, &self.dir, label)
    }
}

/// The scenario's copy of the binary against `server`, as every scenario starts it: a JSON
/// log, no `CODALAB_WM_*` of this process, the scenario's dir as its working dir (a worker's
/// scratch dir is relative to it), no standard input. Credentials and the rest are the caller's.
pub fn manager_command(dir: &Path, server: &str) -> Command {
    let mut command = Command::new(dir.join("../cl-worker-manager"));
    command
        .args(["--server", server, "--log-format", "json"])
        .env("NO_COLOR", "1")
        .current_dir(dir)
        .stdin(Stdio::null());
    for (key, _) in std::env::vars() {
        if key.starts_with("CODALAB_WM_") {
            command.env_remove(key);
        }
    }
    command
}

/// Starts `command` with its output in `<dir>/<label>.log`.
pub fn start(mut command: Command, dir: &Path, label: &str) -> Result<ManagerProcess> {
    let log = dir.join(format!("{label}.log"));
    let file = std::fs::File::create(&log)?;
    let child = command
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .context("starting the copy of cl-worker-manager")?;
    Ok(ManagerProcess {
        child,
        log,
        expected_exit: false,
    })
}

/// The scenario's stand-in worker (`sleep 900`), written into `dir` the first time.
pub fn stand_in_worker(dir: &Path) -> Result<PathBuf> {
    let worker = dir.join("stand-in-worker.sh");
    if !worker.exists() {
        std::fs::write(&worker, "#!/bin/sh\nexec sleep 900\n")?;
        make_executable(&worker)?;
    }
    Ok(worker)
}

/// Copies `target/debug/cl-worker-manager` (just built with every backend) to `dir`: the
/// shared target directory may be rebuilt with other features while the scenarios run.
pub fn copy_binary(dir: &Path) -> Result<()> {
    let built = crate::services::target_dir().join("debug/cl-worker-manager");
    std::fs::copy(&built, dir.join("cl-worker-manager"))
        .with_context(|| format!("copying {}", built.display()))?;
    let check = Command::new(dir.join("cl-worker-manager"))
        .args(["aws-batch", "--help"])
        .output()?;
    if !check.status.success() {
        bail!(
            "{} was rebuilt without every backend before it could be copied; run again",
            built.display()
        );
    }
    Ok(())
}

fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

impl ManagerProcess {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running; `Err` when it exited without being asked to (a crash).
    pub fn alive(&mut self) -> Result<bool> {
        match self.child.try_wait()? {
            None => Ok(true),
            Some(_) if self.expected_exit => Ok(false),
            Some(status) => bail!(
                "the manager exited on its own ({status}); log tail:\n{}",
                tail(&self.log)
            ),
        }
    }

    /// SIGKILL, and reap it.
    pub fn kill(&mut self) -> Result<()> {
        self.expected_exit = true;
        let _ = self.child.kill();
        self.child.wait()?;
        Ok(())
    }

    /// SIGTERM, then waits (at most 20 s) for a clean exit with status 0.
    pub fn stop(&mut self) -> Result<()> {
        self.expected_exit = true;
        if self.child.try_wait()?.is_some() {
            bail!("the manager was already gone before the stop");
        }
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()?;
        if !status.success() {
            bail!("kill -TERM {} failed", self.pid());
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    bail!("the manager exited with {status} after SIGTERM");
                }
                return Ok(());
            }
            thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        bail!("the manager did not exit within 20 s of SIGTERM")
    }

    /// The log's current length: events after this offset happened after now.
    pub fn cursor(&self) -> u64 {
        std::fs::metadata(&self.log).map_or(0, |m| m.len())
    }

    /// The JSON events logged after `cursor`.
    pub fn events_since(&self, cursor: u64) -> Vec<Event> {
        events(&self.log, cursor)
    }

    /// Waits (bounded) for an event after `cursor` that `matches`.
    pub fn wait_for_event(
        &mut self,
        cursor: u64,
        within: Duration,
        what: &str,
        matches: impl Fn(&Event) -> bool,
    ) -> Result<Event> {
        let start = Instant::now();
        while start.elapsed() < within {
            if let Some(event) = self.events_since(cursor).into_iter().find(&matches) {
                return Ok(event);
            }
            self.alive()?;
            thread::sleep(Duration::from_millis(100));
        }
        bail!(
            "no log event `{what}` within {} s; log tail:\n{}",
            within.as_secs(),
            tail(&self.log)
        )
    }
}

impl Drop for ManagerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The JSON lines of `log` after byte `cursor` (non-JSON lines, e.g. a panic, are kept as strings).
pub fn events(log: &Path, cursor: u64) -> Vec<Event> {
    let text = std::fs::read(log).unwrap_or_default();
    let start = usize::try_from(cursor)
        .unwrap_or(usize::MAX)
        .min(text.len());
    String::from_utf8_lossy(&text[start..])
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(Event::parse)
        .collect()
}

/// The last 15 lines of a file.
pub fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Whether an event is a tick skipped for a temporary error (first of a streak at warn, later
/// ones at debug). A fault classified as permanent ("tick failed") does not count: every fault
/// the scenarios inject is one a manager must ride out.
pub fn is_skipped_tick(event: &Event) -> bool {
    event.message().starts_with("tick skipped")
}

/// Whether an event is a completed tick (the one info line per tick with `staged`).
pub fn is_tick(event: &Event) -> bool {
    event.get("staged").is_some() && event.get("jobs").is_some()
}

/// Whether a line is a panic.
pub fn is_panic(event: &Event) -> bool {
    (event.is_raw() && event.raw().contains("panicked")) || event.message().contains("panicked")
}

/// Slurm jobs (pending or running) whose name contains `-<job_name>-`, as `(id, name)`.
pub fn slurm_jobs(job_name: &str) -> Option<Vec<(String, String)>> {
    let output = Command::new("squeue")
        .args([
            "--noheader",
            "--states=PENDING,RUNNING,CONFIGURING,COMPLETING",
        ])
        .args(["--format=%i|%j"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let marker = format!("-{job_name}-");
    Some(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|l| l.trim().split_once('|'))
            .filter(|(_, name)| name.contains(&marker))
            .map(|(id, name)| (id.to_owned(), name.to_owned()))
            .collect(),
    )
}

/// Cancels every job whose name contains `-<job_name>-` and waits (10 s) until none is left.
pub fn cancel_jobs(job_name: &str) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let Some(jobs) = slurm_jobs(job_name) else {
            thread::sleep(Duration::from_millis(300));
            continue;
        };
        if jobs.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = jobs.iter().map(|(id, _)| id.as_str()).collect();
        let _ = Command::new("scancel").args(&ids).status();
        thread::sleep(Duration::from_millis(300));
    }
    bail!("jobs of `{job_name}` still listed 10 s after scancel")
}

/// Cancels one job of `job_name` and returns its id.
pub fn cancel_one(job_name: &str) -> Result<String> {
    let jobs = slurm_jobs(job_name).context("squeue failed")?;
    let Some((id, _)) = jobs.first() else {
        bail!("no job of `{job_name}` to cancel");
    };
    let status = Command::new("scancel").arg(id).status()?;
    if !status.success() {
        bail!("scancel {id} failed");
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if slurm_jobs(job_name).is_some_and(|jobs| jobs.iter().all(|(j, _)| j != id)) {
            return Ok(id.clone());
        }
        thread::sleep(Duration::from_millis(200));
    }
    bail!("job {id} still listed 10 s after scancel")
}

/// Samples the jobs of one job name every 300 ms in a thread: the most seen at once and every
/// id seen.
#[derive(Debug)]
pub struct JobWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<(usize, BTreeSet<String>)>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl JobWatch {
    /// Starts sampling `list` (e.g. [`slurm_jobs`] of one job name).
    pub fn start(list: impl Fn() -> Option<Vec<(String, String)>> + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let seen: Arc<Mutex<(usize, BTreeSet<String>)>> = Arc::default();
        let thread = {
            let (stop, seen) = (stop.clone(), seen.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(jobs) = list() {
                        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                        seen.0 = seen.0.max(jobs.len());
                        seen.1.extend(jobs.into_iter().map(|(id, _)| id));
                    }
                    thread::sleep(Duration::from_millis(300));
                }
            })
        };
        Self {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    /// The most jobs listed at once so far.
    pub fn max_at_once(&self) -> usize {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    /// Every job id listed so far.
    pub fn ids(&self) -> BTreeSet<String> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }
}

impl Drop for JobWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Waits (bounded) until exactly `count` jobs of `job_name` are listed, checking the manager
/// stays alive.
pub fn wait_for_jobs(
    manager: &mut ManagerProcess,
    job_name: &str,
    count: usize,
    within: Duration,
) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < within {
        if slurm_jobs(job_name).is_some_and(|jobs| jobs.len() == count) {
            return Ok(());
        }
        manager.alive()?;
        thread::sleep(Duration::from_millis(200));
    }
    bail!(
        "{count} jobs of `{job_name}` not listed within {} s (now: {:?}); log tail:\n{}",
        within.as_secs(),
        slurm_jobs(job_name),
        tail(&manager.log)
    )
}

/// Waits (bounded) until exactly `count` jobs of `job_name` are listed and each one's worker
/// step runs. A fault that stops slurmctld must come after this: the batch script starts the
/// worker with `srun`, which asks slurmctld for its step, and an `srun` that finds slurmctld
/// down fails the job ("Unable to confirm allocation"), which the manager rightly replaces.
pub fn wait_for_started_jobs(
    manager: &mut ManagerProcess,
    job_name: &str,
    count: usize,
    within: Duration,
) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < within {
        if slurm_jobs(job_name)
            .is_some_and(|jobs| jobs.len() == count && jobs.iter().all(|(id, _)| runs_on_node(id)))
        {
            return Ok(());
        }
        manager.alive()?;
        thread::sleep(Duration::from_millis(200));
    }
    bail!(
        "{count} jobs of `{job_name}` without a running worker step within {} s (now: {:?}); log tail:\n{}",
        within.as_secs(),
        slurm_jobs(job_name),
        tail(&manager.log)
    )
}

/// Whether slurmd on this node runs the worker step (`srun`'s step 0) of job `id`
/// (`scontrol listpids` asks slurmd, which knows a step only once slurmctld granted it).
fn runs_on_node(id: &str) -> bool {
    Command::new("scontrol")
        .args(["listpids", id])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|out| {
            out.status.success()
                && String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .any(|line| line.split_whitespace().nth(2) == Some("0"))
        })
}

/// Checks for `duration` that the number of jobs stays `count` (no launch) and the manager
/// stays alive.
pub fn hold_jobs(
    manager: &mut ManagerProcess,
    job_name: &str,
    count: usize,
    duration: Duration,
) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < duration {
        if let Some(jobs) = slurm_jobs(job_name)
            && jobs.len() != count
        {
            bail!(
                "expected {count} jobs of `{job_name}` while the fault lasts, saw {}: {jobs:?}; \
                 ended: {:?}; manager log tail:\n{}",
                jobs.len(),
                ended_jobs(job_name),
                tail(&manager.log)
            );
        }
        manager.alive()?;
        thread::sleep(Duration::from_millis(250));
    }
    Ok(())
}

/// The jobs of `job_name` Slurm still remembers as ended (for `MinJobAge`), each as
/// `id|state|reason`, so a job that left the queue during a check names its cause.
fn ended_jobs(job_name: &str) -> Vec<String> {
    let Ok(output) = Command::new("squeue")
        .args(["--noheader", "--states=all", "--format=%i|%j|%T|%r"])
        .output()
    else {
        return vec!["squeue did not run".to_owned()];
    };
    let marker = format!("-{job_name}-");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.trim().split('|').collect();
            let [id, name, state, reason] = fields[..] else {
                return None;
            };
            let active = ["PENDING", "RUNNING", "CONFIGURING", "COMPLETING"].contains(&state);
            (name.contains(&marker) && !active).then(|| format!("{id}|{state}|{reason}"))
        })
        .collect()
}

/// Runs a service script of the repository.
pub fn script(path: &str, args: &[&str]) -> Result<String> {
    let output = Command::new("bash")
        .arg(repo_root().join(path))
        .args(args)
        .current_dir(repo_root())
        .env("SERVICES_DIR", repo_root().join(".services"))
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {path}"))?;
    if !output.status.success() {
        bail!(
            "{path} {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Stages `n` bundles of [`USER`] tagged `tag`; returns their uuids.
pub fn stage_bundles(n: usize, tag: &str) -> Result<Vec<String>> {
    stage_bundles_as(USER, n, tag)
}

/// Stages `n` bundles of `user` tagged `tag`; returns their uuids.
pub fn stage_bundles_as(user: &str, n: usize, tag: &str) -> Result<Vec<String>> {
    let out = script(
        "xtask/services/codalab/stage.sh",
        &[
            user,
            &n.to_string(),
            "--request-cpus",
            "1",
            "--request-gpus",
            "0",
            "--request-memory",
            "10m",
            "--tags",
            tag,
        ],
    )?;
    let uuids: Vec<String> = out
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("0x"))
        .map(str::to_owned)
        .collect();
    if uuids.len() != n {
        bail!("stage.sh printed {} uuids, wanted {n}: {out}", uuids.len());
    }
    Ok(uuids)
}

/// Deletes the bundles (best effort).
pub fn remove_bundles(uuids: &[String]) {
    remove_bundles_as(USER, uuids);
}

/// Deletes the bundles as `user` (best effort; the root user `codalab` may delete any).
pub fn remove_bundles_as(user: &str, uuids: &[String]) {
    if uuids.is_empty() {
        return;
    }
    let mut args = vec![user, "rm", "--force"];
    args.extend(uuids.iter().map(String::as_str));
    if let Err(error) = script("xtask/services/codalab/cl.sh", &args) {
        eprintln!("chaos: could not remove the staged bundles: {error:#}");
    }
}

fn mariadb(sql: &str) -> Result<String> {
    let socket = repo_root().join(".services/codalab/run/mysqld.sock");
    let output = Command::new("mariadb")
        .arg(format!("--socket={}", socket.display()))
        .args([
            "--batch",
            "--skip-column-names",
            "codalab_bundles",
            "-e",
            sql,
        ])
        .output()
        .context("running mariadb")?;
    if !output.status.success() {
        bail!(
            "mariadb `{sql}` failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The newest OAuth2 token id (tokens issued later have larger ids).
pub fn newest_token_id() -> Result<u64> {
    Ok(mariadb("SELECT COALESCE(MAX(id), 0) FROM oauth2_token")?
        .parse()
        .unwrap_or(0))
}

/// Deletes the OAuth2 tokens of [`USER`] issued after token `after` (the manager's, not the
/// CLI sessions' of other tests), as a revocation does. Returns how many.
pub fn revoke_tokens(after: u64) -> Result<u64> {
    let deleted = mariadb(&format!(
        "DELETE t FROM oauth2_token t JOIN user u ON t.user_id = u.user_id \
         WHERE u.user_name = '{USER}' AND t.id > {after}; SELECT ROW_COUNT();"
    ))?;
    Ok(deleted.parse().unwrap_or(0))
}

/// The pid of slurmctld from its pid file.
fn slurmctld_pid() -> Option<u32> {
    let path = repo_root().join(".services/slurm/run/slurmctld.pid");
    let pid: u32 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    (comm.trim() == "slurmctld").then_some(pid)
}

/// Stops slurmctld (only it: slurmd and the jobs' state survive) and waits until it is gone.
pub fn stop_slurmctld() -> Result<()> {
    let pid = slurmctld_pid().context("slurmctld is not running")?;
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(15) {
        if slurmctld_pid().is_none() {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(100));
    }
    bail!("slurmctld (pid {pid}) did not stop within 15 s")
}

/// Starts slurmctld again with the service script (idempotent) and waits for the node.
pub fn start_slurmctld() -> Result<()> {
    script("xtask/services/slurm/up.sh", &[]).map(|_| ())
}
