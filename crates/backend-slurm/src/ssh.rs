//! Slurm commands on a login node over SSH (`ssh2`, i.e. libssh2).
//!
//! - The host key must be in the configured known_hosts file (`[host]:port` entries for a port
//!   other than 22): an unknown or changed key is refused with an error naming the host and the
//!   file, never accepted silently.
//! - Login is by key only.
//! - One session is kept and reused across ticks; when it breaks (opening a channel fails), it
//!   is dropped and re-established once, then the command runs. A command is never re-run.
//! - Secrets never travel: an [`Invocation`] with secret environment variables is refused.
//!
//! libssh2 is blocking, so every call runs in [`tokio::task::spawn_blocking`].

use crate::config::SshTarget;
use crate::error::transport_failed;
use crate::transport::{Invocation, Output};
use codalab_wm_backend::{Error, Result};
use ssh2::{CheckResult, KnownHostFileKind, Session};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How long connecting, and any single blocking SSH call, may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A login node reached over one reused SSH session.
#[derive(Debug)]
pub struct SshTransport {
    target: SshTarget,
    connection: Mutex<Option<Connection>>,
    connections: AtomicU64,
}

struct Connection {
    session: Session,
    /// A second handle on the socket, to cut it (tests simulate a dropped network with it).
    socket: TcpStream,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.socket.peer_addr().ok())
            .finish()
    }
}

