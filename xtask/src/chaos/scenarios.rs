//! The fault scenarios. Each starts the real manager (Slurm backend, CodaLab through the fault
//! proxy), injects faults and checks from the outside: `squeue` for launches, the JSON log for
//! what the manager said, the process for crashes.

use super::event::Event;
use super::harness::{
    self, JobWatch, MAX_WORKERS, ManagerProcess, ManagerSpec, cancel_one, hold_jobs,
    is_skipped_tick, is_tick, wait_for_jobs,
};
use crate::proxy::{Fault, FaultProxy};
use anyhow::{Context, Result, bail, ensure};
use std::collections::BTreeSet;
use std::thread;
use std::time::{Duration, Instant};

/// What one scenario gets.
#[derive(Debug)]
pub struct Setup<'a> {
    /// The CodaLab proxy.
    pub proxy: &'a FaultProxy,
    /// The manager settings (job name unique to the scenario).
    pub spec: ManagerSpec,
    /// Staged bundles the search finds.
    pub staged: usize,
    /// Samples the scenario's jobs.
    pub watch: &'a JobWatch,
}

/// What a scenario reports.
#[derive(Debug, Default)]
pub struct Findings {
    /// Faults injected (requests faulted, services stopped, tokens revoked, kills).
    pub faults: u64,
    /// One line on what was seen.
    pub notes: Vec<String>,
    /// Jobs beyond `--max-workers` at once on a backend the scenario watched itself.
    pub beyond_max: usize,
}

/// A scenario: name, what it injects, the function.
pub type Scenario = (&'static str, &'static str, fn(&Setup) -> Result<Findings>);

/// The scenarios that run one after another, in this order, through one proxy, as [`harness::USER`].
pub const ALL: &[Scenario] = &[
    (
        "server-down-at-start",
        "CodaLab refuses connections for 8 s from the start",
        server_down_at_start,
    ),
    (
        "server-down-mid-run",
        "CodaLab refuses connections while a job ends",
        server_down_mid_run,
    ),
    (
        "token-revoked",
        "the manager's OAuth2 tokens deleted in MariaDB",
        token_revoked,
    ),
    (
        "bad-responses",
        "delay 6 s, truncate, HTML 500, 503, drop, reset, stall past the timeout",
        bad_responses,
    ),
    (
        "slurmctld-stopped",
        "slurmctld stopped (until a tick fails, +4 s), then started",
        slurmctld_stopped,
    ),
    (
        "aws-throttled",
        "moto answers 429 ThrottlingException, then 503, then SubmitJob replies cut",
        aws_throttled,
    ),
    (
        "gce-throttled",
        "the fake Compute Engine API answers 429 to API calls, then 503 to everything (token included)",
        super::gce::gce_throttled,
    ),
    (
        "hostile-server",
        "redirect to another origin, search reply nested 100,000 deep, endless body, 401 to the search",
        super::hostile::hostile_server,
    ),
    (
        "relogin-refused",
        "tokens revoked, then the token endpoint answers 401, 400 invalid_grant, 503, each for a spell of several retries",
        super::auth::relogin_refused,
    ),
    (
        "held-job",
        "one running worker job requeued and held (`scontrol requeuehold`) for 15 s",
        super::held::held_job,
    ),
    (
        "listen-flood",
        "one client holds every --listen connection it can for 30 s, reopening each one cut",
        super::flood::listen_flood,
    ),
    (
        "users-failing",
        "as root, four owners staged; the users endpoint answers 502 to every quota read for 45 s",
        super::users::users_failing,
    ),
    (
        "sigkill-after-submit",
        "SIGKILL right after a submit, restart, SIGTERM",
        sigkill_after_submit,
    ),
];

/// The scenarios that run one after another on a thread of their own, beside [`ALL`], through a
/// proxy of their own and as users of their own: no proxy fault and no revoked token of the others
/// reaches them, and what they inject reaches no other scenario. `dispatch-stopped` pauses CodaLab's
/// bundle manager, which no scenario of [`ALL`] needs (their stand-in workers never check in).
/// What does reach them is `slurmctld-stopped`'s few seconds without a controller: they count on
/// the manager riding that out, as it must.
pub const BESIDE: &[Scenario] = &[(
    "dispatch-stopped",
    "CodaLab's bundle manager paused for 180 s under one staged bundle; real cl-workers check in idle",
    super::dispatch::dispatch_stopped,
)];

const RECOVER: Duration = Duration::from_secs(40);

fn retry_seconds(event: &Event) -> Option<u64> {
    event.number("retry_in_seconds")
}

