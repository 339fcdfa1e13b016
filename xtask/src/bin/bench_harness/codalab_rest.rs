//! bob's REST session on the real CodaLab server of `cargo xtask services up codalab`, for the
//! staged→ready section (`staged_ready.rs`): the states of a run's bundles, and removing them.

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
                ("username", USER.0),
                ("password", USER.1),
            ]);
        let reply = runtime
            .block_on(Self::json(request))
            .context("logging in to CodaLab as bob")?;
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
            .map(|b| b["attributes"]["state"].as_str().unwrap_or("?").to_owned())
            .collect())
    }

    pub fn remove(&self, uuids: &[String]) -> Result<()> {
        let data: Vec<Value> = uuids
            .iter()
            .map(|u| json!({"id": u, "type": "bundles"}))
            .collect();
        let request = self
            .http
            .delete(format!("{SERVER}/rest/bundles"))
            .query(&[("force", "1")])
            .bearer_auth(&self.token)
            .json(&json!({ "data": data }));
        self.runtime.block_on(async {
            request.send().await?.error_for_status()?;
            Ok(())
        })
    }
}
