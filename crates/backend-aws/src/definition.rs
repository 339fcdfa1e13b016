//! The job definition and the submit request, as plain data: built from the config, hashed,
//! logged (redacted) by `--dry-run`, and only then turned into SDK calls by the client.
//!
//! Upstream registers a new job definition revision on every launch, with the worker's
//! command and work directory baked in. Here everything that differs per launch goes into the
//! submit request instead (`containerOverrides.command`), so the job definition only changes
//! when the configuration does: its hash is stored in the tag [`SPEC_HASH_TAG`] and an ACTIVE
//! revision carrying the same hash is reused. That is why the work-directory volume is the
//! work-dir *prefix* (default `/tmp`, mounted at the same path) and each worker works in
//! `<prefix>/cl_worker_<id>_work_dir` below it, the path upstream uses.

use crate::config::AwsBatchConfig;
use codalab_wm_backend::WorkerOptions;
use codalab_wm_backend::secret::Credentials;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;

/// Tag holding the manager id, on job definitions and jobs.
pub const MANAGER_ID_TAG: &str = "codalab-wm:manager-id";
/// Tag holding the hash of the job definition's spec.
pub const SPEC_HASH_TAG: &str = "codalab-wm:spec-hash";
/// Tag holding the worker id, on jobs.
pub const WORKER_ID_TAG: &str = "codalab-wm:worker-id";
/// Upstream's spot-interruption watcher, started in the background before the worker.
pub const SPOT_PREEMPTION_DETECTOR: &str = "/opt/scripts/detect-ec2-spot-preemption.sh";
/// Bumped when the way a spec maps to a job definition changes, so old revisions are not reused.
const SPEC_SCHEMA: &str = "codalab-wm-aws/1";
/// What replaces a secret value in logs.
const REDACTED: &str = "***";
/// Environment variables whose value is a secret.
const SECRET_VARIABLES: &[&str] = &["CODALAB_PASSWORD"];

/// What the manager's own environment contributes, read once at start like upstream reads
/// `os.environ`: the image version, the shared file system and Sentry settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostEnvironment {
    /// `CODALAB_VERSION`: the tag of the `codalab/worker` image (`latest` when unset).
    pub codalab_version: Option<String>,
    /// `CODALAB_SHARED_FILE_SYSTEM=true`: workers mount the bundle store directly.
    pub shared_file_system: bool,
    /// `CODALAB_BUNDLE_MOUNT`: the host path of the bundle store (with a shared file system).
    pub bundle_mount: Option<String>,
    /// `CODALAB_SENTRY_INGEST_URL`, passed on to workers.
    pub sentry_ingest_url: Option<String>,
    /// `CODALAB_SENTRY_ENVIRONMENT`, passed on to workers.
    pub sentry_environment: Option<String>,
}

impl HostEnvironment {
    /// Reads the variables from this process's environment.
    pub fn from_process() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Self {
            codalab_version: var("CODALAB_VERSION"),
            shared_file_system: var("CODALAB_SHARED_FILE_SYSTEM").as_deref() == Some("true"),
            bundle_mount: var("CODALAB_BUNDLE_MOUNT"),
            sentry_ingest_url: var("CODALAB_SENTRY_INGEST_URL"),
            sentry_environment: var("CODALAB_SENTRY_ENVIRONMENT"),
        }
    }

    /// The worker image, `codalab/worker:<CODALAB_VERSION or latest>`.
    pub fn image(&self) -> String {
        format!(
            "codalab/worker:{}",
            self.codalab_version.as_deref().unwrap_or("latest")
        )
    }
}

/// A `RegisterJobDefinition` request, field for field as the API names them.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobDefinitionSpec {
    /// The job definition name.
    pub job_definition_name: String,
    /// Always `container`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The container.
    pub container_properties: ContainerSpec,
    /// Upstream's retry strategy: one attempt.
    pub retry_strategy: RetrySpec,
    /// Tags of the job definition: the manager id and the spec hash.
    pub tags: BTreeMap<String, String>,
}

/// `containerProperties` of the job definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSpec {
    /// The worker image.
    pub image: String,
    /// VCPU, MEMORY (MiB) and, when asked for, GPU.
    pub resource_requirements: Vec<ResourceSpec>,
    /// Plain environment variables.
    pub environment: Vec<NameValue>,
    /// Environment variables read from Secrets Manager.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretSpec>,
    /// Host volumes: the docker socket, the work-dir prefix and the bundle mount.
    pub volumes: Vec<VolumeSpec>,
    /// Where the volumes appear in the container (always at the host path).
    pub mount_points: Vec<MountPointSpec>,
    /// Always `false`, as upstream.
    pub readonly_root_filesystem: bool,
    /// The user the container runs as.
    pub user: String,
    /// The role ECS uses to read the secrets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_role_arn: Option<String>,
}

