//! Tests of the job definition and submit request: upstream's shape, a snapshot of every flag
//! combination, hashing and redaction.

use super::*;
use codalab_wm_backend::secret::Secret;
use serde_json::{Value, json};

const PASSWORD: &str = "hunter2-not-for-logs";
const UNIQUE: &str = "0123456789abcdef0123456789abcdef";
const SECRET_ARN: &str = "arn:aws:secretsmanager:us-east-1:123456789012:secret:codalab-AbCdEf";
const ROLE_ARN: &str = "arn:aws:iam::123456789012:role/ecsTaskExecutionRole";
const SNAPSHOT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/snapshots/job_definitions.json"
);

fn credentials() -> Credentials {
    Credentials {
        username: "alice".into(),
        password: Secret::new(PASSWORD),
    }
}

fn worker() -> WorkerOptions {
    WorkerOptions {
        server: "https://codalab.example".into(),
        ..WorkerOptions::default()
    }
}

fn build(
    config: &AwsBatchConfig,
    worker: &WorkerOptions,
    host: &HostEnvironment,
) -> (JobDefinitionSpec, SubmitSpec) {
    let root = work_root(worker);
    let spec = JobDefinitionSpec::build(config, &credentials(), host, &root).with_hash_tag();
    let submit = Launch::new(UNIQUE, worker, &root, host).submit_spec(config, "codalab-worker");
    (spec, submit)
}

#[test]
fn defaults_give_upstreams_job_definition() {
    let (spec, submit) = build(
        &AwsBatchConfig::default(),
        &worker(),
        &HostEnvironment::default(),
    );
    let mut json = serde_json::to_value(&spec).unwrap();
    json["tags"][SPEC_HASH_TAG] = json!("<hash>");
    assert_eq!(
        json,
        json!({
            "jobDefinitionName": "codalab-worker",
            "type": "container",
            "containerProperties": {
                "image": "codalab/worker:latest",
                "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "2048"}],
                "environment": [
                    {"name": "CODALAB_USERNAME", "value": "alice"},
                    {"name": "CODALAB_PASSWORD", "value": PASSWORD},
                ],
                "volumes": [
                    {"host": {"sourcePath": "/var/run/docker.sock"}, "name": "var_run_docker_sock"},
                    {"host": {"sourcePath": "/tmp"}, "name": "work_dir"},
                ],
                "mountPoints": [
                    {"sourceVolume": "var_run_docker_sock", "containerPath": "/var/run/docker.sock", "readOnly": false},
                    {"sourceVolume": "work_dir", "containerPath": "/tmp", "readOnly": false},
                ],
                "readonlyRootFilesystem": false,
                "user": "root",
            },
            "retryStrategy": {"attempts": 1},
            "tags": {"codalab-wm:manager-id": "codalab-worker", "codalab-wm:spec-hash": "<hash>"},
        })
    );
    assert_eq!(submit.job_name, format!("codalab-worker-{UNIQUE}"));
    assert_eq!(submit.job_queue, "codalab-batch-cpu");
    assert_eq!(
        submit.container_overrides.command,
        [
            "/bin/bash".to_owned(),
            "-c".to_owned(),
            format!(
                "/opt/scripts/detect-ec2-spot-preemption.sh & cl-worker --server https://codalab.example \
                 --verbose --exit-when-idle --idle-seconds 600 --work-dir /tmp/cl_worker_{UNIQUE}_work_dir \
                 --id host-{UNIQUE} --network-prefix cl_worker_{UNIQUE}_network \
                 --download-dependencies-max-retries 3"
            ),
        ]
    );
    assert_eq!(submit.tags[WORKER_ID_TAG], UNIQUE);
    assert_eq!(submit.tags[MANAGER_ID_TAG], "codalab-worker");
}

