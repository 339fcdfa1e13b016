//! The drop-in for CodaLab's own docker-compose deployment (`deploy/compose/
//! docker-compose.override.yml`), against the REAL deployment files of codalab 1.7.5 (the
//! PyPI package `services up codalab` installs ships `codalab_service.py` and
//! `docker_config/compose_files/docker-compose.yml`):
//!
//! - `codalab_service.py start --dry-run` prints the docker-compose command it runs for each
//!   worker-manager service (aws-batch, azure-batch, kubernetes; cpu and gpu) with the
//!   environment its settings give; REAL docker-compose (Debian's 1.29) renders each with our
//!   override added (`config`; `xtask/services/codalab/compose_commands.py`);
//! - every one of the six gets our image and keeps upstream's command line (less the secret
//!   flags) and environment, runs as the unprivileged user 65532, and keeps its launch records
//!   in a volume of its own (review §10: two managers of one pool identity on one record dir,
//!   the second is refused);
//! - no secret is on a command line or in the environment: the azure-batch key and the
//!   kubernetes token (upstream passes `--account-key` and `--auth-token`) and the CodaLab
//!   password come from files docker-compose mounts in /run/secrets, and upstream's
//!   environment has its secrets emptied (review §3, issue 40 item 6);
//! - our binary accepts each command line exactly as docker-compose splits it, with that
//!   environment: flags, config, credentials and backend set-up pass, and the first tick fails
//!   only on the server, a closed port of 127.0.0.1 (exit status 1, not 2).
//!
//! Locally a missing service skips the test; under `CI=true` it fails.

use crate::support;
use support::repo;

use codalab_wm_core::testing::require_service;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");
/// The Azure Batch account key (base64) of the compose services' secret file and the fake.
const AZURE_KEY: &str = "a2V5";

/// What the test's secret file mounted as `target` (in /run/secrets) holds: the account of
/// the server's root, the fake Azure Batch service's key, a cluster token.
fn secret_value(target: &str) -> &'static str {
    match target {
        "codalab-username" | "codalab-password" => "codalab",
        "azure_batch.account_key" => AZURE_KEY,
        "kubernetes.auth_token" => "token",
        other => panic!("the override mounts a secret this test does not know: {other}"),
    }
}

/// The six services, as `compose_commands.py` renders them with our override.
fn rendered(workdir: &Path) -> Vec<Value> {
    let python = repo().join(".services/codalab/venv/bin/python");
    let output = Command::new(python)
        .arg(repo().join("xtask/services/codalab/compose_commands.py"))
        .arg(repo().join("deploy/compose/docker-compose.override.yml"))
        .arg(workdir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "compose_commands.py: {stderr}");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The environment variable `name` of a rendered service (docker-compose gives a map).
fn env<'a>(service: &'a Value, name: &str) -> &'a str {
    service["environment"][name].as_str().unwrap_or("")
}

/// The volume of `service` mounted at the image's state dir (`/var/lib/codalab-wm`, where the
/// launch records go), as `docker-compose config` renders it (`source:target[:mode]` or a map).
fn record_volume(service: &Value) -> String {
    let volumes = service["volumes"].as_array().unwrap();
    let mounts: Vec<(String, String)> = volumes
        .iter()
        .map(|v| match v.as_str() {
            Some(short) => {
                let mut parts = short.split(':');
                let source = parts.next().unwrap_or("").to_owned();
                (source, parts.next().unwrap_or("").to_owned())
            }
            None => (
                v["source"].as_str().unwrap_or("").to_owned(),
                v["target"].as_str().unwrap_or("").to_owned(),
            ),
        })
        .collect();
    let records: Vec<&(String, String)> = (mounts.iter())
        .filter(|(_, target)| target == "/var/lib/codalab-wm")
        .collect();
    assert_eq!(records.len(), 1, "{}: {volumes:?}", service["service"]);
    let source = &records[0].0;
    assert!(
        !source.starts_with('/') && !source.is_empty(),
        "{}: a named volume, not a host dir: {source}",
        service["service"]
    );
    source.clone()
}

