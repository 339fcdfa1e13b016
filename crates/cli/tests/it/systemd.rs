//! The systemd unit `deploy/systemd/cl-worker-manager.service`, as shipped:
//!
//! - Debian's `systemd-analyze verify` accepts it, without a word;
//! - its `ExecStart=` runs as systemd would run it: the words of the unit, `${STATE_DIRECTORY}`
//!   and `${CREDENTIALS_DIRECTORY}` given by `StateDirectory=` and `LoadCredential=` (dirs of
//!   this test), the unit's `Environment=`/`EnvironmentFile=` and nothing of the test's
//!   environment, a fresh private temporary dir at every start (`PrivateTmp=`), against the
//!   REAL CodaLab 1.7.5 server (`cargo xtask services up codalab`) with the `local` backend (a
//!   worker stand-in) and a budget. Stopped by SIGTERM, SIGKILL and a crash (SIGABRT), each an
//!   exit the unit's `Restart=`/`RestartPreventExitStatus=` restarts, and started again, it
//!   still holds the launches of the first start and the budget's day (its `/status`);
//! - a bad config exits 2, which the unit leaves down;
//! - `--restart-after-seconds` runs an upgraded program, and exits 4 when the program is gone,
//!   which the unit restarts;
//! - `config check` warns when the launch records would go to the temporary directory.
//!
//! Only the unit's absolute paths are moved under a directory of the test (the binary is this
//! test's). Locally a missing service or tool skips; under `CI=true` it fails.

use crate::support;
use support::systemd as unit;

use support::manager::Manager;
use support::{SERVER, codalab_running, repo};
use unit::{Exit, Unit, libc_signal, under};

use codalab_wm_core::testing::require_service;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");
const UNIT: &str = "deploy/systemd/cl-worker-manager.service";

fn read_unit() -> (String, Unit) {
    let text = std::fs::read_to_string(repo().join(UNIT)).unwrap();
    let unit = Unit::parse(&text);
    (text, unit)
}

