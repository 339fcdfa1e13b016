//! The real `cl-worker-manager` binary as a child process whose log is collected line by line.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

/// The manager with `args`, alice's credentials, `NO_COLOR`, the test process's launch
/// record dir, and no other `CODALAB_WM_*` from the test's environment.
pub fn command(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("CODALAB_USERNAME", "alice")
        .env("CODALAB_PASSWORD", "alicepw")
        .env("NO_COLOR", "1");
    for (key, _) in std::env::vars() {
        if key.starts_with("CODALAB_WM_") {
            command.env_remove(key);
        }
    }
    command.env("CODALAB_WM_RECORD_DIR", record_dir());
    command
}

/// The launch records of one test's managers (`--record-dir`): out of the home directory,
/// shared by the managers one test starts one after the other, and the test's own. A record
/// dir holds a lock per pool, so two tests running at once whose managers serve the same pool
/// (three `slurm-batch` ones in `hardening.rs`) would refuse each other's second manager, as
/// a deployment must. libtest names a test's thread after the test; a command built on
/// another thread gets the process's directory.
pub fn record_dir() -> std::path::PathBuf {
    let process =
        std::env::temp_dir().join(format!("codalab-wm-test-records-{}", std::process::id()));
    match std::thread::current().name() {
        Some(test) if test.contains("::") => process.join(test.replace("::", "-")),
        _ => process,
    }
}

/// A running manager. Dropping it sends SIGTERM and waits for it (the manager's workers are
/// separate processes or jobs: stop them with [`down`]).
#[derive(Debug)]
pub struct Manager {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Manager {
    /// Starts the manager with `args`, logging in as `user`; `env` adds variables (e.g.
    /// `DOCKER_HOST`, which the local and Slurm backends hand down to the workers).
    pub fn start(args: &[String], user: (&str, &str), env: &[(&str, String)]) -> Self {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .env("CODALAB_USERNAME", user.0)
            .env("CODALAB_PASSWORD", user.1)
            .env("NO_COLOR", "1")
            .env("CODALAB_WM_RECORD_DIR", record_dir())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
        Self::spawn(command)
    }

    /// Runs `command` (the binary, or a shell that `exec`s it), its stderr collected.
    pub fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self { child, lines }
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether it has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// The `--listen` address (`http://127.0.0.1:PORT`) from its "serving /metrics" line, once
    /// it has logged it.
    pub fn listen_address(&self) -> Option<String> {
        let lines = self.lines.lock().unwrap();
        lines.iter().find_map(|line| {
            let rest = line.split("serving /metrics").nth(1)?;
            let addr = rest.split("addr=").nth(1)?.split_whitespace().next()?;
            Some(format!("http://{addr}"))
        })
    }

    /// `GET path` from its `--listen` address (in its "serving /metrics" log line): the whole
    /// reply, head and body (one HTTP/1.0 request, its reading bounded by a 10 s timeout).
    pub fn get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let base = self.listen_address();
        let addr = (base.as_deref())
            .and_then(|base| base.strip_prefix("http://"))
            .unwrap_or_else(|| panic!("no listen address in:\n{}", self.log()));
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        reply
    }

    /// Kills it outright (SIGKILL), as a crash or an OOM kill would, and reaps it.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Log lines that contain `needle`.
    pub fn count(&self, needle: &str) -> usize {
        let lines = self.lines.lock().unwrap();
        lines.iter().filter(|l| l.contains(needle)).count()
    }

    /// The last status line (one per tick).
    pub fn last_status(&self) -> Option<String> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .rev()
            .find(|l| l.contains(" worker jobs (min="))
            .cloned()
    }

    /// Polls every 0.1 s until `done` holds; panics with the log after `limit` or when the
    /// manager exits.
    pub fn wait_until(&mut self, what: &str, limit: Duration, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if done(self) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "manager exited ({status}) while waiting for {what}:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "timed out after {limit:?} waiting for {what}:\n{}",
            self.log()
        );
    }
}

impl Manager {
    /// Waits (bounded by `limit`) for the manager to exit on its own; panics with the log if it
    /// does not.
    pub fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the manager did not exit within {limit:?}:\n{}", self.log());
    }

    /// The largest job count any status line reported.
    pub fn most_jobs_seen(&self) -> usize {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .filter(|l| l.contains(" worker jobs (min="))
            .filter_map(|l| {
                let head = l.split(" worker jobs (min=").next()?;
                head.rsplit(' ').next()?.parse().ok()
            })
            .max()
            .unwrap_or(0)
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        // Exited and reaped: its pid may be another process's by now.
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Stops `manager`, then every worker job it owns (`down` as `user`), and checks that `down`
/// succeeded.
pub fn stop(manager: Manager, backend_args: &[String], user: (&str, &str)) {
    drop(manager);
    let out = down(backend_args, user);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `cl-worker-manager down --all-origins BACKEND ARGS…`: stops every worker job under the
/// test's names (the tests give `down` no `--server`, and their names are their own).
pub fn down(backend_args: &[String], user: (&str, &str)) -> std::process::Output {
    Command::new(BIN)
        .args(["down", "--all-origins", "--wait-seconds", "30"])
        .args(backend_args)
        .env("CODALAB_USERNAME", user.0)
        .env("CODALAB_PASSWORD", user.1)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}
