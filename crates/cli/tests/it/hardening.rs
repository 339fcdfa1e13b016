//! Hostile flags, signals and local state (issue 22): the real binary against the in-process
//! fake CodaLab server, with the `local` backend, fake Slurm commands on `PATH`, and signals.

use codalab_wm_fake_codalab::FakeCodaLab;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::support;
use support::manager::command as manager;

/// An executable shell script `name` in `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Runs `wait`, a bounded polling loop, without holding up the fake server: these tests run it
/// inside the `#[tokio::test]` runtime that serves the fake CodaLab, and a worker thread that
/// sleeps in place can starve a task it holds (CI saw the manager never reach `sbatch` for
/// 60 s). `block_in_place` hands the thread's tasks to another first; outside a runtime it
/// just runs `wait`.
fn polling<T>(wait: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(wait)
}

/// Starts the manager in the background with its stderr in `<dir>/<name>.log`.
fn spawn_logged(command: &mut Command, dir: &Path, name: &str) -> (Child, PathBuf) {
    let log = dir.join(format!("{name}.log"));
    let child = command
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    (child, log)
}

/// Waits (bounded: 60 s) until the log holds `needle` at least `count` times.
fn wait_for_log(log: &Path, needle: &str, count: usize) -> String {
    polling(|| wait_for_log_here(log, needle, count))
}

