//! [`AzureBatchBackend`]: workers as container tasks `cl_worker_<unique>` in one Batch job.
//!
//! Starting a worker adds a task as upstream's `AzureBatchWorkerManager` does: the
//! `codalab/worker` image with the same `docker` options (cpus, memory, the docker socket and
//! work-dir volumes, user), the `cl-worker` command line, and the upload of the task's
//! `stderr.txt` to the log container when it completes. The CodaLab credentials go in the
//! task's environment settings rather than in the `docker` options.
//!
//! Listing reads the tasks with the `cl_worker_` id prefix (all pages), so a restarted manager
//! finds the workers an earlier one started. Unlike upstream, which counted tasks and reported
//! zero workers on any error, an error here is an error and the manager skips the tick.

use crate::auth::{Auth, EntraTokenSource};
use crate::client::{AddOutcome, BatchClient, TerminateOutcome};
use crate::config::AzureBatchConfig;
use crate::error::BACKEND;
use crate::models::{
    CloudTask, EnvironmentSetting, OutputFile, OutputFileBlobContainerDestination,
    OutputFileDestination, OutputFileUploadCondition, OutputFileUploadOptions, TaskAddParameter,
    TaskContainerSettings, TaskExecutionResult, TaskState, parse_rfc3339,
};
use crate::sign::SharedKeyCredential;
use codalab_wm_backend::bundle::WorkerShape;
use codalab_wm_backend::secret::Credentials;
use codalab_wm_backend::{
    CleanupItem, Error, JobState, LaunchRequest, Result, WorkerBackend, WorkerJob,
};
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::SystemTime;

/// The id prefix of the tasks this backend owns.
pub const TASK_PREFIX: &str = "cl_worker_";

/// The `$filter` that selects own tasks.
pub const TASK_FILTER: &str = "startswith(id,'cl_worker_')";

/// The `$select` of the listing: only what the backend reads.
pub const TASK_SELECT: &str = "id,state,creationTime,executionInfo";

/// `mutex`'s guard, poisoned or not (the sets it guards stay valid).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the dry run shows instead of a secret.
const REDACTED: &str = "***";

/// Worker jobs as tasks of an Azure Batch job.
#[derive(Debug)]
pub struct AzureBatchBackend {
    config: AzureBatchConfig,
    credentials: Credentials,
    client: BatchClient,
    image: String,
    /// `CODALAB_BUNDLE_MOUNT` when `CODALAB_SHARED_FILE_SYSTEM=true` (read at start, as
    /// upstream reads it): workers get `--shared-file-system` and the mount.
    shared_bundle_mount: Option<String>,
    /// Failed tasks already reported by a listing of this process: the next listing deletes
    /// them (they would linger in the job forever), so the manager sees each failure once.
    reported_failed: Mutex<HashSet<String>>,
    /// A dry run: failed tasks are not deleted, only said to be (and listed no more, as
    /// after a real delete).
    read_only: bool,
    /// In a dry run, the failed tasks a real run would have deleted: never listed again.
    not_deleted: Mutex<HashSet<String>>,
}

impl AzureBatchBackend {
    /// A backend from a validated `config`; workers log in to CodaLab with `credentials`.
    pub fn new(config: AzureBatchConfig, credentials: Credentials) -> Result<Self> {
        config.validate()?;
        let http = BatchClient::http_client(config.request_timeout())?;
        let auth = match (&config.account_key, &config.entra) {
            (Some(key), _) => Auth::SharedKey(SharedKeyCredential::new(&config.account_name, key)?),
            (None, Some(entra)) => Auth::Entra(EntraTokenSource::new(entra.clone(), http.clone())),
            (None, None) => {
                return Err(Error::InvalidConfig(
                    "azure_batch: no account key and no [azure_batch.entra]".into(),
                ));
            }
        };
        let client = BatchClient::new(&config.service_url, &config.job_id, auth, http)?;
        let image = config.image();
        let shared_bundle_mount = (std::env::var("CODALAB_SHARED_FILE_SYSTEM").as_deref()
            == Ok("true"))
        .then(|| std::env::var("CODALAB_BUNDLE_MOUNT").unwrap_or_default());
        Ok(Self {
            config,
            credentials,
            client,
            image,
            shared_bundle_mount,
            reported_failed: Mutex::default(),
            read_only: false,
            not_deleted: Mutex::default(),
        })
    }

