//! The drop-in check for `slurm-batch`: command lines as upstream documents them, parsed as
//! `main` parses them, give the job script upstream's own code writes for them (the same
//! `#SBATCH` options, the same `srun` worker command, the credentials check exactly when there
//! is no password file). Runs against captures of the real Python peer, codalab-worksheets
//! v1.7.5, made by `tests/data/upstream-slurm/make_captures.py`; nothing is submitted.

use crate::cli::{Command, parse_args};
use codalab_wm_core::{LaunchRequest, WorkerOptions};
use codalab_wm_slurm::{SlurmBackend, SlurmConfig};
use serde_json::Value;

const CAPTURES: &str = include_str!("../tests/data/upstream-slurm/captures.json");

/// The `[slurm_batch]` table and the workers' options of the single backend `argv` names.
fn layout_of(argv: &[String]) -> (serde_json::Map<String, Value>, WorkerOptions) {
    let line = std::iter::once("wm".to_owned()).chain(argv.iter().cloned());
    let cli = parse_args(line).unwrap();
    let Some(Command::Backend(backend)) = &cli.command else {
        panic!("{argv:?}: no backend");
    };
    let layers = crate::setup::layers(&cli.global, Some(backend));
    let settings = crate::setup::settings(&layers).unwrap();
    let catalogue = crate::backends::catalogue();
    let layout = codalab_wm_core::layout::Layout::new(&settings, &layers, &catalogue).unwrap();
    let pool = &layout.pools[0];
    (pool.table.values().clone(), pool.worker.clone())
}

/// Our job script for `argv` and launch id `unique`.
fn our_script(argv: &[String], unique: &str) -> String {
    let (table, worker) = layout_of(argv);
    let config: SlurmConfig = serde_json::from_value(Value::Object(table)).unwrap();
    let backend = SlurmBackend::new(&config, None).unwrap();
    backend.render_script(&LaunchRequest {
        unique,
        worker: &worker,
        dry_run: true,
    })
}

fn sbatch_lines(script: &str) -> Vec<&str> {
    script
        .lines()
        .filter(|l| l.starts_with("#SBATCH"))
        .collect()
}

/// The `srun` line; ours `exec`s it (README, "Slurm": so that `scancel` reaches the worker).
fn srun_line(script: &str) -> &str {
    let line = script.lines().rfind(|l| l.contains("srun")).unwrap_or("");
    line.strip_prefix("exec ").unwrap_or(line)
}

#[test]
fn upstream_command_lines_give_upstreams_job_script() {
    let captures: Value = serde_json::from_str(CAPTURES).unwrap();
    let unique = captures["unique"].as_str().unwrap();
    let sets = captures["captures"].as_array().unwrap();
    assert_eq!(sets.len(), 3);
    for set in sets {
        let name = set["name"].as_str().unwrap();
        let argv: Vec<String> = serde_json::from_value(set["argv"].clone()).unwrap();
        let theirs = set["script"].as_str().unwrap();
        let ours = our_script(&argv, unique);
        assert_eq!(sbatch_lines(&ours), sbatch_lines(theirs), "{name}:\n{ours}");
        assert_eq!(srun_line(&ours), srun_line(theirs), "{name}:\n{ours}");
        assert_eq!(
            ours.contains("CODALAB_PASSWORD"),
            theirs.contains("CODALAB_PASSWORD"),
            "{name}: the credentials check is there exactly without a password file:\n{ours}"
        );
    }
}

/// Upstream documents `slurm-batch … --password-file F` (its only place for the flag):
/// there as before the backend name, the file is the manager's and every worker's, and no
/// backend flag left unset hides it.
#[test]
fn a_password_file_after_slurm_batch_reaches_the_workers() {
    for line in [
        "--server http://127.0.0.1:1 slurm-batch --partition cpu --user alice --password-file /pw",
        "--server http://127.0.0.1:1 --password-file /pw slurm-batch --partition cpu --user alice",
    ] {
        let argv: Vec<String> = line.split(' ').map(str::to_owned).collect();
        let (table, _) = layout_of(&argv);
        assert_eq!(table["password_file"], "/pw", "{line}");
        let script = our_script(&argv, "u");
        assert!(
            script.contains(" --pass-down-termination --password-file /pw $GPU_ARGS\n"),
            "{line}:\n{script}"
        );
    }
}
