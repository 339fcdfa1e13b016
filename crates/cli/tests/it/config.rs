//! `cl-worker-manager config init` and `config check`, through the real binary: every
//! template (each backend, single or with pools) passes the check once its placeholders are
//! filled; broken files get every diagnostic, each with its line, and exit 1; `--output`
//! never overwrites without `--force`.

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");
const PLACEHOLDER: &str = "XXX-CUSTOMIZE-THIS-XXX";
const BACKENDS: [&str; 5] = [
    "local",
    "slurm-batch",
    "aws-batch",
    "azure-batch",
    "kubernetes",
];

fn cli(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("CODALAB_WM_LOG")
        .output()
        .unwrap()
}

fn init(backend: &str, pools: bool) -> String {
    let mut args = vec!["config", "init", "--backend", backend];
    if pools {
        args.push("--pools");
    }
    let output = cli(&args);
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// Runs `config check` on `text`; returns the exit code and the diagnostics as
/// `(line, "kind: message")`.
fn check(text: &str) -> (i32, Vec<(usize, String)>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wm.toml");
    std::fs::write(&path, text).unwrap();
    let output = cli(&["config", "check", path.to_str().unwrap()]);
    let prefix = format!("{}:", path.display());
    let found = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let rest = line
                .strip_prefix(&prefix)
                .unwrap_or_else(|| panic!("{line}"));
            let (number, message) = rest.split_once(": ").unwrap();
            (number.parse().unwrap(), message.to_owned())
        })
        .collect();
    (output.status.code().unwrap(), found)
}

#[test]
fn every_template_passes_the_check_once_its_placeholders_are_filled() {
    for backend in BACKENDS {
        for pools in [false, true] {
            let text = init(backend, pools);
            let grep: Vec<&str> = text.lines().filter(|l| l.contains(PLACEHOLDER)).collect();
            let (code, found) = check(&text);
            let placeholders = found
                .iter()
                .filter(|(_, m)| m.starts_with("placeholder"))
                .count();
            assert_eq!(
                placeholders,
                grep.iter().filter(|l| !l.starts_with('#')).count(),
                "{backend} pools={pools}: each placeholder is reported: {found:?}"
            );
            assert_eq!(code, i32::from(!found.is_empty()), "{found:?}");
            let (code, found) = check(&text.replace(PLACEHOLDER, "filled"));
            assert_eq!(
                (code, &found),
                (0, &vec![]),
                "{backend} pools={pools}:\n{text}"
            );
        }
    }
}

#[test]
fn the_slurm_template_needs_only_the_partition() {
    let text = init("slurm-batch", false);
    let (code, found) = check(&text);
    let line = text
        .lines()
        .position(|l| l.contains(PLACEHOLDER) && !l.starts_with('#'))
        .unwrap()
        + 1;
    assert_eq!(code, 1);
    assert_eq!(
        found,
        vec![(
            line,
            format!("placeholder: `slurm_batch.partition` is still {PLACEHOLDER}: set it")
        )]
    );
}