#[test]
fn our_image_runs_every_worker_manager_command_line_codalab_service_builds() {
    let _turn = support::turn(module_path!());
    let installed = repo().join(".services/codalab/venv/bin/python").exists();
    let compose = Path::new("/usr/bin/docker-compose").exists();
    if !require_service("codalab", installed)
        || !require_service("docker-compose (apt-get install docker-compose)", compose)
    {
        return;
    }
    let workdir = tempfile::tempdir().unwrap();
    let services = rendered(workdir.path());
    let names: Vec<&str> = services
        .iter()
        .map(|s| s["service"].as_str().unwrap())
        .collect();
    let want: Vec<String> = ["aws-batch", "azure-batch", "kubernetes"]
        .iter()
        .flat_map(|b| ["cpu", "gpu"].map(|k| format!("{b}-worker-manager-{k}")))
        .collect();
    assert_eq!(names, want);
    let mut record_volumes = std::collections::BTreeSet::new();
    for service in &services {
        let name = &service["service"];
        assert_eq!(service["image"], "codalab-wm:latest", "{name}");
        assert_eq!(
            service["entrypoint"],
            serde_json::json!(["/usr/bin/env"]),
            "{name}"
        );
        let argv: Vec<&str> = (service["argv"].as_array().unwrap().iter())
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(argv[0], "cl-worker-manager", "{name}");
        assert_eq!(
            env(service, "CODALAB_USERNAME"),
            "codalab",
            "{name}: upstream's environment"
        );
        assert_eq!(service["user"], "65532:65532", "{name}: not root");
        let volume = record_volume(service);
        assert!(
            record_volumes.insert(volume.clone()),
            "{name}: its record volume {volume} is another service's"
        );
        for secret in ["--account-key", "--auth-token", "a2V5", "token"] {
            assert!(!argv.contains(&secret), "{name}: {secret} in {argv:?}");
        }
        // Upstream's environment gives every service every secret: the override empties
        // them; the manager's come as files (`secrets:`), mounted in /run/secrets.
        for key in [
            "CODALAB_PASSWORD",
            "CODALAB_MYSQL_PASSWORD",
            "CODALAB_WORKER_MANAGER_AZURE_BATCH_ACCOUNT_KEY",
            "CODALAB_WORKER_MANAGER_CPU_KUBERNETES_AUTH_TOKEN",
            "CODALAB_WORKER_MANAGER_GPU_KUBERNETES_AUTH_TOKEN",
        ] {
            assert_eq!(env(service, key), "", "{name}: {key} in the environment");
        }
        assert_eq!(env(service, "CODALAB_WM_SECRETS_DIR"), "/run/secrets");
        let targets: Vec<&str> = (service["secrets"].as_array().unwrap().iter())
            .map(|s| s["target"].as_str().unwrap())
            .collect();
        let own = match name.as_str().unwrap() {
            n if n.starts_with("azure") => Some("azure_batch.account_key"),
            n if n.starts_with("kubernetes") => Some("kubernetes.auth_token"),
            _ => None,
        };
        let mut expected = vec!["codalab-password", "codalab-username"];
        expected.extend(own);
        expected.sort();
        let mut got = targets.clone();
        got.sort();
        assert_eq!(got, expected, "{name}");
        // The files as docker-compose mounts them (the admin's, mode 400).
        let secrets_dir = workdir.path().join(format!("secrets-{name}"));
        std::fs::create_dir_all(&secrets_dir).unwrap();
        for target in targets {
            let file = secrets_dir.join(target);
            std::fs::write(&file, format!("{}\n", secret_value(target))).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).unwrap();
        }

        let output = Command::new(BIN)
            .arg("--once")
            .args(&argv[1..])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("CODALAB_WM_SECRETS_DIR", &secrets_dir)
            .env("CODALAB_WM_RECORD_DIR", workdir.path().join(volume))
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{name}: {argv:?}\n{stderr}");
        let failed = "the tick failed: codalab server http://127.0.0.1:9 unreachable";
        assert!(stderr.contains(failed), "{name}: {stderr}");
    }
}

/// `docker`/`docker-compose` against the project's dockerd.
fn docker(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(program)
        .args(args)
        .env("DOCKER_HOST", support::bundles::docker_host())
        .output()
        .unwrap()
}

