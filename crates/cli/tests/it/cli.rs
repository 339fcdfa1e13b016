//! The `cl-worker-manager` binary as a user runs it: flags, config layering, credentials and
//! exit codes, against the in-process fake CodaLab server (`codalab_wm_fake_codalab`) with the
//! `local` backend and a worker stand-in script that records its argv and environment.

use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

/// A worker stand-in: records argv and the credential env next to itself, then exits.
fn stand_in(dir: &Path) -> PathBuf {
    let path = dir.join("cl-worker-stand-in.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\nprintf '%s\\n' \"$*\" >> \"$0.argv\"\nprintf '%s:%s\\n' \"$CODALAB_USERNAME\" \"$CODALAB_PASSWORD\" >> \"$0.env\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn manager(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("CODALAB_USERNAME")
        .env_remove("CODALAB_PASSWORD")
        .env("NO_COLOR", "1");
    for (key, _) in std::env::vars() {
        if key.starts_with("CODALAB_WM_") {
            command.env_remove(key);
        }
    }
    command
}

/// Runs the manager with its output in files, killing it if it runs longer than 120 s (no
/// test may hang CI).
trait Bounded {
    fn output_bounded(&mut self) -> std::io::Result<Output>;
}

impl Bounded for Command {
    fn output_bounded(&mut self) -> std::io::Result<Output> {
        let dir = tempfile::tempdir()?;
        let (out, err) = (dir.path().join("out"), dir.path().join("err"));
        self.stdout(std::fs::File::create(&out)?)
            .stderr(std::fs::File::create(&err)?);
        let mut child = self.spawn()?;
        let mut status = None;
        for _ in 0..12_000 {
            if let Some(done) = child.try_wait()? {
                status = Some(done);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let status = match status {
            Some(status) => status,
            None => {
                child.kill()?;
                panic!(
                    "cl-worker-manager did not exit within 120 s: {}",
                    std::fs::read_to_string(&err)?
                );
            }
        };
        Ok(Output {
            status,
            stdout: std::fs::read(out)?,
            stderr: std::fs::read(err)?,
        })
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Waits (bounded) for a file the stand-in writes after the manager has exited.
fn read_when_written(path: &Path) -> String {
    for _ in 0..400 {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{} was never written", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upstream_flag_reaches_the_worker_command_exactly() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(vec![FakeBundle {
        queue: "gpuq".into(),
        ..FakeBundle::new("alice", 1)
    }]);
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(dir.path());
    let state = dir.path().join("state");
    let url = server.url();
    let args = [
        "--server",
        &url,
        "--temp-session",
        "--min-workers",
        "0",
        "--max-workers",
        "2",
        "--search",
        "request_queue=gpuq",
        ".orderby=created",
        "--verbose",
        "--sleep-time",
        "1",
        "--restart-after-seconds",
        "1000",
        "--no-prefilter",
        "--once",
        "--min-seconds-between-workers",
        "0",
        "--worker-tag",
        "gpuq",
        "--worker-work-dir-prefix",
        "/juice",
        "--worker-max-work-dir-size",
        "88g",
        "--worker-delete-work-dir-on-exit",
        "--worker-idle-seconds",
        "888",
        "--worker-download-dependencies-max-retries",
        "5",
        "--worker-checkin-frequency-seconds",
        "30",
        "--worker-exit-after-num-runs",
        "8",
        "--worker-pass-down-termination",
        "--worker-exit-on-exception",
        "--worker-tag-exclusive",
        "--worker-group",
        "grp",
        "--worker-executable",
        worker.to_str().unwrap(),
        "--worker-shared-memory-size-gb",
        "10",
        "--worker-preemptible",
        "local",
        "--cpus",
        "2",
        "--gpus",
        "1",
        "--memory-mb",
        "4096",
        "--state-dir",
        state.to_str().unwrap(),
    ];
    let output = manager(&args)
        .env("CODALAB_USERNAME", "alice")
        .env("CODALAB_PASSWORD", "alicepw")
        .output_bounded()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let argv = read_when_written(&PathBuf::from(format!("{}.argv", worker.display())));
    let id = argv
        .split("--id host-")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(
        argv.trim(),
        format!(
            "--server {url} --verbose --exit-when-idle --idle-seconds 888 \
             --work-dir /juice/alice-codalab-LocalWorkerManager-scratch/workdir --id host-{id} \
             --network-prefix cl_worker_{id}_network --tag gpuq --group grp --exit-after-num-runs 8 \
             --download-dependencies-max-retries 5 --max-work-dir-size 88g --delete-work-dir-on-exit \
             --exit-on-exception --tag-exclusive --pass-down-termination --checkin-frequency-seconds 30 \
             --shared-memory-size-gb 10 --preemptible"
        )
    );
    let env = read_when_written(&PathBuf::from(format!("{}.env", worker.display())));
    assert_eq!(env.trim(), "alice:alicepw");
    let search = server
        .requests()
        .into_iter()
        .find(|r| r.path == "/rest/bundles")
        .unwrap();
    assert_eq!(
        search.query,
        "worksheet=None&keywords=state%3Dstaged&keywords=request_queue%3Dgpuq\
         &keywords=.orderby%3Dcreated&keywords=.mine&keywords=request_queue%3Dgpuq%2Ctag%3Dgpuq&keywords=.limit%3D10"
    );
    let logs = text(&output);
    assert!(
        !logs.contains("alicepw"),
        "the password leaked into the logs:\n{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_file_env_and_flags_layer_in_that_order() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles((0..3).map(|n| FakeBundle::new("alice", n)).collect());
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(dir.path());
    let config = dir.path().join("wm.toml");
    std::fs::write(
        &config,
        format!(
            "server = \"{}\"\nmin_workers = 0\nmax_workers = 0\nbackend = \"local\"\nonce = true\n\
             [worker]\nexecutable = \"{}\"\nidle_seconds = 11\ntag = \"from-file\"\n[local]\nstate_dir = \"{}\"\n",
            server.url(),
            worker.display(),
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    // The file says max 0 (no launch); env raises it to 5; the flag sets the tag.
    let output = manager(&[
        "--config",
        config.to_str().unwrap(),
        "--worker-tag",
        "from-flag",
    ])
    .env("CODALAB_USERNAME", "alice")
    .env("CODALAB_PASSWORD", "alicepw")
    .env("CODALAB_WM_MAX_WORKERS", "5")
    .env("CODALAB_WM_LOG", "info,codalab_wm_core=debug")
    .env("CODALAB_WM_WORKER__IDLE_SECONDS", "22")
    .output_bounded()
    .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let argv = read_when_written(&PathBuf::from(format!("{}.argv", worker.display())));
    assert!(
        argv.contains("--idle-seconds 22 "),
        "env beats file: {argv}"
    );
    assert!(argv.contains("--tag from-flag"), "flag beats file: {argv}");
}

#[test]
fn unknown_config_keys_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wm.toml");
    std::fs::write(&config, "max_workers = 3\n[worker]\nidle_secs = 5\n").unwrap();
    let output = manager(&["--config", config.to_str().unwrap(), "local"])
        .output_bounded()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).contains("idle_secs"), "{}", text(&output));

    std::fs::write(&config, "[local]\ncpu = 5\n").unwrap();
    let output = manager(&["--config", config.to_str().unwrap(), "local"])
        .env("CODALAB_USERNAME", "a")
        .env("CODALAB_PASSWORD", "b")
        .output_bounded()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).contains("`cpu`"), "{}", text(&output));
}

#[test]
fn max_below_min_is_refused() {
    let output = manager(&["--min-workers", "3", "--max-workers", "2", "local"])
        .output_bounded()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).contains("--max-workers (2) is less than --min-workers (3)"),
        "{}",
        text(&output)
    );
}

