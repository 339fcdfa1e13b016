//! The one `squeue` call per tick and the parsing of its output.
//!
//! `squeue --noheader --states=all --user=USER [--partition=P] --format=%i|%j|%T|%r|%V|%S|%k`
//! lists every job of the user (in the pool's partition) that the controller still knows
//! (finished ones for `MinJobAge` seconds), one line each: id, name, state, reason, submit
//! time, start time (of a pending job, the controller's forecast: what `squeue --start`
//! prints; set by the backfill scheduler from the time limits of the jobs ahead, `N/A`
//! until it has one), comment. Whatever the number of jobs, one call. The comment carries the origin of
//! the deployment that submitted the job ([`ORIGIN_COMMENT`]).

use codalab_wm_backend::backend::is_listed;
use codalab_wm_backend::{Error, JobState, Result, WorkerJob};
use std::time::{Duration, SystemTime};

/// The `--format` of the listing: id, name, state, reason, submit time, start time, comment.
pub const FORMAT: &str = "%i|%j|%T|%r|%V|%S|%k";

/// What precedes the origin ([`codalab_wm_backend::backend::origin`]) in the `--comment` of the
/// jobs this manager submits: `codalab-wm-origin=<16 hex>`.
pub const ORIGIN_COMMENT: &str = "codalab-wm-origin=";

/// The `sbatch` option that marks a job with `origin`.
pub fn comment_option(origin: &str) -> String {
    format!("--comment={ORIGIN_COMMENT}{origin}")
}

/// The origin a job's comment carries; `None` for any other comment (`(null)`: none).
fn origin_of(comment: &str) -> Option<&str> {
    let origin = comment.strip_prefix(ORIGIN_COMMENT)?;
    (!origin.is_empty() && origin.bytes().all(|b| b.is_ascii_hexdigit())).then_some(origin)
}

/// The `squeue` argv listing every job of `user`, only those in `partition` when one is
/// given. Run it with `TZ=UTC` so that submit times (printed without an offset) are UTC.
pub fn command(user: &str, partition: Option<&str>) -> Vec<String> {
    let mut argv: Vec<String> = ["squeue", "--noheader", "--states=all"]
        .map(str::to_owned)
        .to_vec();
    argv.push(format!("--user={user}"));
    if let Some(partition) = partition {
        argv.push(format!("--partition={partition}"));
    }
    argv.push(format!("--format={FORMAT}"));
    argv
}

/// What a Slurm job state means to the manager.
pub fn job_state(state: &str) -> JobState {
    match state {
        "PENDING" | "CONFIGURING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED"
        | "RESV_DEL_HOLD" => JobState::Pending,
        // Still holding (or about to release) their resources: upstream #2391 for COMPLETING.
        "RUNNING" | "COMPLETING" | "SUSPENDED" | "STOPPED" | "SIGNALING" | "STAGE_OUT"
        | "RESIZING" => JobState::Active,
        // BOOT_FAIL: the node never came up for the job, which never ran: a failed launch.
        "FAILED" | "BOOT_FAIL" | "OUT_OF_MEMORY" | "DEADLINE" | "SPECIAL_EXIT" => JobState::Failed,
        // The job had its resources and lost them: preempted, or its node died under it.
        "PREEMPTED" | "NODE_FAIL" => JobState::Preempted,
        "COMPLETED" | "CANCELLED" | "TIMEOUT" | "REVOKED" => JobState::Ended,
        other => {
            // A state newer than this code: count it as capacity, so the manager never starts
            // more workers than allowed because of it.
            tracing::warn!(state = other, "unknown slurm job state, counted as pending");
            JobState::Pending
        }
    }
}

/// Whether Slurm's pending `reason` (`%r`) holds that one job back rather than queueing it
/// for resources: a hold (`JobHeldAdmin`, `JobHeldUser`, `launch failed requeued held`), a
/// dependency, a begin time, or nodes it asked for being unavailable (`ReqNodeNotAvail, …`).
/// Slurm would start a new job beside it at once.
pub fn is_hold(reason: &str) -> bool {
    const HOLDS: [&str; 4] = ["JobHeld", "Dependency", "BeginTime", "ReqNodeNotAvail"];
    HOLDS.iter().any(|hold| reason.starts_with(hold)) || reason.ends_with("requeued held")
}

/// Parses the listing and keeps the jobs whose name starts with `prefix`, of every origin.
pub fn parse(output: &str, prefix: &str) -> Result<Vec<WorkerJob>> {
    parse_own(output, prefix, None)
}

