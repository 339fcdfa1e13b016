//! The raw AWS Batch calls this backend makes, on the official SDK, each returning plain data
//! and codalab-wm errors, and its one Secrets Manager read (the workers' account, at start).
//! No decisions here beyond paging: every list follows every page.

use crate::config::AwsBatchConfig;
use crate::definition::{JobDefinitionSpec, MANAGER_ID_TAG, SPEC_HASH_TAG, SubmitSpec};
use crate::error::{from_sdk, missing};
use aws_config::{BehaviorVersion, ConfigLoader, Region};
use aws_sdk_batch::config::retry::RetryConfig;
use aws_sdk_batch::config::timeout::TimeoutConfig;
use aws_sdk_batch::types::{
    ContainerOverrides, ContainerProperties, Host, JobDefinitionType, JobStatus, KeyValuePair,
    KeyValuesPair, MountPoint, ResourceRequirement, ResourceType, RetryStrategy, Secret, Volume,
};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use codalab_wm_backend::Result;
use std::collections::HashMap;
use std::time::Duration;

/// Attempts per SDK call, the first included. Kept small: the manager retries on its next tick.
pub const MAX_ATTEMPTS: u32 = 2;
/// Statuses of jobs that are not finished, in the order a job passes them.
pub const LIVE_STATUSES: [JobStatus; 5] = [
    JobStatus::Submitted,
    JobStatus::Pending,
    JobStatus::Runnable,
    JobStatus::Starting,
    JobStatus::Running,
];

/// One job as `ListJobs` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobListing {
    /// The job id.
    pub id: String,
    /// The job name.
    pub name: String,
    /// `SUBMITTED` … `FAILED`.
    pub status: String,
    /// Why the job is in this status, when Batch says.
    pub status_reason: Option<String>,
    /// When the job was created, in milliseconds since the epoch.
    pub created_at_ms: Option<i64>,
}

/// An AWS Batch client.
#[derive(Debug, Clone)]
pub struct BatchClient {
    client: aws_sdk_batch::Client,
    secrets: aws_sdk_secretsmanager::Client,
}

/// The SDK configuration loader this backend uses: the standard credential chain, the
/// configured region, HTTPS on rustls with ring, [`MAX_ATTEMPTS`] attempts and bounded
/// timeouts. `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_BATCH` are honoured by the SDK. Tests
/// add `.endpoint_url(…)` and static credentials before `.load()`.
pub fn sdk_loader(config: &AwsBatchConfig) -> ConfigLoader {
    let http_client = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(config.region.clone()))
        .http_client(http_client)
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(MAX_ATTEMPTS)
                .with_initial_backoff(Duration::from_millis(200))
                .with_max_backoff(Duration::from_secs(2)),
        )
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(5))
                .operation_attempt_timeout(Duration::from_secs(30))
                .operation_timeout(Duration::from_secs(60))
                .build(),
        )
}

impl BatchClient {
    /// A client from a loaded SDK configuration.
    pub fn new(sdk_config: &aws_config::SdkConfig) -> Self {
        Self {
            client: aws_sdk_batch::Client::new(sdk_config),
            secrets: aws_sdk_secretsmanager::Client::new(sdk_config),
        }
    }

    /// The string at `key` of the JSON secret `arn` (`None` when the secret is not a JSON
    /// object holding a string there). The value is the caller's to keep out of logs.
    pub async fn secret_json_key(&self, arn: &str, key: &str) -> Result<Option<String>> {
        let reply = (self.secrets.get_secret_value().secret_id(arn).send().await)
            .map_err(|e| from_sdk("read the workers' credentials secret", e))?;
        let json: Option<serde_json::Value> = reply
            .secret_string()
            .and_then(|s| serde_json::from_str(s).ok());
        Ok(json.and_then(|j| j.get(key)?.as_str().map(str::to_owned)))
    }

    /// A client configured by [`sdk_loader`].
    pub async fn connect(config: &AwsBatchConfig) -> Self {
        Self::new(&sdk_loader(config).load().await)
    }

    /// The ARN of the newest ACTIVE revision of job definition `name` tagged with `hash`.
    pub async fn find_job_definition(&self, name: &str, hash: &str) -> Result<Option<String>> {
        const WHAT: &str = "describe job definitions";
        let definitions: Vec<_> = self
            .client
            .describe_job_definitions()
            .job_definition_name(name)
            .status("ACTIVE")
            .into_paginator()
            .items()
            .send()
            .collect::<Result<_, _>>()
            .await
            .map_err(|e| from_sdk(WHAT, e))?;
        let newest = definitions
            .iter()
            .filter(|d| {
                d.tags()
                    .and_then(|t| t.get(SPEC_HASH_TAG))
                    .is_some_and(|h| h == hash)
            })
            .max_by_key(|d| d.revision());
        Ok(newest
            .and_then(|d| d.job_definition_arn())
            .map(str::to_owned))
    }

    /// The ARNs of every ACTIVE job definition revision (of any name) that carries both the
    /// tag `codalab-wm:manager-id` = `manager_id` and a spec hash tag: the revisions a
    /// manager with this id registered.
    pub async fn owned_job_definitions(&self, manager_id: &str) -> Result<Vec<String>> {
        const WHAT: &str = "describe job definitions";
        let definitions: Vec<_> = self
            .client
            .describe_job_definitions()
            .status("ACTIVE")
            .into_paginator()
            .items()
            .send()
            .collect::<Result<_, _>>()
            .await
            .map_err(|e| from_sdk(WHAT, e))?;
        Ok(definitions
            .iter()
            .filter(|d| {
                d.tags().is_some_and(|t| {
                    t.get(MANAGER_ID_TAG).is_some_and(|m| m == manager_id)
                        && t.contains_key(SPEC_HASH_TAG)
                })
            })
            .filter_map(|d| d.job_definition_arn().map(str::to_owned))
            .collect())
    }