fn systemd_analyze() -> bool {
    Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn systemd_analyze_verify_accepts_the_unit_without_a_word() {
    let _turn = support::turn(module_path!());
    if !require_service("systemd-analyze (Debian's systemd)", systemd_analyze()) {
        return;
    }
    let (text, unit) = read_unit();
    // The program must exist: this test's binary stands at the unit's path.
    let program = unit.exec_start(&BTreeMap::new())[0].clone();
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("cl-worker-manager.service");
    std::fs::write(&copy, text.replace(&program, BIN)).unwrap();
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{said}");
    // verify exits 0 on a value it ignores ("Failed to parse …, ignoring"): it must say nothing.
    assert_eq!(said.trim(), "", "systemd-analyze verify");
    let reload = unit
        .get("ExecReload")
        .expect("ExecReload= (systemctl reload)");
    assert!(reload.contains("-HUP $MAINPID"), "{reload}");
    assert!(!unit.yes("DynamicUser"), "a static user (Slurm, docker)");
    assert!(unit.get("User").is_some());
}

/// A worker stand-in that waits (bounded), so that its local job stays active.
fn stand_in(dir: &Path) -> PathBuf {
    let path = dir.join("cl-worker-stand-in.sh");
    std::fs::write(&path, "#!/bin/sh\nexec sleep 600\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// What systemd gives the unit's service, in a root of the test: its dirs and files.
struct Service {
    unit: Unit,
    root: tempfile::TempDir,
    state: PathBuf,
    credentials: PathBuf,
    /// The `--config` file of `ExecStart=`, in the root.
    config: PathBuf,
}

impl Service {
    /// Sets up the unit's state dir, its credential (the password file as `LoadCredential=`
    /// gives it), and writes `config` where `ExecStart=`'s `--config` points.
    fn new(config: &str) -> Self {
        let (_, unit) = read_unit();
        let root = tempfile::tempdir().unwrap();
        let name = unit.get("StateDirectory").expect("StateDirectory=");
        let state = under(root.path(), &format!("/var/lib/{name}"));
        std::fs::create_dir_all(&state).unwrap();
        let mode = unit.get("StateDirectoryMode").unwrap_or("0755");
        let mode = u32::from_str_radix(mode, 8).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(mode)).unwrap();
        let credentials = root
            .path()
            .join("run/credentials/cl-worker-manager.service");
        std::fs::create_dir_all(&credentials).unwrap();
        for credential in unit.all("LoadCredential") {
            let (id, source) = credential.split_once(':').unwrap();
            let source = under(root.path(), source);
            std::fs::create_dir_all(source.parent().unwrap()).unwrap();
            std::fs::write(&source, "alice\nalicepw\n").unwrap();
            let copy = credentials.join(id);
            std::fs::copy(&source, &copy).unwrap();
            std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o400)).unwrap();
        }
        let mut service = Self {
            unit,
            root,
            state,
            credentials,
            config: PathBuf::new(),
        };
        let argv = service.argv();
        let at = argv.iter().position(|a| a == "--config").expect("--config");
        service.config = PathBuf::from(&argv[at + 1]);
        std::fs::create_dir_all(service.config.parent().unwrap()).unwrap();
        std::fs::write(&service.config, config).unwrap();
        service
    }

    /// The environment systemd gives the process (no variable of the test's own).
    fn env(&self) -> BTreeMap<String, String> {
        let root = self.root.path();
        let mut env =
            (self.unit).environment(|path| std::fs::read_to_string(under(root, path)).ok());
        env.insert(
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin".into(),
        );
        env.insert("STATE_DIRECTORY".into(), self.state.display().to_string());
        let credentials = self.credentials.display().to_string();
        env.insert("CREDENTIALS_DIRECTORY".into(), credentials);
        env
    }

    /// `ExecStart=` with its variables expanded and its absolute paths in the root: the
    /// program is this test's binary.
    fn argv(&self) -> Vec<String> {
        let words = self.unit.exec_start(&self.env());
        let mut argv = vec![BIN.to_owned()];
        let root = self.root.path().display().to_string();
        argv.extend(words[1..].iter().map(|word| match word.starts_with('/') {
            true if !word.starts_with(&root) => under(self.root.path(), word).display().to_string(),
            _ => word.clone(),
        }));
        argv
    }

    /// Where `ExecStart=`'s program is, in the root.
    fn program(&self) -> PathBuf {
        let words = self.unit.exec_start(&self.env());
        under(self.root.path(), &words[0])
    }

    /// Starts `ExecStart=` as systemd does, with a fresh private `/tmp` (`PrivateTmp=`).
    fn start(&self, start: usize) -> Manager {
        self.start_program(start, Path::new(BIN))
    }

    /// [`Self::start`] with `program` in place of this test's binary.
    fn start_program(&self, start: usize, program: &Path) -> Manager {
        let tmp = match self.unit.yes("PrivateTmp") {
            true => self.root.path().join(format!("private-tmp-{start}")),
            false => self.root.path().join("tmp"),
        };
        std::fs::create_dir_all(&tmp).unwrap();
        let argv = self.argv();
        let mut command = Command::new(program);
        command
            .args(&argv[1..])
            .env_clear()
            .envs(self.env())
            .env("TMPDIR", &tmp)
            .current_dir("/");
        Manager::spawn(command)
    }
}

/// The value of `key=` in the manager's log.
fn logged(manager: &Manager, key: &str) -> Option<String> {
    let log = manager.log();
    let at = log.rfind(&format!(" {key}="))? + key.len() + 2;
    let value = log[at..].split_whitespace().next()?;
    Some(value.trim_matches('"').to_owned())
}

/// The launches (uniques) and the worker-seconds of use in a record file.
fn record(path: &Path) -> (BTreeSet<String>, f64) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return (BTreeSet::new(), 0.0);
    };
    let record: Value = serde_json::from_str(&text).unwrap();
    let launches = (record["launches"].as_object().unwrap().keys().cloned()).collect();
    let usage = (record["usage"].as_array().unwrap().iter())
        .map(|entry| entry[1].as_f64().unwrap())
        .sum();
    (launches, usage)
}