/// A resource requirement (`type` VCPU, MEMORY or GPU).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceSpec {
    /// VCPU, MEMORY or GPU.
    #[serde(rename = "type")]
    pub kind: String,
    /// The amount, as a string as the API wants it.
    pub value: String,
}

/// An environment variable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NameValue {
    /// The variable name.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// An environment variable whose value ECS reads from Secrets Manager.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretSpec {
    /// The variable name.
    pub name: String,
    /// `<secret arn>:<json key>::`.
    pub value_from: String,
}

/// A host volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VolumeSpec {
    /// The host path.
    pub host: HostPath,
    /// The volume name.
    pub name: String,
}

/// The host side of a volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostPath {
    /// The path on the host.
    pub source_path: String,
}

/// A mount point (`readOnly` is always sent: moto's job runner needs it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MountPointSpec {
    /// The volume name.
    pub source_volume: String,
    /// The path in the container.
    pub container_path: String,
    /// Always `false`.
    pub read_only: bool,
}

/// `retryStrategy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetrySpec {
    /// Attempts per job.
    pub attempts: i32,
}

impl JobDefinitionSpec {
    /// The job definition for `config`. With a credentials secret the credentials are
    /// `secrets`; without, they are plain environment variables, as upstream.
    pub fn build(
        config: &AwsBatchConfig,
        credentials: &Credentials,
        host: &HostEnvironment,
        work_root: &str,
    ) -> Self {
        let mut container = ContainerSpec {
            image: host.image(),
            resource_requirements: resources(config),
            environment: Vec::new(),
            secrets: Vec::new(),
            volumes: Vec::new(),
            mount_points: Vec::new(),
            readonly_root_filesystem: false,
            user: config.user.clone(),
            execution_role_arn: None,
        };
        container.add_credentials(config, credentials);
        container.add_volume("var_run_docker_sock", "/var/run/docker.sock");
        container.add_volume("work_dir", work_root);
        if let (true, Some(mount)) = (host.shared_file_system, &host.bundle_mount) {
            container.add_volume("shared_dir", mount);
        }
        if let Some(url) = &host.sentry_ingest_url {
            container.add_env("CODALAB_SENTRY_INGEST_URL", url);
            if let Some(environment) = &host.sentry_environment {
                container.add_env("CODALAB_SENTRY_ENVIRONMENT", environment);
            }
        }
        let tags = BTreeMap::from([(MANAGER_ID_TAG.to_owned(), config.manager_id().to_owned())]);
        Self {
            job_definition_name: config.job_definition_name.clone(),
            kind: "container".to_owned(),
            container_properties: container,
            retry_strategy: RetrySpec { attempts: 1 },
            tags,
        }
    }

    /// The hash of everything but the hash tag itself: 64 hex digits.
    pub fn hash(&self) -> String {
        let mut unhashed = self.clone();
        unhashed.tags.remove(SPEC_HASH_TAG);
        let json = serde_json::to_vec(&unhashed).unwrap_or_default();
        let digest = Sha256::new()
            .chain_update(SPEC_SCHEMA)
            .chain_update([0])
            .chain_update(json)
            .finalize();
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The spec with its hash tag set.
    pub fn with_hash_tag(mut self) -> Self {
        let hash = self.hash();
        self.tags.insert(SPEC_HASH_TAG.to_owned(), hash);
        self
    }

    /// The hash tag's value (set by [`JobDefinitionSpec::with_hash_tag`]).
    pub fn hash_tag(&self) -> Option<&str> {
        self.tags.get(SPEC_HASH_TAG).map(String::as_str)
    }

    /// The spec as JSON with secret values replaced by `***`: what logs may show.
    pub fn redacted_json(&self) -> serde_json::Value {
        let mut redacted = self.clone();
        for variable in &mut redacted.container_properties.environment {
            if SECRET_VARIABLES.contains(&variable.name.as_str()) {
                variable.value = REDACTED.to_owned();
            }
        }
        serde_json::to_value(&redacted).unwrap_or_default()
    }
}

impl fmt::Debug for JobDefinitionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobDefinitionSpec({})", self.redacted_json())
    }
}

impl ContainerSpec {
    fn add_env(&mut self, name: &str, value: &str) {
        self.environment.push(NameValue {
            name: name.to_owned(),
            value: value.to_owned(),
        });
    }

    fn add_volume(&mut self, name: &str, path: &str) {
        self.volumes.push(VolumeSpec {
            host: HostPath {
                source_path: path.to_owned(),
            },
            name: name.to_owned(),
        });
        self.mount_points.push(MountPointSpec {
            source_volume: name.to_owned(),
            container_path: path.to_owned(),
            read_only: false,
        });
    }