    /// With `read_only` (a dry run), listing deletes no failed task.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    fn reported_failed(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        lock(&self.reported_failed)
    }

    /// Deletes the failed tasks an earlier listing reported; returns the ids deleted. A
    /// delete that fails is logged and tried again at the next listing. In a dry run nothing
    /// is deleted: the ids are returned as if they were.
    async fn delete_reported_failed(&self, jobs: &[WorkerJob]) -> HashSet<String> {
        let due: Vec<String> = {
            let reported = self.reported_failed();
            jobs.iter()
                .filter(|j| matches!(j.state, JobState::Failed | JobState::Preempted))
                .filter(|j| reported.contains(&j.id))
                .map(|j| j.id.clone())
                .collect()
        };
        if self.read_only {
            let mut not_deleted = lock(&self.not_deleted);
            for id in due {
                tracing::info!(task_id = %id, "dry run: would delete a failed worker task");
                not_deleted.insert(id);
            }
            return not_deleted.clone();
        }
        let mut deleted = HashSet::new();
        for id in due {
            match self.client.delete_task(&id).await {
                Ok(_) => {
                    tracing::info!(task_id = %id, "deleted a failed worker task");
                    deleted.insert(id);
                }
                Err(error) => {
                    tracing::warn!(task_id = %id, %error, "could not delete a failed worker task")
                }
            }
        }
        deleted
    }

    /// The client, for requests the backend does not wrap.
    pub fn client(&self) -> &BatchClient {
        &self.client
    }

    /// The task id of launch `unique`.
    pub fn task_id(unique: &str) -> String {
        format!("{TASK_PREFIX}{unique}")
    }

    /// The task that `request` adds, secrets included.
    pub fn task_for(&self, request: &LaunchRequest<'_>) -> TaskAddParameter {
        let worker = request.worker;
        let work_dir = worker
            .work_dir_prefix
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/tmp/".to_owned());
        let mut argv = worker.build_command(request.unique, &work_dir);
        let task_id = Self::task_id(request.unique);
        let mut run_options = vec![
            format!("--cpus {}", self.config.cpus),
            format!("--memory {}M", self.config.memory_mb),
            "--volume /var/run/docker.sock:/var/run/docker.sock".to_owned(),
            format!(
                "--volume {}",
                shell_words::quote(&format!("{work_dir}:{work_dir}"))
            ),
            format!("--user {}", shell_words::quote(&self.config.user)),
        ];
        if let Some(mount) = &self.shared_bundle_mount {
            argv.push("--shared-file-system".to_owned());
            run_options.push(format!(
                "--volume {}",
                shell_words::quote(&format!("shared_dir:{mount}"))
            ));
        }
        TaskAddParameter {
            command_line: format!(
                "/bin/bash -c {}",
                shell_words::quote(&shell_words::join(&argv))
            ),
            container_settings: Some(TaskContainerSettings {
                container_run_options: Some(run_options.join(" ")),
                image_name: self.image.clone(),
            }),
            output_files: vec![OutputFile {
                file_pattern: "../stderr.txt".to_owned(),
                destination: OutputFileDestination {
                    container: OutputFileBlobContainerDestination {
                        path: Some(task_id.clone()),
                        container_url: self.config.log_container_url.expose().to_owned(),
                    },
                },
                upload_options: OutputFileUploadOptions {
                    upload_condition: OutputFileUploadCondition::TaskCompletion,
                },
            }],
            environment_settings: vec![
                env("CODALAB_USERNAME", &self.credentials.username),
                env("CODALAB_PASSWORD", self.credentials.password.expose()),
            ],
            id: task_id,
        }
    }

    /// The job as it is right after it was added.
    fn submitted(&self, id: String) -> WorkerJob {
        WorkerJob {
            name: id.clone(),
            id,
            state: JobState::Pending,
            submitted_at: Some(SystemTime::now()),
            shape: Some(self.worker_shape()),
            reason: None,
            expected_start: None,
        }
    }
}