/// `GET /status` of the manager's `--listen` address.
fn status(addr: &str) -> Option<Value> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    let request = format!("GET /status HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (_, body) = response.split_once("\r\n\r\n")?;
    serde_json::from_str(body).ok()
}

/// The worker-seconds the manager's `/status` says the budget has used in the rolling day.
fn budget_use(manager: &Manager) -> Option<f64> {
    let status = status(&logged(manager, "addr")?)?;
    let budgets = status["budgets"].as_array()?;
    budgets
        .iter()
        .find(|b| b["scope"] == "all pools")
        .and_then(|b| b["worker_hours"].as_f64())
        .map(|hours| hours * 3600.0)
}

fn send(manager: &Manager, signal: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &manager.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

#[test]
fn the_units_exec_start_keeps_records_and_budget_across_sigterm_sigkill_and_a_crash() {
    let _turn = support::turn(module_path!());
    if !require_service("codalab", codalab_running()) {
        return;
    }
    let workers = tempfile::tempdir().unwrap();
    let config = format!(
        "server = \"{SERVER}\"\nbackend = \"local\"\nmin_workers = 1\nmax_workers = 1\n\
         min_seconds_between_workers = 0\nsleep_time = 1\nmax_worker_hours_per_day = 100\n\
         listen = \"127.0.0.1:0\"\n\n[worker]\nexecutable = \"{}\"\n\n[local]\ncpus = 1\n",
        stand_in(workers.path()).display()
    );
    let service = Service::new(&config);
    let records = service.state.join("records");
    let mut manager = service.start(0);
    // Budget use is written to the record once a minute: wait for a first non-zero save.
    manager.wait_until(
        "a launch and budget use in the record",
        Duration::from_secs(240),
        |m| {
            logged(m, "record").is_some_and(|path| {
                let (launches, usage) = record(Path::new(&path));
                !launches.is_empty() && usage > 0.0
            })
        },
    );
    let path = PathBuf::from(logged(&manager, "record").unwrap());
    assert!(
        path.starts_with(&records),
        "the launch record is in $STATE_DIRECTORY/records ({}): {}",
        records.display(),
        path.display()
    );
    let (launched, used) = record(&path);

    let stops = [
        ("SIGTERM", "TERM"),
        ("SIGKILL", "KILL"),
        ("a crash (SIGABRT)", "ABRT"),
    ];
    for (start, (how, signal)) in (1..).zip(stops) {
        send(&manager, signal);
        let exit = Exit::of(manager.wait_exit(Duration::from_secs(90)));
        let expected = match signal {
            "TERM" => Exit::Code(0),
            other => Exit::Signal(libc_signal::number(other).unwrap()),
        };
        assert_eq!(exit, expected, "{how}:\n{}", manager.log());
        assert!(
            service.unit.restarts_after(exit),
            "after {how} ({exit:?}) the unit's Restart={:?} RestartPreventExitStatus={:?} leaves the manager down",
            service.unit.get("Restart"),
            service.unit.all("RestartPreventExitStatus")
        );
        drop(manager);
        manager = service.start(start);
        let context = format!(
            "after {how}: the budget's day of the last start ({used} worker-seconds) in /status"
        );
        manager.wait_until(&context, Duration::from_secs(120), |m| {
            budget_use(m).is_some_and(|now| now + 1e-6 >= used)
        });
        let path = PathBuf::from(logged(&manager, "record").unwrap());
        assert!(path.starts_with(&records), "{}", path.display());
        let (now, _) = record(&path);
        assert!(
            now.is_superset(&launched),
            "after {how}: the launches {launched:?} are still recorded: {now:?}\n{}",
            manager.log()
        );
    }
    drop(manager);
    // The stand-in workers the starts launched.
    let down = Command::new(BIN)
        .args(&service.argv()[1..])
        .args(["down", "--wait-seconds", "30"])
        .env_clear()
        .envs(service.env())
        .output()
        .unwrap();
    assert!(down.status.success(), "down: {down:?}");
}

#[test]
fn a_bad_config_exits_2_and_the_unit_leaves_it_down() {
    let _turn = support::turn(module_path!());
    let service = Service::new("min_workers = \"one\"\n");
    let mut manager = service.start(0);
    let exit = Exit::of(manager.wait_exit(Duration::from_secs(30)));
    assert_eq!(exit, Exit::Code(2), "{}", manager.log());
    assert!(!service.unit.restarts_after(exit));
}

/// `--restart-after-seconds` under the unit's command line and environment, against the
/// in-process fake CodaLab (`codalab_wm_fake_codalab`; the re-execution does not depend on the
/// server), the program at the unit's own path (a copy of this test's binary): an upgrade
/// renames a new file over that path (as dpkg and `install` do) and the restart runs the new
/// file; once the file is gone, the restart cannot run it, and the manager exits 4, which the
/// unit restarts.
#[test]
fn a_restart_runs_the_upgraded_program_and_the_unit_restarts_one_that_cannot() {
    use codalab_wm_fake_codalab::FakeCodaLab;
    use std::os::unix::fs::MetadataExt;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(FakeCodaLab::start()).unwrap();
    let workers = tempfile::tempdir().unwrap();
    let service = Service::new(&format!(
        "server = \"{}\"\nbackend = \"local\"\nmin_workers = 0\nsleep_time = 1\n\
         restart_after_seconds = 1\n\n[worker]\nexecutable = \"{}\"\n",
        server.url(),
        stand_in(workers.path()).display()
    ));
    let program = service.program();
    std::fs::create_dir_all(program.parent().unwrap()).unwrap();
    std::fs::copy(BIN, &program).unwrap();
    let mut manager = service.start_program(0, &program);
    manager.wait_until("the first start", Duration::from_secs(60), |m| {
        m.count("started worker manager") >= 1
    });

    let upgrade = program.with_extension("dpkg-new");
    std::fs::copy(BIN, &upgrade).unwrap();
    std::fs::rename(&upgrade, &program).unwrap();
    let upgraded = std::fs::metadata(&program).unwrap().ino();
    let exe = format!("/proc/{}/exe", manager.id());
    manager.wait_until(
        "a restart into the upgraded file",
        Duration::from_secs(60),
        |_| std::fs::metadata(&exe).is_ok_and(|running| running.ino() == upgraded),
    );

    std::fs::remove_file(&program).unwrap();
    let exit = Exit::of(manager.wait_exit(Duration::from_secs(60)));
    assert_eq!(exit, Exit::Code(4), "{}", manager.log());
    let said = format!("cannot restart {}", program.display());
    assert!(manager.log().contains(&said), "{said}:\n{}", manager.log());
    assert!(
        service.unit.restarts_after(exit),
        "after a restart that could not run the program, the unit's Restart={:?} RestartPreventExitStatus={:?} leaves the manager down",
        service.unit.get("Restart"),
        service.unit.all("RestartPreventExitStatus")
    );
}

#[test]
fn config_check_warns_when_the_records_would_go_to_the_temporary_dir() {
    let _turn = support::turn(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("wm.toml");
    std::fs::write(&file, "backend = \"local\"\n").unwrap();
    let check = |env: &[(&str, &Path)]| {
        let output = Command::new(BIN)
            .args(["config", "check"])
            .arg(&file)
            .env_clear()
            .env("TMPDIR", dir.path())
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "a warning is no failure: {output:?}"
        );
        said
    };
    let said = check(&[]);
    assert!(
        said.contains(": warning: the launch records go to ") && said.contains("temporary"),
        "{said}"
    );
    let state = Path::new("/var/lib/codalab-wm");
    assert_eq!(check(&[("STATE_DIRECTORY", state)]), "");
    let home = Path::new("/home/someone");
    assert_eq!(check(&[("HOME", home)]), "");
}
