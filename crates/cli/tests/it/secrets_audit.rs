//! Secrets audit: the CodaLab password and the OAuth2 tokens are recognisable canaries, and
//! every backend's launch path and `--dry-run` must keep them out of logs, stdout/stderr, the
//! Slurm script and work directory, the AWS job definition (with a credentials secret ARN),
//! what `--listen` serves (`/status`, the page, `/metrics`, `/healthz`),
//! the Kubernetes pod spec (credentials by `secretKeyRef`), the Azure task log and error
//! messages. Each test also checks that the canary really was in play (the worker received it,
//! the server accepted it), so a clean result cannot come from a run that never saw it.
//!
//! TLS: the CodaLab certificate is verified by default, `--ca-cert` trusts a private CA, and
//! `--insecure-skip-tls-verify` warns at every start (against a Python HTTPS server on 127.0.0.1, certificates made with the `openssl` CLI).
//! `--password-file` with loose permissions is refused: tested in `cli.rs`.
//!
//! Tests that need Slurm or moto skip locally when they are not running (fail under `CI=true`).

use crate::support;

use axum::Router;
use axum::extract::Form;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use codalab_wm_core::testing::require_service;
use serde_json::json;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");
/// Every canary starts with this; nothing else in the output does.
const MARK: &str = "S3cr3t-CANARY";
const PASSWORD: &str = "S3cr3t-CANARY-password-7f3a";
const ACCESS_TOKEN: &str = "S3cr3t-CANARY-access-token-9b1c";
const REFRESH_TOKEN: &str = "S3cr3t-CANARY-refresh-token-2d4e";

/// Fails when `text` holds any canary, naming where and showing the context.
fn assert_clean(what: &str, text: &str) {
    if let Some(at) = text.find(MARK) {
        let start = text[..at]
            .char_indices()
            .rev()
            .nth(80)
            .map_or(0, |(i, _)| i);
        let context: String = text[start..].chars().take(200).collect();
        panic!("a secret leaked into {what}: …{context}…");
    }
}

/// Every regular file under `dir`, with its text.
fn files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    out
}

// ------------------------------------------------------------------ a CodaLab with canary secrets