/// One broken file per diagnostic: the line and a part of the message expected.
#[test]
fn each_kind_of_problem_is_reported_at_its_line() {
    let cases: &[(&str, &str, usize, &str)] = &[
        ("syntax", "max_workers = = 3\n", 1, "syntax error"),
        (
            "placeholder",
            "backend = \"local\"\n[worker]\ntag = \"XXX-CUSTOMIZE-THIS-XXX\"\n",
            3,
            "placeholder: `worker.tag`",
        ),
        (
            "unknown top-level key",
            "sleep_time = 5\nmax_worker = 3\n",
            2,
            "unknown key: `max_worker` is not a setting at the top level (did you mean `max_workers`?)",
        ),
        (
            "unknown backend key",
            "[slurm_batch]\npartiton = \"cpu\"\n",
            2,
            "unknown key: `partiton` is not a setting in [slurm_batch] (did you mean `partition`?)",
        ),
        (
            "unknown worker key",
            "[worker]\nidle_secs = 3\n",
            2,
            "unknown key: `idle_secs` is not a setting in [worker]",
        ),
        (
            "wrong type",
            "\nsleep_time = \"five\"\n",
            2,
            "wrong type: `sleep_time`: invalid type: string \"five\", expected u64",
        ),
        (
            "wrong type in a backend table",
            "[local]\ncpus = -1\n",
            2,
            "wrong type: `local.cpus`",
        ),
        (
            "min above max",
            "min_workers = 5\nmax_workers = 2\n",
            2,
            "invalid: --max-workers (2) is less than --min-workers (5)",
        ),
        (
            "burst in compat mode",
            "launch_mode = \"compat\"\nmax_launches_per_tick = 3\n",
            2,
            "invalid: --max-launches-per-tick 3 needs --launch-mode target",
        ),
        (
            "no CPUs",
            "[[pools]]\nname = \"p\"\nbackend = \"local\"\n[pools.local]\ncpus = 0\n",
            5,
            "invalid: `pools.local of pool p.cpus` = 0: a worker with no CPUs can run no bundle",
        ),
        (
            "no memory",
            "backend = \"local\"\n[local]\nmemory_mb = 0\n",
            3,
            "a worker with no memory can run no bundle",
        ),
        (
            "GPU pool without GPUs",
            "[[pools]]\nname = \"gpu\"\nbackend = \"local\"\n[pools.local]\ngpus = 0\n",
            5,
            "pool gpu is named for GPUs, but its workers get no GPUs",
        ),
        (
            "GPU partition without GPUs",
            "backend = \"slurm-batch\"\n[slurm_batch]\npartition = \"gpu\"\ngpus = 0\n",
            4,
            "partition \"gpu\" is a GPU partition, but its workers get no GPUs",
        ),
        (
            "pools owning each other's jobs",
            "[[pools]]\nname = \"a\"\nbackend = \"slurm-batch\"\n[pools.slurm_batch]\npartition = \"cpu\"\ngpus = 0\njob_name = \"w\"\n\
             [[pools]]\nname = \"b\"\nbackend = \"slurm-batch\"\n[pools.slurm_batch]\npartition = \"cpu\"\ngpus = 0\njob_name = \"w\"\n",
            9,
            "invalid: pools a and b would own each other's jobs: job_name `w` and `w` share a prefix",
        ),
        (
            "local pools sharing a state dir",
            "[[pools]]\nname = \"a\"\nbackend = \"local\"\n[pools.local]\nstate_dir = \"/tmp/s\"\n\
             [[pools]]\nname = \"b\"\nbackend = \"local\"\n[pools.local]\nstate_dir = \"/tmp/s\"\n",
            7,
            "pools a and b would own each other's jobs: the same state_dir",
        ),
        (
            "missing slurm partition",
            "backend = \"slurm-batch\"\n[slurm_batch]\ngpus = 0\n",
            2,
            "missing: [slurm_batch]: slurm-batch needs --partition",
        ),
        (
            "worker ids over the server's 127 characters",
            &format!(
                "backend = \"slurm-batch\"\n[slurm_batch]\npartition = \"cpu\"\nuser = \"alice\"\njob_name = \"{}\"\n",
                "j".repeat(84)
            ),
            5,
            "makes worker ids of 128 characters",
        ),
        (
            "missing azure keys",
            "[azure_batch]\naccount_name = \"a\"\n",
            1,
            "missing: [azure_batch]: azure_batch: service_url (--service-url) is required",
        ),
        (
            "backend validation",
            "[kubernetes]\nnamespace = \"Bad_NS\"\n",
            2,
            "invalid: [kubernetes]: kubernetes: namespace `Bad_NS`",
        ),
        (
            "pool rules",
            "[[pools]]\nname = \"p\"\nbackend = \"local\"\nmin = 3\nmax = 1\n",
            5,
            "invalid: pool p: max (1) is less than min (3)",
        ),
        (
            "unknown backend",
            "backend = \"slurm\"\n",
            1,
            "invalid: `backend` = \"slurm\" is not a backend",
        ),
        (
            "listen host with a port",
            "backend = \"local\"\nlisten = \"0.0.0.0:9464\"\nlisten_hosts = [\"wm.example.org:9464\"]\n",
            3,
            "invalid: `listen_hosts` (--listen-hosts): \"wm.example.org:9464\" is not a host name",
        ),
        (
            "a search longer than the server's request line",
            &format!(
                "server = \"http://127.0.0.1:2900\"\nbackend = \"local\"\nsearch = [\"name={}\"]\n",
                "x".repeat(3995)
            ),
            3,
            "`search` (--search, 4000 bytes)",
        ),
        (
            "a fallback that is not a pool",
            "[[pools]]\nname = \"spot\"\nbackend = \"local\"\nfallback = \"standrd\"\n[pools.local]\nstate_dir = \"/tmp/a\"\n\
             [[pools]]\nname = \"standard\"\nbackend = \"local\"\n[pools.local]\nstate_dir = \"/tmp/b\"\n",
            4,
            "pool spot: fallback standrd is not a pool (pools: spot, standard)",
        ),
        (
            "fallback keys without a fallback",
            "[[pools]]\nname = \"spot\"\nbackend = \"local\"\nmin_on_demand = 1\n",
            4,
            "pool spot: `min_on_demand` needs `fallback`",
        ),
        (
            "a fallback in compat mode",
            "[[pools]]\nname = \"spot\"\nbackend = \"local\"\nlaunch_mode = \"compat\"\nfallback = \"spot2\"\n",
            5,
            "pool spot: fallback needs launch_mode = \"target\"",
        ),
        (
            "pool sub-table of another backend",
            "[[pools]]\nname = \"p\"\nbackend = \"local\"\n[pools.slurm_batch]\npartition = \"cpu\"\n",
            4,
            "[pools.slurm_batch] does not belong to backend local",
        ),
    ];
    for (what, text, line, expected) in cases {
        let (code, found) = check(text);
        assert_eq!(code, 1, "{what}: exit 1");
        assert!(
            found.iter().any(|(l, m)| l == line && m.contains(expected)),
            "{what}: expected line {line}: {expected}\ngot {found:?}"
        );
    }
}