/// One combination of the options that shape the job definition.
fn combination(bits: u32) -> (String, AwsBatchConfig, WorkerOptions, HostEnvironment) {
    let on = |bit: u32| bits & (1 << bit) != 0;
    let mut names = Vec::new();
    let mut config = AwsBatchConfig::default();
    let mut worker = worker();
    let mut host = HostEnvironment::default();
    if on(0) {
        names.push("resources");
        config = AwsBatchConfig {
            cpus: 4,
            gpus: 2,
            memory_mb: 16384,
            user: "1000:1000".into(),
            job_definition_name: "codalab-gpu".into(),
            manager_id: Some("team-a".into()),
            ..config
        };
    }
    if on(1) {
        names.push("secret");
        config.codalab_credentials_secret_arn = Some(SECRET_ARN.into());
        config.execution_role_arn = Some(ROLE_ARN.into());
    }
    if on(2) {
        names.push("version");
        host.codalab_version = Some("1.7.3".into());
    }
    if on(3) {
        names.push("shared_fs");
        host.shared_file_system = true;
        host.bundle_mount = Some("/mnt/bundles".into());
    }
    if on(4) {
        names.push("prefix");
        worker.work_dir_prefix = Some("/scratch/codalab/".into());
    }
    if on(5) {
        names.push("sentry");
        host.sentry_ingest_url = Some("https://key@sentry.example/1".into());
        host.sentry_environment = Some("prod".into());
    }
    let name = if names.is_empty() {
        "defaults".to_owned()
    } else {
        names.join("+")
    };
    (name, config, worker, host)
}

fn render_all() -> BTreeMap<String, Value> {
    (0..64)
        .map(|bits| {
            let (name, config, worker, host) = combination(bits);
            config.validate().unwrap();
            let (spec, submit) = build(&config, &worker, &host);
            (
                name,
                json!({"definition": spec.redacted_json(), "submit": submit}),
            )
        })
        .collect()
}

/// Every combination against `tests/snapshots/job_definitions.json`. After an intended
/// change, rewrite the snapshot with `UPDATE_SNAPSHOTS=1 cargo test -p codalab-wm-aws` and
/// review its diff.
#[test]
fn every_flag_combination_matches_the_snapshot() {
    let rendered = render_all();
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        let lines: Vec<String> = rendered
            .iter()
            .map(|(name, value)| format!("  {}: {value}", serde_json::to_string(name).unwrap()))
            .collect();
        std::fs::write(SNAPSHOT, format!("{{\n{}\n}}\n", lines.join(",\n"))).unwrap();
    }
    let text =
        std::fs::read_to_string(SNAPSHOT).expect("snapshot missing: run with UPDATE_SNAPSHOTS=1");
    let stored: BTreeMap<String, Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(
        stored.keys().collect::<Vec<_>>(),
        rendered.keys().collect::<Vec<_>>()
    );
    for (name, value) in &rendered {
        assert_eq!(
            &stored[name], value,
            "combination `{name}` differs from the snapshot"
        );
    }
    assert!(!text.contains(PASSWORD), "the snapshot holds a password");
}

