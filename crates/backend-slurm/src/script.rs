//! The batch script of one worker job, semantically what upstream writes: sorted
//! `#SBATCH --key=value` lines, the hostname log line, the credential check (without a password
//! file), the `nvidia-smi -L` GPU isolation, then `srun --unbuffered` with the worker argv.
//!
//! Unlike upstream, every argument is shell-quoted and the worker is `exec`'d so that `scancel`
//! and time limits reach it. The script never holds a secret: without a password file the
//! credentials reach the worker through the environment sbatch hands down, of which
//! `#SBATCH --export` names what the job gets (not the manager's whole environment).

use crate::config::Settings;
use codalab_wm_backend::WorkerOptions;
use std::collections::BTreeMap;

/// The worker's working directory, relative to `--worker-work-dir-prefix` (as upstream).
pub fn worker_work_dir(user: &str) -> String {
    format!("{user}-codalab-SlurmBatchWorkerManager-scratch/workdir")
}

/// Everything needed to submit one worker job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobScript {
    /// The worker id, also the Slurm job name: `<user>-<job-name>-<unique>`.
    pub worker_id: String,
    /// The per-worker directory under the slurm work dir (script and log live there).
    pub dir: String,
    /// Where the script is saved before submission: `<dir>/<worker-id>.slurm`.
    pub path: String,
    /// The script itself.
    pub text: String,
}

impl JobScript {
    /// The script for the worker with launch id `unique`.
    pub fn new(settings: &Settings, unique: &str, worker: &WorkerOptions) -> Self {
        let worker_id = format!("{}{unique}", settings.job_name_prefix());
        let base = settings.config.slurm_work_dir.to_string_lossy();
        let dir = format!("{}/{worker_id}", base.trim_end_matches('/'));
        let path = format!("{dir}/{worker_id}.slurm");
        let text = render(settings, &worker_id, &dir, worker);
        Self {
            worker_id,
            dir,
            path,
            text,
        }
    }
}

/// The `#SBATCH` options, sorted by key as upstream writes them, and `--export` with the
/// names of the variables the worker gets of the manager's environment
/// ([`WorkerOptions::env_names`] and its credentials): without it sbatch exports its whole
/// environment (`--export=ALL`), which Slurm stores with the job.
pub fn sbatch_options(
    settings: &Settings,
    worker_id: &str,
    dir: &str,
    worker: &WorkerOptions,
) -> BTreeMap<&'static str, String> {
    let config = &settings.config;
    let mut options = BTreeMap::new();
    let mut optional = |key, value: &Option<String>| {
        if let Some(value) = value.as_ref().filter(|v| !v.is_empty()) {
            options.insert(key, value.clone());
        }
    };
    optional("nodelist", &config.nodelist);
    optional("exclude", &config.exclude);
    optional("constraint", &config.constraint);
    optional("account", &config.account);
    options.insert("mem", config.memory_mb.to_string());
    options.insert("partition", settings.partition.clone());
    if config.gpus > 0 {
        let gpu_type = config.gpu_type.as_ref().filter(|t| !t.is_empty());
        let gres = match gpu_type {
            Some(kind) => format!("gpu:{kind}:{}", config.gpus),
            None => format!("gpu:{}", config.gpus),
        };
        options.insert("gres", gres);
    }
    options.insert("job-name", worker_id.to_owned());
    options.insert("cpus-per-task", config.cpus.to_string());
    options.insert("ntasks-per-node", "1".to_owned());
    options.insert("time", config.time.clone());
    options.insert("open-mode", "append".to_owned());
    options.insert("output", format!("{dir}/{worker_id}.out"));
    let mut export = worker.env_names();
    if config.password_file.is_none() {
        export.extend(["CODALAB_USERNAME", "CODALAB_PASSWORD"]);
    }
    options.insert("export", export.join(","));
    options
}

/// The worker argv: `cl-worker …` as core builds it, `--pass-down-termination` (always, as
/// upstream) and `--password-file` when one is used.
pub fn worker_argv(settings: &Settings, worker_id: &str, worker: &WorkerOptions) -> Vec<String> {
    let work_dir = worker.work_dir(&worker_work_dir(&settings.user));
    let mut argv = worker.build_command(worker_id, &work_dir);
    argv.push("--pass-down-termination".to_owned());
    if let Some(file) = &settings.config.password_file {
        argv.push("--password-file".to_owned());
        argv.push(file.to_string_lossy().into_owned());
    }
    argv
}

const LOG_HOSTNAME: &str = r#"echo "Worker is executing on host: $(hostname)" || true
"#;

const CHECK_CREDENTIALS: &str = r#"if [ -n "${CODALAB_USERNAME:-}" ] && [ -n "${CODALAB_PASSWORD:-}" ]; then
    echo "Found environment variables CODALAB_USERNAME and CODALAB_PASSWORD."
else
    echo "Environment variable CODALAB_USERNAME or CODALAB_PASSWORD is not set properly."
    echo "Stop creating new workers."
    exit 1
fi
"#;

