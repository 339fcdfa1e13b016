//! # codalab-wm-operator
//!
//! Kubernetes-native mode of codalab-wm (`cl-worker-manager operator`): the
//! `CodaLabWorkerPool` custom resource ([`crd`]), how it maps onto core's pool rules and the
//! Kubernetes backend's settings ([`spec`]), what a reconcile sees of a pool ([`observe`], from
//! its pods and what it remembers of their check-ins, [`memory`]), the status it writes ([`status`]), the reconcile itself ([`reconcile`], with the finalizer in `finalizer`),
//! leader election with a Lease ([`lease`]), the pools read one object at a time
//! ([`pools`]), its metrics ([`metrics`]), `/healthz` ([`health`], served with `/metrics` by
//! [`health_server`]) and the controller around them ([`controller`]).
//!
//! A crate of its own, beside `codalab-wm-k8s`: it needs kube's `derive` and `runtime`
//! features and `schemars`, which the plain `kubernetes` backend (and every other user of
//! that crate) does not; and it keeps the binary's crate thin.
#![warn(missing_docs)]

pub mod access;
mod clients;
pub mod command;
pub mod context;
pub mod controller;
pub mod crd;
mod fence;
mod finalizer;
pub mod health;
pub mod health_server;
pub mod lease;
pub mod memory;
pub mod metrics;
pub mod observe;
pub mod pools;
pub mod reconcile;
mod resources;
pub mod spec;
pub mod status;
