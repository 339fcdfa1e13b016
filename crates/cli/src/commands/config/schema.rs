//! What the config file may hold, read from the code itself so that `config init` and
//! `config check` cannot drift from what `run` accepts: the keys of each table are the fields of
//! the struct that table deserializes into (asked of its `Deserialize` impl), the defaults are
//! the `Default` structs serialized, and the docs are the help of the matching flag (or, for
//! keys without a flag, a line in [`EXTRA_DOCS`]).

use crate::args::{GlobalArgs, WorkerArgs};
use crate::settings::{PoolSettings, Settings, WorkerSettings};
use serde::de::{DeserializeOwned, Visitor};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// What every required value is set to in a template; `grep -n` finds what is left to edit.
pub const PLACEHOLDER: &str = "XXX-CUSTOMIZE-THIS-XXX";

/// The backend tables a file may hold (compiled in or not), by backend name.
pub const BACKEND_TABLES: [&str; 5] = [
    "local",
    "slurm_batch",
    "aws_batch",
    "azure_batch",
    "kubernetes",
];

/// The field names of a struct, as its `Deserialize` impl declares them.
pub fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields = None;
    let _ = T::deserialize(Introspect(&mut fields));
    fields.unwrap_or(&[])
}

/// A deserializer that only records the field list handed to `deserialize_struct`.
struct Introspect<'a>(&'a mut Option<&'static [&'static str]>);

impl<'de> serde::Deserializer<'de> for Introspect<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = Some(fields);
        Err(serde::de::Error::custom("introspected"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// One table of the config file.
#[derive(Debug, Clone)]
pub struct TableSchema {
    /// The table's name (`""` for the top level, `worker`, `pools`, `slurm_batch` …).
    pub name: &'static str,
    /// Every key, in the struct's order.
    pub fields: &'static [&'static str],
    /// The default of every key that has one (`null` for unset options).
    pub defaults: Map<String, Value>,
    /// One line of documentation per key.
    pub docs: HashMap<String, String>,
}

impl TableSchema {
    fn new<T: DeserializeOwned>(
        name: &'static str,
        defaults: Value,
        docs: HashMap<String, String>,
    ) -> Self {
        let mut docs = docs;
        for (table, key, doc) in EXTRA_DOCS {
            if *table == name {
                docs.entry((*key).to_owned())
                    .or_insert_with(|| (*doc).to_owned());
            }
        }
        Self {
            name,
            fields: fields_of::<T>(),
            defaults: match defaults {
                Value::Object(map) => map,
                _ => Map::new(),
            },
            docs,
        }
    }

    /// The keys that are options (not sub-tables).
    pub fn options(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.fields
            .iter()
            .copied()
            .filter(|f| !BACKEND_TABLES.contains(f) && !["pools", "worker", "entra"].contains(f))
    }
}

/// The help of every flag of `A`, by field name (without `(required)`: the template says it).
pub fn flag_docs<A: clap::Args>() -> HashMap<String, String> {
    let command = A::augment_args(clap::Command::new("config"));
    command
        .get_arguments()
        .filter_map(|arg| {
            let help = arg.get_help()?.to_string();
            let help = help.replace(" (required)", "");
            let help = help.trim().trim_end_matches('.').trim();
            Some((arg.get_id().to_string(), help.to_owned()))
        })
        .collect()
}

/// The top level.
pub fn top() -> TableSchema {
    let defaults = serde_json::to_value(Settings::default()).unwrap_or_default();
    TableSchema::new::<Settings>("", defaults, flag_docs::<GlobalArgs>())
}

/// `[worker]`.
pub fn worker() -> TableSchema {
    let defaults = serde_json::to_value(WorkerSettings::default()).unwrap_or_default();
    TableSchema::new::<WorkerSettings>("worker", defaults, flag_docs::<WorkerArgs>())
}

/// `[[pools]]` (its backend sub-table is the backend's own schema).
pub fn pools() -> TableSchema {
    let minimal = serde_json::json!({"name": "", "backend": ""});
    let defaults = serde_json::from_value::<PoolSettings>(minimal)
        .ok()
        .and_then(|p| serde_json::to_value(p).ok())
        .unwrap_or_default();
    TableSchema::new::<PoolSettings>("pools", defaults, HashMap::new())
}

/// A backend: its table, what it needs and how it is checked.
#[derive(Debug, Clone)]
pub struct BackendSchema {
    /// The backend's name (`slurm-batch`).
    pub backend: &'static str,
    /// Its table.
    pub table: TableSchema,
    /// Required keys and the placeholder a template gives them.
    pub required: &'static [(&'static str, &'static str)],
    /// Keys that say which jobs are this manager's: they cannot change while it runs.
    pub identity: &'static [&'static str],
    /// Deserializes a table (given keys over the defaults are the caller's) with the backend's
    /// own config type and runs its `validate()`.
    pub validate: fn(Value) -> Result<(), String>,
}

