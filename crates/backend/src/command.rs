//! The `cl-worker` command line, built exactly as upstream's `WorkerManager.build_command`.

use serde::{Deserialize, Serialize};

/// Settings passed down to every `cl-worker` (the `--worker-*` flags and `--server`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerOptions {
    /// URL of the CodaLab server the workers connect to. Not read from a `[worker]` table:
    /// the manager's own `--server` is used (see [`WorkerOptions::for_server`]).
    #[serde(skip)]
    pub server: String,
    /// The worker executable (`--worker-executable`).
    pub executable: String,
    /// `--worker-tag`: tag put on workers (and searched for with `--worker-tag-exclusive`).
    pub tag: Option<String>,
    /// `--worker-group`: run only bundles of this group.
    pub group: Option<String>,
    /// `--worker-work-dir-prefix`: prefix of each worker's working directory.
    pub work_dir_prefix: Option<String>,
    /// `--worker-max-work-dir-size`, e.g. `88g`.
    pub max_work_dir_size: Option<String>,
    /// `--worker-delete-work-dir-on-exit`.
    pub delete_work_dir_on_exit: bool,
    /// `--worker-idle-seconds`.
    pub idle_seconds: u64,
    /// `--worker-download-dependencies-max-retries` (0 leaves the flag out, as upstream).
    pub download_dependencies_max_retries: u32,
    /// `--worker-checkin-frequency-seconds`.
    pub checkin_frequency_seconds: Option<u64>,
    /// `--worker-exit-after-num-runs` (only values > 0 are passed).
    pub exit_after_num_runs: Option<i64>,
    /// `--worker-pass-down-termination`.
    pub pass_down_termination: bool,
    /// `--worker-exit-on-exception`.
    pub exit_on_exception: bool,
    /// `--worker-tag-exclusive`.
    pub tag_exclusive: bool,
    /// `--worker-shared-memory-size-gb`.
    pub shared_memory_size_gb: Option<u64>,
    /// `--worker-preemptible`.
    pub preemptible: bool,
    /// Names of more variables of the manager's environment each worker gets (`--worker-env
    /// NAME`, `[worker] env = ["NAME", …]`), besides [`WORKER_ENV`] and its CodaLab
    /// credentials: nothing else of the manager's environment (the cloud keys of another
    /// pool, say) reaches a local worker or a Slurm job.
    pub env: Vec<String>,
}

/// The variables of the manager's environment every worker gets (when set): what `cl-worker`,
/// docker and Python need (the search path, home, locale and time zone, the Docker engine,
/// proxies, CA bundles). Slurm's own `SLURM_*` variables always reach a job.
pub const WORKER_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "DOCKER_CONTEXT",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
];

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            server: crate::DEFAULT_SERVER.to_owned(),
            executable: "cl-worker".to_owned(),
            tag: None,
            group: None,
            work_dir_prefix: None,
            max_work_dir_size: None,
            delete_work_dir_on_exit: false,
            idle_seconds: 600,
            download_dependencies_max_retries: 3,
            checkin_frequency_seconds: None,
            exit_after_num_runs: None,
            pass_down_termination: false,
            exit_on_exception: false,
            tag_exclusive: false,
            shared_memory_size_gb: None,
            preemptible: false,
            env: Vec::new(),
        }
    }
}

/// The longest worker id the server keeps: its `worker.worker_id` column is `String(127)`
/// (CodaLab 1.7.5, `tables.py`). A longer id is refused (strict SQL) or cut (lax), so the
/// worker never matches its job.
pub const MAX_CHECKIN_ID_LEN: usize = 127;

/// The id worker `worker_id` checks in with (`cl-worker --id`), as upstream: `host-<id>`.
pub fn checkin_id(worker_id: &str) -> String {
    format!("host-{worker_id}")
}

impl WorkerOptions {
    /// These options for workers of `server`.
    pub fn for_server(&self, server: &str) -> WorkerOptions {
        WorkerOptions {
            server: server.to_owned(),
            ..self.clone()
        }
    }