fn env(name: &str, value: &str) -> EnvironmentSetting {
    EnvironmentSetting {
        name: name.to_owned(),
        value: Some(value.to_owned()),
    }
}

/// `task` as the dry run logs it: the password and the log container's SAS token hidden.
pub fn redacted(task: &TaskAddParameter) -> TaskAddParameter {
    let mut task = task.clone();
    for setting in &mut task.environment_settings {
        if setting.name == "CODALAB_PASSWORD" {
            setting.value = Some(REDACTED.to_owned());
        }
    }
    for file in &mut task.output_files {
        let url = &mut file.destination.container.container_url;
        if let Some((base, _)) = url.split_once('?') {
            *url = format!("{base}?{REDACTED}");
        }
    }
    task
}

/// The job state of a task: `active` is pending, `preparing`/`running` active, `completed`
/// ended, or failed when the execution result says so.
pub fn job_state(task: &CloudTask) -> JobState {
    match task.state {
        Some(TaskState::Active) | None => JobState::Pending,
        Some(TaskState::Preparing | TaskState::Running) => JobState::Active,
        Some(TaskState::Completed) => {
            match task.execution_info.as_ref().and_then(|info| info.result) {
                Some(TaskExecutionResult::Failure) => JobState::Failed,
                _ => JobState::Ended,
            }
        }
    }
}

/// The worker job a listed task stands for.
pub fn worker_job(task: &CloudTask, shape: WorkerShape) -> WorkerJob {
    let failure = task
        .execution_info
        .as_ref()
        .and_then(|info| info.failure_info.as_ref());
    let exit_code = task.execution_info.as_ref().and_then(|info| info.exit_code);
    let reason = failure
        .and_then(|f| f.code.clone())
        .or_else(|| exit_code.map(|code| format!("exit code {code}")));
    WorkerJob {
        id: task.id.clone(),
        name: task.id.clone(),
        state: job_state(task),
        submitted_at: task.creation_time.as_deref().and_then(parse_rfc3339),
        shape: Some(shape),
        reason,
        expected_start: None,
    }
}

#[async_trait::async_trait]
impl WorkerBackend for AzureBatchBackend {
    fn name(&self) -> &str {
        BACKEND
    }

    fn worker_shape(&self) -> WorkerShape {
        self.config.worker_shape()
    }

    #[tracing::instrument(skip(self), fields(backend = BACKEND, job_id = %self.config.job_id))]
    async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> {
        let tasks = self.client.list_tasks(TASK_FILTER, TASK_SELECT).await?;
        let shape = self.worker_shape();
        let jobs: Vec<WorkerJob> = tasks
            .iter()
            .filter(|t| t.id.starts_with(TASK_PREFIX))
            .map(|t| worker_job(t, shape))
            .collect();
        let deleted = self.delete_reported_failed(&jobs).await;
        let jobs: Vec<WorkerJob> = jobs
            .into_iter()
            .filter(|j| !deleted.contains(&j.id))
            .collect();
        let mut reported = self.reported_failed();
        reported.clear();
        reported.extend(
            jobs.iter()
                .filter(|j| matches!(j.state, JobState::Failed | JobState::Preempted))
                .map(|j| j.id.clone()),
        );
        drop(reported);
        Ok(jobs)
    }

