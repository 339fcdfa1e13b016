//! The moto service (AWS Batch stand-in on 127.0.0.1:5055) seen from outside: the jobs of one
//! manager, and their termination, through moto's REST API with `curl`.

use anyhow::{Context, Result, bail};
use std::process::Command;
use std::thread;
use std::time::Duration;

/// The job queue the moto service creates.
pub const QUEUE: &str = "codalab-batch-cpu";
/// Moto's own address.
pub const ADDRESS: &str = "127.0.0.1:5055";
/// Moto reads the region from the (unchecked) signature.
const MOTO_AUTHORIZATION: &str = "Authorization: AWS4-HMAC-SHA256 \
    Credential=test/20260101/us-east-1/batch/aws4_request, SignedHeaders=host, Signature=0";

fn call(action: &str, body: &str) -> Option<String> {
    let output = Command::new("curl")
        .args([
            "-s",
            "-f",
            "-m",
            "5",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
        ])
        .args(["-H", MOTO_AUTHORIZATION, "-d", body])
        .arg(format!("http://{ADDRESS}/v1/{action}"))
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Unfinished moto Batch jobs whose name starts with `<job_name>-`, as `(id, name)`.
pub fn jobs(job_name: &str) -> Option<Vec<(String, String)>> {
    let mut jobs = Vec::new();
    for status in ["SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING"] {
        let body = format!(r#"{{"jobQueue":"{QUEUE}","jobStatus":"{status}"}}"#);
        let listing = call("listjobs", &body)?;
        // `"jobId": "…", … "jobName": "…"` pairs, in order.
        let mut rest = listing.as_str();
        while let Some(at) = rest.find("\"jobId\": \"") {
            rest = &rest[at + 10..];
            let id = rest.split('"').next().unwrap_or_default().to_owned();
            let Some(at) = rest.find("\"jobName\": \"") else {
                break;
            };
            rest = &rest[at + 12..];
            let name = rest.split('"').next().unwrap_or_default().to_owned();
            if name.starts_with(&format!("{job_name}-")) {
                jobs.push((id, name));
            }
        }
    }
    Some(jobs)
}

/// Terminates every unfinished moto job of `job_name` (best effort, bounded).
pub fn cancel_jobs(job_name: &str) -> Result<()> {
    for _ in 0..20 {
        let jobs = jobs(job_name).context("moto does not answer")?;
        if jobs.is_empty() {
            return Ok(());
        }
        for (id, _) in jobs {
            let body = format!(r#"{{"jobId":"{id}","reason":"chaos cleanup"}}"#);
            let _ = call("terminatejob", &body);
        }
        thread::sleep(Duration::from_millis(500));
    }
    bail!("moto jobs of `{job_name}` still unfinished after terminating them")
}
