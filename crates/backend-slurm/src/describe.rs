//! The Slurm backend as the program sees it: its name, table, flags (those of [`SlurmConfig`]),
//! what `config check` needs and how it is built.

use crate::{SlurmBackend, SlurmConfig};
use codalab_wm_backend::describe::{BackendConfig, BackendContext, Kind, Placement};
use codalab_wm_backend::{Result, WorkerBackend, WorkerShape};
use serde_json::{Map, Value};
use std::sync::Arc;

/// The description of the Slurm backend, for the program's list of backends.
pub static KIND: Kind<SlurmConfig> = Kind::new();

#[codalab_wm_backend::async_trait]
impl BackendConfig for SlurmConfig {
    const NAME: &'static str = crate::error::BACKEND;
    const TABLE: &'static str = "slurm_batch";
    const ABOUT: &'static str =
        "Submit workers as Slurm batch jobs (sbatch), locally or on a login node over SSH";
    const REQUIRED: &'static [(&'static str, &'static str)] =
        &[("partition", "\"XXX-CUSTOMIZE-THIS-XXX\"")];
    const BY_ORIGIN: bool = true;
    const IDENTITY: &'static [&'static str] =
        &["job_name", "partition", "user", "ssh_host", "ssh_user"];
    const EXTRA_DOCS: &'static [(&'static str, &'static str)] = &[
        (
            "password_file",
            "File with the CodaLab user name and password passed to every worker (set from the global password_file when unset); must be readable on the compute nodes",
        ),
        (
            "command_timeout_seconds",
            "Seconds a Slurm command (squeue, sbatch, scancel) may run before it is killed and the step retried [default: 60]",
        ),
    ];
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        ("nodelist", "\"node[1-4]\""),
        ("exclude", "\"node5,node6\""),
        ("partition", "\"cpu\""),
        ("gpu_type", "\"a100\""),
        ("constraint", "\"avx2\""),
        ("user", "\"alice\""),
        ("password_file", "\"/home/alice/.codalab-password\""),
        ("account", "\"nlp\""),
        ("ssh_host", "\"login.example.org:22\""),
        ("ssh_user", "\"alice\""),
        ("ssh_key", "\"/home/alice/.ssh/id_ed25519\""),
        ("ssh_known_hosts", "\"/home/alice/.ssh/known_hosts\""),
    ];

    fn validate(&self) -> std::result::Result<(), String> {
        SlurmConfig::validate(self)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn shape(&self) -> WorkerShape {
        WorkerShape::from_flags(self.cpus, self.gpus, self.memory_mb)
    }

    /// A pool's own job name, `codalab-slurm-worker-<pool>`, so that pools never adopt each
    /// other's jobs; the global password file.
    fn placement_defaults(placement: Placement<'_>) -> Map<String, Value> {
        let mut defaults = Map::new();
        if let Some(pool) = placement.pool {
            let job_name = format!("codalab-slurm-worker-{pool}");
            defaults.insert("job_name".into(), job_name.into());
        }
        if let Some(path) = placement.password_file {
            defaults.insert("password_file".into(), path.display().to_string().into());
        }
        defaults
    }

    /// Jobs are found by the name prefix `<user>-<job_name>-`: a job name that is a prefix of
    /// another's shares its jobs.
    fn shares_jobs(a: &Map<String, Value>, b: &Map<String, Value>) -> Option<String> {
        let name = |t: &Map<String, Value>| {
            t.get("job_name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (ja, jb) = (name(a), name(b));
        let prefix = |x: &str, y: &str| format!("{y}-").starts_with(&format!("{x}-"));
        (prefix(&ja, &jb) || prefix(&jb, &ja)).then(|| {
            format!("job_name `{ja}` and `{jb}` share a prefix (jobs are found by `<user>-<job_name>-`); give them distinct job names")
        })
    }

    async fn build(self, context: &BackendContext) -> Result<Arc<dyn WorkerBackend>> {
        let backend = SlurmBackend::new(&self, Some(context.credentials.clone()))?;
        Ok(Arc::new(backend.with_origin(context.origin.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codalab_wm_backend::describe::BackendKind;
    use figment::Figment;
    use figment::providers::{Format, Serialized, Toml};

    /// The `[slurm_batch]` file table with the flags given on the command line over it.
    fn read(file: &str, flags: &[&str]) -> Result<codalab_wm_backend::describe::Table> {
        let matches = KIND
            .command()
            .no_binary_name(true)
            .try_get_matches_from(flags)
            .unwrap();
        let given = KIND.given_flags(&matches).unwrap();
        let figment =
            Figment::from(Toml::string(file)).merge(Serialized::default("slurm_batch", given));
        KIND.read(&figment, false)
    }

    #[test]
    fn flags_override_the_file_and_unset_flags_do_not() {
        let file = "[slurm_batch]\npartition = \"cpu\"\ncpus = 4\naccount = \"nlp\"\npassword_file = \"/pw\"\n";
        let flags = ["--cpus", "2", "--gpus", "0", "--ssh-host", "login:2222"];
        let table = read(
            file,
            &[&flags[..], &["--slurm-work-dir", "/scratch"]].concat(),
        )
        .unwrap();
        let value = |key: &str| table.get(key).cloned().unwrap_or_default();
        assert_eq!(value("partition"), "cpu");
        assert_eq!(
            (value("cpus"), value("gpus"), value("memory_mb")),
            (2.into(), 0.into(), 2048.into())
        );
        assert_eq!(value("account"), "nlp");
        assert_eq!(value("ssh_host"), "login:2222");
        assert_eq!(value("slurm_work_dir"), "/scratch");
    }

    /// The subcommand also carries the manager's `--password-file` (id `password_file`, the
    /// name of a field that is no flag of ours): given, it is not this table's key, so that
    /// its unset value cannot hide the global file the placement passes on (#28 item 14).
    #[test]
    fn the_managers_password_file_flag_is_not_a_table_key() {
        let command = KIND
            .command()
            .arg(clap::Arg::new("password_file").long("password-file"));
        let matches = command
            .no_binary_name(true)
            .try_get_matches_from(["--password-file", "/pw", "--cpus", "2"])
            .unwrap();
        let given = KIND.given_flags(&matches).unwrap();
        assert_eq!(given, serde_json::json!({"cpus": 2}));
    }

    #[test]
    fn partition_is_required_and_bad_keys_are_named() {
        let error = read("", &["--cpus", "2"]).unwrap_err().to_string();
        assert!(
            error.contains("slurm-batch needs --partition (or `partition` in [slurm_batch])"),
            "{error}"
        );
        let error = read("[slurm_batch]\npartiton = \"cpu\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("`slurm_batch.partiton` is not a setting (did you mean `partition`?)"),
            "{error}"
        );
        let error = read("[slurm_batch]\ncpus = \"many\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(error.contains("`slurm_batch.cpus`"), "{error}");
    }

    #[test]
    fn pools_get_their_own_job_name_and_prefixes_share_jobs() {
        let placement = |pool| Placement {
            pool,
            password_file: Some(std::path::Path::new("/pw")),
        };
        let defaults = KIND.placement_defaults(placement(Some("gpu")));
        assert_eq!(defaults["job_name"], "codalab-slurm-worker-gpu");
        assert_eq!(defaults["password_file"], "/pw");
        assert!(
            !KIND
                .placement_defaults(placement(None))
                .contains_key("job_name")
        );
        let table = |name: &str| {
            let mut t = Map::new();
            t.insert("job_name".into(), name.into());
            t
        };
        assert!(KIND.shares_jobs(&table("w"), &table("w-gpu")).is_some());
        assert!(KIND.shares_jobs(&table("w-cpu"), &table("w-gpu")).is_none());
    }
}
