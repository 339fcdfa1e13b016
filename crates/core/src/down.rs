//! Teardown of one pool's backend, as `cl-worker-manager down` does it (like `ray down`): stop
//! the pool's live worker jobs, wait for them to end, remove what the backend created besides
//! jobs ([`WorkerBackend::cleanup`]), and report one [`Row`] per job and resource. With
//! `dry_run` nothing is changed: the rows say what would be done.

use crate::backend::{CleanupItem, WorkerBackend, WorkerJob};
use crate::error::Error;
use crate::layout::Layout;
use crate::secret::{Credentials, Secret};
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

/// The credentials `down` builds the backends with, and its pools told whose jobs to list.
/// Backends take the workers' CodaLab credentials when they are built, to hand them to the
/// workers they start. `down` starts nothing (it lists, stops and removes), so it never uses
/// the password: the backends get a placeholder, which only `start_worker_job` (never called
/// by `down`: no job submitted, no job definition registered, no Secret written) would send
/// anywhere. The user name is the real one when known (`password_file`'s first line, else
/// `CODALAB_USERNAME`): with the server, it is the [origin](crate::backend::origin) by which
/// slurm-batch, kubernetes and gce pools tell this deployment's jobs from another's
/// ([`BackendKind::by_origin`](crate::describe::BackendKind::by_origin)). Without it, or when
/// `server_known` is false (no config, environment or global `--server` named the manager's
/// server: a default server would give another origin than the manager's), such a pool would
/// list every deployment's jobs under its names: that is refused unless `every_origin` (`down
/// --all-origins`, or a dry run, which stops nothing), and said in a warning when allowed.
pub fn credentials(
    layout: &mut Layout,
    password_file: Option<&Path>,
    server_known: bool,
    every_origin: bool,
) -> Result<Credentials, Error> {
    let username = match Credentials::load(password_file) {
        Ok(credentials) => Some(credentials.username),
        Err(_) => std::env::var("CODALAB_USERNAME").ok(),
    };
    let username = username.map(|u| u.trim().to_owned()).unwrap_or_default();
    let (mut what, mut give) = (Vec::new(), Vec::new());
    if !server_known {
        what.push("the manager's server");
        give.push("its --config, CODALAB_WM_SERVER, or --server before `down`");
    }
    if username.is_empty() {
        what.push("the workers' CodaLab user");
        give.push("--password-file or CODALAB_USERNAME");
    }
    let by_origin: Vec<&str> = (layout.pools.iter())
        .filter(|pool| pool.kind.by_origin())
        .map(|pool| pool.policy.name.as_str())
        .collect();
    if !what.is_empty() && !by_origin.is_empty() {
        let unknown = format!(
            "down does not know {} (give it {}): pool(s) {}",
            what.join(" or "),
            give.join("; "),
            by_origin.join(", ")
        );
        if !every_origin {
            return Err(Error::InvalidConfig(format!(
                "{unknown} would stop the jobs of every deployment under this configuration's \
                 names, other servers' and users' too; pass --all-origins to stop them all \
                 (`down --dry-run` lists them)"
            )));
        }
        tracing::warn!(
            "{unknown} list the jobs of every deployment under this configuration's names, \
             other servers' and users' too"
        );
        layout.pools.iter_mut().for_each(|p| p.every_origin = true);
    }
    Ok(Credentials {
        username: Some(username)
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "cl-worker-manager-down".into()),
        password: Secret::new("unused-by-down"),
    })
}

/// How often [`down_pool`] looks whether the stopped jobs have ended.
const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The pool (the backend's name in the single-backend mode).
    pub pool: String,
    /// `job`, `job definition`, `secret`, `scratch dir`, `finished pod` …
    pub kind: String,
    /// Job id (and name), ARN, Secret name or path.
    pub name: String,
    /// What was (or, in a dry run, would be) done.
    pub action: String,
    /// Whether it went wrong.
    pub failed: bool,
}

/// Stops the pool's pending and running jobs, waits up to `wait` for them to end, then
/// removes what the backend created (or, with `dry_run`, lists both).
pub async fn down_pool(
    pool: &str,
    backend: &dyn WorkerBackend,
    dry_run: bool,
    wait: Duration,
) -> Vec<Row> {
    let row = |kind: &str, name: String, action: String, failed: bool| Row {
        pool: pool.to_owned(),
        kind: kind.to_owned(),
        name,
        action,
        failed,
    };
    let jobs = match backend.get_worker_jobs().await {
        Ok(jobs) => jobs,
        Err(error) => {
            let action = format!("cannot list jobs: {error}");
            return vec![row("job", "-".into(), action, true)];
        }
    };
    let mut rows = Vec::new();
    let mut stopped = HashSet::new();
    for job in jobs.iter().filter(|j| j.state.is_capacity()) {
        let state = format!("{:?}", job.state).to_lowercase();
        let (action, failed) = if dry_run {
            (format!("would stop ({state})"), false)
        } else {
            match backend.stop_worker_job(job).await {
                Ok(()) => {
                    stopped.insert(job.id.clone());
                    (format!("stopped (was {state})"), false)
                }
                Err(error) => (format!("stop failed: {error}"), true),
            }
        };
        rows.push(row("job", job_label(job), action, failed));
    }
    if !stopped.is_empty()
        && let Err(still) = wait_until_ended(backend, &stopped, wait).await
    {
        tracing::warn!(jobs = %still, "stopped jobs have not ended yet; what they use is kept");
    }
    match backend.cleanup(dry_run).await {
        Ok(items) => rows.extend(
            items
                .into_iter()
                .map(|item| cleanup_row(pool, item, dry_run)),
        ),
        Err(Error::Unsupported { .. }) => {}
        Err(error) => rows.push(row(
            "resources",
            "-".into(),
            format!("cannot clean up: {error}"),
            true,
        )),
    }
    rows
}

