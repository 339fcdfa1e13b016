//! The Kubernetes backend's integration tests, one binary (a module per subject; each says
//! what it runs against: the in-repo fake API server, strict schemas, real `kubectl`).

mod accounts;
mod down;
mod fake_api;
mod origins;
mod schema;
mod support;
