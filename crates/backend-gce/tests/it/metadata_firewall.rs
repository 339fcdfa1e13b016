//! The startup script's metadata firewall (`block_metadata`, taken from the rendered script, not
//! a copy) against a REAL Docker engine: a container on the worker's Docker reaches a metadata
//! server at 169.254.169.254 before the rule and gets "connection refused" after it, on Docker's
//! default bridge and on a network of its own (as `cl-worker` makes), while a host-network
//! container (as the worker runs) still reaches it.
//!
//! Everything happens in two network namespaces the test makes and removes: `vm` (the worker
//! VM: its own dockerd, bridge and iptables) and `md` (the metadata server: busybox httpd on
//! 169.254.169.254), joined by a veth pair. The route from `vm` to 169.254.169.254 goes through
//! `md`, so container packets are forwarded (FORWARD, DOCKER-USER) as on a GCE VM, where the
//! metadata server is off the host. Nothing is routed in the machine's own namespace and its
//! iptables are not touched. Afterwards the namespaces, the daemons and their mounts are gone.
//!
//! Needs root, `ip`, and what `cargo xtask services up docker` installs (dockerd, containerd,
//! iptables, a static busybox for the probe image); it does not use that service's engine.
//! Skips without them, fails under `CI=true`.

use codalab_wm_core::WorkerOptions;
use codalab_wm_core::testing::require_service;
use codalab_wm_gce::GceConfig;
use codalab_wm_gce::spec::startup_script;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const METADATA_PATH: &str = "computeMetadata/v1/instance/service-accounts/default/token";
const TOKEN: &str = "ya29.instance-token";
const PROBE_IMAGE: &str = "codalab-wm-metadata-probe:latest";

fn tools_present() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n");
    let tools = [
        "ip",
        "dockerd",
        "containerd",
        "docker",
        "iptables",
        "busybox",
    ];
    root && tools.iter().all(|t| which(t).is_some())
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
}

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program} {args:?}: {e}"))
}

