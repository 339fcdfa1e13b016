//! Reading bundles back from the REAL CodaLab server over its REST API (state, the worker that
//! ran it, a file of its output), and what a REAL `cl-worker` needs: the venv's executable and
//! the Docker engine of `cargo xtask services up docker`.

use super::{SERVER, repo};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

/// States from which a run bundle never moves on.
const FINAL: &[&str] = &["ready", "failed", "killed", "worker_offline"];

/// The real `cl-worker` 1.7.5 of the venv that `services up codalab` builds.
pub fn cl_worker() -> PathBuf {
    repo().join(".services/codalab/venv/bin/cl-worker")
}

/// `DOCKER_HOST` of the engine that `services up docker` starts.
pub fn docker_host() -> String {
    format!(
        "unix://{}",
        repo().join(".services/docker/docker.sock").display()
    )
}

/// Every test whose workers run in our dockerd reads this lock; the test that stops dockerd
/// writes it, so it runs when no other test uses the engine.
static DOCKER: RwLock<()> = RwLock::new(());

/// Held while a test's real workers use our dockerd: it is not stopped meanwhile.
pub fn docker_in_use() -> RwLockReadGuard<'static, ()> {
    DOCKER.read().unwrap_or_else(|p| p.into_inner())
}

/// Our dockerd stopped (`xtask/services/docker/down.sh`) once no other test uses it, and
/// started again (`up.sh`) when dropped, whatever the test did.
pub struct DockerStopped {
    _alone: RwLockWriteGuard<'static, ()>,
}

impl DockerStopped {
    pub fn stop() -> Self {
        let alone = DOCKER.write().unwrap_or_else(|p| p.into_inner());
        docker_script("down.sh");
        Self { _alone: alone }
    }
}

impl Drop for DockerStopped {
    fn drop(&mut self) {
        docker_script("up.sh");
    }
}

fn docker_script(name: &str) {
    let status = Command::new("bash")
        .arg(repo().join("xtask/services/docker").join(name))
        .env("SERVICES_DIR", repo().join(".services"))
        .status()
        .unwrap();
    assert!(status.success(), "services/docker/{name} failed");
}