#[test]
fn every_problem_of_a_file_is_reported_not_only_the_first() {
    let text = "\
backend = \"slurm-batch\"
sleep_time = \"five\"
min_workers = 4
max_workers = 2
verbos = true

[worker]
idle_seconds = \"long\"

[slurm_batch]
partition = \"XXX-CUSTOMIZE-THIS-XXX\"
cpus = \"many\"
memory = 4096
";
    let (code, found) = check(text);
    assert_eq!(code, 1);
    let lines: Vec<usize> = found.iter().map(|(l, _)| *l).collect();
    assert_eq!(lines, [2, 4, 5, 8, 11, 12, 13], "{found:?}");
    assert!(found[2].1.contains("did you mean `verbose`"), "{found:?}");
    assert!(found[6].1.contains("did you mean `memory_mb`"), "{found:?}");
}

#[test]
fn a_good_file_exits_0() {
    let text = "\
server = \"http://127.0.0.1:2900\"
backend = \"slurm-batch\"
min_workers = 0
max_workers = 3
launch_mode = \"target\"
max_launches_per_tick = 3

[slurm_batch]
partition = \"cpu\"
gpus = 0
";
    assert_eq!(check(text), (0, vec![]));
}

#[test]
fn init_output_never_overwrites_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wm.toml");
    std::fs::write(&path, "keep me").unwrap();
    let out = path.to_str().unwrap();
    let output = cli(&["config", "init", "--backend", "local", "--output", out]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("pass --force to overwrite it"),
        "{output:?}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
    let output = cli(&[
        "config",
        "init",
        "--backend",
        "local",
        "--output",
        out,
        "--force",
    ]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        std::fs::read_to_string(Path::new(out)).unwrap(),
        init("local", false)
    );
}

/// The manager as started for real, with a config file and the environment (issue 23, item 6).
fn start(config: Option<&Path>, env: &[(&str, &str)]) -> String {
    let mut command = Command::new(BIN);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    command
        .args(["--once", "local"])
        .env("CODALAB_USERNAME", "u")
        .env("CODALAB_PASSWORD", "p")
        .env("NO_COLOR", "1")
        .env_remove("CODALAB_WM_LOG")
        .envs(env.iter().copied());
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    String::from_utf8(output.stderr).unwrap()
}

#[test]
fn start_up_reports_every_file_problem_as_config_check_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wm.toml");
    std::fs::write(
        &path,
        "min_worker = 1\nmax_workers = \"two\"\n[local]\ncpu = 2\n",
    )
    .unwrap();
    let said = start(Some(&path), &[]);
    let file = path.display();
    for expected in [
        format!(
            "{file}:1: unknown key: `min_worker` is not a setting at the top level (did you mean `min_workers`?)"
        ),
        format!("{file}:2: wrong type: `max_workers`"),
        format!("{file}:4: unknown key: `cpu` is not a setting in [local] (did you mean `cpus`?)"),
    ] {
        // One a line, as `config check` prints them.
        let line = format!("  {expected}");
        assert!(
            said.lines().any(|l| l.starts_with(&line)),
            "missing {line:?} in:\n{said}"
        );
    }
    assert!(!said.contains("default."), "{said}");
}