    /// Deregisters the job definition revision `arn` (it becomes INACTIVE).
    pub async fn deregister_job_definition(&self, arn: &str) -> Result<()> {
        self.client
            .deregister_job_definition()
            .job_definition(arn)
            .send()
            .await
            .map_err(|e| from_sdk("deregister a job definition", e))?;
        Ok(())
    }

    /// Registers `spec` as a new revision and returns its ARN.
    pub async fn register_job_definition(&self, spec: &JobDefinitionSpec) -> Result<String> {
        const WHAT: &str = "register the job definition";
        let tags: HashMap<String, String> = spec
            .tags
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let output = self
            .client
            .register_job_definition()
            .job_definition_name(&spec.job_definition_name)
            .r#type(JobDefinitionType::Container)
            .container_properties(container_properties(spec))
            .retry_strategy(
                RetryStrategy::builder()
                    .attempts(spec.retry_strategy.attempts)
                    .build(),
            )
            .set_tags(Some(tags))
            .send()
            .await
            .map_err(|e| from_sdk(WHAT, e))?;
        output
            .job_definition_arn()
            .map(str::to_owned)
            .ok_or_else(|| missing(WHAT, "jobDefinitionArn"))
    }

    /// Submits a job and returns its id.
    pub async fn submit_job(&self, spec: &SubmitSpec) -> Result<String> {
        const WHAT: &str = "submit a worker job";
        let tags: HashMap<String, String> = spec
            .tags
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let overrides = ContainerOverrides::builder()
            .set_command(Some(spec.container_overrides.command.clone()))
            .build();
        let output = self
            .client
            .submit_job()
            .job_name(&spec.job_name)
            .job_queue(&spec.job_queue)
            .job_definition(&spec.job_definition)
            .container_overrides(overrides)
            .set_tags(Some(tags))
            .send()
            .await
            .map_err(|e| from_sdk(WHAT, e))?;
        output
            .job_id()
            .map(str::to_owned)
            .ok_or_else(|| missing(WHAT, "jobId"))
    }

    /// Every job of `queue` whose name starts with `prefix` (case-insensitively, as Batch
    /// matches), in every status, following every page.
    pub async fn list_jobs_named(&self, queue: &str, prefix: &str) -> Result<Vec<JobListing>> {
        let filter = KeyValuesPair::builder()
            .name("JOB_NAME")
            .values(format!("{prefix}*"))
            .build();
        let request = self.client.list_jobs().job_queue(queue).filters(filter);
        collect_jobs(request).await
    }

    /// Every job of `queue` in `status`, following every page.
    pub async fn list_jobs_in_status(
        &self,
        queue: &str,
        status: JobStatus,
    ) -> Result<Vec<JobListing>> {
        collect_jobs(self.client.list_jobs().job_queue(queue).job_status(status)).await
    }

    /// Terminates job `id` (cancels it before it runs, stops it while it runs).
    pub async fn terminate_job(&self, id: &str, reason: &str) -> Result<()> {
        self.client
            .terminate_job()
            .job_id(id)
            .reason(reason)
            .send()
            .await
            .map_err(|e| from_sdk("terminate a worker job", e))?;
        Ok(())
    }
}

async fn collect_jobs(
    request: aws_sdk_batch::operation::list_jobs::builders::ListJobsFluentBuilder,
) -> Result<Vec<JobListing>> {
    let summaries: Vec<_> = request
        .into_paginator()
        .items()
        .send()
        .collect::<Result<_, _>>()
        .await
        .map_err(|e| from_sdk("list worker jobs", e))?;
    Ok(summaries
        .into_iter()
        .map(|job| JobListing {
            id: job.job_id().unwrap_or_default().to_owned(),
            name: job.job_name().unwrap_or_default().to_owned(),
            status: job
                .status()
                .map(|s| s.as_str().to_owned())
                .unwrap_or_default(),
            status_reason: job.status_reason().map(str::to_owned),
            created_at_ms: job.created_at(),
        })
        .collect())
}

fn container_properties(spec: &JobDefinitionSpec) -> ContainerProperties {
    let container = &spec.container_properties;
    let resources = container.resource_requirements.iter().map(|r| {
        ResourceRequirement::builder()
            .r#type(ResourceType::from(r.kind.as_str()))
            .value(&r.value)
            .build()
    });
    let environment = container.environment.iter().map(|e| {
        KeyValuePair::builder()
            .name(&e.name)
            .value(&e.value)
            .build()
    });
    let secrets = container.secrets.iter().map(|s| {
        Secret::builder()
            .name(&s.name)
            .value_from(&s.value_from)
            .build()
    });
    let volumes = container.volumes.iter().map(|v| {
        Volume::builder()
            .name(&v.name)
            .host(Host::builder().source_path(&v.host.source_path).build())
            .build()
    });
    let mount_points = container.mount_points.iter().map(|m| {
        MountPoint::builder()
            .source_volume(&m.source_volume)
            .container_path(&m.container_path)
            .read_only(m.read_only)
            .build()
    });
    ContainerProperties::builder()
        .image(&container.image)
        .set_resource_requirements(Some(resources.collect()))
        .set_environment(Some(environment.collect()))
        .set_secrets((!container.secrets.is_empty()).then(|| secrets.collect()))
        .set_volumes(Some(volumes.collect()))
        .set_mount_points(Some(mount_points.collect()))
        .readonly_root_filesystem(container.readonly_root_filesystem)
        .user(&container.user)
        .set_execution_role_arn(container.execution_role_arn.clone())
        .build()
}
