//! The per-worker scratch directories under `--slurm-work-dir` (job script and log, one
//! directory named after the worker id each) and which of them `cl-worker-manager down` may
//! remove: those of this manager's workers (name starts with `<user>-<job-name>-`) whose job
//! is no longer pending or running.

use codalab_wm_backend::WorkerJob;
use std::collections::HashSet;

/// Lists the directories directly under `$1`, one name a line; nothing when `$1` is missing.
const LIST: &str = r#"cd -- "$1" 2>/dev/null || exit 0; for d in *; do [ -d "$d" ] && printf '%s\n' "$d"; done; exit 0"#;

/// The argv listing the subdirectories of `work_dir` (run locally or over SSH).
pub fn list_command(work_dir: &str) -> Vec<String> {
    ["sh", "-c", LIST, "sh", work_dir]
        .map(str::to_owned)
        .to_vec()
}

/// The argv removing `dirs` (full paths).
pub fn remove_command(dirs: &[String]) -> Vec<String> {
    let mut argv = vec!["rm".to_owned(), "-rf".to_owned(), "--".to_owned()];
    argv.extend(dirs.iter().cloned());
    argv
}

/// The listed directory names that belong to this manager's finished workers: named with
/// `prefix`, and no pending or running job of that name. `jobs` is the full listing.
pub fn finished_worker_dirs(listing: &str, prefix: &str, jobs: &[WorkerJob]) -> Vec<String> {
    let live: HashSet<&str> = jobs
        .iter()
        .filter(|j| j.state.is_capacity())
        .map(|j| j.name.as_str())
        .collect();
    listing
        .lines()
        .map(str::trim)
        .filter(|name| {
            name.starts_with(prefix)
                && !name.contains('/')
                && !name.starts_with('.')
                && !live.contains(name)
        })
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use codalab_wm_backend::JobState;

    #[test]
    fn only_own_finished_workers() {
        let job = |name: &str, state| WorkerJob {
            name: name.into(),
            ..WorkerJob::new("1", state)
        };
        let jobs = [
            job("alice-w-running", JobState::Active),
            job("alice-w-waiting", JobState::Pending),
            job("alice-w-done", JobState::Ended),
            job("alice-w-lost", JobState::Preempted),
        ];
        let listing = "alice-w-running\nalice-w-waiting\nalice-w-done\nalice-w-lost\nalice-w-gone\nbob-w-x\nalice-wx-y\n";
        assert_eq!(
            finished_worker_dirs(listing, "alice-w-", &jobs),
            ["alice-w-done", "alice-w-lost", "alice-w-gone"]
        );
    }

    #[test]
    fn commands() {
        assert_eq!(list_command("/s")[4], "/s");
        assert_eq!(remove_command(&["/s/a".into()]).join(" "), "rm -rf -- /s/a");
    }
}