fn ssh_error(
    operation: &'static str,
    what: String,
    temporary: bool,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> Error {
    transport_failed(operation, what, temporary, Some(source.into()))
}

impl SshTransport {
    /// A transport to `target`; nothing connects until the first command.
    pub fn new(target: SshTarget) -> Self {
        Self {
            target,
            connection: Mutex::new(None),
            connections: AtomicU64::new(0),
        }
    }

    /// How many SSH connections were opened so far (1 while the first one lasts).
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Cuts the TCP connection under the current session, as a network failure would.
    pub fn cut_connection(&self) {
        if let Some(connection) = self.lock().as_ref() {
            let _ = connection.socket.shutdown(std::net::Shutdown::Both);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Connection>> {
        self.connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `invocation` on the login node.
    pub async fn run(
        self: &Arc<Self>,
        operation: &'static str,
        invocation: Invocation,
    ) -> Result<Output> {
        if !invocation.secret_env.is_empty() {
            let message = "refusing to send secret environment variables over ssh".to_owned();
            return Err(transport_failed(operation, message, false, None));
        }
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || this.run_blocking(operation, &invocation))
            .await
            .map_err(|e| ssh_error(operation, format!("ssh task failed: {e}"), true, e))?
    }

    fn run_blocking(&self, operation: &'static str, invocation: &Invocation) -> Result<Output> {
        let mut guard = self.lock();
        let channel = match guard.as_ref().map(|c| c.session.channel_session()) {
            Some(Ok(channel)) => channel,
            reused => {
                if let Some(Err(e)) = reused {
                    tracing::info!(host = %self.target.host, error = %e, "ssh session lost, reconnecting");
                }
                *guard = None;
                let connection = self.connect(operation)?;
                let channel = connection.session.channel_session().map_err(|e| {
                    ssh_error(
                        operation,
                        format!("cannot open an ssh channel to {}: {e}", self.address()),
                        true,
                        e,
                    )
                })?;
                *guard = Some(connection);
                channel
            }
        };
        let result = self.exec(operation, channel, invocation);
        if result.is_err() {
            // A half-broken session is not worth keeping; the next command reconnects.
            *guard = None;
        }
        result
    }

    fn address(&self) -> String {
        format!(
            "{}@{}:{}",
            self.target.user, self.target.host, self.target.port
        )
    }

    fn exec(
        &self,
        operation: &'static str,
        mut channel: ssh2::Channel,
        invocation: &Invocation,
    ) -> Result<Output> {
        let fail = |what: &str, e: ssh2::Error| {
            ssh_error(
                operation,
                format!("ssh to {} failed while {what}: {e}", self.address()),
                true,
                e,
            )
        };
        let io_fail = |what: &str, e: std::io::Error| {
            ssh_error(
                operation,
                format!("ssh to {} failed while {what}: {e}", self.address()),
                true,
                e,
            )
        };
        channel
            .exec(&invocation.shell_line())
            .map_err(|e| fail("starting the command", e))?;
        if let Some(bytes) = &invocation.stdin {
            channel
                .write_all(bytes)
                .map_err(|e| io_fail("sending input", e))?;
        }
        channel.send_eof().map_err(|e| fail("closing input", e))?;
        let mut stdout = String::new();
        channel
            .read_to_string(&mut stdout)
            .map_err(|e| io_fail("reading output", e))?;
        let mut stderr = String::new();
        channel
            .stderr()
            .read_to_string(&mut stderr)
            .map_err(|e| io_fail("reading errors", e))?;
        channel
            .wait_close()
            .map_err(|e| fail("closing the channel", e))?;
        let status = channel
            .exit_status()
            .map_err(|e| fail("reading the exit status", e))?;
        let signalled = channel
            .exit_signal()
            .ok()
            .and_then(|s| s.exit_signal)
            .is_some();
        Ok(Output {
            status: (!signalled).then_some(status),
            stdout,
            stderr,
        })
    }

    fn connect(&self, operation: &'static str) -> Result<Connection> {
        let target = &self.target;
        let unreachable = |e: std::io::Error| {
            ssh_error(
                operation,
                format!(
                    "cannot connect to ssh host {}:{}: {e}",
                    target.host, target.port
                ),
                true,
                e,
            )
        };
        let address = (target.host.as_str(), target.port)
            .to_socket_addrs()
            .map_err(unreachable)?
            .next()
            .ok_or_else(|| unreachable(std::io::Error::other("no address")))?;
        let socket = TcpStream::connect_timeout(&address, TIMEOUT).map_err(unreachable)?;
        let mut session = Session::new()
            .map_err(|e| ssh_error(operation, format!("cannot start libssh2: {e}"), false, e))?;
        session.set_timeout(u32::try_from(TIMEOUT.as_millis()).unwrap_or(u32::MAX));
        session.set_tcp_stream(socket.try_clone().map_err(unreachable)?);
        let known = std::fs::read_to_string(&target.known_hosts).unwrap_or_default();
        let algorithms = host_key_algorithms(&known, &target.host, target.port);
        if !algorithms.is_empty() {
            // Ask for a key type we can check, not one the server prefers but the file lacks.
            let _ = session.method_pref(ssh2::MethodType::HostKey, &algorithms);
        }
        session.handshake().map_err(|e| {
            ssh_error(
                operation,
                format!(
                    "ssh handshake with {}:{} failed: {e}",
                    target.host, target.port
                ),
                true,
                e,
            )
        })?;
        self.verify_host_key(&session)?;
        session
            .userauth_pubkey_file(&target.user, None, &target.key, None)
            .map_err(|e| {
                let message = format!(
                    "ssh host {}:{} refused key {} for user `{}`: {e}",
                    target.host,
                    target.port,
                    target.key.display(),
                    target.user
                );
                ssh_error(operation, message, false, e)
            })?;
        session.set_keepalive(true, 30);
        self.connections.fetch_add(1, Ordering::Relaxed);
        tracing::info!(host = %target.host, port = target.port, user = %target.user, "ssh session established");
        Ok(Connection { session, socket })
    }

    /// Refuses a host whose key is not in the known_hosts file, or differs from it. Fatal: a
    /// configuration (or security) problem that retrying cannot fix.
    fn verify_host_key(&self, session: &Session) -> Result<()> {
        let target = &self.target;
        let file = target.known_hosts.display();
        let refuse = |why: String| {
            Error::InvalidConfig(format!("ssh host {}:{} {why}", target.host, target.port))
        };
        let (key, _) = session
            .host_key()
            .ok_or_else(|| refuse("sent no host key".into()))?;
        let mut known = session
            .known_hosts()
            .map_err(|e| refuse(format!("cannot be checked: {e}")))?;
        known
            .read_file(&target.known_hosts, KnownHostFileKind::OpenSSH)
            .map_err(|e| {
                refuse(format!(
                    "cannot be checked: cannot read known_hosts file {file}: {e}"
                ))
            })?;
        match known.check_port(&target.host, target.port, key) {
            CheckResult::Match => Ok(()),
            CheckResult::NotFound => Err(refuse(format!(
                "is not in known_hosts file {file}: refusing to connect to an unknown host \
                 (add its key, e.g. `ssh-keyscan -p {} {} >> {file}`, after checking it)",
                target.port, target.host
            ))),
            CheckResult::Mismatch => Err(refuse(format!(
                "presented a host key different from the one in known_hosts file {file}: refusing to connect"
            ))),
            CheckResult::Failure => Err(refuse(format!(
                "could not be checked against known_hosts file {file}"
            ))),
        }
    }
}

/// The host key algorithms (libssh2 names) of the known_hosts entries that may be for
/// `host:port`: entries naming it (`host`, or `[host]:port` off port 22) and hashed entries.
pub fn host_key_algorithms(known_hosts: &str, host: &str, port: u16) -> String {
    let name = if port == 22 {
        host.to_owned()
    } else {
        format!("[{host}]:{port}")
    };
    let mut algorithms = BTreeSet::new();
    for line in known_hosts
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let mut fields = line.split_whitespace();
        let (Some(hosts), Some(kind)) = (fields.next(), fields.next()) else {
            continue;
        };
        let (hosts, kind) = if hosts.starts_with('@') {
            (kind, fields.next().unwrap_or_default())
        } else {
            (hosts, kind)
        };
        if hosts.starts_with("|1|") || hosts.split(',').any(|h| h == name) {
            algorithms.insert(kind);
        }
    }
    let mut names: Vec<&str> = Vec::new();
    for kind in algorithms {
        match kind {
            "ssh-rsa" => names.extend(["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]),
            other => names.push(other),
        }
    }
    names.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_key_algorithms_come_from_the_hosts_entries() {
        let file = "\
# comment
[127.0.0.1]:2222 ssh-ed25519 AAAA
127.0.0.1 ecdsa-sha2-nistp256 BBBB
login,[login]:2200 ssh-rsa CCCC
|1|salt|hash ssh-dss DDDD
";
        assert_eq!(
            host_key_algorithms(file, "127.0.0.1", 2222),
            "ssh-dss,ssh-ed25519"
        );
        assert_eq!(
            host_key_algorithms(file, "127.0.0.1", 22),
            "ecdsa-sha2-nistp256,ssh-dss"
        );
        assert_eq!(
            host_key_algorithms(file, "login", 2200),
            "ssh-dss,rsa-sha2-512,rsa-sha2-256,ssh-rsa"
        );
        assert_eq!(host_key_algorithms("", "login", 22), "");
    }
}