/// Parses the listing and keeps the jobs whose name starts with `prefix` and that carry no
/// origin or `own` ([`is_listed`]): another deployment's jobs under the same name are left out.
pub fn parse_own(output: &str, prefix: &str, own: Option<&str>) -> Result<Vec<WorkerJob>> {
    let mut jobs = Vec::new();
    for line in output.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (job, comment) = parse_line(line)?;
        if job.name.starts_with(prefix) && is_listed(own, origin_of(comment)) {
            jobs.push(job);
        }
    }
    Ok(jobs)
}

/// One line: the job and its comment. The name may contain `|` (the fields after it cannot,
/// but for the comment, which must then hold none: this manager's never does).
fn parse_line(line: &str) -> Result<(WorkerJob, &str)> {
    let bad = |why: &str| Error::InvalidReply {
        from: "squeue".into(),
        what: "list worker jobs".into(),
        message: format!("{why} in line {line:?}"),
    };
    let (id, rest) = line.split_once('|').ok_or_else(|| bad("no `|`"))?;
    let mut tail = rest.rsplitn(6, '|');
    let (Some(comment), Some(start), Some(submitted), Some(reason), Some(state), Some(name)) = (
        tail.next(),
        tail.next(),
        tail.next(),
        tail.next(),
        tail.next(),
        tail.next(),
    ) else {
        return Err(bad("fewer than 7 fields"));
    };
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'_' || b == b'[' || b == b']')
    {
        return Err(bad("bad job id"));
    }
    let state = job_state(state);
    let job = WorkerJob {
        id: id.to_owned(),
        name: name.to_owned(),
        state,
        submitted_at: parse_time(submitted),
        shape: None,
        reason: Some(reason.to_owned()).filter(|r| !r.is_empty() && r != "None"),
        expected_start: forecast(state, parse_time(submitted), parse_time(start)),
    };
    Ok((job, comment))
}

/// How far past its submit time a forecast may be and still be one: Slurm puts the start of
/// a job it cannot place (the jobs ahead of it have no time limit) a year after its backfill
/// pass, which says only that it cannot tell.
const CANNOT_TELL: Duration = Duration::from_secs(300 * 86_400);

/// A pending job's `%S`: the controller's forecast of its start (what `squeue --start`
/// prints), unless it is Slurm's way of saying it cannot tell ([`CANNOT_TELL`]). A started
/// job's `%S` is when it started: no forecast.
fn forecast(
    state: JobState,
    submitted: Option<SystemTime>,
    start: Option<SystemTime>,
) -> Option<SystemTime> {
    let start = start.filter(|_| state == JobState::Pending)?;
    let ahead = submitted.and_then(|submitted| start.duration_since(submitted).ok());
    ahead
        .is_none_or(|ahead| ahead < CANNOT_TELL)
        .then_some(start)
}

