//! The alerting rules of `deploy/prometheus/` on Debian's Prometheus 2.42 (`apt-get install
//! prometheus`, among `cargo xtask ci`'s prerequisites):
//!
//! - `promtool check rules` accepts them and `promtool test rules` passes their unit tests
//!   (`codalab-wm.rules.test.yml`: each alert fires when it should, and stays quiet when it
//!   should not);
//! - the REAL `prometheus` server on 127.0.0.1 scrapes the REAL `cl-worker-manager` running
//!   against the REAL CodaLab 1.7.5 server (`cargo xtask services up codalab`; `local`
//!   backend, `--dry-run`: nothing is launched) and evaluates the rules: every rule evaluates
//!   without error, and every metric of the manager a rule names, and every query of the
//!   Grafana dashboard (`deploy/grafana/codalab-wm.json`, all managers selected), returns
//!   series through the Prometheus HTTP API. (The operator's group is checked against the operator's registry in
//!   `crates/operator/tests/it/monitoring.rs`.)
//!
//! Locally a missing `promtool`, `prometheus` or CodaLab server skips a test; under `CI=true`
//! it fails. Every wait polls, bounded.

use crate::support;
use support::bundles::Server;
use support::manager::Manager;
use support::{SERVER, codalab_running, repo, stage_as, unique};

use codalab_wm_core::testing::require_service;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Scrapes every second, rules every second: a wide margin for a loaded machine.
const WITHIN: Duration = Duration::from_secs(120);

fn rules_dir() -> PathBuf {
    repo().join("deploy/prometheus")
}