    /// The `cl-worker` argv for worker `worker_id` working in `work_dir`, flag for flag as
    /// upstream builds it. Backends append their own flags (Slurm adds
    /// `--pass-down-termination`, Kubernetes its `--bundle-runtime` flags).
    pub fn build_command(&self, worker_id: &str, work_dir: &str) -> Vec<String> {
        let mut argv: Vec<String> = vec![
            self.executable.clone(),
            "--server".into(),
            self.server.clone(),
            "--verbose".into(),
            "--exit-when-idle".into(),
            "--idle-seconds".into(),
            self.idle_seconds.to_string(),
            "--work-dir".into(),
            work_dir.to_owned(),
            "--id".into(),
            checkin_id(worker_id),
            "--network-prefix".into(),
            format!("cl_worker_{worker_id}_network"),
        ];
        let mut pair = |flag: &str, value: String| {
            argv.push(flag.to_owned());
            argv.push(value);
        };
        if let Some(tag) = self.tag.as_ref().filter(|t| !t.is_empty()) {
            pair("--tag", tag.clone());
        }
        if let Some(group) = self.group.as_ref().filter(|g| !g.is_empty()) {
            pair("--group", group.clone());
        }
        if let Some(runs) = self.exit_after_num_runs.filter(|n| *n > 0) {
            pair("--exit-after-num-runs", runs.to_string());
        }
        if self.download_dependencies_max_retries != 0 {
            pair(
                "--download-dependencies-max-retries",
                self.download_dependencies_max_retries.to_string(),
            );
        }
        if let Some(size) = self.max_work_dir_size.as_ref().filter(|s| !s.is_empty()) {
            pair("--max-work-dir-size", size.clone());
        }
        let mut flag = |on: bool, name: &str| {
            if on {
                argv.push(name.to_owned());
            }
        };
        flag(self.delete_work_dir_on_exit, "--delete-work-dir-on-exit");
        flag(self.exit_on_exception, "--exit-on-exception");
        flag(self.tag_exclusive, "--tag-exclusive");
        flag(self.pass_down_termination, "--pass-down-termination");
        if let Some(seconds) = self.checkin_frequency_seconds.filter(|s| *s != 0) {
            argv.push("--checkin-frequency-seconds".into());
            argv.push(seconds.to_string());
        }
        if let Some(gb) = self.shared_memory_size_gb.filter(|g| *g != 0) {
            argv.push("--shared-memory-size-gb".into());
            argv.push(gb.to_string());
        }
        if self.preemptible {
            argv.push("--preemptible".into());
        }
        argv
    }

    /// The names of the variables a worker gets from the manager's environment:
    /// [`WORKER_ENV`], then the admin's [`WorkerOptions::env`] (each once).
    pub fn env_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = WORKER_ENV.to_vec();
        for name in &self.env {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        names
    }

    /// The variables a worker gets from the manager's environment: those of
    /// [`WorkerOptions::env_names`] that are set, with their values.
    pub fn inherited_env(&self) -> Vec<(String, std::ffi::OsString)> {
        self.env_names()
            .into_iter()
            .filter_map(|name| std::env::var_os(name).map(|value| (name.to_owned(), value)))
            .collect()
    }