/// `2026-11-21T20:44:46` (UTC) as a [`SystemTime`]; `None` for `N/A`, `Unknown` or garbage.
pub fn parse_time(text: &str) -> Option<SystemTime> {
    let (date, time) = text.split_once('T')?;
    let mut date = date.splitn(3, '-').map(str::parse::<i64>);
    let (year, month, day) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let mut time = time.splitn(3, ':').map(str::parse::<i64>);
    let (hour, minute, second) = (time.next()?.ok()?, time.next()?.ok()?, time.next()?.ok()?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let seconds = codalab_wm_backend::civil::days_from_civil(year, month, day) * 86_400
        + hour * 3600
        + minute * 60
        + second;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "root-codalab-slurm-worker-";

    #[test]
    fn holds_are_told_from_queue_reasons() {
        // Review 2026-11-27 §7: a hold keeps that one job back; Slurm starts new jobs at once.
        let cases = [
            ("JobHeldAdmin", true),
            ("JobHeldUser", true),
            ("Dependency", true),
            ("DependencyNeverSatisfied", true),
            ("BeginTime", true),
            ("ReqNodeNotAvail, UnavailableNodes:node[1-2]", true),
            ("launch failed requeued held", true),
            ("Resources", false),
            ("Priority", false),
            ("QOSMaxJobsPerUserLimit", false),
            ("AssocGrpCpuLimit", false),
        ];
        for (reason, hold) in cases {
            assert_eq!(is_hold(reason), hold, "{reason}");
        }
        let line =
            "12|root-codalab-slurm-worker-1|PENDING|JobHeldAdmin|2026-11-21T20:44:46|N/A|(null)";
        let job = &parse(line, PREFIX).unwrap()[0];
        assert_eq!(job.reason.as_deref(), Some("JobHeldAdmin"));
        assert!(is_hold(job.reason.as_deref().unwrap()));
    }

    /// Lines the real slurmctld (Debian's, `sched/backfill`) printed here on 2026-11-29: a job
    /// pending behind one with a 10-minute limit, forecast to start when that limit ends; one
    /// pending before the backfill pass (no forecast yet); one behind a job without a time
    /// limit (a year out: Slurm cannot tell); a held one; a running one (its start is no
    /// forecast).
    #[test]
    fn a_pending_jobs_start_time_is_the_controllers_forecast() {
        let output = "\
495|root-codalab-slurm-worker-a|PENDING|Resources|2026-11-29T14:03:24|2026-11-29T14:13:22|(null)
497|root-codalab-slurm-worker-b|PENDING|Resources|2026-11-29T14:04:02|N/A|(null)
498|root-codalab-slurm-worker-e|PENDING|Resources|2026-11-29T14:04:02|2027-11-29T14:04:01|(null)
493|root-codalab-slurm-worker-c|PENDING|JobHeldUser|2026-11-29T14:03:17|N/A|(null)
494|root-codalab-slurm-worker-d|RUNNING|None|2026-11-29T14:03:22|2026-11-29T14:03:22|(null)
";
        let jobs = parse(output, PREFIX).unwrap();
        let starts: Vec<_> = jobs.iter().map(|j| j.expected_start).collect();
        assert_eq!(
            starts,
            [parse_time("2026-11-29T14:13:22"), None, None, None, None]
        );
        assert!(starts[0].is_some());
    }

    #[test]
    fn every_state_maps() {
        let cases = [
            ("PENDING", JobState::Pending),
            ("CONFIGURING", JobState::Pending),
            ("RUNNING", JobState::Active),
            ("COMPLETING", JobState::Active),
            ("FAILED", JobState::Failed),
            ("NODE_FAIL", JobState::Preempted),
            ("BOOT_FAIL", JobState::Failed),
            ("OUT_OF_MEMORY", JobState::Failed),
            ("COMPLETED", JobState::Ended),
            ("CANCELLED", JobState::Ended),
            ("TIMEOUT", JobState::Ended),
            ("PREEMPTED", JobState::Preempted),
            ("SOMETHING_NEW", JobState::Pending),
        ];
        for (state, expected) in cases {
            assert_eq!(job_state(state), expected, "{state}");
        }
    }

    /// The recorded `squeue -t all -h -o '%i|%T|%r|%e'` lines of the reference cluster, in our
    /// format (name and submit time added), plus pending/running lines from the same report.
    #[test]
    fn parses_recorded_output() {
        let output = "\
32|root-codalab-slurm-worker-aa|PENDING|Resources|2026-11-21T20:45:01|N/A|(null)
33|root-codalab-slurm-worker-bb|PENDING|Priority|2026-11-21T20:45:02|N/A|(null)
1|root-codalab-slurm-worker-cc|RUNNING|None|2026-11-21T20:44:36|N/A|(null)
6|root-codalab-slurm-worker-dd|CANCELLED|None|2026-11-21T20:44:40|N/A|(null)
5|root-codalab-slurm-worker-ee|COMPLETED|None|2026-11-21T20:44:41|N/A|(null)
4|root-codalab-slurm-worker-ff|FAILED|NonZeroExitCode|2026-11-21T20:44:42|N/A|(null)
3|root-codalab-slurm-worker-gg|TIMEOUT|TimeLimit|2026-11-21T20:44:43|N/A|(null)
7|sleeper|RUNNING|None|2026-11-21T20:44:36|N/A|(null)
8|root-other-job-hh|RUNNING|None|N/A|N/A|(null)
";
        let jobs = parse(output, PREFIX).unwrap();
        let seen: Vec<_> = jobs
            .iter()
            .map(|j| (j.id.as_str(), j.state, j.reason.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [
                ("32", JobState::Pending, Some("Resources")),
                ("33", JobState::Pending, Some("Priority")),
                ("1", JobState::Active, None),
                ("6", JobState::Ended, None),
                ("5", JobState::Ended, None),
                ("4", JobState::Failed, Some("NonZeroExitCode")),
                ("3", JobState::Ended, Some("TimeLimit")),
            ]
        );
        assert_eq!(jobs[2].name, "root-codalab-slurm-worker-cc");
        assert_eq!(
            jobs[2].submitted_at,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_293_876))
        );
    }

    /// Lines as the controller prints them for a preempted job and a job whose node died
    /// (`squeue -t all`, reason as `%r` shows it).
    #[test]
    fn preempted_and_node_failed_jobs_are_preempted() {
        let output = "\
40|root-codalab-slurm-worker-pp|PREEMPTED|None|2026-11-21T20:45:01|N/A|(null)
41|root-codalab-slurm-worker-nf|NODE_FAIL|NodeDown|2026-11-21T20:45:02|N/A|(null)
42|root-codalab-slurm-worker-bf|BOOT_FAIL|None|2026-11-21T20:45:03|N/A|(null)
";
        let jobs = parse(output, PREFIX).unwrap();
        let seen: Vec<_> = jobs
            .iter()
            .map(|j| (j.id.as_str(), j.state, j.reason.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [
                ("40", JobState::Preempted, None),
                ("41", JobState::Preempted, Some("NodeDown")),
                ("42", JobState::Failed, None),
            ]
        );
    }

    #[test]
    fn names_with_bars_and_empty_output() {
        assert!(parse("", PREFIX).unwrap().is_empty());
        assert!(parse("\n  \n", PREFIX).unwrap().is_empty());
        let jobs = parse(
            "9|root-codalab-slurm-worker-x|y|RUNNING|None|N/A|N/A|(null)\n",
            PREFIX,
        )
        .unwrap();
        assert_eq!(jobs[0].name, "root-codalab-slurm-worker-x|y");
        assert_eq!(jobs[0].submitted_at, None);
    }

    #[test]
    fn garbage_is_an_invalid_reply() {
        for bad in [
            "slurm_load_jobs error: Unable to contact slurm controller",
            "x|a|RUNNING|None|N/A|N/A|(null)",
            "1|a|b",
        ] {
            let err = parse(bad, PREFIX).unwrap_err();
            assert!(err.is_temporary(), "{err}");
            assert!(err.to_string().contains("squeue"), "{err}");
        }
    }

    /// Lines as the real squeue prints them (`%k`: `(null)` without a comment), #28 item 4:
    /// a job of another origin is left out, one without an origin is kept, and a job marked
    /// with no origin of ours (another comment) counts as without.
    #[test]
    fn jobs_of_another_origin_are_left_out() {
        let output = "\
1|root-codalab-slurm-worker-aa|RUNNING|None|2026-11-21T20:44:36|N/A|codalab-wm-origin=00000000000000aa
2|root-codalab-slurm-worker-bb|RUNNING|None|2026-11-21T20:44:36|N/A|codalab-wm-origin=00000000000000bb
3|root-codalab-slurm-worker-cc|RUNNING|None|2026-11-21T20:44:36|N/A|(null)
4|root-codalab-slurm-worker-dd|RUNNING|None|2026-11-21T20:44:36|N/A|a note
";
        let ids = |own| -> Vec<String> {
            let jobs = parse_own(output, PREFIX, own).unwrap();
            jobs.into_iter().map(|j| j.id).collect()
        };
        assert_eq!(ids(Some("00000000000000aa")), ["1", "3", "4"]);
        assert_eq!(ids(Some("00000000000000bb")), ["2", "3", "4"]);
        assert_eq!(ids(None), ["1", "2", "3", "4"], "every origin");
        assert_eq!(
            comment_option("00000000000000aa"),
            "--comment=codalab-wm-origin=00000000000000aa"
        );
    }

    #[test]
    fn times() {
        assert_eq!(
            parse_time("1970-01-01T00:00:00"),
            Some(SystemTime::UNIX_EPOCH)
        );
        assert_eq!(
            parse_time("2000-03-01T00:00:01"),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(951_868_801))
        );
        for bad in ["N/A", "Unknown", "2026-13-01T00:00:00", "2026-01-01"] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn one_command_for_all_jobs() {
        assert_eq!(
            command("alice", None).join(" "),
            "squeue --noheader --states=all --user=alice --format=%i|%j|%T|%r|%V|%S|%k"
        );
        assert_eq!(
            command("alice", Some("cpu")).join(" "),
            "squeue --noheader --states=all --user=alice --partition=cpu --format=%i|%j|%T|%r|%V|%S|%k"
        );
    }
}