    fn add_credentials(&mut self, config: &AwsBatchConfig, credentials: &Credentials) {
        match &config.codalab_credentials_secret_arn {
            Some(arn) => {
                for (name, key) in [
                    ("CODALAB_USERNAME", "username"),
                    ("CODALAB_PASSWORD", "password"),
                ] {
                    self.secrets.push(SecretSpec {
                        name: name.to_owned(),
                        value_from: format!("{arn}:{key}::"),
                    });
                }
                self.execution_role_arn = config.execution_role_arn.clone();
            }
            None => {
                self.add_env("CODALAB_USERNAME", &credentials.username);
                self.add_env("CODALAB_PASSWORD", credentials.password.expose());
            }
        }
    }
}

fn resources(config: &AwsBatchConfig) -> Vec<ResourceSpec> {
    let resource = |kind: &str, value: String| ResourceSpec {
        kind: kind.to_owned(),
        value,
    };
    let mut resources = vec![
        resource("VCPU", config.cpus.to_string()),
        resource("MEMORY", config.memory_mb.to_string()),
    ];
    if config.gpus > 0 {
        resources.push(resource("GPU", config.gpus.to_string()));
    }
    resources
}

/// A `SubmitJob` request, as the API names its fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubmitSpec {
    /// `<manager id>-<unique>`.
    pub job_name: String,
    /// The job queue.
    pub job_queue: String,
    /// The job definition: its ARN (pinning the revision), or its name in a dry run.
    pub job_definition: String,
    /// The per-launch command.
    pub container_overrides: CommandOverride,
    /// The manager id and the worker id.
    pub tags: BTreeMap<String, String>,
}

/// `containerOverrides` with just the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommandOverride {
    /// `/bin/bash -c "<spot detector> & <worker argv>"`.
    pub command: Vec<String>,
}

/// Everything that differs per launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The worker id (the launch's unique id).
    pub worker_id: String,
    /// The worker's work directory, `<prefix>/cl_worker_<id>_work_dir`.
    pub work_dir: String,
    /// The container command.
    pub command: Vec<String>,
}

impl Launch {
    /// The launch of worker `worker_id` with its work directory under `work_root` (see
    /// [`work_root`]): upstream's work directory and bash command.
    pub fn new(
        worker_id: &str,
        worker: &WorkerOptions,
        work_root: &str,
        host: &HostEnvironment,
    ) -> Self {
        let work_dir = format!(
            "{}/cl_worker_{worker_id}_work_dir",
            work_root.trim_end_matches('/')
        );
        let mut argv = worker.build_command(worker_id, &work_dir);
        if host.shared_file_system {
            argv.push("--shared-file-system".to_owned());
        }
        let quoted: Vec<String> = argv.iter().map(|arg| shell_quote(arg)).collect();
        let script = format!("{SPOT_PREEMPTION_DETECTOR} & {}", quoted.join(" "));
        Self {
            worker_id: worker_id.to_owned(),
            work_dir,
            command: vec!["/bin/bash".into(), "-c".into(), script],
        }
    }

    /// The submit request for this launch.
    pub fn submit_spec(&self, config: &AwsBatchConfig, job_definition: &str) -> SubmitSpec {
        SubmitSpec {
            job_name: job_name(config.manager_id(), &self.worker_id),
            job_queue: config.job_queue.clone(),
            job_definition: job_definition.to_owned(),
            container_overrides: CommandOverride {
                command: self.command.clone(),
            },
            tags: BTreeMap::from([
                (MANAGER_ID_TAG.to_owned(), config.manager_id().to_owned()),
                (WORKER_ID_TAG.to_owned(), self.worker_id.clone()),
            ]),
        }
    }
}

/// The job name of worker `worker_id`: `<manager id>-<worker id>`.
pub fn job_name(manager_id: &str, worker_id: &str) -> String {
    format!("{manager_id}-{worker_id}")
}

/// The host directory holding the work directories: `--worker-work-dir-prefix`, else `/tmp`
/// (upstream's default), without trailing `/` unless it is `/`.
pub fn work_root(worker: &WorkerOptions) -> String {
    let prefix = worker
        .work_dir_prefix
        .as_deref()
        .filter(|p| !p.is_empty())
        .unwrap_or("/tmp/");
    match prefix.trim_end_matches('/') {
        "" => "/".to_owned(),
        trimmed => trimmed.to_owned(),
    }
}

/// Quotes `arg` for bash exactly as Python's `shlex.quote`.
pub fn shell_quote(arg: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if arg.is_empty() {
        "''".to_owned()
    } else if arg.chars().all(safe) {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r#"'"'"'"#))
    }
}

#[cfg(test)]
#[path = "definition_tests.rs"]
mod tests;
