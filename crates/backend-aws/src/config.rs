//! The options of the `aws-batch` backend: upstream's flags plus what ownership and secret
//! handling need. One [`AwsBatchConfig::validate`] checks them all before anything is called.

use codalab_wm_core::{Error, Result, WorkerShape};
use serde::{Deserialize, Serialize};

/// How many characters a job name may have on AWS Batch.
const MAX_JOB_NAME: usize = 128;
/// `-` plus the 32 hex digits of the launch's unique id, appended to the manager id.
const JOB_NAME_SUFFIX: usize = 33;

/// Settings of the `aws-batch` backend (config table `aws_batch`).
///
/// The flag names, meanings and defaults are upstream's `cl-worker-manager aws-batch` ones;
/// `manager_id`, `codalab_credentials_secret_arn` and `execution_role_arn` are new.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AwsBatchConfig {
    /// AWS region to run jobs in (`--region`).
    pub region: String,
    /// Name of the job definition this manager registers and submits (`--job-definition-name`).
    pub job_definition_name: String,
    /// vCPUs of each worker (`--cpus`).
    pub cpus: u32,
    /// GPUs of each worker (`--gpus`); 0 asks for none.
    pub gpus: u32,
    /// Memory of each worker in MiB (`--memory-mb`).
    pub memory_mb: u64,
    /// User the worker container runs as (`--user`), e.g. `root` or `1000:1000`.
    pub user: String,
    /// Name or ARN of the job queue (`--job-queue`).
    pub job_queue: String,
    /// `--job-filter`: when set, every unfinished job in the queue whose name fully matches
    /// this regex counts as a worker (upstream's meaning), instead of only the jobs this
    /// manager started.
    pub job_filter: Option<String>,
    /// What identifies this manager's jobs in the queue: job names are
    /// `<manager_id>-<32 hex digits>` and jobs carry the tag `codalab-wm:manager-id`.
    /// Defaults to the job definition name, so a manager is identified by its queue and its
    /// job definition. Letters, digits, `-` and `_`, starting with a letter or digit, at most
    /// 95 characters.
    pub manager_id: Option<String>,
    /// ARN of a Secrets Manager secret holding JSON `{"username": …, "password": …}`. When
    /// set, workers get `CODALAB_USERNAME`/`CODALAB_PASSWORD` from it (container `secrets`),
    /// so no credential is stored in the job definition. Needs `execution_role_arn`.
    pub codalab_credentials_secret_arn: Option<String>,
    /// ARN of the ECS task execution role that may read the credentials secret.
    pub execution_role_arn: Option<String>,
}

impl Default for AwsBatchConfig {
    fn default() -> Self {
        Self {
            region: "us-east-1".to_owned(),
            job_definition_name: "codalab-worker".to_owned(),
            cpus: 1,
            gpus: 0,
            memory_mb: 2048,
            user: "root".to_owned(),
            job_queue: "codalab-batch-cpu".to_owned(),
            job_filter: None,
            manager_id: None,
            codalab_credentials_secret_arn: None,
            execution_role_arn: None,
        }
    }
}

impl AwsBatchConfig {
    /// The resources of each worker.
    pub fn shape(&self) -> WorkerShape {
        WorkerShape::from_flags(self.cpus, self.gpus, self.memory_mb)
    }

    /// The manager id: `manager_id` when set, else the job definition name.
    pub fn manager_id(&self) -> &str {
        self.manager_id
            .as_deref()
            .unwrap_or(&self.job_definition_name)
    }

    /// Checks every option; the error names the option and the value.
    pub fn validate(&self) -> Result<()> {
        let invalid = |message: String| Err(Error::InvalidConfig(message));
        if self.region.trim().is_empty() {
            return invalid("aws_batch.region is empty".into());
        }
        if !is_batch_name(&self.job_definition_name, MAX_JOB_NAME) {
            return invalid(format!(
                "aws_batch.job_definition_name `{}` must be 1 to {MAX_JOB_NAME} letters, digits, `-` or `_`",
                self.job_definition_name
            ));
        }
        if !is_batch_name(self.manager_id(), MAX_JOB_NAME - JOB_NAME_SUFFIX)
            || !self
                .manager_id()
                .starts_with(|c: char| c.is_ascii_alphanumeric())
        {
            return invalid(format!(
                "aws_batch.manager_id `{}` must be 1 to {} letters, digits, `-` or `_`, starting with a letter or digit",
                self.manager_id(),
                MAX_JOB_NAME - JOB_NAME_SUFFIX
            ));
        }
        if self.cpus == 0 {
            return invalid("aws_batch.cpus must be at least 1".into());
        }
        if self.memory_mb < 4 {
            return invalid(format!(
                "aws_batch.memory_mb {} is below the Batch minimum of 4",
                self.memory_mb
            ));
        }
        if self.user.trim().is_empty() {
            return invalid("aws_batch.user is empty".into());
        }
        if self.job_queue.trim().is_empty() {
            return invalid("aws_batch.job_queue is empty".into());
        }
        if let Some(filter) = &self.job_filter {
            regex::Regex::new(filter).map_err(|e| {
                Error::InvalidConfig(format!(
                    "aws_batch.job_filter `{filter}` is not a regex: {e}"
                ))
            })?;
        }
        self.validate_secret()
    }

