//! # codalab-wm-slurm
//!
//! The `slurm-batch` backend of codalab-wm: CodaLab workers as Slurm batch jobs, submitted with
//! `sbatch`, listed with one `squeue` call per tick and stopped with `scancel`, either on this
//! machine or on a login node over SSH.
//!
//! - [`config`]: [`SlurmConfig`], upstream's `slurm-batch` flags plus the SSH login node;
//! - [`script`]: the batch script of one worker (what upstream writes, shell-quoted, `exec`'d);
//! - [`squeue`]: the one listing command per tick and its parsing;
//! - [`transport`] and [`ssh`]: where the commands run (local child process or SSH session);
//! - [`backend`]: [`SlurmBackend`], the [`WorkerBackend`](codalab_wm_backend::WorkerBackend);
//! - [`error`]: which Slurm failures are temporary.
//!
//! Jobs belong to this manager when their name starts with `<user>-<job-name>-`, so a restarted
//! manager finds the jobs an earlier one submitted, and their `--comment` carries no origin or
//! this deployment's ([`codalab_wm_backend::backend::origin`]): another server's or CodaLab
//! user's jobs under the same name are not listed. The comment is passed on `sbatch`'s command
//! line; the script's `#SBATCH` lines stay upstream's.
//!
//! ## Credentials
//! With `password_file`, workers get `--password-file` and read the file on the compute node.
//! Without it, the local transport sets `CODALAB_USERNAME`/`CODALAB_PASSWORD` in the
//! environment of the `sbatch` child only (sbatch hands its environment to the job, as with
//! upstream); the password is never written into the script, a file or a command line. Over
//! SSH there is no such channel that keeps the password off the cluster's disks and process
//! lists, so the SSH transport requires `password_file` (a path on the cluster).
//!
//! ## Differences from upstream
//! `account` has no default (upstream: `nlp`) and writes no line when unset; `gpus = 0` writes
//! no `--gres` line and passes `--gpuset NONE`; the worker argv is shell-quoted and `exec`'d.
//!
//! The backend describes itself to the program ([`describe`]): [`SlurmConfig`] is at once its flags,
//! its config table and its defaults, and [`KIND`] is its line in the binary's list of backends.
#![warn(missing_docs)]

pub mod backend;
pub mod config;
pub mod describe;
pub mod error;
pub mod scratch;
pub mod script;
pub mod squeue;
pub mod ssh;
pub mod transport;

pub use backend::SlurmBackend;
pub use config::SlurmConfig;
pub use describe::KIND;