/// The `error` of an event, shortened to its start and its root cause.
fn error_text(event: &Event) -> String {
    let error = event.get("error").unwrap_or_default();
    let chars: Vec<char> = error.chars().collect();
    if chars.len() <= 130 {
        return error.to_owned();
    }
    let head: String = chars[..55].iter().collect();
    let tail: String = chars[chars.len() - 70..].iter().collect();
    format!("{head} … {tail}")
}

fn server_down_at_start(setup: &Setup) -> Result<Findings> {
    let mut findings = Findings::default();
    setup.proxy.set(Fault::Down);
    let mut manager = setup.spec.spawn("down-at-start")?;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(8) {
        ensure!(manager.alive()?, "manager gone");
        if let Some(jobs) = harness::slurm_jobs(&setup.spec.job_name) {
            ensure!(
                jobs.is_empty(),
                "launched while the server was down: {jobs:?}"
            );
        }
        thread::sleep(Duration::from_millis(250));
    }
    let skipped: Vec<Event> = manager
        .events_since(0)
        .into_iter()
        .filter(is_skipped_tick)
        .collect();
    let waits: Vec<u64> = skipped.iter().filter_map(retry_seconds).collect();
    ensure!(
        waits.len() >= 3,
        "expected at least 3 skipped ticks in 8 s, got {waits:?}"
    );
    ensure!(
        waits.windows(2).all(|w| w[0] <= w[1]) && waits.last() > waits.first(),
        "retries do not back off: {waits:?}"
    );
    findings.faults += waits.len() as u64;
    findings.notes.push(format!(
        "retry waits {waits:?} s; reason `{}`",
        error_text(&skipped[0])
    ));
    setup.proxy.set(Fault::Pass);
    let up = Instant::now();
    wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
    manager.wait_for_event(0, Duration::from_secs(1), "recovered from", |e| {
        e.message().starts_with("recovered from")
    })?;
    findings.notes.push(format!(
        "{MAX_WORKERS} jobs {} s after the server came up",
        up.elapsed().as_secs()
    ));
    manager.stop()?;
    Ok(findings)
}

fn server_down_mid_run(setup: &Setup) -> Result<Findings> {
    let mut findings = Findings::default();
    let mut manager = setup.spec.spawn("down-mid-run")?;
    wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
    let cursor = manager.cursor();
    setup.proxy.set(Fault::Down);
    let skipped = manager.wait_for_event(
        cursor,
        Duration::from_secs(10),
        "tick skipped",
        is_skipped_tick,
    )?;
    let ended = cancel_one(&setup.spec.job_name)?;
    hold_jobs(
        &mut manager,
        &setup.spec.job_name,
        MAX_WORKERS - 1,
        Duration::from_secs(6),
    )?;
    findings.faults += manager
        .events_since(cursor)
        .iter()
        .filter(|e| is_skipped_tick(e))
        .count() as u64;
    setup.proxy.set(Fault::Pass);
    let up = Instant::now();
    wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
    findings.notes.push(format!(
        "job {ended} ended while down: no launch for 6 s (`{}`); replaced {} s after the server came up",
        error_text(&skipped),
        up.elapsed().as_secs()
    ));
    manager.stop()?;
    Ok(findings)
}

fn token_revoked(setup: &Setup) -> Result<Findings> {
    let mut findings = Findings::default();
    let before = harness::newest_token_id()?;
    let mut manager = setup.spec.spawn("token-revoked")?;
    wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
    let cursor = manager.cursor();
    let deleted = harness::revoke_tokens(before)?;
    ensure!(deleted > 0, "no token of the user was in the database");
    findings.faults += 1;
    let relogin =
        manager.wait_for_event(cursor, Duration::from_secs(15), "logging in again", |e| {
            e.message().contains("logging in again")
        })?;
    // Several ticks after the re-login, and a job replaced with the new token.
    thread::sleep(Duration::from_secs(3));
    cancel_one(&setup.spec.job_name)?;
    wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
    let ticks: Vec<u64> = manager
        .events_since(cursor)
        .iter()
        .filter(|e| is_tick(e))
        .filter_map(|e| e.number("staged"))
        .collect();
    ensure!(
        ticks.len() >= 3,
        "too few ticks after the revocation: {ticks:?}"
    );
    ensure!(
        ticks.iter().all(|&s| s == setup.staged as u64),
        "a tick saw a wrong number of staged bundles after the revocation (want {} every time): {ticks:?}",
        setup.staged
    );
    findings.notes.push(format!(
        "{deleted} tokens deleted; `{}`; {} ticks after, all with {} staged",
        relogin.message(),
        ticks.len(),
        setup.staged
    ));
    manager.stop()?;
    Ok(findings)
}