#[test]
fn missing_credentials_are_explained() {
    let output = manager(&["local"]).output_bounded().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).contains(
            "set CODALAB_USERNAME and CODALAB_PASSWORD, pass --password-file, or give \
             codalab-username and codalab-password files in CODALAB_WM_SECRETS_DIR"
        ),
        "{}",
        text(&output)
    );
}

#[test]
fn a_password_file_readable_by_others_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pw");
    std::fs::write(&file, "alice\nalicepw\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let output = manager(&["local", "--password-file", file.to_str().unwrap()])
        .output_bounded()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).contains("is accessible by group or others (mode 644): run `chmod 600"),
        "{}",
        text(&output)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_exits_1_with_a_clear_message() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pw");
    std::fs::write(&file, "alice\nnot-the-password\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let state = dir.path().join("state");
    let output = manager(&[
        "--server",
        &server.url(),
        "--password-file",
        file.to_str().unwrap(),
        "local",
        "--state-dir",
        state.to_str().unwrap(),
    ])
    .output_bounded()
    .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let message = text(&output);
    assert!(
        message.contains("refused the credentials of user `alice`: Invalid credentials given."),
        "{message}"
    );
    assert!(!message.contains("not-the-password"));
}

#[test]
fn a_backend_that_is_not_compiled_in_says_which_feature() {
    for (name, feature) in [
        ("kubernetes", "k8s"),
        ("azure-batch", "azure"),
        ("aws-batch", "aws"),
        ("slurm-batch", "slurm"),
        ("gce", "gce"),
    ] {
        let output = manager(&[name]).output_bounded().unwrap();
        let message = text(&output);
        if message.contains("is not compiled in") {
            assert_eq!(output.status.code(), Some(2));
            assert!(message.contains(&format!(
                "backend `{name}` is not compiled in: rebuild with `--features {feature}`"
            )));
        }
    }
}

