//! The objects the backend creates: the worker Pod (upstream's pod, fixed) and the Secret
//! holding the workers' credentials.
//!
//! Secret values never appear in a Pod: the container reads them from the Secret with
//! `secretKeyRef`, and the worker flags that need them refer to those variables with
//! Kubernetes' `$(VAR)` expansion. A Pod can therefore be logged as it is (`--dry-run`).

use crate::config::{BundleRuntime, CertSource, KubernetesConfig};
use crate::names;
use crate::overrides::PodOverrides;
use codalab_wm_backend::backend;
use codalab_wm_backend::command::WorkerOptions;
use codalab_wm_backend::error::Result;
use codalab_wm_backend::secret::{Credentials, Secret};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    Affinity, Container, EnvVar, EnvVarSource, HostPathVolumeSource, ObjectFieldSelector,
    PersistentVolumeClaimVolumeSource, Pod, PodAffinityTerm, PodAntiAffinity, PodSpec,
    ResourceRequirements, Secret as SecretObject, SecretKeySelector, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use std::collections::BTreeMap;

/// The keys of the credentials Secret (also the keys a Secret given by name must have).
pub mod keys {
    /// The CodaLab user name (`CODALAB_USERNAME`).
    pub const CODALAB_USERNAME: &str = "codalab-username";
    /// The CodaLab password (`CODALAB_PASSWORD`).
    pub const CODALAB_PASSWORD: &str = "codalab-password";
    /// The cluster token for `--kubernetes-auth-token` (kubernetes runtime only).
    pub const KUBERNETES_AUTH_TOKEN: &str = "kubernetes-auth-token";
    /// The CA certificate for `--kubernetes-cert` (kubernetes runtime, no cert path).
    pub const KUBERNETES_CERT: &str = "kubernetes-cert";
}

/// The environment variables of the worker container.
mod env {
    pub const USERNAME: &str = "CODALAB_USERNAME";
    pub const PASSWORD: &str = "CODALAB_PASSWORD";
    pub const NODE_NAME: &str = "CODALAB_KUBERNETES_NODE_NAME";
    pub const AUTH_TOKEN: &str = "CODALAB_KUBERNETES_AUTH_TOKEN";
    pub const CERT: &str = "CODALAB_KUBERNETES_CERT";
}

/// The GPU resource name, as upstream.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// The name of the worker container.
pub const CONTAINER_NAME: &str = "cl-worker";

/// Everything needed to render worker Pods and the credentials Secret, resolved and validated
/// once from the configuration.
#[derive(Debug, Clone)]
pub struct WorkerTemplate {
    namespace: String,
    image: String,
    manager_id: String,
    bundle_runtime: BundleRuntime,
    cluster_host: Option<String>,
    cert_path: Option<String>,
    nfs_volume_name: Option<String>,
    cpus: u32,
    gpus: u32,
    memory_mb: u64,
    worker: WorkerOptions,
    secret_name: String,
    /// The values of the Secret the manager creates; `None` when the Secret is given by name.
    secret_values: Option<BTreeMap<&'static str, Secret>>,
    /// What the caller adds to every Pod (none by default).
    overrides: PodOverrides,
    /// The deployment's origin, the pods' `codalab-wm/origin` label (`None`: no label).
    origin: Option<String>,
}

impl WorkerTemplate {
    /// Resolves `config` (validating it) for workers with `credentials` and `worker` options.
    pub fn new(
        config: &KubernetesConfig,
        credentials: &Credentials,
        worker: &WorkerOptions,
    ) -> Result<Self> {
        config.validate()?;
        let kubernetes = config.bundle_runtime == BundleRuntime::Kubernetes;
        let cert = config.cert_source();
        let secret_values = config.credentials_secret.is_none().then(|| {
            let mut values = BTreeMap::new();
            values.insert(
                keys::CODALAB_USERNAME,
                Secret::new(credentials.username.clone()),
            );
            values.insert(keys::CODALAB_PASSWORD, credentials.password.clone());
            if let (true, Some(token)) = (kubernetes, &config.auth_token) {
                values.insert(keys::KUBERNETES_AUTH_TOKEN, token.clone());
            }
            if let (true, CertSource::Contents(pem)) = (kubernetes, &cert) {
                values.insert(keys::KUBERNETES_CERT, Secret::new(pem.clone()));
            }
            values
        });
        Ok(Self {
            namespace: config.namespace.clone(),
            image: config.image(),
            manager_id: config.manager_id.clone(),
            bundle_runtime: config.bundle_runtime,
            cluster_host: config.cluster_host.clone(),
            cert_path: match cert {
                CertSource::Path(path) => Some(path),
                _ => None,
            },
            nfs_volume_name: config.nfs_volume_name.clone(),
            cpus: config.cpus,
            gpus: config.gpus,
            memory_mb: config.memory_mb,
            worker: worker.clone(),
            secret_name: config.secret_name(),
            secret_values,
            overrides: PodOverrides::default(),
            origin: Some(backend::origin(&worker.server, &credentials.username)),
        })
    }