fn said(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// moto's second seeded queue (`xtask/services/moto/seed.py`), for the gpu service.
const SECOND_QUEUE: &str = "codalab-batch-spot";

/// The jobs the aws-batch services submitted (named after the job definition), terminated
/// when the test ends (moto keeps them running 15 min).
struct Jobs(String);

impl Drop for Jobs {
    fn drop(&mut self) {
        for queue in [support::moto::QUEUE, SECOND_QUEUE] {
            for status in ["SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING"] {
                let body = serde_json::json!({"jobQueue": queue, "jobStatus": status});
                let listing = support::moto::call("listjobs", &body.to_string());
                for job in listing["jobSummaryList"].as_array().into_iter().flatten() {
                    let named = job["jobName"].as_str().unwrap_or("");
                    if named.starts_with(&format!("{}-", self.0)) {
                        let body =
                            serde_json::json!({"jobId": job["jobId"], "reason": "test done"});
                        support::moto::call("terminatejob", &body.to_string());
                    }
                }
            }
        }
    }
}

/// A compose project taken down, its volumes with it, when the test ends.
struct Project(PathBuf, String);

impl Drop for Project {
    fn drop(&mut self) {
        let file = self.0.display().to_string();
        docker(
            "docker-compose",
            &["-p", &self.1, "-f", &file, "down", "-v", "-t", "5"],
        );
    }
}

/// All six services (the kubernetes pair, which one record dir made collide, review §10; the
/// aws-batch and azure-batch pairs), brought up by REAL docker-compose with our image and the
/// merged configs codalab_service.py's commands give with our override, beside the REAL
/// CodaLab server, against the fake Kubernetes API server, moto (`services up moto`) and the
/// in-repo fake Azure Batch service (the account's two jobs behind one URL): all tick, none
/// exits, each keeps its own launch record. The changes to codalab_service.py's services: the
/// host's network (`network_mode: host`) instead of upstream's networks, so that the loopback
/// server and fakes are reachable, and moto's endpoint in the aws-batch services' environment.
#[cfg(feature = "k8s")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_come_up_beside_the_real_server_tick_and_share_nothing() {
    let _turn = support::turn(module_path!());
    let installed = repo().join(".services/codalab/venv/bin/python").exists();
    let compose = Path::new("/usr/bin/docker-compose").exists();
    if !require_service("codalab", installed && support::codalab_running())
        || !require_service("docker-compose (apt-get install docker-compose)", compose)
        || !require_service("docker", support::bundles::docker_running())
        || !require_service("moto", support::moto::available())
    {
        return;
    }
    let fake = codalab_wm_fake_k8s::FakeApiServer::start().await;
    fake.auto_kubelet(true);
    let url = fake.url().to_owned();
    // The account's two jobs (upstream's settings give cpu-job and gpu-job) behind one service
    // URL, with the key of the services' secret file.
    let key = codalab_wm_core::secret::Secret::new(AZURE_KEY);
    let azure = codalab_wm_fake_azure::FakeBatch::start("acct", &key, "cpu-job")
        .await
        .unwrap();
    azure.also_serve("gpu-job");
    let azure_url = azure.url().to_owned();
    let definition = support::unique("compose");
    let _jobs = Jobs(definition.clone());
    tokio::task::spawn_blocking(move || {
        const TAG: &str = "codalab-wm:compose-test";
        let built = Command::new("bash")
            .arg(repo().join("xtask/image/build.sh"))
            .args([BIN, TAG])
            .env("SERVICES_DIR", repo().join(".services"))
            .output()
            .unwrap();
        assert!(built.status.success(), "build.sh: {}", said(&built));
        let workdir = tempfile::tempdir().unwrap();
        let settings = serde_json::json!({
            "CODALAB_SERVER": support::SERVER,
            "CODALAB_WORKER_MANAGER_CPU_KUBERNETES_CLUSTER_HOST": url,
            "CODALAB_WORKER_MANAGER_GPU_KUBERNETES_CLUSTER_HOST": url,
            "CODALAB_WORKER_MANAGER_SLEEP_TIME_SECONDS": "1",
            "CODALAB_WORKER_MANAGER_CPU_AWS_BATCH_QUEUE": support::moto::QUEUE,
            "CODALAB_WORKER_MANAGER_GPU_AWS_BATCH_QUEUE": SECOND_QUEUE,
            "CODALAB_WORKER_MANAGER_AWS_REGION": "us-east-1",
            "CODALAB_WORKER_MANAGER_AWS_BATCH_JOB_DEFINITION_NAME": definition,
            "CODALAB_WORKER_MANAGER_AZURE_BATCH_SERVICE_URL": azure_url,
        });
        let python = repo().join(".services/codalab/venv/bin/python");
        let output = Command::new(python)
            .arg(repo().join("xtask/services/codalab/compose_commands.py"))
            .arg(repo().join("deploy/compose/docker-compose.override.yml"))
            .arg(workdir.path())
            .env("COMPOSE_SETTINGS", settings.to_string())
            .env("COMPOSE_FULL", "1")
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", said(&output));
        let services: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
        let mut file = serde_json::Map::new();
        let mut volumes = serde_json::Map::new();
        let mut names = Vec::new();
        for service in &services {
            let name = service["service"].as_str().unwrap();
            names.push(name.to_owned());
            let mut config = service["config"].clone();
            let config = config.as_object_mut().unwrap();
            if name.starts_with("aws-batch-") {
                let environment = config["environment"].as_object_mut().unwrap();
                for (key, value) in support::moto::env() {
                    environment.insert(key.into(), value.into());
                }
            }
            config.remove("networks");
            config.remove("depends_on");
            config.insert("network_mode".into(), "host".into());
            config.insert("image".into(), TAG.into());
            volumes.insert(record_volume(service), serde_json::json!({}));
            file.insert(name.to_owned(), Value::Object(config.clone()));
        }
        assert_eq!(names.len(), 6, "{names:?}");
        // The admin's secret files (the override's `secrets:`), readable by the containers'
        // user only; the manager logs in with the server's root account from them.
        let secret_files = workdir.path().join("secrets");
        std::fs::create_dir_all(&secret_files).unwrap();
        let mut secrets = serde_json::Map::new();
        for config in file.values() {
            for secret in config["secrets"].as_array().into_iter().flatten() {
                let source = secret["source"].as_str().unwrap();
                let value = secret_value(secret["target"].as_str().unwrap());
                let path = secret_files.join(source);
                std::fs::write(&path, value).unwrap();
                std::os::unix::fs::chown(&path, Some(65532), Some(65532)).unwrap();
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
                secrets.insert(source.into(), serde_json::json!({"file": path}));
            }
        }
        assert!(secrets.contains_key("codalab-wm-password"), "{secrets:?}");
        let compose = serde_json::json!({
            "version": "3.5", "services": file, "volumes": volumes, "secrets": secrets,
        });
        let path = workdir.path().join("compose.json");
        std::fs::write(&path, compose.to_string()).unwrap();
        let project = format!("wmtest{}", std::process::id());
        let file = path.display().to_string();
        let _down = Project(path.clone(), project.clone());
        let up = docker("docker-compose", &["-p", &project, "-f", &file, "up", "-d"]);
        assert!(up.status.success(), "{}", said(&up));

        let container = |name: &str| format!("{project}_{name}_1");
        let mut records = std::collections::BTreeSet::new();
        for name in &names {
            let mut ticks = 0;
            for _ in 0..600 {
                let log = said(&docker("docker", &["logs", &container(name)]));
                let state = said(&docker(
                    "docker",
                    &["inspect", "-f", "{{.State.Status}}", &container(name)],
                ));
                assert!(state.trim() == "running", "{name} is {state}:\n{log}");
                ticks = log.matches(" worker jobs (min=").count();
                if ticks >= 3 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            assert!(
                ticks >= 3,
                "{name} ticks: {}",
                said(&docker("docker", &["logs", &container(name)]))
            );
            let listed = docker(
                "docker",
                &[
                    "exec",
                    &container(name),
                    "ls",
                    "/var/lib/codalab-wm/records",
                ],
            );
            assert!(listed.status.success(), "{}", said(&listed));
            let files: Vec<String> = String::from_utf8_lossy(&listed.stdout)
                .split_whitespace()
                .filter(|f| f.ends_with(".json"))
                .map(str::to_owned)
                .collect();
            assert_eq!(files.len(), 1, "{name}: one pool record: {files:?}");
            assert!(
                records.insert(files[0].clone()),
                "{name}: the other's identity: {files:?}"
            );
        }
        for name in &names {
            let state = said(&docker(
                "docker",
                &[
                    "inspect",
                    "-f",
                    "{{.State.Status}} {{.RestartCount}}",
                    &container(name),
                ],
            ));
            assert_eq!(state.trim(), "running 0", "{name}");
        }
    })
    .await
    .unwrap();
}
