//! A local worker's record (`<state-dir>/<worker-id>.json`): its pid and the kernel's start
//! time of that pid (so a recycled pid is never taken for it), and how it ended when the
//! manager that started it saw it end. Records and logs are written 0600.

use serde::{Deserialize, Serialize};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::SystemTime;

/// What is recorded about a started worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct WorkerRecord {
    pub worker_id: String,
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat` when the worker started.
    pub start_ticks: u64,
    /// Seconds since the epoch.
    pub started_at: u64,
    pub argv: Vec<String>,
    /// The manager asked the worker to stop (`stop_worker_job`): its end is not a failure.
    #[serde(default)]
    pub stopped: bool,
    /// How the worker ended, when the manager that started it saw it end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<Exit>,
}

/// How a worker process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Exit {
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// Seconds it ran.
    pub after_seconds: u64,
}

impl WorkerRecord {
    /// Why the worker counts as failed, when it does: it ended on its own, not with status 0.
    pub fn failure(&self) -> Option<String> {
        let exit = self.exit.filter(|e| !self.stopped && e.code != Some(0))?;
        let how = match (exit.code, exit.signal) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => "ended abnormally".to_owned(),
        };
        Some(format!("{how} after {} s", exit.after_seconds))
    }
}

/// Whether the worker of `record` runs: its pid is alive with the recorded start time.
pub(super) fn is_alive(record: &WorkerRecord) -> bool {
    process_start_ticks(record.pid) == Some(record.start_ticks)
}

/// The start time (field 22 of `/proc/<pid>/stat`) of a live, non-zombie process.
pub(super) fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    if matches!(fields.first(), Some(&"Z") | Some(&"X") | None) {
        return None;
    }
    fields.get(19)?.parse().ok()
}

pub(super) fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// Creates (or truncates) `path`, readable and writable by this user only.
pub(super) fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("json.tmp");
    private_file(&tmp)?.write_all(bytes)?;
    std::fs::rename(tmp, path)
}