/// A minimal CodaLab REST server on 127.0.0.1: accepts `alice` with [`PASSWORD`], hands out the
/// canary tokens, and serves two staged bundles of alice.
async fn codalab() -> String {
    let app = Router::new()
        .route("/rest/oauth2/token", post(token))
        .route("/rest/user", get(user))
        .route("/rest/bundles", get(bundles));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

async fn token(Form(form): Form<HashMap<String, String>>) -> Response {
    let ok = match form.get("grant_type").map(String::as_str) {
        Some("password") => {
            form.get("username").map(String::as_str) == Some("alice")
                && form.get("password").map(String::as_str) == Some(PASSWORD)
        }
        Some("refresh_token") => {
            form.get("refresh_token").map(String::as_str) == Some(REFRESH_TOKEN)
        }
        _ => false,
    };
    if !ok {
        let body =
            json!({"error": "invalid_grant", "error_description": "Invalid credentials given."});
        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    axum::Json(
        json!({"access_token": ACCESS_TOKEN, "refresh_token": REFRESH_TOKEN,
        "expires_in": 3600, "token_type": "Bearer", "scope": "default"}),
    )
    .into_response()
}

fn authorised(headers: &HeaderMap) -> bool {
    headers.get("authorization").and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {ACCESS_TOKEN}"))
}

async fn user(headers: HeaderMap) -> Response {
    if !authorised(&headers) {
        return (StatusCode::UNAUTHORIZED, "User is not authenticated.").into_response();
    }
    axum::Json(json!({"data": {"type": "users", "id": "0xa11ce",
        "attributes": {"user_name": "alice"}}}))
    .into_response()
}

async fn bundles(headers: HeaderMap) -> Response {
    let data: Vec<_> = if authorised(&headers) {
        (1..=2)
            .map(|n| {
                json!({"type": "bundles", "id": format!("0x{n:032x}"), "attributes": {
                    "uuid": format!("0x{n:032x}"), "bundle_type": "run", "state": "staged",
                    "metadata": {"request_cpus": 1, "request_gpus": 0, "request_memory": "10m",
                                 "request_queue": "", "tags": []}},
                    "relationships": {"owner": {"data": {"type": "users", "id": "0xa11ce"}}}})
            })
            .collect()
    } else {
        Vec::new()
    };
    axum::Json(
        json!({"data": data, "included": [{"type": "users", "id": "0xa11ce",
        "attributes": {"user_name": "alice"}}]}),
    )
    .into_response()
}

// ------------------------------------------------------------------ running the manager

/// One `--once --verbose` run of the manager (bounded to 120 s), credentials from the
/// environment unless the args name a password file.
fn manager(server: &str, global: &[&str], backend: &[&str], password: Option<&str>) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(["--server", server, "--once", "--verbose"])
        .args(["--min-workers", "1", "--min-seconds-between-workers", "0"])
        .args(global)
        .args(backend)
        .env_remove("CODALAB_USERNAME")
        .env_remove("CODALAB_PASSWORD")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    for (key, _) in std::env::vars() {
        if key.starts_with("CODALAB_WM_") || key.starts_with("AZURE_BATCH") {
            command.env_remove(key);
        }
    }
    if let Some(password) = password {
        command
            .env("CODALAB_USERNAME", "alice")
            .env("CODALAB_PASSWORD", password);
    }
    bounded(command)
}

fn bounded(mut command: Command) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    command
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = command.spawn().unwrap();
    let mut status = None;
    for _ in 0..1200 {
        if let Some(done) = child.try_wait().unwrap() {
            status = Some(done);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("cl-worker-manager did not exit within 120 s");
    };
    Output {
        status,
        stdout: std::fs::read(out).unwrap(),
        stderr: std::fs::read(err).unwrap(),
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs the manager on a thread of its own (tests serve the fakes on the tokio runtime).
async fn run_manager(
    server: &str,
    global: &[&str],
    backend: &[&str],
    password: Option<&str>,
) -> Output {
    let (server, global, backend, password) = (
        server.to_owned(),
        global.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        backend.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        password.map(str::to_owned),
    );
    tokio::task::spawn_blocking(move || {
        let global: Vec<&str> = global.iter().map(String::as_str).collect();
        let backend: Vec<&str> = backend.iter().map(String::as_str).collect();
        manager(&server, &global, &backend, password.as_deref())
    })
    .await
    .unwrap()
}

/// A worker stand-in that records its argv and the password it received, then exits.
fn stand_in(dir: &Path) -> PathBuf {
    let path = dir.join("worker-stand-in.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\nprintf '%s\\n' \"$*\" >> \"$0.argv\"\nprintf '%s\\n' \"$CODALAB_PASSWORD\" >> \"$0.env\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A 0600 password file for alice.
fn password_file(dir: &Path) -> PathBuf {
    let path = dir.join("password");
    std::fs::write(&path, format!("alice\n{PASSWORD}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn read_when_written(path: &Path) -> String {
    for _ in 0..400 {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("{} was never written", path.display());
}

// ------------------------------------------------------------------ local backend

#[tokio::test(flavor = "multi_thread")]
async fn local_launch_keeps_secrets_out_of_logs_state_and_argv() {
    let _turn = support::turn(module_path!());
    let server = codalab().await;
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(dir.path());
    let state = dir.path().join("state");
    let output = run_manager(
        &server,
        &["--worker-executable", worker.to_str().unwrap()],
        &["local", "--state-dir", state.to_str().unwrap()],
        Some(PASSWORD),
    )
    .await;
    let all = text(&output);
    assert!(output.status.success(), "{all}");
    assert!(all.contains("started a worker job"), "{all}");
    assert_clean("the local backend's logs", &all);
    // The worker got the password (through its environment only).
    let env = read_when_written(&PathBuf::from(format!("{}.env", worker.display())));
    assert_eq!(env.trim(), PASSWORD);
    let argv = read_when_written(&PathBuf::from(format!("{}.argv", worker.display())));
    assert_clean("the worker's argv", &argv);
    let state_files = files(&state);
    assert!(
        !state_files.is_empty(),
        "the local backend recorded nothing"
    );
    for (path, content) in state_files {
        assert_clean(&path.display().to_string(), &content);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn local_dry_run_keeps_secrets_out_of_logs() {
    let _turn = support::turn(module_path!());
    let server = codalab().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let output = run_manager(
        &server,
        &["--dry-run"],
        &["local", "--state-dir", state.to_str().unwrap()],
        Some(PASSWORD),
    )
    .await;
    let all = text(&output);
    assert!(output.status.success(), "{all}");
    assert!(all.contains("dry run: would start a local worker"), "{all}");
    assert_clean("the local dry run", &all);
}

/// What the manager serves on `--listen` (`/status`, the page, `/metrics`, `/healthz`) once it
/// has logged in with the canary password, got the canary tokens and launched a worker that
/// received the password: no canary anywhere.
#[tokio::test(flavor = "multi_thread")]
async fn the_status_the_page_and_the_metrics_hold_no_secret() {
    let _turn = support::turn(module_path!());
    let server = codalab().await;
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(dir.path());
    let state = dir.path().join("state");
    let args: Vec<String> = [
        "--server",
        &server,
        "--listen",
        "127.0.0.1:0",
        "--min-workers",
        "1",
        "--worker-executable",
        worker.to_str().unwrap(),
        "local",
        "--state-dir",
        state.to_str().unwrap(),
    ]
    .map(str::to_owned)
    .into();
    let served = tokio::task::spawn_blocking(move || {
        let mut manager = support::manager::Manager::start(&args, ("alice", PASSWORD), &[]);
        manager.wait_until(
            "a tick that launched a worker",
            Duration::from_secs(60),
            |m| m.listen_address().is_some() && m.count("started a worker job") > 0,
        );
        let served: Vec<(String, String)> = ["/status", "/", "/metrics", "/healthz"]
            .map(|path| (path.to_owned(), manager.get(path)))
            .into();
        (served, manager.log())
    })
    .await
    .unwrap();
    let (served, log) = served;
    assert_clean("the log", &log);
    let env = read_when_written(&PathBuf::from(format!("{}.env", worker.display())));
    assert_eq!(env.trim(), PASSWORD, "the worker got the password");
    for (path, reply) in &served {
        assert!(reply.starts_with("HTTP/1.0 200"), "GET {path}: {reply}");
        assert_clean(path, reply);
    }
    assert!(served[0].1.contains("\"ticks\""), "{}", served[0].1);
    let _ = std::process::Command::new(BIN)
        .args(["down", "local", "--state-dir", state.to_str().unwrap()])
        .output();
}

// ------------------------------------------------------------------ errors

#[tokio::test(flavor = "multi_thread")]
async fn error_messages_hold_no_secret() {
    let _turn = support::turn(module_path!());
    let server = codalab().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let local = ["local", "--state-dir", state.to_str().unwrap()];
    // A wrong password: refused, exit 1, and the password it tried is not repeated.
    let wrong = run_manager(&server, &[], &local, Some("S3cr3t-CANARY-wrong-password")).await;
    assert_eq!(wrong.status.code(), Some(1), "{}", text(&wrong));
    assert!(
        text(&wrong).contains("Invalid credentials"),
        "{}",
        text(&wrong)
    );
    assert_clean("the wrong-password error", &text(&wrong));
    // An unreachable server.
    let gone = run_manager("http://127.0.0.1:9", &[], &local, Some(PASSWORD)).await;
    assert!(!gone.status.success());
    assert!(text(&gone).contains("unreachable"), "{}", text(&gone));
    assert_clean("the unreachable-server error", &text(&gone));
    // A password file that others can read: refused without printing its content.
    let file = password_file(dir.path());
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let loose = run_manager(
        &server,
        &["--password-file", file.to_str().unwrap()],
        &local,
        None,
    )
    .await;
    assert_eq!(loose.status.code(), Some(2), "{}", text(&loose));
    assert_clean("the loose password file error", &text(&loose));
}

// ------------------------------------------------------------------ Slurm

#[cfg(feature = "slurm")]
fn slurm_available() -> bool {
    Command::new("squeue")
        .arg("--noheader")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Cancels the jobs whose name contains `-<job_name>-`.
#[cfg(feature = "slurm")]
fn cancel_slurm_jobs(job_name: &str) {
    let listing = Command::new("squeue")
        .args(["--noheader", "--format=%i|%j"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for line in listing.lines() {
        if let Some((id, name)) = line.trim().split_once('|')
            && name.contains(&format!("-{job_name}-"))
        {
            let _ = Command::new("scancel").arg(id).status();
        }
    }
}

#[cfg(feature = "slurm")]
#[tokio::test(flavor = "multi_thread")]
async fn slurm_dry_run_with_password_file_keeps_secrets_out() {
    let _turn = support::turn(module_path!());
    if !require_service("slurm", slurm_available()) {
        return;
    }
    let server = codalab().await;
    let dir = tempfile::tempdir().unwrap();
    let file = password_file(dir.path());
    let work = dir.path().join("slurm");
    let output = run_manager(
        &server,
        &["--dry-run", "--password-file", file.to_str().unwrap()],
        &[
            "slurm-batch",
            "--partition",
            "cpu",
            "--gpus",
            "0",
            "--job-name",
            "audit-dry",
            "--slurm-work-dir",
            work.to_str().unwrap(),
        ],
        None,
    )
    .await;
    let all = text(&output);
    assert!(output.status.success(), "{all}");
    assert!(all.contains("dry run: would submit"), "{all}");
    assert!(all.contains("--password-file"), "{all}");
    assert_clean("the Slurm dry run", &all);
    for (path, content) in files(&work) {
        assert_clean(&path.display().to_string(), &content);
    }
}

#[cfg(feature = "slurm")]
#[tokio::test(flavor = "multi_thread")]
async fn slurm_submission_keeps_secrets_out_of_script_and_logs() {
    let _turn = support::turn(module_path!());
    if !require_service("slurm", slurm_available()) {
        return;
    }
    let server = codalab().await;
    for with_file in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let file = password_file(dir.path());
        let worker = stand_in(dir.path());
        let work = dir.path().join("slurm");
        let job_name = format!("audit{}{}", std::process::id(), u8::from(with_file));
        let global = ["--worker-executable", worker.to_str().unwrap()];
        let mut backend = vec![
            "slurm-batch",
            "--partition",
            "cpu",
            "--gpus",
            "0",
            "--memory-mb",
            "64",
            "--job-name",
            &job_name,
            "--slurm-work-dir",
            work.to_str().unwrap(),
        ];
        if with_file {
            // Where upstream documents it: after the backend name (#28 item 14).
            backend.extend(["--password-file", file.to_str().unwrap()]);
        }
        let output =
            run_manager(&server, &global, &backend, (!with_file).then_some(PASSWORD)).await;
        cancel_slurm_jobs(&job_name);
        let all = text(&output);
        assert!(output.status.success(), "{all}");
        assert!(all.contains("started a worker job"), "{all}");
        assert_clean("the Slurm launch logs", &all);
        let written = files(&work);
        let script = written
            .iter()
            .find(|(path, _)| path.extension().is_some_and(|e| e == "slurm"))
            .unwrap_or_else(|| panic!("no job script under {}", work.display()));
        if with_file {
            assert!(script.1.contains("--password-file"), "{}", script.1);
        }
        for (path, content) in &written {
            assert_clean(&path.display().to_string(), content);
        }
    }
}

// ------------------------------------------------------------------ AWS Batch

#[cfg(feature = "aws")]
const SECRET_ARN: &str =
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:codalab-worker-credentials";

/// The job definition built for a credentials secret holds the ARN and no secret.
#[cfg(feature = "aws")]
#[test]
fn aws_job_definition_with_a_secret_arn_holds_no_secret() {
    let _turn = support::turn(module_path!());
    use codalab_wm_aws::{AwsBatchConfig, HostEnvironment, JobDefinitionSpec};
    use codalab_wm_core::secret::{Credentials, Secret};
    let config: AwsBatchConfig = serde_json::from_value(json!({
        "codalab_credentials_secret_arn": SECRET_ARN,
        "execution_role_arn": "arn:aws:iam::123456789012:role/exec"
    }))
    .unwrap();
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new(PASSWORD),
    };
    let spec = JobDefinitionSpec::build(
        &config,
        &credentials,
        &HostEnvironment::default(),
        "/tmp/work",
    );
    let json = serde_json::to_string(&spec).unwrap();
    assert!(json.contains(SECRET_ARN), "{json}");
    assert_clean("the AWS job definition", &json);
    assert_clean("the AWS job definition (Debug)", &format!("{spec:?}"));
    // Without the ARN the password is in the definition (upstream's way): the check above
    // would have seen it.
    let plain = JobDefinitionSpec::build(
        &AwsBatchConfig::default(),
        &credentials,
        &HostEnvironment::default(),
        "/tmp/work",
    );
    assert!(serde_json::to_string(&plain).unwrap().contains(PASSWORD));
    assert_clean(
        "the AWS job definition (redacted)",
        &plain.redacted_json().to_string(),
    );
}

/// Against moto: the dry run and a real submission, then the job definition moto stored.
#[cfg(feature = "aws")]
#[tokio::test(flavor = "multi_thread")]
async fn aws_launch_and_dry_run_with_a_secret_arn_keep_secrets_out() {
    let _turn = support::turn(module_path!());
    if !require_service("moto", support::moto::available()) {
        return;
    }
    let server = codalab().await;
    let definition = format!("audit-{}", std::process::id());
    let backend = [
        "aws-batch",
        "--job-definition-name",
        &definition,
        "--codalab-credentials-secret-arn",
        SECRET_ARN,
        "--execution-role-arn",
        "arn:aws:iam::123456789012:role/exec",
    ];
    for dry_run in [true, false] {
        let global: &[&str] = if dry_run { &["--dry-run"] } else { &[] };
        let mut command = Command::new(BIN);
        command
            .args(["--server", &server, "--once", "--verbose"])
            .args(["--min-workers", "1", "--min-seconds-between-workers", "0"])
            .args(global)
            .args(backend)
            .env("CODALAB_USERNAME", "alice")
            .env("CODALAB_PASSWORD", PASSWORD)
            .env("NO_COLOR", "1");
        command.envs(support::moto::env());
        let output = tokio::task::spawn_blocking(move || bounded(command))
            .await
            .unwrap();
        let all = text(&output);
        assert!(output.status.success(), "dry_run={dry_run}: {all}");
        let expect = if dry_run {
            "dry run: would register"
        } else {
            "started a worker job"
        };
        assert!(all.contains(expect), "{all}");
        assert!(!dry_run || all.contains(SECRET_ARN), "{all}");
        assert_clean("the AWS Batch logs", &all);
    }
    // (moto answers 500 to a filter by name: list the active ones and pick ours)
    let described = support::moto::call("describejobdefinitions", r#"{"status":"ACTIVE"}"#);
    let ours: Vec<String> = described["jobDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["jobDefinitionName"] == definition.as_str())
        .map(serde_json::Value::to_string)
        .collect();
    support::moto::terminate_jobs(&definition);
    assert_eq!(ours.len(), 1, "{described}");
    assert!(ours[0].contains(SECRET_ARN), "{}", ours[0]);
    assert_clean("the job definition registered in moto", &ours[0]);
}

// ------------------------------------------------------------------ Kubernetes

/// The pod takes its credentials from the Secret (`secretKeyRef`); the pod spec, which
/// `--dry-run` logs, holds none.
#[cfg(feature = "k8s")]
#[test]
fn kubernetes_pod_spec_refers_to_the_secret() {
    let _turn = support::turn(module_path!());
    use codalab_wm_core::WorkerOptions;
    use codalab_wm_core::secret::{Credentials, Secret};
    use codalab_wm_k8s::{KubernetesConfig, WorkerTemplate};
    let config: KubernetesConfig = serde_json::from_value(json!({
        "cluster_host": "https://127.0.0.1:6443",
        "auth_token": "S3cr3t-CANARY-kube-token",
        "cert": "-----BEGIN CERTIFICATE-----\nS3cr3t-CANARY-kube-cert\n-----END CERTIFICATE-----\n",
        "bundle_runtime": "kubernetes"
    }))
    .unwrap();
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new(PASSWORD),
    };
    let worker = WorkerOptions {
        server: "https://codalab.example".into(),
        ..WorkerOptions::default()
    };
    let template = WorkerTemplate::new(&config, &credentials, &worker).unwrap();
    let pod = serde_json::to_string(&template.pod("0123456789abcdef0123456789abcdef")).unwrap();
    assert!(pod.contains("secretKeyRef"), "{pod}");
    assert!(pod.contains("CODALAB_PASSWORD"), "{pod}");
    assert_clean("the worker pod spec", &pod);
    assert_clean("the worker template (Debug)", &format!("{template:?}"));
}

// ------------------------------------------------------------------ Azure Batch

/// Against the crate's stateful Batch fake: dry run and real launch, with the account key and
/// the log container SAS token as canaries too.
#[cfg(feature = "azure")]
#[tokio::test(flavor = "multi_thread")]
async fn azure_launch_and_dry_run_keep_secrets_out_of_logs() {
    let _turn = support::turn(module_path!());
    use base64::Engine as _;
    use codalab_wm_core::secret::Secret;
    use codalab_wm_fake_azure::FakeBatch;
    let key = base64::engine::general_purpose::STANDARD.encode("S3cr3t-CANARY-azure-account-key");
    let batch = FakeBatch::start("acct", &Secret::new(key.clone()), "job-1")
        .await
        .unwrap();
    let server = codalab().await;
    let sas = "https://s.blob.core.windows.net/logs?sv=2022&sig=S3cr3t-CANARY-sas";
    let backend = [
        "azure-batch",
        "--account-name",
        "acct",
        "--service-url",
        batch.url(),
        "--log-container-url",
        sas,
        "--job-id",
        "job-1",
    ];
    for dry_run in [true, false] {
        let global: &[&str] = if dry_run { &["--dry-run"] } else { &[] };
        let mut command = Command::new(BIN);
        command
            .args(["--server", &server, "--once", "--verbose"])
            .args(["--min-workers", "1", "--min-seconds-between-workers", "0"])
            .args(global)
            .args(backend)
            .env("AZURE_BATCH_ACCOUNT_KEY", &key)
            .env("CODALAB_USERNAME", "alice")
            .env("CODALAB_PASSWORD", PASSWORD)
            .env("NO_COLOR", "1");
        let output = tokio::task::spawn_blocking(move || bounded(command))
            .await
            .unwrap();
        let all = text(&output);
        assert!(output.status.success(), "dry_run={dry_run}: {all}");
        let expect = if dry_run {
            "dry run: would add this task"
        } else {
            "started a worker job"
        };
        assert!(all.contains(expect), "{all}");
        assert_clean("the Azure Batch logs", &all);
        assert!(!all.contains(&key), "the account key leaked: {all}");
    }
    assert_eq!(batch.tasks().len(), 1, "the real launch added no task");
}

// ------------------------------------------------------------------ TLS

fn openssl(args: &[&str], dir: &Path) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command");
    assert!(
        output.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A private CA and a server certificate for 127.0.0.1 signed by it, in `dir`.
fn certificates(dir: &Path) {
    openssl(
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=codalab-wm test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
        dir,
    );
    openssl(
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
        dir,
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.pem",
        ],
        dir,
    );
}

/// A Python HTTPS server on a free port of 127.0.0.1 with the server certificate, answering
/// every request with `503 tls-test-server` (so a client that got through the handshake says so).
struct TlsServer {
    child: std::process::Child,
    url: String,
}

const TLS_SERVER: &str = r#"
import http.server, ssl, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def answer(self):
        body = b"tls-test-server\n"
        self.send_response(503)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = answer
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("server.pem", "server.key")
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"#;

impl TlsServer {
    fn start(dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("python3")
            .args(["-c", TLS_SERVER, &port.to_string()])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            child,
            url: format!("https://127.0.0.1:{port}"),
        }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn tls_is_verified_unless_a_ca_is_given_and_skipping_warns_every_start() {
    let _turn = support::turn(module_path!());
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let server = TlsServer::start(dir.path());
    let state = dir.path().join("state");
    let local = ["local", "--state-dir", state.to_str().unwrap()];
    let ca = dir.path().join("ca.pem");
    // Default: the certificate is checked and refused; nothing is sent past the handshake.
    let verified = text(&manager(&server.url, &[], &local, Some(PASSWORD)));
    assert!(
        verified.to_lowercase().contains("certificate"),
        "no certificate error without --ca-cert: {verified}"
    );
    assert!(!verified.contains("tls-test-server"), "{verified}");
    assert_clean("the TLS error", &verified);
    // With the CA: the handshake succeeds and the (non-CodaLab) reply is what fails.
    let trusted = text(&manager(
        &server.url,
        &["--ca-cert", ca.to_str().unwrap()],
        &local,
        Some(PASSWORD),
    ));
    assert!(
        !trusted.to_lowercase().contains("certificate"),
        "the private CA was not trusted: {trusted}"
    );
    assert!(trusted.contains("tls-test-server"), "{trusted}");
    // Skipping verification works and warns, at every start.
    for _ in 0..2 {
        let skipped = text(&manager(
            &server.url,
            &["--insecure-skip-tls-verify"],
            &local,
            Some(PASSWORD),
        ));
        assert!(
            skipped.contains(
                "--insecure-skip-tls-verify: the CodaLab server's certificate is NOT verified"
            ),
            "{skipped}"
        );
        assert!(
            !skipped.to_lowercase().contains("certificate verify"),
            "{skipped}"
        );
        assert!(skipped.contains("tls-test-server"), "{skipped}");
    }
}
