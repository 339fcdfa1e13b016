//! A REST session on the real CodaLab server of `cargo xtask services up codalab`: bob's for the
//! staged→ready section (`staged_ready.rs`: the states of a run's bundles, and removing them),
//! bench's for the server-cost section (`server_cost.rs`: counting and removing its bundles),
//! the root user's for the real packing section (`packing_real.rs`: every user's bundles of a
//! run and the checked-in workers).

use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::time::Duration;

pub const SERVER: &str = "http://127.0.0.1:2900";
/// Bench bundles run as bob only (tests stage as alice; bob's tests use their own queues).
pub const USER: (&str, &str) = ("bob", "bobpw");

/// bob's REST session on the real server (gunicorn drops idle keep-alives: no reuse).
pub struct Rest {
    http: reqwest::Client,
    token: String,
    runtime: tokio::runtime::Runtime,
}

impl Rest {
    pub fn login() -> Result<Self> {
        Self::login_as(USER)
    }

    /// A session of `user` (name, password).
    pub fn login_as(user: (&str, &str)) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(30))
            .build()?;
        let request = http
            .post(format!("{SERVER}/rest/oauth2/token"))
            .basic_auth("codalab_cli_client", Some(""))
            .form(&[
                ("grant_type", "password"),
                ("username", user.0),
                ("password", user.1),
            ]);
        let reply = runtime
            .block_on(Self::json(request))
            .with_context(|| format!("logging in to CodaLab as {}", user.0))?;
        let token = reply["access_token"]
            .as_str()
            .context("no access_token in the login reply")?
            .to_owned();
        Ok(Self {
            http,
            token,
            runtime,
        })
    }

    async fn json(request: reqwest::RequestBuilder) -> Result<Value> {
        Ok(request.send().await?.error_for_status()?.json().await?)
    }

    /// States of the bundles tagged `tag` (one search request).
    pub fn states(&self, tag: &str) -> Result<Vec<String>> {
        let bundles = self.bundles(tag)?;
        Ok(bundles.into_iter().map(|(_, state)| state).collect())
    }

    /// (uuid, state) of the bundles tagged `tag` that this user may read (one search request).
    pub fn bundles(&self, tag: &str) -> Result<Vec<(String, String)>> {
        let tags = format!("tags={tag}");
        let request = self
            .http
            .get(format!("{SERVER}/rest/bundles"))
            .query(&[("keywords", tags.as_str()), ("keywords", ".limit=1000")])
            .bearer_auth(&self.token);
        let reply = self
            .runtime
            .block_on(Self::json(request))
            .context("searching the run's bundles")?;
        let data = reply["data"]
            .as_array()
            .context("no data in the search reply")?;
        Ok(data
            .iter()
            .map(|b| {
                let uuid = b["id"].as_str().unwrap_or("?").to_owned();
                (
                    uuid,
                    b["attributes"]["state"].as_str().unwrap_or("?").to_owned(),
                )
            })
            .collect())
    }

    /// (worker id, uuids of its runs) of the checked-in workers tagged `tag`
    /// (`GET /rest/workers/info`; the root user sees every user's workers).
    pub fn workers(&self, tag: &str) -> Result<Vec<(String, Vec<String>)>> {
        let request = (self.http)
            .get(format!("{SERVER}/rest/workers/info"))
            .bearer_auth(&self.token);
        let reply = self.runtime.block_on(Self::json(request))?;
        let strings = |v: &Value| -> Vec<String> {
            let items = v.as_array().map(Vec::as_slice).unwrap_or_default();
            items
                .iter()
                .filter_map(|s| Some(s.as_str()?.to_owned()))
                .collect()
        };
        let data = reply["data"]
            .as_array()
            .context("no data in workers/info")?;
        Ok(data
            .iter()
            .filter(|w| w["tag"].as_str() == Some(tag))
            .map(|w| {
                let id = w["worker_id"].as_str().unwrap_or("?").to_owned();
                (id, strings(&w["run_uuids"]))
            })
            .collect())
    }

    /// `GET /rest/bundles` with `keywords`, as JSON.
    fn search(&self, keywords: &[&str]) -> Result<Value> {
        let query: Vec<(&str, &str)> = keywords.iter().map(|k| ("keywords", *k)).collect();
        let request = self
            .http
            .get(format!("{SERVER}/rest/bundles"))
            .header("X-Requested-With", "XMLHttpRequest")
            .query(&query)
            .bearer_auth(&self.token);
        self.runtime
            .block_on(Self::json(request))
            .with_context(|| format!("searching bundles: {}", keywords.join(" ")))
    }

    /// How many bundles match `keywords` (`.count`).
    pub fn count(&self, keywords: &[&str]) -> Result<usize> {
        let mut keywords = keywords.to_vec();
        keywords.push(".count");
        let reply = self.search(&keywords)?;
        let count = reply["meta"]["result"]
            .as_u64()
            .context("no meta.result in the count reply")?;
        Ok(count as usize)
    }

    /// Removes every bundle of this user, in any state (1,000 per request).
    pub fn remove_all_mine(&self) -> Result<usize> {
        let mut removed = 0;
        loop {
            let reply = self.search(&[".mine", ".limit=1000"])?;
            let uuids: Vec<String> = reply["data"]
                .as_array()
                .context("no data in the search reply")?
                .iter()
                .filter_map(|b| b["id"].as_str().map(str::to_owned))
                .collect();
            if uuids.is_empty() {
                return Ok(removed);
            }
            self.remove(&uuids)?;
            removed += uuids.len();
        }
    }

    pub fn remove(&self, uuids: &[String]) -> Result<()> {
        let data: Vec<Value> = uuids
            .iter()
            .map(|u| json!({"id": u, "type": "bundles"}))
            .collect();
        let request = self
            .http
            .delete(format!("{SERVER}/rest/bundles"))
            .header("X-Requested-With", "XMLHttpRequest")
            .query(&[("force", "1")])
            .bearer_auth(&self.token)
            .json(&json!({ "data": data }));
        self.runtime.block_on(async {
            request.send().await?.error_for_status()?;
            Ok(())
        })
    }
}
