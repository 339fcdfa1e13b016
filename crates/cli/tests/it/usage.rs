//! The `cl-worker-manager` binary as a new user meets it (issue 23): `--search` before every
//! backend, flag prefixes, `--once` exit status, colour only on a terminal, upstream's INFO
//! lines, the password file, `completions` through a pipe and through bash, and the `--help`
//! of every subcommand (snapshots in `tests/golden/help/`). Each runs the real binary.

use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

/// The binary with no credentials and no `CODALAB_WM_*` from the caller's environment, and
/// NO_COLOR removed: these tests must see what a user without it sees.
pub(crate) fn manager(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("CODALAB_USERNAME")
        .env_remove("CODALAB_PASSWORD")
        .env_remove("NO_COLOR")
        .env("COLUMNS", "100");
    for (key, _) in std::env::vars() {
        if key.starts_with("CODALAB_WM_") {
            command.env_remove(key);
        }
    }
    command
}

/// Runs with stdout and stderr on pipes (not a terminal). Every command here ends by itself
/// (`--once`, a usage error, a tool).
pub(crate) fn run(command: &mut Command) -> Output {
    command.stdin(Stdio::null()).output().unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The backends this binary was built with, each with one flag of its own.
fn backends() -> Vec<(&'static str, &'static [&'static str])> {
    let mut all: Vec<(&'static str, &'static [&'static str])> = vec![("local", &["--cpus", "1"])];
    if cfg!(feature = "slurm") {
        all.push(("slurm-batch", &["--partition", "cpu"]));
    }
    if cfg!(feature = "aws") {
        all.push(("aws-batch", &["--job-queue", "q"]));
    }
    if cfg!(feature = "azure") {
        all.push(("azure-batch", &["--account-name", "a"]));
    }
    if cfg!(feature = "k8s") {
        all.push(("kubernetes", &["--namespace", "n"]));
    }
    if cfg!(feature = "gce") {
        all.push(("gce", &["--machine-type", "e2-standard-2"]));
    }
    all
}

/// Parsing succeeded when the binary got as far as reading the configuration (a backend
/// setting missing) or asking for credentials.
fn assert_parsed(args: &[&str]) {
    let output = run(&mut manager(args));
    let message = text(&output);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {message}");
    assert!(
        message.contains("no CodaLab credentials") || message.contains("invalid configuration: "),
        "{args:?} did not parse: {message}"
    );
}

#[test]
fn search_keywords_stop_at_every_backend_name() {
    for (backend, flag) in backends() {
        let mut args = vec!["--search", "tags=x", ".owner=alice", backend];
        args.extend(flag);
        assert_parsed(&args);
    }
    // The README's example.
    if cfg!(feature = "slurm") {
        assert_parsed(&["--search", "a", "b", "slurm-batch", "--partition", "p"]);
    }
}

#[test]
fn long_flag_prefixes_work_and_an_ambiguous_one_is_named() {
    for (backend, _) in backends() {
        assert_parsed(&["--max-w", "4", "--min-w", "0", "--sea", "tags=x", backend]);
    }
    let output = run(manager(&["--max-w", "1", "--min-w", "2", "local"])
        .env("CODALAB_USERNAME", "alice")
        .env("CODALAB_PASSWORD", "alicepw"));
    assert!(
        text(&output).contains("--max-workers (1) is less than --min-workers (2)"),
        "{}",
        text(&output)
    );
    let output = run(&mut manager(&["--max", "4", "local"]));
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).contains(
            "`--max` is ambiguous: it could be --max-launches-per-tick, --max-workers; write more of the flag"
        ),
        "{}",
        text(&output)
    );
}

/// A worker stand-in that records its arguments next to itself and exits.
fn stand_in(dir: &Path) -> PathBuf {
    let path = dir.join("cl-worker-stand-in.sh");
    std::fs::write(&path, "#!/bin/sh\nprintf '%s\\n' \"$*\" >> \"$0.argv\"\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// One `--once` tick of the local backend against a fake server with one staged bundle.
async fn once(worker: &str, no_color: bool) -> Output {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(vec![FakeBundle::new("alice", 1)]);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let url = server.url();
    let mut command = manager(&[
        "--server",
        &url,
        "--once",
        "--min-workers",
        "0",
        "--min-seconds-between-workers",
        "0",
        "--worker-executable",
        worker,
        "local",
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    command
        .env("CODALAB_USERNAME", "alice")
        .env("CODALAB_PASSWORD", "alicepw");
    if no_color {
        command.env("NO_COLOR", "1");
    }
    tokio::task::spawn_blocking(move || run(&mut command))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_exits_non_zero_when_its_launch_failed() {
    let output = once("/nonexistent/cl-worker", true).await;
    let message = text(&output);
    assert_eq!(output.status.code(), Some(1), "{message}");
    assert!(
        message.contains("--once: 1 worker launch(es) failed"),
        "{message}"
    );
}

#[test]
fn once_exits_1_when_its_tick_failed() {
    // Nothing listens on port 9 of 127.0.0.1 (discard): the search fails.
    let dir = tempfile::tempdir().unwrap();
    let output = run(manager(&[
        "--server",
        "http://127.0.0.1:9",
        "--once",
        "local",
        "--state-dir",
        dir.path().to_str().unwrap(),
    ])
    .env("CODALAB_USERNAME", "alice")
    .env("CODALAB_PASSWORD", "alicepw"));
    let message = text(&output);
    assert_eq!(output.status.code(), Some(1), "{message}");
    assert!(message.contains("--once: the tick failed"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_colour_when_stderr_is_a_pipe_even_without_no_color() {
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(dir.path());
    let output = once(worker.to_str().unwrap(), false).await;
    let log = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{log}");
    assert!(log.contains(" INFO "), "{log}");
    assert!(
        !log.contains('\x1b'),
        "escape codes in piped output: {log:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_have_upstreams_info_lines_verbatim() {
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(dir.path());
    // This test is about the words; the colour rule has its own test.
    let output = once(worker.to_str().unwrap(), true).await;
    let log = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{log}");
    for line in [
        "1 staged bundles (0 removed since last time), 0 worker jobs (min=0, max=10) (0 active, 0 pending)",
        "Want to launch a worker because we have 1 > 0 staged bundles",
        "Starting a worker!",
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains(" INFO ") && l.contains(line)),
            "no INFO line `{line}`: {log}"
        );
    }
}

#[test]
fn a_password_file_that_is_a_directory_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let output = run(&mut manager(&[
        "--password-file",
        dir.path().to_str().unwrap(),
        "local",
    ]));
    let message = text(&output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    assert!(message.contains("is not a regular file"), "{message}");
    assert!(!message.contains("chmod"), "{message}");
}

#[test]
fn completions_into_a_closed_pipe_end_quietly() {
    let mut child = manager(&["completions", "bash"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the script is written: every write meets EPIPE.
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(stderr, "");
}

/// What bash completes for `words` (the last one being completed), with the generated script.
fn bash_complete(words: &str) -> Vec<String> {
    let script = run(&mut manager(&["completions", "bash"])).stdout;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("completion.bash");
    std::fs::write(&file, script).unwrap();
    let program = format!(
        "source {}\nCOMP_WORDS=({words})\nCOMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))\nCOMP_LINE=\"${{COMP_WORDS[*]}}\"\nCOMP_POINT=${{#COMP_LINE}}\n_cl__worker__manager cl-worker-manager \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        file.display()
    );
    let output = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_the_flags_of_subcommands() {
    let top = bash_complete("cl-worker-manager --max");
    assert!(top.contains(&"--max-workers".to_owned()), "{top:?}");
    let local = bash_complete("cl-worker-manager local --mem");
    assert_eq!(local, ["--memory-mb"]);
    if cfg!(feature = "slurm") {
        let slurm = bash_complete("cl-worker-manager slurm-batch --p");
        assert!(slurm.contains(&"--partition".to_owned()), "{slurm:?}");
        let down = bash_complete("cl-worker-manager down slurm-batch --slurm-w");
        assert_eq!(down, ["--slurm-work-dir"]);
    }
    let check = bash_complete("cl-worker-manager config init --back");
    assert_eq!(check, ["--backend"]);
}

/// The `--help` of every command, which needs every backend compiled in: the snapshots, and
/// what the book's flag reference and flag check read.
#[cfg(all(
    feature = "slurm",
    feature = "aws",
    feature = "azure",
    feature = "k8s",
    feature = "gce"
))]
pub(crate) mod every_backend {
    use super::{Path, manager, run, text};

    /// Every subcommand path whose `--help` is kept as a snapshot.
    const HELP: &[&[&str]] = &[
        &[],
        &["local"],
        &["slurm-batch"],
        &["aws-batch"],
        &["azure-batch"],
        &["kubernetes"],
        &["gce"],
        &["status"],
        &["simulate"],
        &["advise"],
        &["config"],
        &["config", "init"],
        &["config", "check"],
        &["down"],
        &["completions"],
        &["operator"],
        &["operator", "crd"],
    ];

    /// The manager's own flags, which the tools must not offer.
    const MANAGER_FLAGS: &[&str] = &[
        "--listen",
        "--password-file",
        "--exit-after-num-failed",
        "--ca-cert",
        "--insecure-skip-tls-verify",
        "--log-format",
        "Print what would be submitted",
    ];

    /// `--help` of every subcommand against `tests/golden/help/*.txt` (with every backend compiled
    /// in). `UPDATE_GOLDEN=1` rewrites the snapshots; review the diff.
    #[test]
    fn help_of_every_subcommand_matches_its_snapshot() {
        let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/help");
        let mut stale = Vec::new();
        for (path, help) in helps() {
            let name = if path.is_empty() {
                "cl-worker-manager".to_owned()
            } else {
                path.join("-")
            };
            let file = golden.join(format!("{name}.txt"));
            let regenerate = "cargo test -p codalab-wm --features full --test it -- usage::every_backend::help_of_every";
            if let Some(why) = codalab_wm_core::testing::stale_generated(&file, &help, regenerate) {
                stale.push(format!("{why}:\n{help}"));
            }
            if matches!(
                path.first(),
                Some(&("simulate" | "advise" | "config" | "down" | "completions"))
            ) {
                for flag in MANAGER_FLAGS {
                    assert!(
                        !help.contains(flag),
                        "{path:?} --help offers {flag}:\n{help}"
                    );
                }
            }
        }
        assert!(stale.is_empty(), "--help changed:\n{}", stale.join("\n"));
    }

    /// Every command of [`HELP`] with its `--help` (as a user without `NO_COLOR` at 100 columns
    /// sees it): what the snapshots, the book's flag reference and its flag check read.
    pub fn helps() -> Vec<(&'static [&'static str], String)> {
        (HELP.iter().copied())
            .map(|path| {
                let mut args = path.to_vec();
                args.push("--help");
                let output = run(&mut manager(&args));
                assert!(output.status.success(), "{args:?}: {}", text(&output));
                (path, String::from_utf8(output.stdout).unwrap())
            })
            .collect()
    }
}
#[cfg(all(
    feature = "slurm",
    feature = "aws",
    feature = "azure",
    feature = "k8s",
    feature = "gce"
))]
pub(crate) use every_backend::helps;

#[test]
fn tools_take_only_their_own_flags() {
    for args in [
        &["completions", "bash", "--listen", "127.0.0.1:1"][..],
        &["config", "check", "--config", "wm.toml"],
        &[
            "simulate",
            "--arrivals",
            "poisson:1",
            "--password-file",
            "pw",
        ],
        &["down", "--exit-after-num-failed", "1"],
    ] {
        let output = run(&mut manager(args));
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", text(&output));
        assert!(
            text(&output).contains("unexpected argument"),
            "{args:?}: {}",
            text(&output)
        );
    }
    let output = run(&mut manager(&["simulate"]));
    let message = text(&output);
    assert!(
        message.contains("--trace") && message.contains("--arrivals"),
        "{message}"
    );
}

/// `operator crd` prints the CRD checked in as `deploy/kubernetes/operator/crd.yaml`.
#[cfg(feature = "k8s")]
#[test]
fn operator_crd_prints_the_checked_in_crd() {
    let output = run(&mut manager(&["operator", "crd"]));
    assert!(output.status.success(), "{}", text(&output));
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes/operator/crd.yaml");
    let checked_in = std::fs::read_to_string(file).unwrap();
    assert_eq!(String::from_utf8(output.stdout).unwrap(), checked_in);
}