fn validated<T: DeserializeOwned>(
    table: Value,
    validate: impl FnOnce(&T) -> Result<(), String>,
) -> Result<(), String> {
    let config: T = serde_json::from_value(table).map_err(|e| e.to_string())?;
    validate(&config)
}

fn local() -> BackendSchema {
    use codalab_wm_core::local::LocalConfig;
    BackendSchema {
        backend: "local",
        table: TableSchema::new::<LocalConfig>(
            "local",
            serde_json::to_value(LocalConfig::default()).unwrap_or_default(),
            flag_docs::<crate::backends::local::Args>(),
        ),
        required: &[],
        identity: &["state_dir"],
        // The local backend has no checks of its own beyond its types.
        validate: |table| validated::<LocalConfig>(table, |_| Ok(())),
    }
}

#[cfg(feature = "slurm")]
fn slurm() -> BackendSchema {
    use codalab_wm_slurm::SlurmConfig;
    BackendSchema {
        backend: "slurm-batch",
        table: TableSchema::new::<SlurmConfig>(
            "slurm_batch",
            serde_json::to_value(SlurmConfig::default()).unwrap_or_default(),
            flag_docs::<crate::backends::slurm::Args>(),
        ),
        required: &[("partition", "\"XXX-CUSTOMIZE-THIS-XXX\"")],
        identity: &["job_name", "partition", "user", "ssh_host", "ssh_user"],
        validate: |table| {
            validated::<SlurmConfig>(table, |c| c.validate().map(drop).map_err(|e| e.to_string()))
        },
    }
}

#[cfg(feature = "aws")]
fn aws() -> BackendSchema {
    use codalab_wm_aws::AwsBatchConfig;
    BackendSchema {
        backend: "aws-batch",
        table: TableSchema::new::<AwsBatchConfig>(
            "aws_batch",
            serde_json::to_value(AwsBatchConfig::default()).unwrap_or_default(),
            flag_docs::<crate::backends::aws::Args>(),
        ),
        required: &[],
        identity: &[
            "region",
            "job_queue",
            "job_definition_name",
            "manager_id",
            "job_filter",
        ],
        validate: |table| {
            validated::<AwsBatchConfig>(table, |c| c.validate().map_err(|e| e.to_string()))
        },
    }
}

/// The Azure config has required keys and no `Default`/`Serialize`: its defaults are written
/// here, and a test proves they are the ones `AzureBatchConfig::new` gives.
#[cfg(feature = "azure")]
fn azure() -> BackendSchema {
    use codalab_wm_azure::AzureBatchConfig;
    let defaults = serde_json::json!({
        "account_name": null, "account_key": null, "service_url": null,
        "log_container_url": null, "job_id": null, "cpus": 1, "gpus": 0, "memory_mb": 2048,
        "user": "root", "worker_image": null, "request_timeout_seconds": 30, "entra": null,
    });
    BackendSchema {
        backend: "azure-batch",
        table: TableSchema::new::<AzureBatchConfig>(
            "azure_batch",
            defaults,
            flag_docs::<crate::backends::azure::Args>(),
        ),
        required: &[
            ("account_name", "\"XXX-CUSTOMIZE-THIS-XXX\""),
            ("account_key", "\"XXX-CUSTOMIZE-THIS-XXX\""),
            (
                "service_url",
                "\"https://XXX-CUSTOMIZE-THIS-XXX.westeurope.batch.azure.com\"",
            ),
            (
                "log_container_url",
                "\"https://XXX-CUSTOMIZE-THIS-XXX.blob.core.windows.net/logs?sv=XXX-CUSTOMIZE-THIS-XXX\"",
            ),
            ("job_id", "\"XXX-CUSTOMIZE-THIS-XXX\""),
        ],
        identity: &["account_name", "service_url", "job_id"],
        validate: |table| {
            validated::<AzureBatchConfig>(table, |c| c.validate().map_err(|e| e.to_string()))
        },
    }
}