fn job_label(job: &WorkerJob) -> String {
    if job.name.is_empty() || job.name == job.id {
        job.id.clone()
    } else {
        format!("{} ({})", job.id, job.name)
    }
}

fn cleanup_row(pool: &str, item: CleanupItem, dry_run: bool) -> Row {
    let (action, failed) = match (&item.error, item.removed, dry_run) {
        (_, _, true) => ("would remove".to_owned(), false),
        (Some(error), _, _) => (format!("remove failed: {error}"), true),
        (None, true, _) => ("removed".to_owned(), false),
        (None, false, _) => ("kept".to_owned(), false),
    };
    Row {
        pool: pool.to_owned(),
        kind: item.kind.to_owned(),
        name: item.name,
        action,
        failed,
    }
}

/// Polls the backend until none of the `stopped` jobs is pending or running, for at most
/// `wait`. Returns the ids still live when time is up.
async fn wait_until_ended(
    backend: &dyn WorkerBackend,
    stopped: &HashSet<String>,
    wait: Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let live: Vec<String> = match backend.get_worker_jobs().await {
            Ok(jobs) => jobs
                .into_iter()
                .filter(|j| j.state.is_capacity() && stopped.contains(&j.id))
                .map(|j| j.id)
                .collect(),
            Err(error) => vec![format!("(cannot list: {error})")],
        };
        if live.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() + POLL_INTERVAL > deadline {
            return Err(live.join(", "));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The report: one aligned line per job and resource, then a summary.
pub fn render(rows: &[Row], dry_run: bool) -> String {
    let header = ["POOL", "KIND", "NAME", "ACTION"];
    let cells: Vec<[&str; 4]> = rows
        .iter()
        .map(|r| [&r.pool[..], &r.kind[..], &r.name[..], &r.action[..]])
        .collect();
    let mut widths = header.map(str::len);
    for line in &cells {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    for line in std::iter::once(&header).chain(&cells) {
        let text = format!(
            "{:w0$}  {:w1$}  {:w2$}  {}",
            line[0],
            line[1],
            line[2],
            line[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
        out.push_str(text.trim_end());
        out.push('\n');
    }
    let jobs = rows.iter().filter(|r| r.kind == "job" && !r.failed).count();
    let other = rows.iter().filter(|r| r.kind != "job" && !r.failed).count();
    let failed = rows.iter().filter(|r| r.failed).count();
    out.push_str(&if dry_run {
        format!("dry run: would stop {jobs} job(s) and remove {other} resource(s); nothing was changed\n")
    } else {
        format!("stopped {jobs} job(s), removed {other} resource(s), {failed} failure(s)\n")
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeBackend;
    use crate::{JobState, WorkerShape};

    #[tokio::test]
    async fn stops_only_live_jobs_and_a_dry_run_stops_none() {
        let backend = FakeBackend::new(WorkerShape::from_flags(1, 0, 1024));
        backend.insert(WorkerJob::new("1", JobState::Active));
        backend.insert(WorkerJob::new("2", JobState::Pending));
        backend.insert(WorkerJob::new("3", JobState::Preempted));
        let rows = down_pool("p", &backend, true, Duration::ZERO).await;
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|r| r.action.starts_with("would stop")));
        assert!(backend.stops().is_empty());
        let rows = down_pool("p", &backend, false, Duration::from_secs(5)).await;
        assert_eq!(backend.stops(), ["1", "2"]);
        assert!(rows.iter().all(|r| r.action.starts_with("stopped")));
        let report = render(&rows, false);
        assert!(
            report
                .starts_with("POOL  KIND  NAME  ACTION\np     job   1     stopped (was active)\n"),
            "{report}"
        );
        assert!(report.ends_with("stopped 2 job(s), removed 0 resource(s), 0 failure(s)\n"));
    }

    #[test]
    fn cleanup_items_become_rows_and_the_summary_counts_them() {
        let item = |removed, error: Option<&str>| CleanupItem {
            kind: "scratch dir",
            name: "/tmp/w1".into(),
            removed,
            error: error.map(str::to_owned),
        };
        let cases = [
            (item(false, None), true, "would remove", false),
            (item(true, None), false, "removed", false),
            (item(false, None), false, "kept", false),
            (
                item(false, Some("busy")),
                false,
                "remove failed: busy",
                true,
            ),
        ];
        for (item, dry_run, action, failed) in cases {
            let row = cleanup_row("p", item, dry_run);
            assert_eq!((row.action.as_str(), row.failed), (action, failed));
        }
        let rows = [
            cleanup_row("p", item(false, None), true),
            Row {
                pool: "p".into(),
                kind: "job".into(),
                name: job_label(&WorkerJob::new("7", JobState::Active)),
                action: "would stop (active)".into(),
                failed: false,
            },
        ];
        assert_eq!(
            render(&rows, true),
            "POOL  KIND         NAME     ACTION\n\
             p     scratch dir  /tmp/w1  would remove\n\
             p     job          7        would stop (active)\n\
             dry run: would stop 1 job(s) and remove 1 resource(s); nothing was changed\n"
        );
    }
}
