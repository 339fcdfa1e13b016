//! Connection problems as a user sees them, through the real binary (issue 23, item 8): the
//! error names the server's URL and says each cause once; `https://` against a plain-HTTP server
//! gets a hint; a server that stays unreachable keeps being reported at WARN, with the number of
//! failed ticks and the time since the last success, at a bounded rate; "started worker manager"
//! comes only once the server took the credentials.

use codalab_wm_fake_codalab::FakeCodaLab;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

fn manager(server: &str, state: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["--server", server])
        .args(extra)
        .args(["local", "--state-dir"])
        .arg(state)
        .env("CODALAB_USERNAME", "alice")
        .env("CODALAB_PASSWORD", "alicepw")
        .env("NO_COLOR", "1")
        .env_remove("CODALAB_WM_LOG");
    command
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A 127.0.0.1 port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Waits (bounded: 60 s) until the log holds `needle`.
fn wait_for_log(log: &PathBuf, needle: &str) -> String {
    for _ in 0..6000 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!(
        "`{needle}` never logged:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

#[test]
fn an_unreachable_server_keeps_being_reported_at_warn_with_count_and_url() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", closed_port());
    let log = dir.path().join("stderr.log");
    let extra = ["--min-workers", "0", "--sleep-time", "1"];
    let mut child = manager(&url, &dir.path().join("state"), &extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let said = wait_for_log(&log, "(4 failed in a row");
    child.kill().unwrap();
    child.wait().unwrap();
    let warnings: Vec<&str> = said.lines().filter(|l| l.contains(" WARN ")).collect();
    let counts: Vec<&str> = warnings
        .iter()
        .filter_map(|l| l.split("tick skipped (").nth(1)?.split(' ').next())
        .collect();
    // the 1st, 2nd and 4th failure (the 3rd comes well within a minute of the 2nd)
    assert_eq!(counts, ["1", "2", "4"], "{said}");
    assert!(
        warnings[0].contains("no successful tick since the start"),
        "{said}"
    );
    let expected = format!("codalab server {url} unreachable during login");
    assert!(warnings[0].contains(&expected), "{said}");
    assert_eq!(
        warnings[0].matches("Connection refused").count(),
        1,
        "the cause is said once: {said}"
    );
    assert!(!said.contains("started worker manager"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_against_a_plain_http_server_suggests_http() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let https = server.url().replacen("http://", "https://", 1);
    let output = manager(
        &https,
        &dir.path().join("state"),
        &["--min-workers", "0", "--once"],
    )
    .output()
    .unwrap();
    let said = text(&output);
    // The exit statuses (the book's operate/state.md): 1 = with --once, its tick failed
    assert_eq!(output.status.code(), Some(1), "{said}");
    let hint = format!(
        "(the server speaks plain HTTP? try --server {})",
        server.url()
    );
    assert!(said.contains(&hint), "{said}");
    assert_eq!(
        said.matches("InvalidContentType").count(),
        1,
        "said once: {said}"
    );
    assert!(
        said.contains(&format!("codalab server {https} unreachable")),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_is_said_only_after_the_server_took_the_credentials() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let refused = manager(&server.url(), &state, &["--min-workers", "0", "--once"])
        .env("CODALAB_PASSWORD", "wrong")
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        !text(&refused).contains("started worker manager"),
        "{}",
        text(&refused)
    );
    // --min-workers 1: one worker is started, and its line says where its output goes
    let extra = [
        "--min-workers",
        "1",
        "--worker-executable",
        "/bin/true",
        "--once",
    ];
    let accepted = manager(&server.url(), &state, &extra).output().unwrap();
    let said = text(&accepted);
    assert!(accepted.status.success(), "{said}");
    let started = said.find("started worker manager").expect(&said);
    let job = said.find("started a worker job").expect(&said);
    assert!(started < job, "{said}");
    let output = format!(
        "started a worker job; its output goes to {}/",
        state.display()
    );
    assert!(said.contains(&output), "{said}");
}