#[cfg(feature = "k8s")]
fn kubernetes() -> BackendSchema {
    use codalab_wm_k8s::KubernetesConfig;
    BackendSchema {
        backend: "kubernetes",
        table: TableSchema::new::<KubernetesConfig>(
            "kubernetes",
            serde_json::to_value(KubernetesConfig::default()).unwrap_or_default(),
            flag_docs::<crate::backends::k8s::Args>(),
        ),
        required: &[],
        identity: &["cluster_host", "namespace", "manager_id"],
        validate: |table| {
            validated::<KubernetesConfig>(table, |c| c.validate().map_err(|e| e.to_string()))
        },
    }
}

/// Every backend compiled in.
pub fn backends() -> Vec<BackendSchema> {
    vec![
        local(),
        #[cfg(feature = "slurm")]
        slurm(),
        #[cfg(feature = "aws")]
        aws(),
        #[cfg(feature = "azure")]
        azure(),
        #[cfg(feature = "k8s")]
        kubernetes(),
    ]
}

/// The backend whose table is `table`, when compiled in.
pub fn backend_of_table(table: &str) -> Option<BackendSchema> {
    backends().into_iter().find(|b| b.table.name == table)
}

/// The backend named `name` (`slurm-batch`), when compiled in.
pub fn backend_named(name: &str) -> Option<BackendSchema> {
    backends().into_iter().find(|b| b.backend == name)
}

/// Docs of keys that have no flag of their own.
pub const EXTRA_DOCS: &[(&str, &str, &str)] = &[
    (
        "",
        "backend",
        "The backend to run when no subcommand is given (local, slurm-batch, aws-batch, azure-batch, kubernetes); leave unset with [[pools]]",
    ),
    (
        "",
        "temp_session",
        "Accepted for compatibility with upstream (this manager never writes session state)",
    ),
    (
        "slurm_batch",
        "password_file",
        "File with the CodaLab user name and password passed to every worker (set from the global password_file when unset); must be readable on the compute nodes",
    ),
    (
        "slurm_batch",
        "command_timeout_seconds",
        "Seconds a Slurm command (squeue, sbatch, scancel) may run before it is killed and the step retried [default: 60]",
    ),
    (
        "azure_batch",
        "worker_image",
        "Worker image [default: codalab/worker:<CODALAB_VERSION or latest>]",
    ),
    (
        "azure_batch",
        "request_timeout_seconds",
        "Seconds before a Batch request times out",
    ),
    (
        "azure_batch",
        "entra",
        "Microsoft Entra ID client-credentials auth instead of the account key",
    ),
    (
        "kubernetes",
        "request_timeout_seconds",
        "Timeout of one API request, in seconds",
    ),
    (
        "kubernetes",
        "keep_finished_pods",
        "Finished worker pods kept for inspection; older ones are deleted",
    ),
    ("pools", "name", "Unique name: letters, digits and `_`"),
    (
        "pools",
        "backend",
        "The pool's backend; its settings go in [pools.<backend table>]",
    ),
    ("pools", "min", "Workers kept at least"),
    ("pools", "max", "Workers at most (jobs being stopped count)"),
    (
        "pools",
        "tag",
        "Tag put on the pool's workers; bundles with request_queue = tag need this pool",
    ),
    (
        "pools",
        "tag_exclusive",
        "The pool's workers run only bundles of their tag",
    ),
    (
        "pools",
        "cost",
        "Preference: the cheapest fitting pool gets a bundle (ties: file order)",
    ),
    (
        "pools",
        "pending_timeout",
        "Seconds a job may stay pending before it is stopped and replaced elsewhere (target mode)",
    ),
    (
        "pools",
        "startup_grace",
        "Seconds a job that just became active counts as free capacity [default: 30]",
    ),
    (
        "pools",
        "launch_mode",
        "compat (upstream's rules) or target",
    ),
    (
        "pools",
        "max_launches_per_tick",
        "Launches per tick at most",
    ),
    (
        "pools",
        "min_seconds_between_workers",
        "Seconds between two launches of this pool [default: the global setting]",
    ),
];

