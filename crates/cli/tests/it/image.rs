//! The container image (`cargo xtask image`), built and run here: `xtask/image/build.sh` (the
//! script `cargo xtask image` runs) builds it from THIS test's binary on a Debian base made by
//! debootstrap, in the project's REAL dockerd (`cargo xtask services up docker`; no registry).
//! Then the image:
//! - prints the binary's `--version`, runs as the unprivileged user 65532, and holds no secret
//!   (its configuration's environment is `PATH` and the state dir's base only; credentials
//!   come at run time), and its default launch record dir is writable;
//! - run with the host's network against the REAL CodaLab 1.7.5 server (`services up
//!   codalab`) and `aws-batch` against moto (`services up moto`, the real `aws-sdk-batch`
//!   client in the binary) submits a worker job, which moto lists;
//! - run as `deploy/kubernetes/manager.yaml`'s Deployment runs it, translated by this test from
//!   the YAML: its pod's and container's securityContext (read-only root, its user and group,
//!   fsGroup, no privilege escalation, no capabilities), only its declared volumes (the
//!   ConfigMap's files read-only, the PersistentVolumeClaim as a host dir owned by fsGroup as
//!   kubelet makes it), its env (the Secret's keys given by the test) and its args, it ticks
//!   against the REAL CodaLab server and the fake Kubernetes API server (`crates/testkit/k8s`,
//!   in place of the cluster the in-cluster service account would name), answers `/healthz`,
//!   launches a worker pod, and a `docker restart` and a `docker kill` + `docker start` keep its
//!   launch records and its budget's day (on the claim's volume).
//!
//! Locally a missing service skips the test; under `CI=true` it fails.
#![cfg(feature = "aws")]

use crate::support;
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
    // The tests of this file build the same tag: once per process.
    static BUILT: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if *built {
        return;
    }
    let output = Command::new("bash")
        .arg(repo().join("xtask/image/build.sh"))
        .args([BIN, TAG])
        .env("SERVICES_DIR", repo().join(".services"))
        .output()
        .unwrap();
    assert!(output.status.success(), "build.sh: {}", text(&output));
    *built = true;
}

#[test]
fn the_image_runs_unprivileged_holds_no_secret_and_submits_a_worker_job() {
    let _turn = support::turn(module_path!());
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

/// The objects of a multi-document YAML file, as JSON.
fn yaml_objects(path: &std::path::Path) -> Vec<serde_json::Value> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| {
            let value = serde_yaml::Value::deserialize(document).unwrap();
            serde_json::to_value(value).unwrap()
        })
        .filter(|object| !object.is_null())
        .collect()
}

/// The launches (uniques) and the worker-seconds of use in the record files under `dir`.
fn records_in(dir: &std::path::Path) -> (std::collections::BTreeSet<String>, f64) {
    let (mut launches, mut usage) = (std::collections::BTreeSet::new(), 0.0);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let Ok(record) =
            serde_json::from_slice::<serde_json::Value>(&std::fs::read(&path).unwrap())
        else {
            continue;
        };
        launches.extend(
            record["launches"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone()),
        );
        usage += (record["usage"].as_array().into_iter().flatten())
            .filter_map(|entry| entry[1].as_f64())
            .sum::<f64>();
    }
    (launches, usage)
}