#[test]
fn each_option_lands_where_upstream_puts_it() {
    let all = render_all();
    let full = &all["resources+secret+version+shared_fs+prefix+sentry"];
    let container = &full["definition"]["containerProperties"];
    assert_eq!(container["image"], "codalab/worker:1.7.3");
    assert_eq!(
        container["resourceRequirements"],
        json!([{"type": "VCPU", "value": "4"}, {"type": "MEMORY", "value": "16384"}, {"type": "GPU", "value": "2"}])
    );
    assert_eq!(container["user"], "1000:1000");
    assert_eq!(container["executionRoleArn"], ROLE_ARN);
    assert_eq!(
        container["secrets"],
        json!([
            {"name": "CODALAB_USERNAME", "valueFrom": format!("{SECRET_ARN}:username::")},
            {"name": "CODALAB_PASSWORD", "valueFrom": format!("{SECRET_ARN}:password::")},
        ])
    );
    assert_eq!(
        container["environment"],
        json!([
            {"name": "CODALAB_SENTRY_INGEST_URL", "value": "https://key@sentry.example/1"},
            {"name": "CODALAB_SENTRY_ENVIRONMENT", "value": "prod"},
        ])
    );
    let paths: Vec<&Value> = container["mountPoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["containerPath"])
        .collect();
    assert_eq!(
        paths,
        [
            &json!("/var/run/docker.sock"),
            &json!("/scratch/codalab"),
            &json!("/mnt/bundles")
        ]
    );
    assert_eq!(full["definition"]["jobDefinitionName"], "codalab-gpu");
    let script = full["submit"]["containerOverrides"]["command"][2]
        .as_str()
        .unwrap();
    assert!(
        script.contains(&format!(
            "--work-dir /scratch/codalab/cl_worker_{UNIQUE}_work_dir"
        )),
        "{script}"
    );
    assert!(script.ends_with(" --shared-file-system"), "{script}");
    assert_eq!(full["submit"]["jobName"], format!("team-a-{UNIQUE}"));
}

#[test]
fn with_a_secret_no_credential_is_in_the_definition() {
    let config = AwsBatchConfig {
        codalab_credentials_secret_arn: Some(SECRET_ARN.into()),
        execution_role_arn: Some(ROLE_ARN.into()),
        ..AwsBatchConfig::default()
    };
    let (spec, submit) = build(&config, &worker(), &HostEnvironment::default());
    let everything = format!(
        "{} {}",
        serde_json::to_string(&spec).unwrap(),
        serde_json::to_string(&submit).unwrap()
    );
    assert!(!everything.contains(PASSWORD));
    assert!(!everything.contains("alice"));
}

#[test]
fn logs_never_show_the_password() {
    let (spec, _) = build(
        &AwsBatchConfig::default(),
        &worker(),
        &HostEnvironment::default(),
    );
    assert!(
        serde_json::to_string(&spec).unwrap().contains(PASSWORD),
        "the registered spec has it"
    );
    assert!(!spec.redacted_json().to_string().contains(PASSWORD));
    assert!(!format!("{spec:?}").contains(PASSWORD));
    assert!(
        spec.redacted_json()
            .to_string()
            .contains(r#""value":"***""#)
    );
}

#[test]
fn the_hash_is_stable_and_covers_the_spec() {
    let (spec, _) = build(
        &AwsBatchConfig::default(),
        &worker(),
        &HostEnvironment::default(),
    );
    let hash = spec.hash_tag().unwrap().to_owned();
    assert_eq!(hash.len(), 64);
    assert_eq!(spec.hash(), hash, "the hash tag does not change the hash");
    // Launches do not change the job definition: one revision serves every worker.
    let other_worker = WorkerOptions {
        tag: Some("gpu".into()),
        idle_seconds: 5,
        ..worker()
    };
    let (same, _) = build(
        &AwsBatchConfig::default(),
        &other_worker,
        &HostEnvironment::default(),
    );
    assert_eq!(same.hash_tag(), Some(hash.as_str()));
    // Everything that is registered changes it, the password included.
    let hashes: std::collections::BTreeSet<String> = (0..64)
        .map(|bits| {
            let (_, config, worker, host) = combination(bits);
            build(&config, &worker, &host).0.hash()
        })
        .collect();
    assert_eq!(hashes.len(), 64);
    let other_password = Credentials {
        username: "alice".into(),
        password: Secret::new("other"),
    };
    let changed = JobDefinitionSpec::build(
        &AwsBatchConfig::default(),
        &other_password,
        &HostEnvironment::default(),
        "/tmp",
    );
    assert_ne!(changed.hash(), hash);
}

#[test]
fn quotes_like_python_shlex() {
    let cases = [
        ("", "''"),
        ("plain-word_1.2/x:y,z=@%+", "plain-word_1.2/x:y,z=@%+"),
        ("two words", "'two words'"),
        ("it's", r#"'it'"'"'s'"#),
        ("$HOME", "'$HOME'"),
        ("a;rm -rf /", "'a;rm -rf /'"),
        ("ü", "'ü'"),
    ];
    for (arg, quoted) in cases {
        assert_eq!(shell_quote(arg), quoted, "{arg}");
    }
}

#[test]
fn work_root_defaults_to_tmp() {
    let mut worker = worker();
    assert_eq!(work_root(&worker), "/tmp");
    worker.work_dir_prefix = Some("/".into());
    assert_eq!(work_root(&worker), "/");
    worker.work_dir_prefix = Some("/data//".into());
    assert_eq!(work_root(&worker), "/data");
    let launch = Launch::new(UNIQUE, &worker, "/", &HostEnvironment::default());
    assert_eq!(launch.work_dir, format!("/cl_worker_{UNIQUE}_work_dir"));
}
