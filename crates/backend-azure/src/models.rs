//! The few Batch REST models the backend needs, named and shaped as in the Batch OpenAPI spec
//! (`spec/BatchService.json`, api-version [`API_VERSION`](crate::client::API_VERSION)).

use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `TaskAddParameter`: the body of `POST /jobs/{jobId}/tasks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskAddParameter {
    /// The task id, unique within the job (at most 64 characters: letters, digits, `-`, `_`).
    pub id: String,
    /// The command line the task runs (in the container, for container tasks).
    pub command_line: String,
    /// The container the task runs in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_settings: Option<TaskContainerSettings>,
    /// Files uploaded after the task ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_files: Vec<OutputFile>,
    /// Environment variables of the task process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environment_settings: Vec<EnvironmentSetting>,
}

/// `TaskContainerSettings`: the image and `docker create` options of a container task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskContainerSettings {
    /// Extra `docker create` options.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_run_options: Option<String>,
    /// The image (`codalab/worker:latest`).
    pub image_name: String,
}

/// `OutputFile`: files to upload to blob storage after the task ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputFile {
    /// Which files, relative to the task's working directory (`../stderr.txt`).
    pub file_pattern: String,
    /// Where to upload them.
    pub destination: OutputFileDestination,
    /// When to upload them.
    pub upload_options: OutputFileUploadOptions,
}

/// `OutputFileDestination`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputFileDestination {
    /// The blob container.
    pub container: OutputFileBlobContainerDestination,
}

/// `OutputFileBlobContainerDestination`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputFileBlobContainerDestination {
    /// The blob (or virtual directory) path in the container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The container URL, with a SAS token granting write access (a secret).
    pub container_url: String,
}

/// `OutputFileUploadOptions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputFileUploadOptions {
    /// When to upload.
    pub upload_condition: OutputFileUploadCondition,
}

/// `OutputFileUploadCondition`, lowercase on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputFileUploadCondition {
    /// After the task exited with code 0.
    TaskSuccess,
    /// After the task exited with a non-zero code.
    TaskFailure,
    /// After the task exited, whatever the code.
    TaskCompletion,
}

/// `EnvironmentSetting`: one environment variable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvironmentSetting {
    /// The variable name.
    pub name: String,
    /// Its value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// `TaskState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    /// Queued, not yet on a compute node.
    Active,
    /// On a node, waiting for the job preparation task.
    Preparing,
    /// Running on a node.
    Running,
    /// Finished, failed for good or terminated.
    Completed,
}

/// `TaskExecutionResult`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskExecutionResult {
    /// The task ran and exited with code 0.
    Success,
    /// The task failed (non-zero exit, or an error before it could run).
    Failure,
}

/// `CloudTask`, reduced to what the backend selects with `$select`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudTask {
    /// The task id.
    pub id: String,
    /// The task state.
    pub state: Option<TaskState>,
    /// When the task was created (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<String>,
    /// How the task ran, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_info: Option<TaskExecutionInformation>,
}

/// `TaskExecutionInformation`, reduced.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskExecutionInformation {
    /// The exit code of the command line, once it exited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Success or failure, once completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<TaskExecutionResult>,
    /// Why the task failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_info: Option<TaskFailureInformation>,
}

/// `TaskFailureInformation`, reduced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFailureInformation {
    /// The error code (`ContainerPoolNotSupported`, `TaskEnded` …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// What happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `CloudTaskListResult`: one page of `GET /jobs/{jobId}/tasks`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CloudTaskListResult {
    /// The tasks on this page.
    #[serde(default)]
    pub value: Vec<CloudTask>,
    /// The URL of the next page, when there is one.
    #[serde(rename = "odata.nextLink", skip_serializing_if = "Option::is_none")]
    pub next_link: Option<String>,
}

/// `BatchError`: the body of every error response. No field is required.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BatchError {
    /// The error code (`TaskExists`, `ServerBusy`, `AuthenticationFailed` …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// What went wrong, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<ErrorMessage>,
    /// Details (`Reason`, `AuthenticationErrorDetail` …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<BatchErrorDetail>,
}

