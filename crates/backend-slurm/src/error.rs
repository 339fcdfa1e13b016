//! Turning what a Slurm command printed into core's [`Error`], decided once here: a controller
//! that does not answer is temporary (the core retries on a later tick), anything else Slurm
//! refuses (bad partition, too many CPUs, bad gres …) is permanent and carries Slurm's message.

use codalab_wm_backend::Error;

/// The backend name used in errors.
pub const BACKEND: &str = "slurm-batch";

/// Slurm messages that mean "try again later": the controller or a node did not answer.
const TEMPORARY: &[&str] = &[
    "unable to contact slurm controller",
    "socket timed out",
    "connection timed out",
    "connection refused",
    "slurmctld is busy",
    "try again",
    "resource temporarily unavailable",
];

/// Whether Slurm's `message` describes a temporary condition.
pub fn is_temporary_message(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    TEMPORARY.iter().any(|needle| lower.contains(needle))
}

/// Slurm's message from a command's stderr (falling back to stdout): its non-empty lines joined.
pub fn slurm_message(stderr: &str, stdout: &str, status: Option<i32>) -> String {
    let lines = |text: &str| {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let message = lines(stderr);
    let message = if message.is_empty() {
        lines(stdout)
    } else {
        message
    };
    match (message.is_empty(), status) {
        (false, _) => message,
        (true, Some(code)) => format!("exited with status {code} and printed nothing"),
        (true, None) => "killed by a signal before printing anything".to_owned(),
    }
}

/// The error for a Slurm command that failed while doing `operation`.
pub fn command_failed(operation: &'static str, program: &str, message: String) -> Error {
    let message = format!("`{program}`: {message}");
    if is_temporary_message(&message) {
        Error::backend_temporary(BACKEND, operation, message)
    } else {
        Error::backend(BACKEND, operation, message)
    }
}

/// The error for a transport failure (cannot spawn, SSH connection lost): temporary when
/// `temporary`, with the underlying error as source.
pub fn transport_failed(
    operation: &'static str,
    message: String,
    temporary: bool,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
) -> Error {
    Error::Backend {
        backend: BACKEND.to_owned(),
        operation,
        message,
        temporary,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stderr of every submission error recorded on the reference cluster.
    #[test]
    fn classifies_recorded_messages() {
        let permanent = [
            "sbatch: error: Batch job submission failed: More processors requested than permitted",
            "sbatch: error: Batch job submission failed: Node count specification invalid",
            "sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)",
            "sbatch: error: Memory specification can not be satisfied\nsbatch: error: Batch job submission failed: Requested node configuration is not available",
            "sbatch: error: invalid partition specified: nosuch\nsbatch: error: Batch job submission failed: Invalid partition name specified",
            "sbatch: error: Invalid generic resource (gres) specification",
            "sbatch: error: Invalid --time specification",
            "sbatch: error: Unable to open file /nonexistent.sh",
            "squeue: error: Invalid user: nosuch",
        ];
        for stderr in permanent {
            let err = command_failed(
                "submit a worker job",
                "sbatch",
                slurm_message(stderr, "", Some(1)),
            );
            assert!(!err.is_temporary(), "{err}");
        }
        let temporary = [
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
            "slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
            "slurm_load_jobs error: Socket timed out on send/recv operation",
        ];
        for stderr in temporary {
            let err = command_failed(
                "list worker jobs",
                "squeue",
                slurm_message(stderr, "", Some(1)),
            );
            assert!(err.is_temporary(), "{err}");
        }
    }

    #[test]
    fn messages_keep_slurms_words() {
        let stderr = "sbatch: error: invalid partition specified: nosuch\nsbatch: error: Batch job submission failed: Invalid partition name specified\n";
        let err = command_failed(
            "submit a worker job",
            "sbatch",
            slurm_message(stderr, "", Some(1)),
        );
        assert_eq!(
            err.to_string(),
            "slurm-batch failed to submit a worker job: `sbatch`: sbatch: error: invalid partition specified: \
             nosuch; sbatch: error: Batch job submission failed: Invalid partition name specified"
        );
        assert_eq!(
            slurm_message("", "", Some(3)),
            "exited with status 3 and printed nothing"
        );
        assert_eq!(slurm_message("", "out\n", Some(3)), "out");
    }
}
