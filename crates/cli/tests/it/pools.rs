//! `cl-worker-manager` with `[[pools]]` in the config file: two `local` pools against the
//! in-process fake CodaLab server (`codalab_wm_fake_codalab`), with a worker stand-in script
//! that records its argv; plus the configuration errors of pools and of the new global flags.

use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

/// A worker stand-in: appends its argv to `<itself>.argv`, then exits.
fn stand_in(dir: &Path) -> PathBuf {
    let path = dir.join("cl-worker-stand-in.sh");
    std::fs::write(&path, "#!/bin/sh\nprintf '%s\\n' \"$*\" >> \"$0.argv\"\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Runs the manager to completion (bounded: killed after 60 s) with alice's credentials.
fn run(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("CODALAB_USERNAME", "alice")
        .env("CODALAB_PASSWORD", "alicepw")
        .env("NO_COLOR", "1")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    for (key, _) in std::env::vars() {
        if key.starts_with("CODALAB_WM_") {
            command.env_remove(key);
        }
    }
    let mut child = command.spawn().unwrap();
    for _ in 0..6_000 {
        if let Some(status) = child.try_wait().unwrap() {
            return Output {
                status,
                stdout: std::fs::read(&out).unwrap(),
                stderr: std::fs::read(&err).unwrap(),
            };
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().unwrap();
    panic!(
        "cl-worker-manager did not exit within 60 s: {}",
        std::fs::read_to_string(&err).unwrap()
    );
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The argv of each worker recorded (`*.json`) in a local pool's state directory.
fn records(dir: &Path) -> Vec<String> {
    let mut records: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .map(|e| {
                    let record: serde_json::Value =
                        serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
                    let argv = record["argv"].as_array().unwrap().iter();
                    argv.map(|a| a.as_str().unwrap())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect()
        })
        .unwrap_or_default();
    records.sort();
    records
}

fn config_file(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("wm.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn two_local_pools(server: &str, worker: &Path, dir: &Path) -> String {
    format!(
        r#"server = "{server}"
once = true
[worker]
executable = "{worker}"

[[pools]]
name = "small"
backend = "local"
max = 5
max_launches_per_tick = 5
min_seconds_between_workers = 0
[pools.local]
cpus = 1
memory_mb = 1024
state_dir = "{small}"

[[pools]]
name = "gpu"
backend = "local"
cost = 5
max = 2
tag = "gpuq"
min_seconds_between_workers = 0
[pools.local]
cpus = 4
gpus = 1
memory_mb = 4096
state_dir = "{gpu}"
"#,
        worker = worker.display(),
        small = dir.join("small").display(),
        gpu = dir.join("gpu").display(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_local_pools_each_get_the_bundles_that_fit_them() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(vec![
        FakeBundle::new("alice", 1),
        FakeBundle::new("alice", 2),
        FakeBundle {
            gpus: 1,
            ..FakeBundle::new("alice", 3)
        },
        FakeBundle {
            cpus: 64,
            ..FakeBundle::new("alice", 4)
        },
        FakeBundle {
            queue: "nlp".into(),
            ..FakeBundle::new("alice", 5)
        },
    ]);
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(dir.path());
    let config = config_file(
        dir.path(),
        &two_local_pools(&server.url(), &worker, dir.path()),
    );
    let output = run(&["--config", config.to_str().unwrap()]);
    let logs = text(&output);
    assert!(output.status.success(), "{logs}");
    let small = records(&dir.path().join("small"));
    let gpu = records(&dir.path().join("gpu"));
    assert_eq!(
        small.len(),
        2,
        "the two 1-cpu bundles burst onto the small pool:\n{logs}"
    );
    assert_eq!(gpu.len(), 1, "the gpu bundle goes to the gpu pool:\n{logs}");
    assert!(gpu[0].contains("--tag gpuq"), "{}", gpu[0]);
    assert!(!small[0].contains("--tag"), "{}", small[0]);
    // Decisions and unserved bundles are logged per pool, with reasons.
    assert!(logs.contains("pool small: 2 bundles assigned"), "{logs}");
    assert!(logs.contains("pool gpu: 1 bundles assigned"), "{logs}");
    let misfit = format!(
        "bundle 0x{:032x} is not served: no pool can run this bundle",
        4
    );
    assert!(logs.contains(&misfit), "{logs}");
    assert!(
        logs.contains("request_queue=nlp does not match pool tag gpuq"),
        "{logs}"
    );
    // The staged search is not narrowed to any pool's tag.
    let search = server
        .requests()
        .into_iter()
        .find(|r| r.path == "/rest/bundles")
        .unwrap();
    assert!(!search.query.contains("request_queue"), "{}", search.query);
}

#[test]
fn pool_configuration_errors_name_the_pool_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(dir.path());
    let good = two_local_pools("http://127.0.0.1:9", &worker, dir.path());
    let cases = [
        (
            good.replace("max = 2\n", "max = 2\nmaxx = 3\n"),
            "unknown key: `maxx` is not a setting in [pools[1]] (did you mean `max`?)",
        ),
        (
            good.replace("cpus = 4\n", "cpus = 4\ncpu = 4\n"),
            "unknown key: `cpu` is not a setting in [pools.local of pool gpu] (did you mean `cpus`?)",
        ),
        (
            good.replace("[pools.local]\ncpus = 4", "[pools.slurm_batch]\ncpus = 4"),
            "pool gpu: [pools.slurm_batch] does not belong to backend local; its settings go in [pools.local]",
        ),
        (
            good.replace("backend = \"local\"\ncost", "backend = \"nosuch\"\ncost"),
            "pool gpu: unknown backend `nosuch`",
        ),
        (
            good.replace("name = \"gpu\"", "name = \"small\""),
            "two pools are named small",
        ),
        (
            good.replace("name = \"gpu\"", "name = \"g-pu\""),
            "pool name `g-pu` must be letters, digits and `_`",
        ),
        (
            good.replace(
                "tag = \"gpuq\"",
                "tag = \"gpuq\"\npending_timeout = 60\nlaunch_mode = \"compat\"",
            ),
            "pool gpu: pending_timeout needs launch_mode = \"target\"",
        ),
        (
            good.replace("max = 5", "max = 5\nmin = 6"),
            "pool small: max (5) is less than min (6)",
        ),
        (
            format!("backend = \"local\"\n{good}"),
            "choose either a backend",
        ),
        (
            good.replace("[worker]\n", "[worker]\ntag = \"x\"\n"),
            "set `tag` and `tag_exclusive` per pool",
        ),
    ];
    for (file, expected) in cases {
        let config = config_file(dir.path(), &file);
        let output = run(&["--config", config.to_str().unwrap()]);
        let logs = text(&output);
        assert_eq!(output.status.code(), Some(2), "{expected}: {logs}");
        assert!(logs.contains(expected), "expected `{expected}` in:\n{logs}");
    }
}

#[test]
fn burst_flags_need_target_mode() {
    let output = run(&["--max-launches-per-tick", "3", "--once", "local"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).contains("--max-launches-per-tick 3 needs --launch-mode target"),
        "{}",
        text(&output)
    );
    let output = run(&["--launch-mode", "burst", "local"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).contains("unknown launch mode `burst`: use compat or target"),
        "{}",
        text(&output)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_single_backend_mode_bursts_with_launch_mode_target() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles((0..4).map(|n| FakeBundle::new("alice", n)).collect());
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(dir.path());
    let state = dir.path().join("state");
    let url = server.url();
    let args = [
        "--server",
        &url,
        "--once",
        "--min-workers",
        "0",
        "--launch-mode",
        "target",
        "--max-launches-per-tick",
        "3",
        "--worker-executable",
        worker.to_str().unwrap(),
        "local",
        "--state-dir",
        state.to_str().unwrap(),
    ];
    let output = run(&args);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(records(&state).len(), 3, "{}", text(&output));
    assert!(
        text(&output).contains("launch_cap_reached"),
        "{}",
        text(&output)
    );
}