/// Docker ignores Slurm's GPU isolation, so the worker is told which GPUs it got.
const GPU_ISOLATION: &str = r#"GPUSET=$(nvidia-smi -L 2>/dev/null | grep -o 'UUID: [^)]*' | cut -d ' ' -f2 | paste -sd, -)
if [ -z "$GPUSET" ]; then
    echo "No GPUs on the machine"
    GPU_ARGS="--gpuset NONE"
else
    echo "Using GPUs $GPUSET"
    GPU_ARGS="--gpuset $GPUSET"
fi
"#;

/// A worker without GPUs must not pick up every GPU `nvidia-smi` sees on a shared node.
const NO_GPUS: &str = r#"GPU_ARGS="--gpuset NONE"
"#;

fn render(settings: &Settings, worker_id: &str, dir: &str, worker: &WorkerOptions) -> String {
    let mut text = String::from("#!/usr/bin/env bash\n\n");
    for (key, value) in sbatch_options(settings, worker_id, dir, worker) {
        text.push_str(&format!("#SBATCH --{key}={value}\n"));
    }
    text.push('\n');
    text.push_str(LOG_HOSTNAME);
    text.push('\n');
    if settings.config.password_file.is_none() {
        text.push_str(CHECK_CREDENTIALS);
        text.push('\n');
    }
    text.push_str(if settings.config.gpus > 0 {
        GPU_ISOLATION
    } else {
        NO_GPUS
    });
    text.push('\n');
    let argv = worker_argv(settings, worker_id, worker);
    // `$GPU_ARGS` stays unquoted on purpose: it is two words.
    text.push_str(&format!(
        "exec srun --unbuffered {} $GPU_ARGS\n",
        shell_words::join(&argv)
    ));
    text
}

