//! Where Slurm commands run: as a child process here ([`Transport::Local`]) or on a login node
//! over one reused SSH session ([`Transport::Ssh`]). Both run the same argv; the backend does
//! not know which one it has.
//!
//! Every command has a deadline: a local command still running after `timeout` is killed and
//! reported as a temporary error naming it (a hung `squeue` must not stop the manager's loop);
//! over SSH every blocking call has the session's own timeout (see [`crate::ssh`]).

use crate::error::transport_failed;
use crate::ssh::SshTransport;
use codalab_wm_backend::Result;
use codalab_wm_backend::secret::Secret;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// How long a Slurm command may run by default (`command_timeout_seconds`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// One command to run.
#[derive(Debug, Clone, Default)]
pub struct Invocation {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Bytes written to the command's standard input (then closed).
    pub stdin: Option<Vec<u8>>,
    /// Environment variables set for the command (not secret: over SSH they go on the command
    /// line as `env K=V`).
    pub env: Vec<(String, String)>,
    /// Secret environment variables: only the local transport accepts them (they are set in
    /// the child's environment, never written anywhere).
    pub secret_env: Vec<(String, Secret)>,
}

impl Invocation {
    /// A command with no input and no environment.
    pub fn new(argv: Vec<String>) -> Self {
        Self {
            argv,
            ..Self::default()
        }
    }

    /// The program name, for messages.
    pub fn program(&self) -> &str {
        self.argv.first().map_or("", String::as_str)
    }

    /// The command as one shell line (`env K=V … argv`), every word quoted.
    pub fn shell_line(&self) -> String {
        let mut words: Vec<String> = Vec::new();
        if !self.env.is_empty() {
            words.push("env".into());
            words.extend(self.env.iter().map(|(k, v)| format!("{k}={v}")));
        }
        words.extend(self.argv.iter().cloned());
        shell_words::join(words)
    }
}

/// What a command printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Exit status; `None` when killed by a signal.
    pub status: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Output {
    /// Whether the command exited with status 0.
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }
}

/// Where the Slurm commands run.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Child processes of this process.
    Local,
    /// Commands on a login node over SSH.
    Ssh(Arc<SshTransport>),
}

impl Transport {
    /// Runs `invocation` for `operation` (used in error messages); a local command is killed
    /// after `timeout`.
    pub async fn run(
        &self,
        operation: &'static str,
        invocation: Invocation,
        timeout: Duration,
    ) -> Result<Output> {
        match self {
            Transport::Local => {
                let program = invocation.program().to_owned();
                tokio::time::timeout(timeout, run_local(operation, invocation))
                    .await
                    .unwrap_or_else(|_| {
                        let message = format!(
                            "`{program}` did not finish within {} s and was killed (command_timeout_seconds)",
                            timeout.as_secs_f64()
                        );
                        Err(transport_failed(operation, message, true, None))
                    })
            }
            Transport::Ssh(ssh) => ssh.run(operation, invocation).await,
        }
    }
}

/// Runs `invocation` as a child process; dropping the future kills the child.
async fn run_local(operation: &'static str, invocation: Invocation) -> Result<Output> {
    let program = invocation.program().to_owned();
    let mut command = tokio::process::Command::new(&program);
    command.args(&invocation.argv[1..]).kill_on_drop(true);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    command.stdin(if invocation.stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    command.envs(invocation.env.iter().map(|(k, v)| (k, v)));
    command.envs(invocation.secret_env.iter().map(|(k, v)| (k, v.expose())));
    let spawn_error = |e: std::io::Error| {
        let message = format!("cannot run `{program}`: {e}");
        transport_failed(operation, message, false, Some(Box::new(e)))
    };
    let mut child = command.spawn().map_err(spawn_error)?;
    if let (Some(bytes), Some(mut stdin)) = (&invocation.stdin, child.stdin.take()) {
        // A command that exits without reading its input is reported by its status below.
        let _ = stdin.write_all(bytes).await;
        drop(stdin);
    }
    let output = child.wait_with_output().await.map_err(spawn_error)?;
    Ok(Output {
        status: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// Counts the platform commands a backend runs (the bench reports it per tick).
#[derive(Debug, Default)]
pub struct CallCounter(AtomicU64);

impl CallCounter {
    /// One more command.
    pub fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Commands so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_line_quotes_every_word() {
        let mut invocation = Invocation::new(vec![
            "sh".into(),
            "-c".into(),
            "echo \"$1\"".into(),
            "a b".into(),
        ]);
        invocation.env.push(("TZ".into(), "UTC".into()));
        assert_eq!(
            invocation.shell_line(),
            "env 'TZ=UTC' sh -c 'echo \"$1\"' 'a b'"
        );
    }

    #[tokio::test]
    async fn local_runs_with_stdin_and_env() {
        let mut invocation = Invocation::new(vec![
            "sh".into(),
            "-c".into(),
            "cat; echo \" $TZ $PW\" >&2".into(),
        ]);
        invocation.stdin = Some(b"in".to_vec());
        invocation.env.push(("TZ".into(), "UTC".into()));
        invocation
            .secret_env
            .push(("PW".into(), Secret::new("s3cret")));
        let output = Transport::Local
            .run("test", invocation, DEFAULT_TIMEOUT)
            .await
            .unwrap();
        assert!(output.success());
        assert_eq!(
            (output.stdout.as_str(), output.stderr.as_str()),
            ("in", " UTC s3cret\n")
        );
    }

    #[tokio::test]
    async fn a_hanging_squeue_times_out_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let squeue = dir.path().join("squeue");
        std::fs::write(&squeue, "#!/bin/sh\nexec sleep 600\n").unwrap();
        std::fs::set_permissions(&squeue, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let invocation = Invocation::new(vec![squeue.display().to_string()]);
        let err = Transport::Local
            .run("list worker jobs", invocation, Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(err.is_temporary());
        let message = err.to_string();
        assert!(
            message.contains("squeue` did not finish within 0.3 s"),
            "{message}"
        );
        assert!(message.contains("list worker jobs"), "{message}");
    }

    #[tokio::test]
    async fn a_missing_program_is_a_permanent_error() {
        let invocation = Invocation::new(vec!["/nonexistent/sbatch".into()]);
        let err = Transport::Local
            .run("submit a worker job", invocation, DEFAULT_TIMEOUT)
            .await
            .unwrap_err();
        assert!(!err.is_temporary());
        assert!(
            err.to_string().contains("cannot run `/nonexistent/sbatch`"),
            "{err}"
        );
    }
}
