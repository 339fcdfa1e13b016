//! The operator's integration tests, one binary (a module per subject; each says what it runs
//! against: the in-repo fake Kubernetes API, real `kubectl`, strict schemas, Prometheus's own
//! CRDs).

mod access;
mod checkins;
mod deploy;
mod invalid_pool;
mod kubectl;
mod lease;
mod monitoring;
mod reconcile;
mod watch;
