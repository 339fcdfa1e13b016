//! The real binary against hostile input (issue 22): a `--ca-cert` file without a
//! certificate, a `--server` URL carrying a password, a CodaLab server (in-process fake on
//! 127.0.0.1) whose replies hold control characters, and a `--worker-tag` too long for a URL.

use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::process::{Command, Output};

use crate::support;
use support::manager::command as manager;

/// Runs `command` on a blocking thread (the test's runtime keeps serving the fake).
async fn run(mut command: Command) -> (Output, String) {
    let output = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output, text)
}

fn local(state: &std::path::Path) -> Vec<String> {
    vec![
        "--once".into(),
        "--min-workers".into(),
        "0".into(),
        "local".into(),
        "--state-dir".into(),
        state.display().to_string(),
    ]
}

#[tokio::test]
async fn a_ca_cert_file_without_a_certificate_is_refused_at_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "this is not a certificate\n").unwrap();
    let mut command = manager(&["--server", "https://127.0.0.1:1", "--ca-cert"]);
    command.arg(&garbage).args(local(&dir.path().join("state")));
    let (output, text) = run(command).await;
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(text.contains(&garbage.display().to_string()), "{text}");
    assert!(text.contains("no certificate"), "{text}");
}

#[tokio::test]
async fn a_password_in_the_server_url_is_never_logged() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = server.url().replace("http://", "http://u:hunter2-url-pw@");
    let mut command = manager(&["--server", &url]);
    command.args(local(&dir.path().join("state")));
    let (_, text) = run(command).await;
    assert!(
        text.contains("u:***@127.0.0.1"),
        "the URL was not logged: {text}"
    );
    assert!(!text.contains("hunter2-url-pw"), "{text}");
}

#[tokio::test]
async fn control_characters_from_the_server_are_escaped_in_text_logs() {
    let server = FakeCodaLab::start().await.unwrap();
    let mut bundle = FakeBundle::new("alice", 1);
    bundle.memory = "5\r\nINFO forged line \u{1b}[2J".into();
    server.set_bundles(vec![bundle]);
    let dir = tempfile::tempdir().unwrap();
    let mut command = manager(&["--server", &server.url()]);
    command.args(local(&dir.path().join("state")));
    let (_, text) = run(command).await;
    assert!(text.contains("skipping malformed bundle"), "{text}");
    assert!(text.contains("\\u{1b}[2J"), "{text}");
    assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");
    assert!(!text.contains("\nINFO forged"), "{text}");
    // The final error (printed by main, not by the log) is escaped too.
    server.inject_faults(vec![(500, "boom\r\u{1b}[2J\nINFO forged".into())]);
    let mut command = manager(&["--server", &server.url()]);
    command.args(local(&dir.path().join("state")));
    let (_, text) = run(command).await;
    assert!(text.contains("boom\\u{d}\\u{1b}[2J"), "{text}");
    assert!(!text.contains("\nINFO forged"), "{text}");
}

#[tokio::test]
async fn a_worker_tag_too_long_for_the_search_url_is_a_clear_error_not_unreachable() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tag = "t".repeat(100_000);
    let mut command = manager(&[
        "--server",
        &server.url(),
        "--worker-tag",
        &tag,
        "--worker-tag-exclusive",
    ]);
    command.args(local(&dir.path().join("state")));
    let (output, text) = run(command).await;
    assert_eq!(output.status.code(), Some(2), "{text}");
    // Refused when the settings are read, naming the setting and its size.
    assert!(
        text.contains("or `worker.tag` (--worker-tag, 100000 bytes"),
        "{text}"
    );
    assert!(!text.contains("unreachable"), "{text}");
}