fn wait_for_log_here(log: &Path, needle: &str, count: usize) -> String {
    for _ in 0..6000 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.matches(needle).count() >= count {
            return text;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!(
        "`{needle}` x{count} never logged:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// Waits for `child` to exit, at most `limit` (a generous upper bound, not a measurement);
/// kills it and fails past that.
fn exit_within(child: &mut Child, limit: Duration, log: &Path) -> ExitStatus {
    polling(|| exit_within_here(child, limit, log))
}

fn exit_within_here(child: &mut Child, limit: Duration, log: &Path) -> ExitStatus {
    let steps = limit.as_millis() / 10;
    for _ in 0..steps {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    panic!(
        "the manager did not exit within {limit:?}:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// Runs the manager to its end (bounded: 120 s); returns its status and stderr.
fn run_to_end(command: &mut Command) -> (ExitStatus, String) {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, log) = spawn_logged(command, dir.path(), "run");
    let status = exit_within(&mut child, Duration::from_secs(120), &log);
    (status, std::fs::read_to_string(&log).unwrap())
}

fn kill(child: &Child, signal: &str) {
    let pid = child.id().to_string();
    let status = Command::new("kill").args([signal, &pid]).status().unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

#[test]
fn huge_durations_are_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let state = state.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "--sleep-time",
                "18446744073709551615",
                "--listen",
                "127.0.0.1:0",
            ],
            "--sleep-time (`sleep_time` in the config file) is 18446744073709551615 seconds",
        ),
        (&["--sleep-time", "0"], "--sleep-time"),
        (
            &["--min-seconds-between-workers", "18446744073709551615"],
            "--min-seconds-between-workers",
        ),
        (
            &["--worker-checkin-frequency-seconds", "99999999999"],
            "--worker-checkin-frequency-seconds",
        ),
    ];
    for (flags, expected) in cases {
        let mut args = vec!["--server", "http://127.0.0.1:9", "--once"];
        args.extend(flags);
        args.extend(["local", "--state-dir", state]);
        let (status, log) = run_to_end(&mut manager(&args));
        assert_eq!(status.code(), Some(2), "{flags:?}: {log}");
        assert!(log.contains(expected), "{flags:?}: {log}");
        assert!(log.contains("must be between"), "{flags:?}: {log}");
    }
}

#[test]
fn huge_durations_in_the_config_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wm.toml");
    std::fs::write(
        &config,
        "server = \"http://127.0.0.1:9\"\nbackend = \"local\"\n\n[worker]\nidle_seconds = 9223372036854775807\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let (status, log) = run_to_end(&mut manager(&["--config", config, "--once"]));
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(log.contains("`worker.idle_seconds`"), "{log}");

    let pools = dir.path().join("pools.toml");
    std::fs::write(
        &pools,
        "server = \"http://127.0.0.1:9\"\n\n[[pools]]\nname = \"cpu\"\nbackend = \"local\"\nlaunch_mode = \"target\"\npending_timeout = 9999999999\n",
    )
    .unwrap();
    let pools = pools.to_str().unwrap();
    let (status, log) = run_to_end(&mut manager(&["--config", pools, "--once"]));
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(
        log.contains("`pools.pending_timeout` of pool `cpu`"),
        "{log}"
    );

    // `config check` (contacts nothing) reports it too.
    let output = manager(&["config", "check", pools]).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.contains("`pools.pending_timeout` of pool `cpu`"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_after_seconds_0_is_off() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (mut child, log) = spawn_logged(
        &mut manager(&[
            "--server",
            &server.url(),
            "--sleep-time",
            "1",
            "--restart-after-seconds",
            "0",
            "--min-workers",
            "0",
            "local",
            "--state-dir",
            state.to_str().unwrap(),
        ]),
        dir.path(),
        "manager",
    );
    let text = wait_for_log(&log, "worker jobs (min=0, max=10)", 2);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!text.contains("restarting"), "{text}");
    assert_eq!(text.matches("started worker manager").count(), 1, "{text}");
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_worker_exiting_1_at_once_counts_as_failed() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let worker = script(
        dir.path(),
        "failing-worker.sh",
        "echo 'cannot start'\nexit 1",
    );
    let state = dir.path().join("state");
    let (status, log) = run_to_end(&mut manager(&[
        "--server",
        &server.url(),
        "--sleep-time",
        "1",
        "--min-seconds-between-workers",
        "0",
        "--min-workers",
        "1",
        "--exit-after-num-failed",
        "2",
        "--worker-executable",
        worker.to_str().unwrap(),
        "local",
        "--state-dir",
        state.to_str().unwrap(),
    ]));
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(log.contains("exited with status 1 after"), "{log}");
    assert!(log.contains("more than --exit-after-num-failed 2"), "{log}");
    // Private state: the dir 0700, records and logs 0600; ended workers' files are pruned.
    assert_eq!(mode(&state), 0o700);
    let files: Vec<PathBuf> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let logs = files
        .iter()
        .filter(|f| f.extension() == Some("log".as_ref()));
    assert!((1..=10).contains(&logs.clone().count()), "{files:?}");
    for file in &files {
        assert_eq!(mode(file), 0o600, "{}", file.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_manager_on_the_same_state_dir_is_refused() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let args = [
        "--server",
        &server.url(),
        "--sleep-time",
        "1",
        "--min-workers",
        "0",
        "local",
        "--state-dir",
        state.to_str().unwrap(),
    ];
    let (mut first, log) = spawn_logged(&mut manager(&args), dir.path(), "first");
    wait_for_log(&log, "worker jobs (min=0, max=10)", 1);
    let (second, second_log) = run_to_end(&mut manager(&args));
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(second.code(), Some(2), "{second_log}");
    let holder = format!("in use by another manager (pid {}", first.id());
    assert!(second_log.contains(&holder), "{second_log}");
    // Once the first is gone, the dir is free again.
    let (status, log) = run_to_end(&mut manager(
        &[&args[..2], &["--once"], &args[2..]].concat(),
    ));
    assert!(status.success(), "{log}");
}

#[test]
fn a_state_dir_others_may_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (status, log) = run_to_end(&mut manager(&[
        "--server",
        "http://127.0.0.1:9",
        "--once",
        "local",
        "--state-dir",
        state.to_str().unwrap(),
    ]));
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(
        log.contains("is writable by group or others (mode 0777)"),
        "{log}"
    );
}

/// Waits (bounded: 60 s) until `path` exists.
fn wait_for_file(path: &Path) {
    polling(|| {
        for _ in 0..6000 {
            if path.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{} was never created", path.display());
    })
}

/// A directory of fake Slurm commands (`squeue`, `sbatch` with the given bodies; each first
/// creates `<dir>/<name>.started`) to put first on `PATH`.
fn fake_slurm(dir: &Path, squeue: &str, sbatch: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    for (name, body) in [("squeue", squeue), ("sbatch", sbatch)] {
        let started = bin.join(format!("{name}.started"));
        script(
            &bin,
            name,
            &format!("touch '{}'\n{body}", started.display()),
        );
    }
    bin
}

/// The manager on `slurm-batch` with the fake commands of `bin` first on `PATH`, in `dir`.
fn slurm_manager(server: &str, bin: &Path, dir: &Path, extra: &[&str]) -> Command {
    let mut args = vec![
        "--server",
        server,
        "--sleep-time",
        "1",
        "--min-seconds-between-workers",
        "0",
    ];
    args.extend(extra);
    args.extend(["slurm-batch", "--partition", "cpu", "--gpus", "0"]);
    let mut command = manager(&args);
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    command.env("PATH", path).current_dir(dir);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_squeue_times_out_and_the_loop_goes_on() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_slurm(dir.path(), "exec sleep 600", "exit 1");
    let mut command = slurm_manager(&server.url(), &bin, dir.path(), &["--min-workers", "0"]);
    command.env("CODALAB_WM_SLURM_BATCH__COMMAND_TIMEOUT_SECONDS", "1");
    let (mut child, log) = spawn_logged(&mut command, dir.path(), "manager");
    // Two timeouts in a row: the first did not stop the loop.
    let text = wait_for_log(&log, "did not finish within 1 s and was killed", 2);
    kill(&child, "-TERM");
    let status = exit_within(&mut child, Duration::from_secs(60), &log);
    assert!(status.success(), "{status}");
    assert!(
        text.contains("`squeue` did not finish within 1 s"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cancels_a_hanging_squeue_and_exits_0() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_slurm(dir.path(), "exec sleep 600", "exit 1");
    let mut command = slurm_manager(&server.url(), &bin, dir.path(), &["--min-workers", "0"]);
    let (mut child, log) = spawn_logged(&mut command, dir.path(), "manager");
    wait_for_file(&bin.join("squeue.started"));
    kill(&child, "-TERM");
    // The squeue would hang for 60 s (the default timeout) and the sleep for 600 s; the bound
    // is far below both.
    let status = exit_within(&mut child, Duration::from_secs(30), &log);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status}: {text}");
    assert!(text.contains("cancelling the current step"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigint_exits_at_once_with_130() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(vec![codalab_wm_fake_codalab::FakeBundle::new("alice", 1)]);
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_slurm(dir.path(), "exit 0", "exec sleep 600");
    let mut command = slurm_manager(&server.url(), &bin, dir.path(), &["--min-workers", "1"]);
    let (mut child, log) = spawn_logged(&mut command, dir.path(), "manager");
    wait_for_file(&bin.join("sbatch.started"));
    kill(&child, "-INT");
    wait_for_log(
        &log,
        "waiting up to 5 s for the worker job being submitted",
        1,
    );
    kill(&child, "-INT");
    let status = exit_within(&mut child, Duration::from_secs(30), &log);
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(130), "{text}");
    assert!(
        text.contains("second signal (SIGINT); exiting at once"),
        "{text}"
    );
}