/// `text` with every occurrence of each non-empty secret replaced by `***`.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(text.to_owned(), |acc, secret| acc.replace(secret, "***"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SlurmConfig;

    const UNIQUE: &str = "0123456789abcdef0123456789abcdef";

    fn settings(config: SlurmConfig) -> Settings {
        let base = SlurmConfig {
            partition: Some("cpu".into()),
            user: Some("alice".into()),
            ..config
        };
        base.validate().unwrap()
    }

    fn script(config: SlurmConfig) -> JobScript {
        let worker = WorkerOptions {
            server: "https://cl.example".into(),
            ..WorkerOptions::default()
        };
        JobScript::new(&settings(config), UNIQUE, &worker)
    }

    fn sbatch_lines(text: &str) -> Vec<&str> {
        text.lines().filter(|l| l.starts_with("#SBATCH")).collect()
    }

    #[test]
    fn default_script_snapshot() {
        let script = script(SlurmConfig::default());
        let id = "alice-codalab-slurm-worker-0123456789abcdef0123456789abcdef";
        let export = codalab_wm_backend::command::WORKER_ENV.join(",");
        assert_eq!(script.worker_id, id);
        assert_eq!(script.dir, format!("slurm-worker-scratch/{id}"));
        assert_eq!(script.path, format!("slurm-worker-scratch/{id}/{id}.slurm"));
        let expected = format!(
            r#"#!/usr/bin/env bash

#SBATCH --cpus-per-task=1
#SBATCH --export={export},CODALAB_USERNAME,CODALAB_PASSWORD
#SBATCH --gres=gpu:1
#SBATCH --job-name={id}
#SBATCH --mem=2048
#SBATCH --ntasks-per-node=1
#SBATCH --open-mode=append
#SBATCH --output=slurm-worker-scratch/{id}/{id}.out
#SBATCH --partition=cpu
#SBATCH --time=10-0

echo "Worker is executing on host: $(hostname)" || true

if [ -n "${{CODALAB_USERNAME:-}}" ] && [ -n "${{CODALAB_PASSWORD:-}}" ]; then
    echo "Found environment variables CODALAB_USERNAME and CODALAB_PASSWORD."
else
    echo "Environment variable CODALAB_USERNAME or CODALAB_PASSWORD is not set properly."
    echo "Stop creating new workers."
    exit 1
fi

GPUSET=$(nvidia-smi -L 2>/dev/null | grep -o 'UUID: [^)]*' | cut -d ' ' -f2 | paste -sd, -)
if [ -z "$GPUSET" ]; then
    echo "No GPUs on the machine"
    GPU_ARGS="--gpuset NONE"
else
    echo "Using GPUs $GPUSET"
    GPU_ARGS="--gpuset $GPUSET"
fi

exec srun --unbuffered cl-worker --server https://cl.example --verbose --exit-when-idle --idle-seconds 600 --work-dir alice-codalab-SlurmBatchWorkerManager-scratch/workdir --id host-{id} --network-prefix cl_worker_{id}_network --download-dependencies-max-retries 3 --pass-down-termination $GPU_ARGS
"#
        );
        assert_eq!(script.text, expected);
    }

    #[test]
    fn every_optional_flag_snapshot() {
        let script = script(SlurmConfig {
            job_name: "jn".into(),
            nodelist: Some("node[1-2]".into()),
            exclude: Some("node3,node4".into()),
            cpus: 4,
            gpus: 2,
            gpu_type: Some("a100".into()),
            constraint: Some("avx512".into()),
            memory_mb: 16384,
            time: "1-12:00:00".into(),
            slurm_work_dir: "/scratch/wm/".into(),
            account: Some("nlp".into()),
            password_file: Some("/home/alice/pw".into()),
            ..SlurmConfig::default()
        });
        let id = format!("alice-jn-{UNIQUE}");
        assert_eq!(
            sbatch_lines(&script.text),
            [
                "#SBATCH --account=nlp",
                "#SBATCH --constraint=avx512",
                "#SBATCH --cpus-per-task=4",
                "#SBATCH --exclude=node3,node4",
                &format!(
                    "#SBATCH --export={}",
                    codalab_wm_backend::command::WORKER_ENV.join(",")
                ),
                "#SBATCH --gres=gpu:a100:2",
                &format!("#SBATCH --job-name={id}"),
                "#SBATCH --mem=16384",
                "#SBATCH --nodelist=node[1-2]",
                "#SBATCH --ntasks-per-node=1",
                "#SBATCH --open-mode=append",
                &format!("#SBATCH --output=/scratch/wm/{id}/{id}.out"),
                "#SBATCH --partition=cpu",
                "#SBATCH --time=1-12:00:00",
            ]
        );
        assert!(
            !script.text.contains("CODALAB_PASSWORD"),
            "no credential check with a password file"
        );
        assert!(
            script
                .text
                .ends_with(" --pass-down-termination --password-file /home/alice/pw $GPU_ARGS\n"),
            "{}",
            script.text
        );
    }

    #[test]
    fn no_gpus_means_no_gres_and_no_gpuset() {
        let script = script(SlurmConfig {
            gpus: 0,
            gpu_type: Some("a100".into()),
            ..SlurmConfig::default()
        });
        assert!(!script.text.contains("--gres"), "{}", script.text);
        assert!(!script.text.contains("nvidia-smi"), "{}", script.text);
        assert!(
            script
                .text
                .contains("GPU_ARGS=\"--gpuset NONE\"\n\nexec srun"),
            "{}",
            script.text
        );
    }

    #[test]
    fn gres_without_type_and_empty_optionals_are_left_out() {
        let script = script(SlurmConfig {
            gpus: 3,
            nodelist: Some(String::new()),
            ..SlurmConfig::default()
        });
        let lines = sbatch_lines(&script.text);
        assert!(lines.contains(&"#SBATCH --gres=gpu:3"), "{lines:?}");
        assert!(
            !lines
                .iter()
                .any(|l| l.contains("nodelist") || l.contains("account")),
            "{lines:?}"
        );
    }

    #[test]
    fn worker_arguments_are_shell_quoted() {
        let worker = WorkerOptions {
            executable: "/opt/my worker/cl-worker".into(),
            server: "https://cl.example/?a=1&b=$(reboot)".into(),
            tag: Some("it's".into()),
            work_dir_prefix: Some("/juice scratch".into()),
            ..WorkerOptions::default()
        };
        let script = JobScript::new(&settings(SlurmConfig::default()), UNIQUE, &worker);
        let last = script.text.lines().last().unwrap();
        let words = shell_words::split(last.trim_end_matches(" $GPU_ARGS")).unwrap();
        let id = format!("alice-codalab-slurm-worker-{UNIQUE}");
        assert_eq!(
            words[..4],
            ["exec", "srun", "--unbuffered", "/opt/my worker/cl-worker"]
        );
        assert!(
            words.contains(&"https://cl.example/?a=1&b=$(reboot)".to_owned()),
            "{words:?}"
        );
        assert!(words.contains(&"it's".to_owned()), "{words:?}");
        assert!(words.contains(
            &"/juice scratch/alice-codalab-SlurmBatchWorkerManager-scratch/workdir".to_owned()
        ));
        assert!(words.contains(&format!("host-{id}")), "{words:?}");
    }

    /// Every generated script is valid bash (`bash -n`).
    #[test]
    fn scripts_pass_bash_syntax_check() {
        let configs = [
            SlurmConfig::default(),
            SlurmConfig {
                gpus: 0,
                ..SlurmConfig::default()
            },
            SlurmConfig {
                password_file: Some("/home/alice/pw".into()),
                ..SlurmConfig::default()
            },
        ];
        for config in configs {
            let worker = WorkerOptions {
                tag: Some("a'b \"c\" $d".into()),
                ..WorkerOptions::default()
            };
            let script = JobScript::new(&settings(config), UNIQUE, &worker);
            let output = std::process::Command::new("bash")
                .args(["-n", "-c", &script.text])
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "{}\n{}",
                String::from_utf8_lossy(&output.stderr),
                script.text
            );
        }
    }

    #[test]
    fn redacts_secrets() {
        assert_eq!(redact("pw=hunter2 hunter2", &["hunter2", ""]), "pw=*** ***");
    }
}