#[test]
fn start_up_names_a_bad_environment_key_as_the_file_would_spell_it() {
    let said = start(None, &[("CODALAB_WM_MIN_WORKER", "1")]);
    assert!(
        said.contains("`min_worker` is not a setting (did you mean `min_workers`?) (from CODALAB_WM_MIN_WORKER)"),
        "{said}"
    );
    let said = start(None, &[("CODALAB_WM_LOCAL__CPU", "2")]);
    assert!(
        said.contains(
            "`local.cpu` is not a setting (did you mean `cpus`?) (from CODALAB_WM_LOCAL__CPU)"
        ),
        "{said}"
    );
    assert!(!said.contains("default."), "{said}");
}

/// A Slurm table whose own `password_file` names another CodaLab user than the manager's
/// login (the global `password_file`) is said at its line, as the start refuses it; the same
/// user is not. The files are read as `cl-worker` reads them (user on line 1, mode 600).
#[cfg(feature = "slurm")]
#[test]
fn workers_of_another_account_in_a_readable_password_file_are_said() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, user: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("{user}\npw\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path.display().to_string()
    };
    let manager = file("manager", "bob");
    for (workers, said) in [(file("root", "codalab"), true), (file("bob", "bob"), false)] {
        let text = format!(
            "backend = \"slurm-batch\"\npassword_file = \"{manager}\"\n[slurm_batch]\npartition = \"cpu\"\npassword_file = \"{workers}\"\n"
        );
        let (_, found) = check(&text);
        let line = found
            .iter()
            .find(|(_, m)| m.contains("the workers log in as"));
        assert_eq!(line.is_some(), said, "{found:?}");
        if let Some((number, message)) = line {
            assert_eq!(*number, 5, "{message}");
            assert!(
                message.contains("`codalab` but the manager as `bob`"),
                "{message}"
            );
        }
    }
}

/// Secrets as files (`CODALAB_WM_SECRETS_DIR`): a `TABLE.KEY` file is a layer of that table
/// (its value checked as the file's would be), and a file of another name, or one others may
/// read, stops the start with its name (issue 40, item 6).
#[test]
fn the_secrets_dir_is_a_layer_of_the_backend_tables_and_its_files_are_checked() {
    use std::os::unix::fs::PermissionsExt;
    let secrets = tempfile::tempdir().unwrap();
    let put = |name: &str, text: &str, mode: u32| {
        let path = secrets.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let dir = secrets.path().to_str().unwrap().to_owned();
    put("local.cpus", "two\n", 0o400);
    let said = start(None, &[("CODALAB_WM_SECRETS_DIR", &dir)]);
    let file = secrets.path().join("local.cpus");
    assert!(
        said.contains(&format!(
            "`local.cpus`: invalid type: found string \"two\", expected u32 (in {})",
            file.display()
        )),
        "the file was not read, or not named:\n{said}"
    );

    std::fs::remove_file(secrets.path().join("local.cpus")).unwrap();
    put("token", "x", 0o400);
    let said = start(None, &[("CODALAB_WM_SECRETS_DIR", &dir)]);
    assert!(
        said.contains(&format!(
            "secrets dir {dir}: file `token`: name it codalab-username"
        )),
        "{said}"
    );

    // With [[pools]] a TABLE.KEY file would be read by no pool: said, not ignored.
    std::fs::remove_file(secrets.path().join("token")).unwrap();
    put("local.cpus", "2", 0o400);
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("pools.toml");
    std::fs::write(
        &config,
        "[[pools]]\nname = \"a\"\nbackend = \"local\"\n[pools.local]\ncpus = 1\n",
    )
    .unwrap();
    let said = start(Some(&config), &[("CODALAB_WM_SECRETS_DIR", &dir)]);
    assert!(
        said.contains(
            "file `local.cpus`: TABLE.KEY files set the backend table of the single-backend mode"
        ),
        "{said}"
    );
    std::fs::remove_file(secrets.path().join("local.cpus")).unwrap();
    put("codalab-password", "pw\n", 0o644);
    let said = start(None, &[("CREDENTIALS_DIRECTORY", &dir)]);
    assert!(
        said.contains("file `codalab-password` is accessible by others (mode 644)"),
        "systemd's CREDENTIALS_DIRECTORY is the secrets dir too:\n{said}"
    );
}