/// Whether our dockerd answers and the default image exists (`xtask/services/docker/status.sh`).
pub fn docker_running() -> bool {
    Command::new("bash")
        .arg(repo().join("xtask/services/docker/status.sh"))
        .env("SERVICES_DIR", repo().join(".services"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One bundle as the server reports it.
#[derive(Debug, Clone, Default)]
pub struct BundleInfo {
    pub state: String,
    /// The id of the worker that ran it (`remote`), once one has.
    pub remote: Option<String>,
}

/// A logged-in REST session of one user on the real server.
#[derive(Debug)]
pub struct Server {
    http: reqwest::Client,
    token: String,
    runtime: tokio::runtime::Runtime,
}

impl Server {
    pub fn login(user: &str, password: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // gunicorn closes idle keep-alive connections without notice: no reuse.
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        let token = runtime.block_on(async {
            let reply: serde_json::Value = http
                .post(format!("{SERVER}/rest/oauth2/token"))
                .basic_auth("codalab_cli_client", Some(""))
                .form(&[
                    ("grant_type", "password"),
                    ("username", user),
                    ("password", password),
                ])
                .send()
                .await
                .unwrap()
                .error_for_status()
                .unwrap()
                .json()
                .await
                .unwrap();
            reply["access_token"].as_str().unwrap().to_owned()
        });
        Self {
            http,
            token,
            runtime,
        }
    }

    fn get(&self, path: &str) -> reqwest::Result<String> {
        self.runtime.block_on(async {
            self.http
                .get(format!("{SERVER}{path}"))
                .bearer_auth(&self.token)
                .send()
                .await?
                .error_for_status()?
                .text()
                .await
        })
    }

    /// The JSON document of `GET path`.
    pub fn json(&self, path: &str) -> serde_json::Value {
        let body = self.get(path).unwrap_or_else(|e| panic!("GET {path}: {e}"));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    /// Kills bundles (`cl kill`: `POST /rest/bundle-actions`); their workers stop them at
    /// their next check-in.
    pub fn kill(&self, uuids: &[String]) {
        let data: Vec<serde_json::Value> = uuids
            .iter()
            .map(|uuid| {
                serde_json::json!({
                    "type": "bundle-actions",
                    "attributes": {"type": "kill", "uuid": uuid},
                })
            })
            .collect();
        let reply = self.change(reqwest::Method::POST, "/rest/bundle-actions", data);
        assert!(
            reply.as_ref().is_ok_and(|(status, _)| status.is_success()),
            "killing {uuids:?}: {reply:?}"
        );
    }

    /// A state-changing request with a JSON API `data` body: its status and body.
    fn change(
        &self,
        method: reqwest::Method,
        path: &str,
        data: Vec<serde_json::Value>,
    ) -> reqwest::Result<(reqwest::StatusCode, String)> {
        self.runtime.block_on(async {
            let response = self
                .http
                .request(method, format!("{SERVER}{path}"))
                .bearer_auth(&self.token)
                // the server's CSRF guard for state-changing requests
                .header("X-Requested-With", "XMLHttpRequest")
                .json(&serde_json::json!({ "data": data }))
                .send()
                .await?;
            Ok((response.status(), response.text().await?))
        })
    }

    /// Polls (every 0.5 s, at most `limit`) until every bundle is in a final state.
    pub fn wait_final(&self, uuids: &[String], limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let states = self.states(uuids);
            if states.values().all(|s| FINAL.contains(&s.as_str())) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "bundles not final after {limit:?}: {states:?}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    pub fn info(&self, uuid: &str) -> BundleInfo {
        let body = self.get(&format!("/rest/bundles/{uuid}")).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        let attributes = &doc["data"]["attributes"];
        BundleInfo {
            state: attributes["state"].as_str().unwrap_or_default().to_owned(),
            remote: attributes["metadata"]["remote"]
                .as_str()
                .filter(|r| !r.is_empty())
                .map(str::to_owned),
        }
    }

    pub fn states(&self, uuids: &[String]) -> BTreeMap<String, String> {
        uuids
            .iter()
            .map(|u| (u.clone(), self.info(u).state))
            .collect()
    }

    /// A file of a bundle's output (`cl cat UUID/PATH`).
    pub fn cat(&self, uuid: &str, path: &str) -> String {
        self.get(&format!("/rest/bundles/{uuid}/contents/blob/{path}"))
            .unwrap()
    }

    /// What the server says of bundles that did not finish: each one's state and
    /// `staged_status` (the bundle manager's reason), the workers it lists (the user's), and
    /// the end of the bundle manager's log. Printed after the manager's log: a failure's
    /// output keeps its end.
    pub fn diagnose(&self, uuids: &[String]) -> String {
        let mut out = String::from("--- what the server says\n");
        for uuid in uuids {
            let body = self
                .get(&format!("/rest/bundles/{uuid}"))
                .unwrap_or_default();
            let doc: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let attributes = &doc["data"]["attributes"];
            out += &format!(
                "bundle {uuid}: {} {}\n",
                attributes["state"], attributes["metadata"]["staged_status"]
            );
        }
        let workers = self
            .get("/rest/workers/info")
            .unwrap_or_else(|e| e.to_string());
        out += &format!("workers: {workers}\n");
        let log = repo().join(".services/codalab/logs/bundle-manager.log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with(' ')).collect();
        out += "bundle manager's last lines:\n";
        for line in &lines[lines.len().saturating_sub(40)..] {
            out += line;
            out.push('\n');
        }
        out
    }

    /// Polls (every 0.5 s, at most `limit`) until every bundle is in a final state; panics with
    /// the states and `context()` (e.g. the manager's log) when one is not `ready` or time runs out.
    pub fn wait_ready(&self, uuids: &[String], limit: Duration, context: impl Fn() -> String) {
        let deadline = Instant::now() + limit;
        loop {
            let states = self.states(uuids);
            let done = states.values().all(|s| FINAL.contains(&s.as_str()));
            if done {
                assert!(
                    states.values().all(|s| s == "ready"),
                    "bundles ended but not all ready: {states:?}\n{}",
                    context()
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "bundles not ready after {limit:?}: {states:?}\n{}\n{}",
                context(),
                self.diagnose(uuids)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Removes bundles (`cl rm --force`), e.g. one left staged on purpose. The server refuses
    /// (400) while a bundle is `starting` (it may be offered to a worker that exited and come
    /// back to `staged`): retried every 0.5 s for up to a minute.
    pub fn remove(&self, uuids: &[String]) {
        let data: Vec<serde_json::Value> = uuids
            .iter()
            .map(|id| serde_json::json!({"id": id, "type": "bundles"}))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let path = "/rest/bundles?force=1";
            let reply = self.change(reqwest::Method::DELETE, path, data.clone());
            if reply.as_ref().is_ok_and(|(status, _)| status.is_success()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "removing {uuids:?}: {reply:?} (states {:?})",
                self.states(uuids)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}
