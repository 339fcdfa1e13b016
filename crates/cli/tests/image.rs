//! The container image (`cargo xtask image`), built and run here: `xtask/image/build.sh` (the
//! script `cargo xtask image` runs) builds it from THIS test's binary on a Debian base made by
//! debootstrap, in the project's REAL dockerd (`cargo xtask services up docker`; no registry).
//! Then the image:
//! - prints the binary's `--version`, runs as the unprivileged user 65532, and holds no secret
//!   (its configuration's environment is `PATH` and the state dir's base only; credentials
//!   come at run time), and its default launch record dir is writable;
//! - run with the host's network against the REAL CodaLab 1.7.5 server (`services up
//!   codalab`) and `aws-batch` against moto (`services up moto`, the real `aws-sdk-batch`
//!   client in the binary) submits a worker job, which moto lists.
//!
//! Locally a missing service skips the test; under `CI=true` it fails.
#![cfg(feature = "aws")]

mod support;
use support::bundles::{docker_host, docker_running};
use support::{SERVER, codalab_running, repo, unique};

use codalab_wm_core::testing::require_service;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");
const TAG: &str = "codalab-wm:test";

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .env("DOCKER_HOST", docker_host())
        .output()
        .expect("the docker client (services up docker installs it)")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn build_image() {
    let output = Command::new("bash")
        .arg(repo().join("xtask/image/build.sh"))
        .args([BIN, TAG])
        .env("SERVICES_DIR", repo().join(".services"))
        .output()
        .unwrap();
    assert!(output.status.success(), "build.sh: {}", text(&output));
}

#[test]
fn the_image_runs_unprivileged_holds_no_secret_and_submits_a_worker_job() {
    if !require_service("docker", docker_running())
        || !require_service("codalab", codalab_running())
        || !require_service("moto", support::moto::available())
    {
        return;
    }
    build_image();
    let version = docker(&["run", "--rm", TAG, "--version"]);
    let ours = Command::new(BIN).arg("--version").output().unwrap();
    assert_eq!(text(&version), text(&ours), "the image runs this binary");

    let format = "{{.Config.User}} {{json .Config.Env}}";
    let config = docker(&["image", "inspect", "--format", format, TAG]);
    let config = text(&config);
    assert!(config.starts_with("65532:65532 "), "{config}");
    let env: Vec<String> = serde_json::from_str(config.split_once(' ').unwrap().1).unwrap();
    let names: Vec<&str> = env.iter().map(|e| e.split('=').next().unwrap()).collect();
    assert_eq!(names, ["PATH", "XDG_STATE_HOME"], "{env:?}");
    let id = docker(&["run", "--rm", "--entrypoint", "id", TAG, "-u"]);
    assert_eq!(text(&id).trim(), "65532");

    let definition = unique("image");
    let mut run = vec!["run", "--rm", "--network", "host"];
    let env = support::moto::env();
    let env: Vec<String> = (env.iter().map(|(k, v)| format!("{k}={v}")))
        .chain([
            "CODALAB_USERNAME=alice".into(),
            "CODALAB_PASSWORD=alicepw".into(),
        ])
        .collect();
    for pair in &env {
        run.extend(["-e", pair.as_str()]);
    }
    // No --record-dir: the image's default (/var/lib/codalab-wm/records) must be writable.
    run.extend([TAG, "--server", SERVER, "--once"]);
    run.extend(["--min-workers", "1", "--min-seconds-between-workers", "0"]);
    run.extend(["aws-batch", "--job-queue", support::moto::QUEUE]);
    run.extend(["--job-definition-name", &definition]);
    let output = docker(&run);
    let jobs = support::moto::unfinished_jobs(&definition);
    support::moto::terminate_jobs(&definition);
    let log = text(&output);
    assert!(output.status.success(), "{log}");
    assert!(log.contains("submitted a worker job"), "{log}");
    assert_eq!(
        jobs.len(),
        1,
        "moto lists the job the container submitted: {jobs:?}\n{log}"
    );
    assert!(!log.contains("alicepw"), "{log}");
}