fn promtool(args: &[&str]) -> Option<String> {
    let found = Path::new("/usr/bin/promtool").exists();
    if !require_service("promtool (apt-get install prometheus)", found) {
        return None;
    }
    let output = Command::new("promtool")
        .args(args)
        .current_dir(rules_dir())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?}:\n{text}");
    Some(text)
}

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests_pass() {
    let _turn = support::turn(module_path!());
    let Some(checked) = promtool(&["check", "rules", "codalab-wm.rules.yml"]) else {
        return;
    };
    assert!(checked.contains("SUCCESS: 11 rules found"), "{checked}");
    let tested = promtool(&["test", "rules", "codalab-wm.rules.test.yml"]).unwrap();
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// The manager's metric names the rules' expressions use (the manager's rules' expressions
/// are one line each).
fn manager_metrics_in_rules() -> BTreeSet<String> {
    let rules = std::fs::read_to_string(rules_dir().join("codalab-wm.rules.yml")).unwrap();
    let exprs: Vec<&str> = rules.lines().filter(|l| l.contains("expr: ")).collect();
    let exprs = exprs.join("\n");
    let mut names = BTreeSet::new();
    for (at, _) in exprs.match_indices("codalab_wm_") {
        let name: String = exprs[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.starts_with("codalab_wm_operator_") {
            names.insert(name);
        }
    }
    names
}

/// Every panel's query in the Grafana dashboard, its `$instance` variable set to "all".
fn dashboard_queries() -> Vec<String> {
    let file = repo().join("deploy/grafana/codalab-wm.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    let targets = panels.iter().flat_map(|p| p["targets"].as_array().unwrap());
    targets
        .map(|t| t["expr"].as_str().unwrap().replace("$instance", ".*"))
        .collect()
}

/// `GET path` from `addr` (HTTP/1.0): the status line's code and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return (0, String::new());
    };
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    let code = reply
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = reply.split_once("\r\n\r\n").map(|(_, b)| b.to_owned());
    (code, body.unwrap_or_default())
}

fn encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Series `query` returns on the Prometheus at `addr` (an instant query).
fn series(addr: &str, query: &str) -> usize {
    let (_, body) = get(addr, &format!("/api/v1/query?query={}", encode(query)));
    let reply: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    reply["data"]["result"].as_array().map_or(0, Vec::len)
}

/// A port of 127.0.0.1 nothing listens on now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Debian's `prometheus` scraping `target` every second with the rules loaded; stopped when
/// dropped.
struct Prometheus {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let rules = rules_dir().join("codalab-wm.rules.yml");
        let config = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [{rules:?}]\n\
             scrape_configs:\n  - job_name: codalab-wm\n    static_configs: [{{targets: [{target:?}]}}]\n"
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Self {
            child,
            addr,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The rules whose last evaluation did not succeed (`health` other than `ok`), with why.
    fn unhealthy_rules(&self) -> Vec<String> {
        let (_, body) = get(&self.addr, "/api/v1/rules");
        let reply: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let groups = reply["data"]["groups"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if groups.is_empty() {
            return vec!["no rules loaded yet".to_owned()];
        }
        groups
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .filter(|r| r["health"] != "ok")
            .map(|r| format!("{}: {} {}", r["name"], r["health"], r["lastError"]))
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The manager's `--listen` address, from its "serving /metrics" log line (bounded).
fn listen_addr(manager: &mut Manager) -> String {
    manager.wait_until("the listen address", WITHIN, |m| {
        m.listen_address().is_some()
    });
    let base = manager.listen_address().unwrap();
    base.trim_start_matches("http://").to_owned()
}

fn manager_args(tag: &str, state: &Path) -> Vec<String> {
    let flags = [
        "--server",
        SERVER,
        "--search",
        &format!("tags={tag}"),
        "--worker-tag",
        tag,
        "--max-workers",
        "2",
        "--sleep-time",
        "1",
        "--dry-run",
        "--listen",
        "127.0.0.1:0",
        "local",
        "--cpus",
        "1",
        "--memory-mb",
        "1024",
        "--state-dir",
        &state.display().to_string(),
    ];
    flags.iter().map(|s| s.to_string()).collect()
}

#[test]
fn prometheus_scraping_a_real_manager_evaluates_every_rule_and_every_dashboard_query() {
    let _turn = support::turn(module_path!());
    let found = Path::new("/usr/bin/prometheus").exists();
    if !require_service("prometheus (apt-get install prometheus)", found)
        || !require_service("codalab", codalab_running())
    {
        return;
    }
    let tag = unique("prom");
    // One bundle the pool fits, one that no pool fits (64 GPUs): unmet bundles by reason.
    let mut uuids = stage_as(
        "alice",
        1,
        &["--tags", &tag, "--request-memory", "256m"],
        &[],
    );
    uuids.extend(stage_as(
        "alice",
        1,
        &["--tags", &tag, "--request-gpus", "64"],
        &[],
    ));
    let state = tempfile::tempdir().unwrap();
    let mut manager = Manager::start(&manager_args(&tag, state.path()), ("alice", "alicepw"), &[]);
    let target = listen_addr(&mut manager);
    let prometheus = Prometheus::start(&target);

    let rules = manager_metrics_in_rules();
    assert!(rules.len() >= 7, "{rules:?}");
    let panels = dashboard_queries();
    assert!(panels.len() >= 14, "{panels:?}");
    let wanted: Vec<String> = (rules.iter().map(|name| format!("count({name})")))
        .chain(panels)
        .collect();
    let deadline = Instant::now() + WITHIN;
    let (missing, unhealthy) = loop {
        let missing: Vec<&String> = (wanted.iter())
            .filter(|query| series(&prometheus.addr, query) == 0)
            .collect();
        let unhealthy = prometheus.unhealthy_rules();
        if (missing.is_empty() && unhealthy.is_empty()) || Instant::now() > deadline {
            break (missing, unhealthy);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    Server::login("alice", "alicepw").remove(&uuids);
    assert!(
        missing.is_empty() && unhealthy.is_empty(),
        "queries with no series: {missing:?}; rules not evaluated: {unhealthy:?}\n\
         --- prometheus ---\n{}\n--- manager ---\n{}",
        prometheus.log(),
        manager.log()
    );
    // The rule the staged misfit should not trip yet (its `for` is 30 minutes), evaluated
    // all the same: the no_fitting_pool bundle is there.
    let unmet = r#"codalab_wm_unmet_bundles{reason="no_fitting_pool"}"#;
    assert_eq!(series(&prometheus.addr, unmet), 1, "{}", manager.log());
}

/// The book's alert table (`docs/src/operate/monitoring.md`) lists every alert of the rules
/// file with its `for`.
#[test]
fn the_book_lists_every_alert_with_its_for() {
    let _turn = support::turn(module_path!());
    let page = repo().join("docs/src/operate/monitoring.md");
    let readme = std::fs::read_to_string(page).unwrap();
    let table: Vec<(String, String)> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `CodalabWm"))
        .map(|rest| {
            let cells: Vec<&str> = rest.split('|').map(str::trim).collect();
            let name = format!("CodalabWm{}", cells[0].trim_end_matches('`'));
            (name, cells[2].replace(' ', ""))
        })
        .collect();
    let rules = std::fs::read_to_string(rules_dir().join("codalab-wm.rules.yml")).unwrap();
    let mut alerts: Vec<(String, String)> = Vec::new();
    for line in rules.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("- alert: ") {
            alerts.push((name.to_owned(), String::new()));
        } else if let Some(duration) = line.strip_prefix("for: ") {
            alerts.last_mut().unwrap().1 = duration.to_owned();
        }
    }
    assert_eq!(
        table, alerts,
        "the monitoring page's alert table against the rules"
    );
}