#[test]
fn help_lists_every_upstream_flag() {
    let output = manager(&["--help"]).output_bounded().unwrap();
    let help = text(&output);
    for flag in [
        "--server",
        "--temp-session",
        "--min-workers",
        "--max-workers",
        "--search",
        "--verbose",
        "--sleep-time",
        "--restart-after-seconds",
        "--no-prefilter",
        "--once",
        "--min-seconds-between-workers",
        "--worker-tag",
        "--worker-work-dir-prefix",
        "--worker-max-work-dir-size",
        "--worker-delete-work-dir-on-exit",
        "--worker-idle-seconds",
        "--worker-download-dependencies-max-retries",
        "--worker-checkin-frequency-seconds",
        "--worker-exit-after-num-runs",
        "--worker-pass-down-termination",
        "--worker-exit-on-exception",
        "--worker-tag-exclusive",
        "--worker-group",
        "--worker-executable",
        "--worker-shared-memory-size-gb",
        "--worker-preemptible",
    ] {
        assert!(
            help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
            "{flag} missing"
        );
    }
}

/// Starts the manager in the background with stderr in a file; returns the child and the file.
fn spawn_logged(command: &mut Command, dir: &Path) -> (std::process::Child, PathBuf) {
    let log = dir.join("stderr.log");
    let child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    (child, log)
}

/// Waits (bounded: 60 s) until the log holds `needle` at least `count` times.
fn wait_for_log(log: &Path, needle: &str, count: usize) -> String {
    for _ in 0..6000 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.matches(needle).count() >= count {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!(
        "`{needle}` x{count} never logged:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_step_and_exits_0() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (mut child, log) = spawn_logged(
        manager(&[
            "--server",
            &server.url(),
            "--sleep-time",
            "3600",
            "--min-workers",
            "0",
            "local",
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .env("CODALAB_USERNAME", "alice")
        .env("CODALAB_PASSWORD", "alicepw"),
        dir.path(),
    );
    wait_for_log(&log, "worker jobs (min=0, max=10)", 1);
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let mut status = None;
    for _ in 0..3000 {
        status = child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let Some(status) = status else {
        child.kill().unwrap();
        panic!("the manager did not exit on SIGTERM");
    };
    assert!(status.success(), "{status}");
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("shutdown requested; exiting")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_after_seconds_re_executes_with_the_same_arguments() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (mut child, log) = spawn_logged(
        manager(&[
            "--server",
            &server.url(),
            "--sleep-time",
            "1",
            "--restart-after-seconds",
            "1",
            "--min-workers",
            "0",
            "--log-format",
            "json",
            "local",
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .env("CODALAB_USERNAME", "alice")
        .env("CODALAB_PASSWORD", "alicepw"),
        dir.path(),
    );
    let text = wait_for_log(&log, "started worker manager", 2);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(text.contains("restarting"), "{text}");
    // The re-executed process kept the arguments: JSON logs, same server.
    for line in text
        .lines()
        .filter(|l| l.contains("started worker manager"))
    {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(event["server"], server.url());
    }
}