    #[tracing::instrument(skip_all, fields(backend = BACKEND, job_id = %self.config.job_id, unique = request.unique))]
    async fn start_worker_job(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob> {
        let task = self.task_for(request);
        if request.dry_run {
            let shown = serde_json::to_string(&redacted(&task)).unwrap_or_default();
            tracing::info!(task = %shown, "dry run: would add this task");
            let mut job = WorkerJob::new(format!("dry-run-{}", request.unique), JobState::Ended);
            job.shape = Some(self.worker_shape());
            return Ok(job);
        }
        tracing::info!(task_id = %task.id, image = %self.image, "adding worker task");
        match self.client.add_task(&task).await? {
            AddOutcome::Created => {}
            AddOutcome::AlreadyExists => {
                tracing::info!(task_id = %task.id, "task already exists: an earlier try added it");
            }
        }
        Ok(self.submitted(task.id))
    }

    #[tracing::instrument(skip_all, fields(backend = BACKEND, job_id = %self.config.job_id, task_id = %job.id))]
    async fn stop_worker_job(&self, job: &WorkerJob) -> Result<()> {
        if !job.id.starts_with(TASK_PREFIX) {
            return Err(Error::backend(
                BACKEND,
                "stop a worker job",
                format!("task `{}` is not a worker task", job.id),
            ));
        }
        match self.client.terminate_task(&job.id).await? {
            TerminateOutcome::Terminated => tracing::info!("terminated worker task"),
            outcome => tracing::info!(?outcome, "worker task was already over"),
        }
        Ok(())
    }

    /// Deletes this manager's completed tasks (`cl_worker_…`) from the job; the job itself is
    /// the operator's and stays.
    #[tracing::instrument(skip_all, fields(backend = BACKEND, job_id = %self.config.job_id))]
    async fn cleanup(&self, dry_run: bool) -> Result<Vec<CleanupItem>> {
        let tasks = self.client.list_tasks(TASK_FILTER, TASK_SELECT).await?;
        let mut items = Vec::new();
        for task in tasks.iter().filter(|t| t.id.starts_with(TASK_PREFIX)) {
            // A dry run lists what `down` deletes once it has terminated the live tasks.
            if !dry_run && task.state != Some(TaskState::Completed) {
                continue;
            }
            let item = CleanupItem::found("finished task", &task.id);
            if dry_run {
                items.push(item);
                continue;
            }
            let result = self.client.delete_task(&task.id).await.map(|_| ());
            items.push(item.outcome(result));
        }
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{TaskExecutionInformation, TaskFailureInformation};
    use codalab_wm_backend::command::WorkerOptions;
    use codalab_wm_backend::secret::Secret;
    use std::time::{Duration, UNIX_EPOCH};

    fn backend() -> AzureBatchBackend {
        let mut config = AzureBatchConfig::new(
            "acct",
            "https://acct.westeurope.batch.azure.com",
            "job-1",
            Secret::new("https://store.blob.core.windows.net/logs?sv=1&sig=SAS-SECRET"),
        );
        config.account_key = Some(Secret::new("a2V5"));
        config.cpus = 4;
        config.memory_mb = 8192;
        config.worker_image = Some("codalab/worker:1.7".into());
        let credentials = Credentials {
            username: "alice".into(),
            password: Secret::new("PW-SECRET"),
        };
        AzureBatchBackend::new(config, credentials).unwrap()
    }

    fn options() -> WorkerOptions {
        WorkerOptions {
            server: "https://cl.example".into(),
            tag: Some("azure".into()),
            ..WorkerOptions::default()
        }
    }

    /// The body upstream's `start_worker_job` sends, field by field.
    #[test]
    fn task_body_matches_upstream() {
        let backend = backend();
        let options = options();
        let request = LaunchRequest {
            unique: "0123abcd",
            worker: &options,
            dry_run: false,
        };
        let body = serde_json::to_value(backend.task_for(&request)).unwrap();
        let expected = serde_json::json!({
            "id": "cl_worker_0123abcd",
            "commandLine": "/bin/bash -c 'cl-worker --server https://cl.example --verbose --exit-when-idle \
                --idle-seconds 600 --work-dir /tmp/ --id host-0123abcd --network-prefix \
                cl_worker_0123abcd_network --tag azure --download-dependencies-max-retries 3'",
            "containerSettings": {
                "containerRunOptions": "--cpus 4 --memory 8192M --volume /var/run/docker.sock:/var/run/docker.sock \
                    --volume /tmp/:/tmp/ --user root",
                "imageName": "codalab/worker:1.7"
            },
            "outputFiles": [{
                "filePattern": "../stderr.txt",
                "destination": {"container": {
                    "path": "cl_worker_0123abcd",
                    "containerUrl": "https://store.blob.core.windows.net/logs?sv=1&sig=SAS-SECRET"
                }},
                "uploadOptions": {"uploadCondition": "taskcompletion"}
            }],
            "environmentSettings": [
                {"name": "CODALAB_USERNAME", "value": "alice"},
                {"name": "CODALAB_PASSWORD", "value": "PW-SECRET"}
            ]
        });
        assert_eq!(body, expected);
    }

    /// `CODALAB_SHARED_FILE_SYSTEM=true`: as upstream, the worker gets `--shared-file-system`
    /// and the container the bundle mount.
    #[test]
    fn shared_file_system_mounts_the_bundle_store() {
        let mut backend = backend();
        backend.shared_bundle_mount = Some("/bundles".into());
        let options = options();
        let task = backend.task_for(&LaunchRequest {
            unique: "u",
            worker: &options,
            dry_run: false,
        });
        assert!(
            task.command_line.ends_with(" --shared-file-system'"),
            "{}",
            task.command_line
        );
        let run = task
            .container_settings
            .unwrap()
            .container_run_options
            .unwrap();
        assert!(
            run.ends_with("--user root --volume shared_dir:/bundles"),
            "{run}"
        );
    }

    #[test]
    fn work_dir_prefix_is_the_work_dir_and_odd_values_are_quoted() {
        let mut backend = backend();
        backend.config.user = "1000:1000".into();
        let options = WorkerOptions {
            work_dir_prefix: Some("/mnt/work dir".into()),
            ..options()
        };
        let task = backend.task_for(&LaunchRequest {
            unique: "u",
            worker: &options,
            dry_run: false,
        });
        let run = task
            .container_settings
            .unwrap()
            .container_run_options
            .unwrap();
        assert!(
            run.ends_with("--volume '/mnt/work dir:/mnt/work dir' --user 1000:1000"),
            "{run}"
        );
        let argv = shell_words::split(&task.command_line).unwrap();
        assert_eq!(argv[..2], ["/bin/bash", "-c"]);
        let inner = shell_words::split(&argv[2]).unwrap();
        assert_eq!(inner, options.build_command("u", "/mnt/work dir"));
    }

    #[test]
    fn the_task_body_has_every_field_the_spec_requires() {
        let spec: serde_json::Value =
            serde_json::from_str(include_str!("../spec/BatchService.json"))
                .expect("vendored spec parses");
        let options = options();
        let body = serde_json::to_value(backend().task_for(&LaunchRequest {
            unique: "u",
            worker: &options,
            dry_run: false,
        }))
        .unwrap();
        check_against(
            &spec,
            &spec["definitions"]["TaskAddParameter"],
            &body,
            "task",
        );
    }

    /// A small Swagger 2.0 check: required properties present, no unknown property, JSON
    /// types and enums as declared, recursively through `$ref`s.
    fn check_against(
        spec: &serde_json::Value,
        schema: &serde_json::Value,
        value: &serde_json::Value,
        at: &str,
    ) {
        let schema = match schema.get("$ref").and_then(|r| r.as_str()) {
            Some(reference) => {
                let name = reference.trim_start_matches("#/definitions/");
                &spec["definitions"][name]
            }
            None => schema,
        };
        if let Some(values) = schema.get("enum").and_then(|e| e.as_array()) {
            assert!(values.contains(value), "{at}: {value} not in {values:?}");
        }
        match schema.get("type").and_then(|t| t.as_str()) {
            Some("string") => assert!(value.is_string(), "{at}: not a string"),
            Some("integer") => assert!(value.is_i64(), "{at}: not an integer"),
            Some("array") => {
                for (i, item) in value.as_array().expect("array").iter().enumerate() {
                    check_against(spec, &schema["items"], item, &format!("{at}[{i}]"));
                }
            }
            _ => {}
        }
        if let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) {
            let object = value
                .as_object()
                .unwrap_or_else(|| panic!("{at}: not an object"));
            for required in schema
                .get("required")
                .and_then(|r| r.as_array())
                .into_iter()
                .flatten()
            {
                assert!(
                    object.contains_key(required.as_str().unwrap()),
                    "{at}: {required} missing"
                );
            }
            for (name, field) in object {
                let field_schema = properties
                    .get(name)
                    .unwrap_or_else(|| panic!("{at}: unknown property {name}"));
                check_against(spec, field_schema, field, &format!("{at}.{name}"));
            }
        }
    }

    #[test]
    fn dry_run_hides_password_and_sas_token() {
        let options = options();
        let task = backend().task_for(&LaunchRequest {
            unique: "u",
            worker: &options,
            dry_run: true,
        });
        let shown = serde_json::to_string(&redacted(&task)).unwrap();
        assert!(
            !shown.contains("PW-SECRET") && !shown.contains("SAS-SECRET"),
            "{shown}"
        );
        assert!(
            shown.contains("https://store.blob.core.windows.net/logs?***"),
            "{shown}"
        );
        assert!(
            shown.contains(r#""name":"CODALAB_USERNAME","value":"alice""#),
            "{shown}"
        );
    }

    #[tokio::test]
    async fn dry_run_sends_nothing_and_returns_an_ended_job() {
        // The service URL points at a closed port: any request would fail.
        let mut config = backend().config.clone();
        config.service_url = "http://127.0.0.1:9".into();
        let credentials = Credentials {
            username: "alice".into(),
            password: Secret::new("pw"),
        };
        let backend = AzureBatchBackend::new(config, credentials).unwrap();
        let options = options();
        let job = backend
            .start_worker_job(&LaunchRequest {
                unique: "abc",
                worker: &options,
                dry_run: true,
            })
            .await
            .unwrap();
        assert_eq!(
            (job.id.as_str(), job.state),
            ("dry-run-abc", JobState::Ended)
        );
    }

    fn task(state: Option<TaskState>, result: Option<TaskExecutionResult>) -> CloudTask {
        CloudTask {
            id: "cl_worker_1".into(),
            state,
            creation_time: Some("2017-02-17T00:00:00Z".into()),
            execution_info: result.map(|result| TaskExecutionInformation {
                result: Some(result),
                exit_code: Some(3),
                failure_info: (result == TaskExecutionResult::Failure).then(|| {
                    TaskFailureInformation {
                        code: Some("FailureExitCode".into()),
                        message: None,
                    }
                }),
            }),
        }
    }

    #[test]
    fn task_states_map_to_job_states() {
        let cases = [
            (task(Some(TaskState::Active), None), JobState::Pending),
            (task(None, None), JobState::Pending),
            (task(Some(TaskState::Preparing), None), JobState::Active),
            (task(Some(TaskState::Running), None), JobState::Active),
            (task(Some(TaskState::Completed), None), JobState::Ended),
            (
                task(
                    Some(TaskState::Completed),
                    Some(TaskExecutionResult::Success),
                ),
                JobState::Ended,
            ),
            (
                task(
                    Some(TaskState::Completed),
                    Some(TaskExecutionResult::Failure),
                ),
                JobState::Failed,
            ),
        ];
        for (task, expected) in cases {
            assert_eq!(job_state(&task), expected, "{task:?}");
        }
    }

    #[test]
    fn listed_tasks_carry_time_shape_and_reason() {
        let shape = WorkerShape::from_flags(1, 0, 2048);
        let job = worker_job(
            &task(
                Some(TaskState::Completed),
                Some(TaskExecutionResult::Failure),
            ),
            shape,
        );
        assert_eq!(
            job.submitted_at,
            Some(UNIX_EPOCH + Duration::from_secs(1_487_289_600))
        );
        assert_eq!(job.reason.as_deref(), Some("FailureExitCode"));
        assert_eq!(job.shape, Some(shape));
        let job = worker_job(
            &task(
                Some(TaskState::Completed),
                Some(TaskExecutionResult::Success),
            ),
            shape,
        );
        assert_eq!(job.reason.as_deref(), Some("exit code 3"));
    }
}