/// Example values of options that are unset by default, written commented out.
pub const EXAMPLES: &[(&str, &str, &str)] = &[
    ("", "restart_after_seconds", "86400"),
    ("", "password_file", "\"/etc/codalab-wm/password\""),
    ("", "exit_after_num_failed", "10"),
    ("", "ca_cert", "\"/etc/codalab-wm/ca.pem\""),
    ("", "listen", "\"127.0.0.1:9464\""),
    ("", "backend", "\"local\""),
    ("worker", "tag", "\"my-tag\""),
    ("worker", "group", "\"my-group\""),
    ("worker", "work_dir_prefix", "\"/scratch\""),
    ("worker", "max_work_dir_size", "\"88g\""),
    ("worker", "checkin_frequency_seconds", "20"),
    ("worker", "exit_after_num_runs", "100"),
    ("worker", "shared_memory_size_gb", "2"),
    ("pools", "tag", "\"gpu\""),
    ("pools", "pending_timeout", "900"),
    ("pools", "startup_grace", "30"),
    ("pools", "min_seconds_between_workers", "0"),
    ("slurm_batch", "nodelist", "\"node[1-4]\""),
    ("slurm_batch", "exclude", "\"node5,node6\""),
    ("slurm_batch", "partition", "\"cpu\""),
    ("slurm_batch", "gpu_type", "\"a100\""),
    ("slurm_batch", "constraint", "\"avx2\""),
    ("slurm_batch", "user", "\"alice\""),
    (
        "slurm_batch",
        "password_file",
        "\"/home/alice/.codalab-password\"",
    ),
    ("slurm_batch", "account", "\"nlp\""),
    ("slurm_batch", "ssh_host", "\"login.example.org:22\""),
    ("slurm_batch", "ssh_user", "\"alice\""),
    ("slurm_batch", "ssh_key", "\"/home/alice/.ssh/id_ed25519\""),
    (
        "slurm_batch",
        "ssh_known_hosts",
        "\"/home/alice/.ssh/known_hosts\"",
    ),
    ("aws_batch", "job_filter", "\"codalab-worker-.*\""),
    ("aws_batch", "manager_id", "\"codalab-worker\""),
    (
        "aws_batch",
        "codalab_credentials_secret_arn",
        "\"arn:aws:secretsmanager:us-east-1:123456789012:secret:codalab\"",
    ),
    (
        "aws_batch",
        "execution_role_arn",
        "\"arn:aws:iam::123456789012:role/ecsTaskExecutionRole\"",
    ),
    ("azure_batch", "worker_image", "\"codalab/worker:1.7.5\""),
    ("kubernetes", "cluster_host", "\"https://127.0.0.1:6443\""),
    ("kubernetes", "auth_token", "\"<token>\""),
    ("kubernetes", "cert_path", "\"/etc/kubernetes/ca.crt\""),
    ("kubernetes", "cert", "\"-----BEGIN CERTIFICATE-----\\n…\""),
    ("kubernetes", "nfs_volume_name", "\"codalab-nfs\""),
    ("kubernetes", "image", "\"codalab/worker:1.7.5\""),
    (
        "kubernetes",
        "credentials_secret",
        "\"codalab-worker-credentials\"",
    ),
];

/// The example of `table.key`, if there is one.
pub fn example(table: &str, key: &str) -> Option<&'static str> {
    EXAMPLES
        .iter()
        .find(|(t, k, _)| *t == table && *k == key)
        .map(|(_, _, v)| *v)
}
