//! The instance's startup script, run for real by bash with stand-ins for what a Compute Engine
//! VM provides (no VM here: `curl` answers as the metadata server and Secret Manager do, and
//! `docker`, `iptables` and `poweroff` record how they were called). Checks that the password
//! reaches the container's environment from Secret Manager and nowhere else, that the metadata
//! server is closed to containers before the worker starts (`metadata_firewall.rs` proves the
//! rule works on a real Docker), that `cl-worker` gets core's argv in the worker image, and that
//! the VM powers off after the worker exits or when reading the secret fails.

use codalab_wm_core::WorkerOptions;
use codalab_wm_gce::GceConfig;
use codalab_wm_gce::spec::startup_script;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// `curl` of a VM: the metadata server's token, then Secret Manager's answer (base64 of
/// `s3cret pw`), pretty-printed as the services do; fails for any other URL.
const CURL: &str = r#"#!/bin/sh
for arg in "$@"; do url="$arg"; done
echo "curl $url" >> "$LOG"
case "$url" in
  */service-accounts/default/token) printf '{\n  "access_token": "ya29.vm-token",\n  "expires_in": 3599,\n  "token_type": "Bearer"\n}\n' ;;
  https://secretmanager.googleapis.com/v1/projects/p/secrets/codalab-password/versions/latest:access)
    [ -n "$SECRET_FAILS" ] && exit 22
    printf '{\n  "name": "projects/1/secrets/codalab-password/versions/1",\n  "payload": {\n    "data": "czNjcmV0IHB3",\n    "dataCrc32c": "1"\n  }\n}\n' ;;
  *) exit 22 ;;
esac
"#;
const DOCKER: &str = "#!/bin/sh\necho \"docker $* | password=$CODALAB_PASSWORD user=$CODALAB_USERNAME\" >> \"$LOG\"\n";
const IPTABLES: &str = "#!/bin/sh\necho \"iptables $*\" >> \"$LOG\"\n";
const POWEROFF: &str = "#!/bin/sh\necho poweroff >> \"$LOG\"\n";

fn stand_ins(dir: &Path) {
    for (name, text) in [
        ("curl", CURL),
        ("docker", DOCKER),
        ("iptables", IPTABLES),
        ("poweroff", POWEROFF),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

fn run(secret_fails: bool) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    stand_ins(dir.path());
    let mut config = GceConfig::new("p", &["us-central1-a"], "codalab-password");
    config.worker_image = Some("codalab/worker:1.7.5".into());
    let work = dir.path().join("work");
    let options = WorkerOptions {
        server: "https://cl.example".into(),
        work_dir_prefix: Some(work.display().to_string()),
        ..WorkerOptions::default()
    };
    let script = startup_script(&config, "alice", &options, "u1");
    let log = dir.path().join("log");
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(&script)
        .env("PATH", path)
        .env("LOG", &log);
    if secret_fails {
        command.env("SECRET_FAILS", "1");
    }
    let output = command.output().unwrap();
    assert!(work.is_dir() || secret_fails, "the work dir is made");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        !stdout.contains("s3cret") && !stderr.contains("s3cret"),
        "{stdout}{stderr}"
    );
    (
        output.status.success(),
        std::fs::read_to_string(&log).unwrap_or_default(),
        stderr,
    )
}

#[test]
fn the_worker_runs_with_the_secret_and_the_vm_powers_off() {
    let (ok, log, stderr) = run(false);
    assert!(ok, "{stderr}\n{log}");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 7, "{log}");
    assert!(
        lines[0].starts_with("curl http://metadata.google.internal/computeMetadata/v1/"),
        "{log}"
    );
    assert!(
        lines[1].starts_with("curl https://secretmanager.googleapis.com/"),
        "{log}"
    );
    assert_eq!(
        &lines[2..5],
        [
            "iptables -w -N DOCKER-USER",
            "iptables -w -I DOCKER-USER 1 -d 169.254.169.254/32 -j REJECT",
            "iptables -w -I FORWARD 1 -d 169.254.169.254/32 -j REJECT",
        ],
        "the metadata server is closed to containers before the worker starts: {log}"
    );
    let docker = lines[5];
    assert!(
        docker.starts_with(
            "docker run --rm --network host --env CODALAB_USERNAME --env CODALAB_PASSWORD"
        ),
        "{docker}"
    );
    assert!(
        docker.contains(" codalab/worker:1.7.5 cl-worker --server https://cl.example "),
        "{docker}"
    );
    assert!(
        docker.ends_with("| password=s3cret pw user=alice"),
        "{docker}"
    );
    assert_eq!(lines[6], "poweroff");
}

#[test]
fn the_vm_powers_off_when_the_secret_cannot_be_read() {
    let (ok, log, _) = run(true);
    assert!(!ok);
    assert!(!log.contains("docker"), "{log}");
    assert_eq!(log.lines().last(), Some("poweroff"), "{log}");
}