/// `docker run` arguments of the Deployment's pod in `manifest`, its volumes made under
/// `volumes`; the Secret's keys from `secrets`. Asserts what the translation relies on.
fn pod_run_args(
    objects: &[serde_json::Value],
    volumes: &std::path::Path,
    secrets: &[(&str, &str)],
) -> (Vec<String>, Option<std::path::PathBuf>) {
    use std::os::unix::fs::PermissionsExt;
    let kind = |k: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == k)
            .unwrap_or_else(|| panic!("no {k}"))
    };
    let pod = &kind("Deployment")["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "one container");
    let container = &containers[0];
    let (pod_security, security) = (&pod["securityContext"], &container["securityContext"]);
    let pick = |key: &str| {
        container["securityContext"][key]
            .as_u64()
            .or(pod_security[key].as_u64())
    };
    let user = pick("runAsUser").expect("runAsUser");
    assert_ne!(user, 0, "a non-root user");
    assert_eq!(pod_security["runAsNonRoot"], true);
    // Without runAsGroup, the image's group (its USER 65532:65532).
    let group = pick("runAsGroup").unwrap_or(65532);
    let mut args: Vec<String> = vec!["--user".into(), format!("{user}:{group}")];
    let fs_group = pod_security["fsGroup"].as_u64();
    if let Some(fs_group) = fs_group {
        args.extend(["--group-add".into(), fs_group.to_string()]);
    }
    assert_eq!(security["readOnlyRootFilesystem"], true, "a read-only root");
    args.push("--read-only".into());
    if security["allowPrivilegeEscalation"] == false {
        args.extend(["--security-opt".into(), "no-new-privileges".into()]);
    }
    for cap in security["capabilities"]["drop"]
        .as_array()
        .into_iter()
        .flatten()
    {
        args.extend(["--cap-drop".into(), cap.as_str().unwrap().into()]);
    }
    let mut claim_dir = None;
    for mount in container["volumeMounts"].as_array().unwrap() {
        let name = mount["name"].as_str().unwrap();
        let target = mount["mountPath"].as_str().unwrap();
        let volume = (pod["volumes"].as_array().unwrap().iter())
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("volume {name}"));
        let host = volumes.join(name);
        std::fs::create_dir_all(&host).unwrap();
        let read_only = if mount["readOnly"] == true {
            ",readonly"
        } else {
            ""
        };
        if let Some(map) = volume["configMap"]["name"].as_str() {
            let map = (objects.iter())
                .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == map)
                .unwrap();
            for (file, content) in map["data"].as_object().unwrap() {
                std::fs::write(host.join(file), content.as_str().unwrap()).unwrap();
            }
            std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o755)).unwrap();
        } else if let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() {
            assert!(
                objects.iter().any(|o| o["kind"] == "PersistentVolumeClaim" && o["metadata"]["name"] == claim),
                "the manifest declares the claim {claim}"
            );
            // kubelet with fsGroup: the volume's group is fsGroup, setgid, group-writable.
            let gid = fs_group.expect("fsGroup makes the claim writable for the user");
            std::os::unix::fs::chown(&host, Some(0), Some(gid as u32)).unwrap();
            std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o2775)).unwrap();
            claim_dir = Some(host.clone());
        } else if let Some(secret) = volume["secret"]["secretName"].as_str() {
            // kubelet: a file per key, defaultMode, with fsGroup the files' group.
            let mode = volume["secret"]["defaultMode"].as_u64().unwrap_or(0o644) as u32;
            let gid = fs_group.map(|g| g as u32);
            for (key, value) in secrets {
                let file = host.join(key);
                std::fs::write(&file, value).unwrap();
                std::os::unix::fs::chown(&file, Some(0), gid).unwrap();
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            }
            assert!(!secret.is_empty());
            std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o755)).unwrap();
        } else {
            panic!(
                "volume {name}: only configMap, persistentVolumeClaim and secret are translated: {volume}"
            );
        }
        args.extend([
            "--mount".into(),
            format!(
                "type=bind,source={},target={target}{read_only}",
                host.display()
            ),
        ]);
    }
    for var in container["env"].as_array().unwrap() {
        let name = var["name"].as_str().unwrap();
        let value = match var["value"].as_str() {
            Some(value) => value.to_owned(),
            None => {
                let key = var["valueFrom"]["secretKeyRef"]["key"].as_str().unwrap();
                let (_, value) = secrets.iter().find(|(k, _)| *k == key).unwrap();
                (*value).to_owned()
            }
        };
        args.extend(["-e".into(), format!("{name}={value}")]);
    }
    (args, claim_dir)
}