    fn validate_secret(&self) -> Result<()> {
        let Some(arn) = &self.codalab_credentials_secret_arn else {
            return Ok(());
        };
        if !arn.starts_with("arn:")
            || !arn.contains(":secretsmanager:")
            || !arn.contains(":secret:")
        {
            return Err(Error::InvalidConfig(format!(
                "aws_batch.codalab_credentials_secret_arn `{arn}` is not a Secrets Manager secret ARN \
                 (arn:aws:secretsmanager:<region>:<account>:secret:<name>)"
            )));
        }
        if self
            .execution_role_arn
            .as_deref()
            .is_none_or(|r| !r.starts_with("arn:"))
        {
            return Err(Error::InvalidConfig(
                "aws_batch.codalab_credentials_secret_arn needs aws_batch.execution_role_arn \
                 (the role ECS uses to read the secret)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// Whether `name` is 1 to `max` characters of `[A-Za-z0-9_-]`.
fn is_batch_name(name: &str, max: usize) -> bool {
    !name.is_empty()
        && name.len() <= max
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_upstreams() {
        let config = AwsBatchConfig::default();
        assert_eq!(config.region, "us-east-1");
        assert_eq!(config.job_definition_name, "codalab-worker");
        assert_eq!((config.cpus, config.gpus, config.memory_mb), (1, 0, 2048));
        assert_eq!(config.user, "root");
        assert_eq!(config.job_queue, "codalab-batch-cpu");
        assert_eq!(config.manager_id(), "codalab-worker");
        config.validate().unwrap();
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = serde_json::from_str::<AwsBatchConfig>(r#"{"regoin": "x"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `regoin`"), "{err}");
    }

    #[test]
    fn invalid_values_name_the_option() {
        let cases: Vec<(AwsBatchConfig, &str)> = vec![
            (
                AwsBatchConfig {
                    cpus: 0,
                    ..Default::default()
                },
                "aws_batch.cpus",
            ),
            (
                AwsBatchConfig {
                    memory_mb: 2,
                    ..Default::default()
                },
                "aws_batch.memory_mb 2",
            ),
            (
                AwsBatchConfig {
                    job_definition_name: "a b".into(),
                    ..Default::default()
                },
                "job_definition_name `a b`",
            ),
            (
                AwsBatchConfig {
                    manager_id: Some("-x".into()),
                    ..Default::default()
                },
                "manager_id `-x`",
            ),
            (
                AwsBatchConfig {
                    manager_id: Some("m".repeat(96)),
                    ..Default::default()
                },
                "1 to 95 letters",
            ),
            (
                AwsBatchConfig {
                    job_filter: Some("(".into()),
                    ..Default::default()
                },
                "job_filter `(`",
            ),
            (
                AwsBatchConfig {
                    codalab_credentials_secret_arn: Some("creds".into()),
                    ..Default::default()
                },
                "not a Secrets Manager secret ARN",
            ),
            (
                AwsBatchConfig {
                    codalab_credentials_secret_arn: Some(
                        "arn:aws:secretsmanager:us-east-1:1:secret:c".into(),
                    ),
                    ..Default::default()
                },
                "needs aws_batch.execution_role_arn",
            ),
        ];
        for (config, expected) in cases {
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(expected), "{err} lacks {expected}");
            assert!(
                err.starts_with("invalid configuration: aws_batch."),
                "{err}"
            );
        }
    }

    #[test]
    fn a_manager_id_of_95_characters_fits_a_job_name() {
        let config = AwsBatchConfig {
            manager_id: Some("m".repeat(95)),
            ..Default::default()
        };
        config.validate().unwrap();
    }
}
