//! moto (`cargo xtask services up moto`): the AWS Batch API the `aws-batch` tests submit to,
//! called with curl as any AWS client would (moto checks no signature, it reads the region
//! from it).

use serde_json::{Value, json};
use std::process::Command;

/// Moto reads the region from the (unchecked) signature.
pub const AUTHORIZATION: &str = "Authorization: AWS4-HMAC-SHA256 \
    Credential=test/20260101/us-east-1/batch/aws4_request, SignedHeaders=host, Signature=0";

/// The job queue `services up moto` seeds.
pub const QUEUE: &str = "codalab-batch-cpu";

pub fn endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| "http://127.0.0.1:5055".to_owned())
}

pub fn available() -> bool {
    Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-m", "3", "-w", "%{http_code}"])
        .arg(format!("{}/moto-api/", endpoint()))
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"2"))
}

/// The environment an AWS SDK client needs to talk to moto.
pub fn env() -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", endpoint()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]
}

/// POSTs `body` to Batch's `action` (`listjobs`, `describejobdefinitions` …).
pub fn call(action: &str, body: &str) -> Value {
    let output = Command::new("curl")
        .args(["-s", "-m", "10", "-X", "POST"])
        .args(["-H", "Content-Type: application/json", "-H", AUTHORIZATION])
        .args(["-d", body])
        .arg(format!("{}/v1/{action}", endpoint()))
        .output()
        .unwrap();
    serde_json::from_slice(&output.stdout).unwrap_or_default()
}

/// The unfinished jobs of [`QUEUE`] named `<prefix>-…`.
pub fn unfinished_jobs(prefix: &str) -> Vec<Value> {
    let mut jobs = Vec::new();
    for status in ["SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING"] {
        let body = json!({"jobQueue": QUEUE, "jobStatus": status}).to_string();
        let listing = call("listjobs", &body);
        let named = |job: &&Value| {
            (job["jobName"].as_str()).is_some_and(|n| n.starts_with(&format!("{prefix}-")))
        };
        let listed = listing["jobSummaryList"].as_array().into_iter().flatten();
        jobs.extend(listed.filter(named).cloned());
    }
    jobs
}

/// Terminates the unfinished jobs named `<prefix>-…` (moto keeps them running 15 min).
pub fn terminate_jobs(prefix: &str) {
    for job in unfinished_jobs(prefix) {
        let body = json!({"jobId": job["jobId"], "reason": "test done"}).to_string();
        call("terminatejob", &body);
    }
}
