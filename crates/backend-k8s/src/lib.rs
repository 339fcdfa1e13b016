//! # codalab-wm-k8s
//!
//! The Kubernetes backend of codalab-wm (`cl-worker-manager kubernetes`): each worker is a
//! pod, as in upstream's `KubernetesWorkerManager`, with these differences:
//!
//! - every pod of this manager is counted: Pending pods are pending, Running pods active,
//!   terminating and finished pods are not capacity; an API error is an error, never "zero
//!   workers";
//! - the workers' credentials live in a Secret (created by the manager or given by name) and
//!   reach the container through `secretKeyRef`, so pod manifests hold no secret and can be
//!   logged (`--dry-run`);
//! - one worker per node through pod anti-affinity on the standard `kubernetes.io/hostname`;
//! - pods carry `app=cl-worker`, `app.kubernetes.io/managed-by=codalab-wm` and
//!   `codalab-wm/manager-id=<id>`, and a restarted manager finds them by these labels; their
//!   `codalab-wm/origin` (the workers' server and user) keeps another deployment's pods under
//!   the same labels out of the listing;
//! - `stop` deletes a pod (uid precondition), and finished pods beyond
//!   [`KubernetesConfig::keep_finished_pods`] are deleted, oldest first.
//!
//! Modules: [`config`] (options and validation), [`manifest`] (the Pod and Secret),
//! [`names`] (name and label syntax), [`pods`] (reading pods back), [`backend`] (the trait
//! implementation); the kube client setup and the error mapping are private.
//!
//! The transport tests run against an in-process fake Kubernetes API server (plain HTTP, no
//! auth), `crates/testkit/k8s` (`codalab-wm-fake-k8s`).
//!
//! The backend describes itself to the program ([`describe`]): [`KubernetesConfig`] is at once its flags,
//! its config table and its defaults, and [`KIND`] is its line in the binary's list of backends.
#![warn(missing_docs)]

pub mod backend;
mod client;
pub mod config;
pub mod describe;
mod error;
pub mod manifest;
pub mod names;
pub mod overrides;
pub mod pods;
pub mod scale_up;

pub use backend::KubernetesBackend;
pub use config::{BundleRuntime, KubernetesConfig};
pub use describe::KIND;
pub use manifest::WorkerTemplate;
pub use overrides::PodOverrides;