fn bad_responses(setup: &Setup) -> Result<Findings> {
    let mut findings = Findings::default();
    let mut manager = setup.spec.spawn("bad-responses")?;
    wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
    // A slow server (6 s per request) only slows the ticks down.
    let cursor = manager.cursor();
    let before = setup.proxy.faulted();
    setup.proxy.set(Fault::Delay(Duration::from_secs(6)));
    let slow = Instant::now();
    manager.wait_for_event(cursor, Duration::from_secs(40), "a slow tick", is_tick)?;
    ensure!(
        slow.elapsed() >= Duration::from_secs(5),
        "a tick completed in {:?} through a 6 s delay",
        slow.elapsed()
    );
    setup.proxy.set(Fault::Pass);
    findings.faults += setup.proxy.faulted() - before;
    findings.notes.push(format!(
        "delay 6 s: tick completed in {} s",
        slow.elapsed().as_secs()
    ));
    let faults = [
        Fault::Truncate,
        Fault::html_500(),
        Fault::Reply {
            status: 503,
            content_type: "text/plain",
            body: "Service Unavailable".into(),
        },
        Fault::Drop,
        Fault::Reset,
        Fault::Stall,
    ];
    for fault in faults {
        wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
        let cursor = manager.cursor();
        let before = setup.proxy.faulted();
        setup.proxy.set(fault.clone());
        // A stalled tick fails after two 30 s request timeouts: the workers' check-ins (tolerated,
        // the last view kept) and then the staged search.
        let within = if fault == Fault::Stall { 75 } else { 15 };
        let skipped = manager.wait_for_event(
            cursor,
            Duration::from_secs(within),
            &format!("tick skipped ({})", fault.label()),
            is_skipped_tick,
        )?;
        let reason = error_text(&skipped);
        ensure!(
            !reason.is_empty(),
            "a skipped tick without a reason: {skipped}"
        );
        cancel_one(&setup.spec.job_name)?;
        hold_jobs(
            &mut manager,
            &setup.spec.job_name,
            MAX_WORKERS - 1,
            Duration::from_secs(3),
        )?;
        setup.proxy.set(Fault::Pass);
        findings.faults += setup.proxy.faulted() - before;
        wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
        findings
            .notes
            .push(format!("{}: `{reason}`", fault.label()));
    }
    manager.stop()?;
    Ok(findings)
}

fn slurmctld_stopped(setup: &Setup) -> Result<Findings> {
    let mut findings = Findings::default();
    let mut manager = setup.spec.spawn("slurmctld-stopped")?;
    harness::wait_for_started_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
    let before: BTreeSet<String> = harness::slurm_jobs(&setup.spec.job_name)
        .context("squeue failed")?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let cursor = manager.cursor();
    harness::stop_slurmctld()?;
    findings.faults += 1;
    let result = (|| -> Result<Event> {
        let skipped = manager.wait_for_event(
            cursor,
            Duration::from_secs(30),
            "tick skipped (slurmctld down)",
            is_skipped_tick,
        )?;
        thread::sleep(Duration::from_secs(4));
        ensure!(manager.alive()?, "manager gone");
        Ok(skipped)
    })();
    harness::start_slurmctld()?;
    let skipped = result?;
    wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
    hold_jobs(
        &mut manager,
        &setup.spec.job_name,
        MAX_WORKERS,
        Duration::from_secs(4),
    )?;
    let after = setup.watch.ids();
    ensure!(
        after == before,
        "jobs changed across the slurmctld restart (duplicate submission?): before {before:?}, after {after:?}"
    );
    manager.wait_for_event(cursor, Duration::from_secs(1), "recovered from", |e| {
        e.message().starts_with("recovered from")
    })?;
    findings.faults += manager
        .events_since(cursor)
        .iter()
        .filter(|e| is_skipped_tick(e))
        .count() as u64;
    findings.notes.push(format!(
        "`{}`; same {} jobs after the restart",
        error_text(&skipped),
        after.len()
    ));
    manager.stop()?;
    Ok(findings)
}