    /// This template for the deployment of `origin` (by default the workers' server and
    /// user's): its pods carry it; `None` renders pods without it.
    pub fn with_origin(self, origin: Option<String>) -> Self {
        Self { origin, ..self }
    }

    /// The deployment's origin, which the pods carry in [`names::ORIGIN_LABEL`].
    pub fn origin(&self) -> Option<&str> {
        self.origin.as_deref()
    }

    /// This template with `overrides` added to every Pod.
    pub fn with_overrides(mut self, overrides: PodOverrides) -> Self {
        self.overrides = overrides;
        self
    }

    /// The namespace of pods and Secret.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The worker image.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// The name of the credentials Secret.
    pub fn secret_name(&self) -> &str {
        &self.secret_name
    }

    /// The uid of the object that controls the pods (the controller owner reference of the
    /// overrides: an operator pool), if any.
    pub fn controller_uid(&self) -> Option<&str> {
        self.overrides
            .owner_references
            .iter()
            .find(|r| r.controller == Some(true))
            .map(|r| r.uid.as_str())
    }

    /// The label selector that finds exactly this manager's worker pods.
    pub fn selector(&self) -> String {
        names::worker_selector(&self.manager_id)
    }

    /// The labels of every object this manager creates.
    pub fn labels(&self) -> BTreeMap<String, String> {
        [
            APP,
            MANAGED_BY,
            (names::MANAGER_ID_LABEL, self.manager_id.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    /// The worker's work directory, a hostPath (bundle containers started through the node's
    /// docker socket mount paths of the node):
    /// `<--worker-work-dir-prefix or /tmp>/codalab-worker-scratch/<namespace>/<manager_id>`.
    /// Each namespace and manager (each operator pool) has its own, so a worker never finds
    /// another tenant's bundles or state left on the node.
    pub fn work_dir(&self) -> String {
        let own = format!(
            "codalab-worker-scratch/{}/{}",
            self.namespace, self.manager_id
        );
        match self
            .worker
            .work_dir_prefix
            .as_deref()
            .filter(|p| !p.is_empty())
        {
            Some(_) => self.worker.work_dir(&own),
            None => format!("/tmp/{own}"),
        }
    }

    /// The container's argv: the `cl-worker` command plus `--bundle-runtime` and, for the
    /// kubernetes runtime, the `--kubernetes-*` flags (secrets as `$(VAR)` references).
    pub fn command(&self, unique: &str) -> Vec<String> {
        let mut argv: Vec<String> = self
            .worker
            .build_command(unique, &self.work_dir())
            .iter()
            .map(|a| escape_expansion(a))
            .collect();
        argv.extend([
            "--bundle-runtime".to_owned(),
            self.bundle_runtime.as_str().to_owned(),
        ]);
        if self.bundle_runtime == BundleRuntime::Kubernetes {
            let host = self.cluster_host.as_deref().unwrap_or_default();
            argv.extend([
                "--kubernetes-cluster-host".to_owned(),
                escape_expansion(host),
            ]);
            argv.extend([
                "--kubernetes-auth-token".to_owned(),
                format!("$({})", env::AUTH_TOKEN),
            ]);
            match &self.cert_path {
                Some(path) => {
                    argv.extend(["--kubernetes-cert-path".to_owned(), escape_expansion(path)])
                }
                None => argv.extend([
                    "--kubernetes-cert-path".to_owned(),
                    "/dev/null".to_owned(),
                    "--kubernetes-cert".to_owned(),
                    format!("$({})", env::CERT),
                ]),
            }
        }
        argv
    }

    /// The worker Pod for launch `unique`.
    pub fn pod(&self, unique: &str) -> Pod {
        let mut labels = self.labels();
        if let Some(origin) = &self.origin {
            labels.insert(names::ORIGIN_LABEL.to_owned(), origin.clone());
        }
        let mut pod = Pod {
            metadata: ObjectMeta {
                name: Some(names::pod_name(unique)),
                namespace: Some(self.namespace.clone()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![self.container(unique)],
                affinity: Some(one_worker_per_node()),
                volumes: Some(self.volumes()),
                restart_policy: Some("Never".to_owned()),
                // The worker needs no Kubernetes API token from its service account (the
                // kubernetes runtime gets its own by flag); bundles must not find one.
                automount_service_account_token: Some(false),
                ..PodSpec::default()
            }),
            status: None,
        };
        self.overrides.apply(&mut pod);
        pod
    }

    /// The credentials Secret the manager creates, or `None` when it is given by name.
    pub fn secret(&self) -> Option<SecretObject> {
        let values = self.secret_values.as_ref()?;
        let data = values
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.expose().as_bytes().to_vec())));
        Some(SecretObject {
            metadata: ObjectMeta {
                name: Some(self.secret_name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(
                    self.labels()
                        .into_iter()
                        .filter(|(k, _)| k != APP.0)
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(data.collect()),
            ..SecretObject::default()
        })
    }

    fn container(&self, unique: &str) -> Container {
        Container {
            name: CONTAINER_NAME.to_owned(),
            image: Some(self.image.clone()),
            command: Some(self.command(unique)),
            env: Some(self.env()),
            resources: Some(self.resources()),
            volume_mounts: Some(self.volume_mounts()),
            ..Container::default()
        }
    }

    fn env(&self) -> Vec<EnvVar> {
        let mut env = vec![
            self.secret_env(env::USERNAME, keys::CODALAB_USERNAME),
            self.secret_env(env::PASSWORD, keys::CODALAB_PASSWORD),
            EnvVar {
                name: env::NODE_NAME.to_owned(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "spec.nodeName".to_owned(),
                        ..ObjectFieldSelector::default()
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            },
        ];
        if self.bundle_runtime == BundleRuntime::Kubernetes {
            env.push(self.secret_env(env::AUTH_TOKEN, keys::KUBERNETES_AUTH_TOKEN));
            if self.cert_path.is_none() {
                env.push(self.secret_env(env::CERT, keys::KUBERNETES_CERT));
            }
        }
        env
    }

    fn secret_env(&self, name: &str, key: &str) -> EnvVar {
        EnvVar {
            name: name.to_owned(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: self.secret_name.clone(),
                    key: key.to_owned(),
                    optional: None,
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }
    }

    /// Limits as asked; requests equal, except half a CPU when one is asked (as upstream, so
    /// a one-CPU node with some overhead can still run a worker).
    fn resources(&self) -> ResourceRequirements {
        let memory = Quantity(format!("{}Mi", self.memory_mb));
        let mut limits = BTreeMap::from([
            ("cpu".to_owned(), Quantity(self.cpus.to_string())),
            ("memory".to_owned(), memory.clone()),
        ]);
        let cpu_request = if self.cpus == 1 {
            "500m".to_owned()
        } else {
            self.cpus.to_string()
        };
        let mut requests = BTreeMap::from([
            ("cpu".to_owned(), Quantity(cpu_request)),
            ("memory".to_owned(), memory),
        ]);
        if self.gpus > 0 {
            limits.insert(GPU_RESOURCE.to_owned(), Quantity(self.gpus.to_string()));
            requests.insert(GPU_RESOURCE.to_owned(), Quantity(self.gpus.to_string()));
        }
        ResourceRequirements {
            limits: Some(limits),
            requests: Some(requests),
            ..ResourceRequirements::default()
        }
    }

    fn work_volume_name(&self) -> &str {
        self.nfs_volume_name.as_deref().unwrap_or("workdir")
    }

    fn volume_mounts(&self) -> Vec<VolumeMount> {
        let mut mounts = vec![VolumeMount {
            name: self.work_volume_name().to_owned(),
            mount_path: self.work_dir(),
            ..VolumeMount::default()
        }];
        if let Some(path) = self.mounted_cert_path() {
            mounts.push(VolumeMount {
                name: "certpath".to_owned(),
                mount_path: path.to_owned(),
                read_only: Some(true),
                ..VolumeMount::default()
            });
        }
        mounts
    }

    fn volumes(&self) -> Vec<Volume> {
        let work = match &self.nfs_volume_name {
            Some(nfs) => Volume {
                name: nfs.clone(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: format!("{nfs}-claim"),
                    read_only: None,
                }),
                ..Volume::default()
            },
            None => host_path_volume("workdir", &self.work_dir(), "DirectoryOrCreate"),
        };
        let mut volumes = vec![work];
        if let Some(path) = self.mounted_cert_path() {
            volumes.push(host_path_volume("certpath", path, "File"));
        }
        volumes
    }

    /// The CA cert path the kubernetes-runtime worker reads, mounted from the node.
    fn mounted_cert_path(&self) -> Option<&str> {
        (self.bundle_runtime == BundleRuntime::Kubernetes)
            .then_some(self.cert_path.as_deref())
            .flatten()
    }
}

const APP: (&str, &str) = names::APP_LABEL;
const MANAGED_BY: (&str, &str) = names::MANAGED_BY_LABEL;

fn host_path_volume(name: &str, path: &str, type_: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        host_path: Some(HostPathVolumeSource {
            path: path.to_owned(),
            type_: Some(type_.to_owned()),
        }),
        ..Volume::default()
    }
}

/// At most one worker pod per node (any manager's), spread over the standard hostname label.
fn one_worker_per_node() -> Affinity {
    Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                label_selector: Some(LabelSelector {
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: APP.0.to_owned(),
                        operator: "In".to_owned(),
                        values: Some(vec![APP.1.to_owned()]),
                    }]),
                    match_labels: None,
                }),
                topology_key: names::HOSTNAME_TOPOLOGY_KEY.to_owned(),
                ..PodAffinityTerm::default()
            }]),
            ..PodAntiAffinity::default()
        }),
        ..Affinity::default()
    }
}

/// `arg` with `$(` written as `$$(`, so the kubelet passes it literally instead of expanding
/// a variable reference.
fn escape_expansion(arg: &str) -> String {
    arg.replace("$(", "$$(")
}

#[cfg(test)]
mod tests;