/// Creates, in the fake API server, the Secret the Deployment's env reads (`kubectl create
/// secret generic` of the manifest's instructions), in the namespace of the ConfigMap's config.
#[cfg(feature = "k8s")]
async fn create_secret(
    fake: &codalab_wm_fake_k8s::FakeApiServer,
    objects: &[serde_json::Value],
    secrets: &[(&str, &str)],
) {
    use base64::Engine;
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    let volumes = &deployment["spec"]["template"]["spec"]["volumes"];
    let names: std::collections::BTreeSet<&str> = (env.as_array().unwrap().iter())
        .filter_map(|v| v["valueFrom"]["secretKeyRef"]["name"].as_str())
        .chain(
            (volumes.as_array().unwrap().iter()).filter_map(|v| v["secret"]["secretName"].as_str()),
        )
        .collect();
    let map = objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    let config = map["data"]["config.toml"].as_str().unwrap();
    let namespace = (config.lines())
        .find_map(|l| l.trim().strip_prefix("namespace = "))
        .expect("[kubernetes] namespace")
        .trim_matches('"');
    let data: serde_json::Map<String, serde_json::Value> = (secrets.iter())
        .map(|(k, v)| {
            let value = base64::engine::general_purpose::STANDARD.encode(v);
            ((*k).to_owned(), value.into())
        })
        .collect();
    for name in names {
        let secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        });
        let url = format!("{}/api/v1/namespaces/{namespace}/secrets", fake.url());
        let response = reqwest::Client::new()
            .post(url)
            .json(&secret)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{:?}",
            response.text().await
        );
    }
}

/// A container removed when the test ends, passed or not.
struct Removed(String);

impl Drop for Removed {
    fn drop(&mut self) {
        docker(&["rm", "-f", &self.0]);
    }
}

/// The `key=value` the container last logged (JSON logs: `"key":"value"`).
fn logged_json(log: &str, key: &str) -> Option<String> {
    log.lines().rev().find_map(|line| {
        let line: serde_json::Value = serde_json::from_str(line).ok()?;
        let value = line.get(key).or_else(|| line["fields"].get(key))?;
        Some(value.as_str()?.to_owned())
    })
}