fn sigkill_after_submit(setup: &Setup) -> Result<Findings> {
    let mut findings = Findings::default();
    let mut first = setup.spec.spawn("sigkill-first")?;
    first.wait_for_event(0, RECOVER, "started a worker job", |e| {
        e.message() == "started a worker job"
    })?;
    first.kill()?;
    findings.faults += 1;
    let mut second: ManagerProcess = setup.spec.spawn("sigkill-restarted")?;
    let tick = second.wait_for_event(0, RECOVER, "first tick", is_tick)?;
    let adopted = tick.number("jobs").unwrap_or(0);
    ensure!(
        adopted >= 1,
        "the restarted manager did not count the job submitted before the kill: {tick}"
    );
    wait_for_jobs(&mut second, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
    hold_jobs(
        &mut second,
        &setup.spec.job_name,
        MAX_WORKERS,
        Duration::from_secs(4),
    )?;
    let ids = setup.watch.ids();
    ensure!(
        ids.len() == MAX_WORKERS,
        "expected {MAX_WORKERS} submissions in all across the kill and restart, saw {ids:?}"
    );
    second.stop()?;
    let stopped_log = harness::tail(&second.log);
    if !stopped_log.contains("shutdown requested") {
        bail!("no clean shutdown in the log:\n{stopped_log}");
    }
    findings.notes.push(format!(
        "restarted manager counted {adopted} job(s) at its first tick; {} ids in all; exit 0 on SIGTERM",
        setup.watch.ids().len()
    ));
    Ok(findings)
}

fn aws_throttled(setup: &Setup) -> Result<Findings> {
    let mut findings = Findings::default();
    let moto = FaultProxy::start(super::moto::ADDRESS.parse()?)?;
    let spec = ManagerSpec {
        backend: harness::Backend::Aws {
            endpoint: moto.url(),
        },
        ..setup.spec.clone()
    };
    let job_name = spec.job_name.clone();
    let watch = {
        let job_name = job_name.clone();
        JobWatch::start(move || super::moto::jobs(&job_name))
    };
    let result = (|| -> Result<()> {
        let throttled = Fault::Reply {
            status: 429,
            content_type: "application/json",
            body: r#"{"__type":"ThrottlingException","message":"Rate exceeded"}"#.into(),
        };
        let unavailable = Fault::Reply {
            status: 503,
            content_type: "application/json",
            body: r#"{"__type":"ServiceUnavailableException","message":"try later"}"#.into(),
        };
        moto.set(throttled);
        let mut manager = spec.spawn("aws-throttled")?;
        for (fault, next) in [("429", Some(unavailable)), ("503", None)] {
            let cursor = manager.cursor();
            let skipped = manager.wait_for_event(
                cursor,
                Duration::from_secs(30),
                &format!("tick skipped (moto {fault})"),
                is_skipped_tick,
            )?;
            thread::sleep(Duration::from_secs(3));
            ensure!(manager.alive()?, "manager gone");
            ensure!(
                watch.ids().is_empty(),
                "a job was submitted through a throttled API"
            );
            findings
                .notes
                .push(format!("{fault}: `{}`", error_text(&skipped)));
            if let Some(next) = next {
                moto.set(next);
            }
        }
        // Submissions reach moto but their replies are lost: the manager must count the jobs
        // it cannot confirm on the next listing, not submit more than --max-workers.
        moto.set_scoped(Fault::Truncate, "/v1/submitjob");
        let cut = Instant::now();
        while cut.elapsed() < Duration::from_secs(10) {
            ensure!(manager.alive()?, "manager gone");
            thread::sleep(Duration::from_millis(250));
        }
        moto.set(Fault::Pass);
        let start = Instant::now();
        while super::moto::jobs(&job_name).is_none_or(|jobs| jobs.len() < MAX_WORKERS) {
            ensure!(
                start.elapsed() < RECOVER,
                "no {MAX_WORKERS} jobs on moto after the faults"
            );
            ensure!(manager.alive()?, "manager gone");
            thread::sleep(Duration::from_millis(250));
        }
        thread::sleep(Duration::from_secs(3));
        let launch_errors = manager
            .events_since(0)
            .iter()
            .filter(|e| e.message().starts_with("could not start a worker job"))
            .count();
        findings.notes.push(format!(
            "submit replies cut for 10 s: {launch_errors} unconfirmed launches, {} jobs in all, at most {} at once",
            watch.ids().len(),
            watch.max_at_once()
        ));
        manager.stop()?;
        Ok(())
    })();
    findings.faults = moto.faulted();
    findings.beyond_max = watch.max_at_once().saturating_sub(MAX_WORKERS);
    let cleanup = super::moto::cancel_jobs(&job_name);
    result?;
    cleanup?;
    Ok(findings)
}
