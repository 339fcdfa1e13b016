//! `GET /rest/workers/info`: the workers the server knows (those the user may see), with their
//! check-ins and runs, for [`crate::checkin`]. One call per tick.

use super::{CodaLabClient, first_line, limits, transport::unreachable};
use crate::checkin::CheckedInWorker;
use crate::error::{Error, Result};
use reqwest::{Method, StatusCode};
use serde::Deserialize;

/// What the call is named in errors.
const WHAT: &str = "workers info";

/// The reply: `{"data": [worker, …], "meta": {…}}`.
#[derive(Deserialize)]
struct WorkersReply {
    data: Vec<CheckedInWorker>,
}

impl CodaLabClient {
    /// The server's checked-in workers (`GET /rest/workers/info`). A 401 forgets the token (the
    /// next call logs in again); every error is the caller's to tolerate.
    pub async fn workers_info(&self) -> Result<Vec<CheckedInWorker>> {
        let access = self.access_token().await?;
        let response = self
            .request(Method::GET, "/rest/workers/info")
            .bearer_auth(access.expose())
            .send()
            .await
            .map_err(|e| unreachable(WHAT, e))?;
        let status = response.status();
        let body = limits::read_text(response, limits::MAX_WORKERS_INFO_BYTES, WHAT).await?;
        if !status.is_success() {
            if status == StatusCode::UNAUTHORIZED {
                // A revoked token is seen here first when the pools are full (no search then).
                tracing::warn!(
                    "the server refused our token (401 to the workers' check-ins); logging in again"
                );
                *self.token.lock().await = None;
            }
            return Err(Error::Server {
                what: WHAT,
                status: status.as_u16(),
                message: first_line(&body),
            });
        }
        parse_workers_reply(&body).map_err(|message| Error::InvalidReply {
            from: "codalab server".into(),
            what: WHAT.into(),
            message,
        })
    }
}

/// Parses a `/rest/workers/info` body as the client does: the depth bound, then the model.
pub fn parse_workers_reply(body: &str) -> std::result::Result<Vec<CheckedInWorker>, String> {
    limits::parse_json::<WorkersReply>(body).map(|reply| reply.data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_real_servers_reply_and_refuses_others() {
        // samples/workers-info.json of a real CodaLab 1.7.5 server (REPORT.md §6).
        let body = r#"{"data": [{"user_id": "0", "worker_id": "dispatch-worker-3", "group_uuid": null, "tag": "dispatchq3", "cpus": 2, "gpus": 0, "memory_bytes": 4294967296, "free_disk_bytes": 53687091200, "checkin_time": 1795295461, "socket_id": 4, "run_uuids": ["0xe5a98b06fdc7463faf560b56bf7783c3"], "shared_file_system": false, "tag_exclusive": true, "exit_after_num_runs": 999999999, "is_terminating": false, "preemptible": false, "cpus_in_use": 1, "gpus_in_use": 0}, {"user_id": "0", "worker_id": "info-worker-1", "group_uuid": null, "tag": "cpuq", "cpus": 2, "gpus": 0, "memory_bytes": 4294967296, "free_disk_bytes": 53687091200, "checkin_time": 1795295475, "socket_id": 5, "run_uuids": [], "shared_file_system": false, "tag_exclusive": false, "exit_after_num_runs": 999999999, "is_terminating": true, "preemptible": false, "cpus_in_use": 2, "gpus_in_use": 0}], "meta": {"version": "1.7.5"}}"#;
        let workers = parse_workers_reply(body).unwrap();
        assert_eq!(workers.len(), 2);
        assert_eq!(workers[0].run_uuids, ["0xe5a98b06fdc7463faf560b56bf7783c3"]);
        assert!(workers[1].is_terminating && workers[1].run_uuids.is_empty());
        let w = &workers[0];
        assert_eq!(w.user_id.as_deref(), Some("0"));
        assert_eq!(w.tag.as_deref(), Some("dispatchq3"));
        assert_eq!(w.tag_exclusive, Some(true));
        assert_eq!(
            (w.cpus, w.gpus, w.memory_bytes),
            (Some(2), Some(0), Some(4 << 30))
        );
        assert_eq!((w.cpus_in_use, w.gpus_in_use), (Some(1), Some(0)));
        assert_eq!(w.exit_after_num_runs, Some(999_999_999));
        assert!(parse_workers_reply(r#"{"meta": {}}"#).is_err(), "no data");
        assert!(
            parse_workers_reply(r#"{"data": [{"run_uuids": []}]}"#).is_err(),
            "no worker_id"
        );
        // The fields the dispatch model reads are optional: an older reply without them, or
        // with a value of another type, still gives the check-ins.
        let odd = r#"{"data": [{"worker_id": "w", "cpus": "two", "user_id": 0, "tag": null}]}"#;
        let odd = &parse_workers_reply(odd).unwrap()[0];
        assert_eq!(
            (odd.cpus, odd.user_id.as_deref(), odd.tag.as_deref()),
            (None, None, None)
        );
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(parse_workers_reply(&format!(r#"{{"data": {deep}}}"#)).is_err());
    }
}