/// The status code of `GET /healthz` on `addr`.
fn healthz(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    let request = format!("GET /healthz HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    // The status code of the status line.
    Some(response.split_whitespace().nth(1)?.to_owned())
}

/// Polls `docker logs` of `name` until `done` holds (bounded); panics with the log.
fn wait_logs(name: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    for _ in 0..1200 {
        let log = text(&docker(&["logs", name]));
        if done(&log) {
            return log;
        }
        let state = text(&docker(&["inspect", "--format", "{{.State.Status}}", name]));
        assert!(
            !state.contains("exited"),
            "the container exited while waiting for {what}:\n{log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    panic!(
        "timed out waiting for {what}:\n{}",
        text(&docker(&["logs", name]))
    );
}

#[cfg(feature = "k8s")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifests_pod_runs_read_only_ticks_and_keeps_records_and_budget_across_restarts() {
    let _turn = support::turn(module_path!());
    if !require_service("docker", docker_running())
        || !require_service("codalab", codalab_running())
    {
        return;
    }
    let fake = codalab_wm_fake_k8s::FakeApiServer::start().await;
    fake.auto_kubelet(true);
    let objects = yaml_objects(&repo().join("deploy/kubernetes/manager.yaml"));
    let secrets = [
        ("codalab-username", "alice"),
        ("codalab-password", "alicepw"),
    ];
    create_secret(&fake, &objects, &secrets).await;
    tokio::task::spawn_blocking(move || {
        build_image();
        let volumes = tempfile::tempdir().unwrap();
        let (pod_args, claim) = pod_run_args(&objects, volumes.path(), &secrets);
        let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        let name = unique("manifest");
        let mut run: Vec<String> = ["run", "-d", "--name", &name, "--network", "host"]
            .map(String::from)
            .into();
        run.extend(pod_args);
        // The test's stand-ins: the real CodaLab server instead of the public one, the fake
        // API server instead of the in-cluster one, a port of 127.0.0.1, and a worker to launch
        // and a budget to meter (the ConfigMap has min_workers = 0 and no budget).
        for pair in [
            format!("CODALAB_WM_SERVER={SERVER}"),
            format!("CODALAB_WM_KUBERNETES__CLUSTER_HOST={}", fake.url()),
            "CODALAB_WM_LISTEN=127.0.0.1:0".into(),
            "CODALAB_WM_MIN_WORKERS=1".into(),
            "CODALAB_WM_MIN_SECONDS_BETWEEN_WORKERS=0".into(),
            "CODALAB_WM_SLEEP_TIME=1".into(),
            "CODALAB_WM_MAX_WORKER_HOURS_PER_DAY=100".into(),
        ] {
            run.extend(["-e".into(), pair]);
        }
        run.push(TAG.into());
        run.extend(
            (container["args"].as_array().unwrap().iter()).map(|a| a.as_str().unwrap().to_owned()),
        );
        let run: Vec<&str> = run.iter().map(String::as_str).collect();
        let started = docker(&run);
        assert!(started.status.success(), "{}", text(&started));
        let _removed = Removed(name.clone());
        // The credentials are files of the Secret's volume: in neither the command line nor
        // the environment (`docker inspect` shows both, as `kubectl describe` does).
        let shown = text(&docker(&["inspect", "--format", "{{json .Config}}", &name]));
        assert!(
            !shown.contains("alicepw") && shown.contains("CODALAB_WM_SECRETS_DIR"),
            "{shown}"
        );

        // Without a claim (the manifest before #40) the records would be in the container:
        // it must not even start on its read-only root.
        let records =
            (claim.as_ref()).map_or_else(|| volumes.path().join("no-claim"), |c| c.join("records"));
        // Budget use is written to the record once a minute: wait for a first non-zero save.
        let log = wait_logs(
            &name,
            "a launch and budget use on the claim's volume",
            |_| {
                let (launches, usage) = records_in(&records);
                !launches.is_empty() && usage > 0.0
            },
        );
        let addr = logged_json(&log, "addr").expect("the --listen address");
        assert_eq!(healthz(&addr).as_deref(), Some("200"), "{log}");
        // kubelet's probes while another client holds every `--listen` connection it can
        // (review 2026-11-27 §13): the manifest's readiness and liveness paths still answer,
        // and the pod keeps ticking.
        let socket: std::net::SocketAddr = addr.parse().unwrap();
        let runtime = tokio::runtime::Handle::current();
        let (flood, opened) = runtime.block_on(support::flood::Flood::start(socket, 1000));
        assert!(opened > 64, "only {opened} connections opened");
        let ticks = text(&docker(&["logs", &name]))
            .matches(" worker jobs (min=")
            .count();
        for probe in ["readinessProbe", "livenessProbe"] {
            let path = container[probe]["httpGet"]["path"].as_str().unwrap();
            let answers = runtime.block_on(support::flood::probe(socket, path));
            assert!(
                support::flood::answered(&answers),
                "{probe} {path} during the flood: {answers:?}"
            );
        }
        wait_logs(&name, "two more ticks during the flood", |log| {
            log.matches(" worker jobs (min=").count() >= ticks + 2
        });
        drop(flood);
        let (launched, used) = records_in(&records);

        for (how, stop) in [
            ("docker restart", &["restart", &name][..]),
            ("docker kill", &["kill", &name][..]),
        ] {
            let before = text(&docker(&["logs", &name]))
                .matches("launch record of pool")
                .count();
            let stopped = docker(stop);
            assert!(stopped.status.success(), "{how}: {}", text(&stopped));
            if how == "docker kill" {
                let again = docker(&["start", &name]);
                assert!(again.status.success(), "{}", text(&again));
            }
            let log = wait_logs(&name, "a tick after the restart", |log| {
                let tail = log.split("launch record of pool").nth(before + 1);
                tail.is_some_and(|t| t.contains(" worker jobs (min="))
            });
            let (now, usage) = records_in(&records);
            assert!(
                now.is_superset(&launched),
                "{how}: {launched:?} kept: {now:?}\n{log}"
            );
            assert!(
                usage + 1e-6 >= used,
                "{how}: the budget's day kept ({used} worker-seconds): {usage}\n{log}"
            );
            let addr = logged_json(&log, "addr").unwrap();
            assert_eq!(healthz(&addr).as_deref(), Some("200"), "{how}:\n{log}");
        }
    })
    .await
    .unwrap();
}