/// `ErrorMessage`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ErrorMessage {
    /// The language of the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lang: Option<String>,
    /// The message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// `BatchErrorDetail`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BatchErrorDetail {
    /// What the detail is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// Parses an RFC 3339 UTC time as Batch writes it (`2024-07-01T10:20:30.1234567Z`).
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text
        .strip_suffix('Z')
        .or_else(|| text.strip_suffix("+00:00"))?;
    let (date, time) = text.split_once('T')?;
    let mut date_parts = date.splitn(3, '-').map(str::parse::<i64>);
    let (year, month, day) = (
        date_parts.next()?.ok()?,
        date_parts.next()?.ok()?,
        date_parts.next()?.ok()?,
    );
    let (hms, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut time_parts = hms.splitn(3, ':').map(str::parse::<u64>);
    let (hour, minute, second) = (
        time_parts.next()?.ok()?,
        time_parts.next()?.ok()?,
        time_parts.next()?.ok()?,
    );
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let nanos = if fraction.is_empty() {
        0
    } else {
        let digits: String = fraction.chars().take(9).collect();
        digits.parse::<u32>().ok()? * 10u32.pow(9 - digits.len() as u32)
    };
    let days = u64::try_from(codalab_wm_backend::civil::days_from_civil(year, month, day)).ok()?;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::new(secs, nanos))
}

/// Formats a time as RFC 3339 UTC with seconds (`2024-07-01T10:20:30Z`).
pub fn format_rfc3339(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = codalab_wm_backend::civil::civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_batch_times() {
        let t = parse_rfc3339("2017-02-17T00:00:00Z").unwrap();
        assert_eq!(t, UNIX_EPOCH + Duration::from_secs(1_487_289_600));
        let t = parse_rfc3339("2024-07-01T10:20:30.1234567Z").unwrap();
        assert_eq!(
            t.duration_since(UNIX_EPOCH).unwrap().subsec_nanos(),
            123_456_700
        );
        assert_eq!(format_rfc3339(t), "2024-07-01T10:20:30Z");
        assert_eq!(
            parse_rfc3339("2000-02-29T23:59:59+00:00")
                .map(format_rfc3339)
                .unwrap(),
            "2000-02-29T23:59:59Z"
        );
        assert!(parse_rfc3339("2024-13-01T00:00:00Z").is_none());
        assert!(parse_rfc3339("yesterday").is_none());
        assert!(parse_rfc3339("2024-07-01T10:20:30+02:00").is_none());
    }

    #[test]
    fn a_list_page_parses_with_next_link_and_unknown_fields() {
        let page: CloudTaskListResult = serde_json::from_str(
            r#"{"odata.metadata":"m","value":[{"id":"cl_worker_1","state":"completed","url":"u",
                "creationTime":"2024-07-01T10:20:30Z","executionInfo":{"result":"failure","retryCount":0,
                "requeueCount":0,"failureInfo":{"category":"usererror","code":"FailureExitCode"}}}],
                "odata.nextLink":"https://a.b/jobs/j/tasks?$skiptoken=x"}"#,
        )
        .unwrap();
        assert_eq!(page.value[0].state, Some(TaskState::Completed));
        let info = page.value[0].execution_info.as_ref().unwrap();
        assert_eq!(info.result, Some(TaskExecutionResult::Failure));
        assert_eq!(
            info.failure_info.as_ref().unwrap().code.as_deref(),
            Some("FailureExitCode")
        );
        assert_eq!(
            page.next_link.as_deref(),
            Some("https://a.b/jobs/j/tasks?$skiptoken=x")
        );
    }

    #[test]
    fn upload_condition_is_lowercase_on_the_wire() {
        let json = serde_json::to_string(&OutputFileUploadCondition::TaskCompletion).unwrap();
        assert_eq!(json, r#""taskcompletion""#);
    }
}