fn ok(program: &str, args: &[&str]) {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Polls `ready` up to 300 times, 100 ms apart (a daemon's socket has no event to wait on);
/// the panic shows the daemon's `log`.
fn wait_until(what: &str, log: &Path, mut ready: impl FnMut() -> bool) {
    for _ in 0..300 {
        if ready() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(log).unwrap_or_default();
    panic!("{what} was not ready after 30 s; its log:\n{log}");
}

/// The two namespaces, their daemons and files; removed on drop, even when an assertion fails.
struct Sandbox {
    vm: String,
    md: String,
    dir: tempfile::TempDir,
    exec_root: PathBuf,
    daemons: Vec<Child>,
}

impl Sandbox {
    fn new() -> Self {
        let id = std::process::id() % 100_000;
        let dir = tempfile::tempdir().unwrap();
        let mut sandbox = Sandbox {
            vm: format!("cwm-vm-{id}"),
            md: format!("cwm-md-{id}"),
            exec_root: PathBuf::from(format!("/run/cwm-fw-{id}")),
            dir,
            daemons: Vec::new(),
        };
        sandbox.network(id);
        sandbox.metadata_server();
        sandbox.dockerd();
        sandbox.probe_image();
        sandbox
    }

    fn network(&self, id: u32) {
        let (vm, md) = (self.vm.as_str(), self.md.as_str());
        let (vm_end, md_end) = (format!("cwv{id}"), format!("cwm{id}"));
        ok("ip", &["netns", "add", vm]);
        ok("ip", &["netns", "add", md]);
        ok(
            "ip",
            &[
                "link", "add", &vm_end, "type", "veth", "peer", "name", &md_end,
            ],
        );
        ok("ip", &["link", "set", &vm_end, "netns", vm]);
        ok("ip", &["link", "set", &md_end, "netns", md]);
        for (ns, end, addr) in [
            (vm, &vm_end, "10.213.0.1/30"),
            (md, &md_end, "10.213.0.2/30"),
        ] {
            ok("ip", &["-n", ns, "link", "set", "lo", "up"]);
            ok("ip", &["-n", ns, "addr", "add", addr, "dev", end]);
            ok("ip", &["-n", ns, "link", "set", end, "up"]);
        }
        ok(
            "ip",
            &["-n", vm, "route", "add", "default", "via", "10.213.0.2"],
        );
        ok(
            "ip",
            &["-n", md, "addr", "add", "169.254.169.254/32", "dev", "lo"],
        );
    }

    /// Starts a daemon in namespace `ns`. `nsenter --net`, not `ip netns exec`: the latter
    /// mounts a fresh /sys, which hides the cgroup mounts dockerd needs.
    fn spawn_in(&mut self, ns: &str, program: &Path, args: &[&str], log: &str) {
        let log = std::fs::File::create(self.dir.path().join(log)).unwrap();
        let child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{ns}"))
            .arg("--")
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.daemons.push(child);
    }

    fn metadata_server(&mut self) {
        let www = self.dir.path().join("www");
        let file = www.join(METADATA_PATH);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, TOKEN).unwrap();
        let busybox = which("busybox").unwrap();
        let root = www.display().to_string();
        let args = ["httpd", "-f", "-p", "169.254.169.254:80", "-h", &root];
        let md = self.md.clone();
        self.spawn_in(&md, &busybox, &args, "httpd.log");
        let url = format!("http://169.254.169.254/{METADATA_PATH}");
        wait_until(
            "the metadata stand-in",
            &self.dir.path().join("httpd.log"),
            || {
                run(
                    "ip",
                    &[
                        "netns", "exec", &md, "busybox", "wget", "-q", "-O", "-", &url,
                    ],
                )
                .stdout
                    == TOKEN.as_bytes()
            },
        );
    }

    /// A dockerd of the sandbox's own, in `vm`. Started through a link of another name, so
    /// `services up docker` (which refuses a `dockerd` that is not its own) is not disturbed.
    fn dockerd(&mut self) {
        let dir = self.dir.path().to_owned();
        let link = dir.join("vm-dockerd");
        std::os::unix::fs::symlink(which("dockerd").unwrap(), &link).unwrap();
        let data = dir.join("data").display().to_string();
        let exec_root = self.exec_root.display().to_string();
        let pidfile = dir.join("dockerd.pid").display().to_string();
        let host = format!("unix://{}", dir.join("docker.sock").display());
        let args = [
            "--data-root",
            &data,
            "--exec-root",
            &exec_root,
            "--pidfile",
            &pidfile,
            "--host",
            &host,
        ];
        let vm = self.vm.clone();
        self.spawn_in(&vm, &link, &args, "dockerd.log");
        wait_until("the sandbox's dockerd", &dir.join("dockerd.log"), || {
            self.docker(&["version"]).status.success()
        });
    }

    fn probe_image(&self) {
        let root = self.dir.path().join("probe");
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::copy(which("busybox").unwrap(), root.join("bin/busybox")).unwrap();
        let tar = self.dir.path().join("probe.tar");
        ok(
            "tar",
            &[
                "-C",
                &root.display().to_string(),
                "-cf",
                &tar.display().to_string(),
                ".",
            ],
        );
        let out = self.docker(&["import", &tar.display().to_string(), PROBE_IMAGE]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn docker(&self, args: &[&str]) -> Output {
        let host = format!("unix://{}", self.dir.path().join("docker.sock").display());
        Command::new("docker")
            .arg("--host")
            .arg(host)
            .args(args)
            .output()
            .unwrap()
    }

    /// Whether a container on `network` gets the token: Ok(()) or Err(what it got instead).
    /// busybox `nc`, not `wget`: the static busybox's `wget` crashes in a bare image.
    fn fetch_token(&self, network: &str) -> Result<(), String> {
        let request = format!(
            "printf 'GET /{METADATA_PATH} HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 10 169.254.169.254 80"
        );
        let args = [
            "run",
            "--rm",
            "--network",
            network,
            PROBE_IMAGE,
            "/bin/busybox",
            "sh",
            "-c",
            &request,
        ];
        let out = self.docker(&args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && stdout.contains(TOKEN) {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(format!("{}: {stdout}{stderr}", out.status))
    }

    /// Runs the rendered script's `block_metadata` on the sandbox's VM.
    fn block_metadata(&self, script: &str) {
        let start = script
            .find("block_metadata() {")
            .expect("the script defines it");
        let end = start + script[start..].find("\n}\n").expect("the function ends") + 3;
        let program = format!("set -euo pipefail\n{}block_metadata\n", &script[start..end]);
        let net = format!("--net=/run/netns/{}", self.vm);
        ok("nsenter", &[&net, "--", "bash", "-c", &program]);
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for child in self.daemons.iter_mut().rev() {
            let pid = child.id().to_string();
            let _ = run("kill", &["-TERM", &pid]);
            let _ = child.wait();
        }
        // dockerd leaves its namespace bound under the exec root: unbound, `vm` goes away.
        for mount in mounts_under(&self.exec_root) {
            let _ = run("umount", &["-l", &mount]);
        }
        let _ = run("ip", &["netns", "del", &self.vm]);
        let _ = run("ip", &["netns", "del", &self.md]);
        let _ = std::fs::remove_dir_all(&self.exec_root);
    }
}

/// Mount points at or below `dir`, deepest first (from /proc/self/mountinfo).
fn mounts_under(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<String> = info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| Path::new(point).starts_with(dir))
        .map(str::to_owned)
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    mounts
}

fn rendered_script() -> String {
    let mut config = GceConfig::new("p", &["us-central1-a"], "codalab-password");
    config.worker_image = Some("codalab/worker:1.7.5".into());
    let options = WorkerOptions {
        server: "https://cl.example".into(),
        ..WorkerOptions::default()
    };
    startup_script(&config, "alice", &options, "u1")
}

#[test]
fn containers_on_the_worker_docker_cannot_reach_the_metadata_server() {
    if !require_service("docker", tools_present()) {
        return;
    }
    let sandbox = Sandbox::new();
    let own = sandbox.docker(&["network", "create", "cwm-bundles"]);
    assert!(
        own.status.success(),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );
    for network in ["bridge", "cwm-bundles", "host"] {
        assert_eq!(
            sandbox.fetch_token(network),
            Ok(()),
            "control: before the rule a container on `{network}` reaches the metadata server"
        );
    }
    sandbox.block_metadata(&rendered_script());
    for network in ["bridge", "cwm-bundles"] {
        let refused = sandbox.fetch_token(network);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("Connection refused")),
            "a container on `{network}` must not reach the metadata server: {refused:?}"
        );
    }
    assert_eq!(
        sandbox.fetch_token("host"),
        Ok(()),
        "the worker's own container (--network host) is not affected"
    );
    let (exec_root, vm) = (sandbox.exec_root.clone(), sandbox.vm.clone());
    drop(sandbox);
    assert!(
        mounts_under(&exec_root).is_empty(),
        "dockerd's mounts are gone"
    );
    let namespaces = run("ip", &["netns", "list"]);
    assert!(!String::from_utf8_lossy(&namespaces.stdout).contains(&vm));
}