    /// Checks the names of [`WorkerOptions::env`]: each a variable name (letters, digits and
    /// `_`, not starting with a digit), as Slurm's `--export` list needs them.
    pub fn check_env(&self) -> Result<(), String> {
        for name in &self.env {
            let mut chars = name.chars();
            let first = chars.next();
            let valid = first.is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!(
                    "worker env `{name}` is not a variable name (letters, digits and `_`, not starting with a digit)"
                ));
            }
        }
        Ok(())
    }

    /// `<prefix>/<rest>` when `--worker-work-dir-prefix` is set, else `rest` (Python's
    /// `Path(prefix).joinpath(rest)` for a relative `rest`).
    pub fn work_dir(&self, rest: &str) -> String {
        match self.work_dir_prefix.as_deref().filter(|p| !p.is_empty()) {
            Some(prefix) => format!("{}/{}", prefix.trim_end_matches('/'), rest),
            None => rest.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The acceptance case: upstream's `slurm_batch_worker_manager_test.py`.
    #[test]
    fn matches_upstream_unit_test() {
        let options = WorkerOptions {
            server: "some_server".into(),
            idle_seconds: 888,
            tag: Some("some_tag".into()),
            group: Some("some_group".into()),
            exit_after_num_runs: Some(8),
            download_dependencies_max_retries: 5,
            max_work_dir_size: Some("88g".into()),
            checkin_frequency_seconds: Some(30),
            shared_memory_size_gb: Some(10),
            ..WorkerOptions::default()
        };
        let argv = options.build_command(
            "some_worker_id",
            "/some/path/some_user-codalab-SlurmBatchWorkerManager-scratch/workdir",
        );
        assert_eq!(
            argv.join(" "),
            "cl-worker --server some_server --verbose --exit-when-idle --idle-seconds 888 \
             --work-dir /some/path/some_user-codalab-SlurmBatchWorkerManager-scratch/workdir \
             --id host-some_worker_id --network-prefix cl_worker_some_worker_id_network \
             --tag some_tag --group some_group --exit-after-num-runs 8 \
             --download-dependencies-max-retries 5 --max-work-dir-size 88g \
             --checkin-frequency-seconds 30 --shared-memory-size-gb 10"
        );
    }

    #[test]
    fn defaults_give_the_minimal_command() {
        let argv = WorkerOptions::default().build_command("w1", "wd");
        assert_eq!(
            argv.join(" "),
            "cl-worker --server https://worksheets.codalab.org --verbose --exit-when-idle \
             --idle-seconds 600 --work-dir wd --id host-w1 --network-prefix cl_worker_w1_network \
             --download-dependencies-max-retries 3"
        );
    }

    #[test]
    fn every_optional_flag_in_upstream_order() {
        let options = WorkerOptions {
            server: "s".into(),
            executable: "/opt/cl-worker".into(),
            tag: Some("t".into()),
            group: Some("g".into()),
            exit_after_num_runs: Some(1),
            download_dependencies_max_retries: 0,
            max_work_dir_size: Some("1t".into()),
            delete_work_dir_on_exit: true,
            exit_on_exception: true,
            tag_exclusive: true,
            pass_down_termination: true,
            checkin_frequency_seconds: Some(5),
            shared_memory_size_gb: Some(2),
            preemptible: true,
            ..WorkerOptions::default()
        };
        let argv = options.build_command("x", "d");
        assert_eq!(
            argv[13..].join(" "),
            "--tag t --group g --exit-after-num-runs 1 --max-work-dir-size 1t \
             --delete-work-dir-on-exit --exit-on-exception --tag-exclusive --pass-down-termination \
             --checkin-frequency-seconds 5 --shared-memory-size-gb 2 --preemptible"
        );
        assert_eq!(argv[0], "/opt/cl-worker");
    }

    #[test]
    fn zero_and_empty_values_are_left_out_like_upstream() {
        let options = WorkerOptions {
            tag: Some(String::new()),
            exit_after_num_runs: Some(0),
            checkin_frequency_seconds: Some(0),
            shared_memory_size_gb: Some(0),
            max_work_dir_size: Some(String::new()),
            ..WorkerOptions::default()
        };
        assert_eq!(options.build_command("x", "d").len(), 15);
    }

    #[test]
    fn workers_get_the_allow_list_and_the_admins_names_only() {
        let options = WorkerOptions {
            env: vec!["MY_SITE_TOKEN".into(), "PATH".into()],
            ..WorkerOptions::default()
        };
        let names = options.env_names();
        assert!(names.contains(&"DOCKER_HOST") && names.contains(&"MY_SITE_TOKEN"));
        assert_eq!(names.iter().filter(|n| **n == "PATH").count(), 1);
        assert!(
            !names
                .iter()
                .any(|n| n.starts_with("AWS_") || n.starts_with("AZURE_"))
        );
        assert!(options.check_env().is_ok());
        for bad in ["", "A,B", "A=1", "1A", "A B"] {
            let options = WorkerOptions {
                env: vec![bad.into()],
                ..WorkerOptions::default()
            };
            assert!(options.check_env().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn work_dir_prefix_joins() {
        let mut options = WorkerOptions::default();
        assert_eq!(options.work_dir("a/workdir"), "a/workdir");
        options.work_dir_prefix = Some("/juice/".into());
        assert_eq!(options.work_dir("a/workdir"), "/juice/a/workdir");
    }
}
