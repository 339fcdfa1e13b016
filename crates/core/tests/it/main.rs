//! Core's integration tests, one binary (a binary per file relinked the library and its
//! dependencies seventeen times): the manager against the in-process fake CodaLab server and
//! in-memory backends, the CodaLab client against real and hostile wire samples, and the
//! property tests. Each module says what it tests and against what. `worker_env.rs` stays a
//! binary of its own: it sets variables in its process environment.

mod budget_restarts;
mod capacity_restart;
mod checkin_manager;
mod codalab_transport;
mod engine_differential;
mod events_budgets;
mod fallback_manager;
mod fixtures;
mod fuzz_props;
mod hedge_restarts;
mod hostile;
mod hostile_server;
mod manager;
mod never_destroys;
mod pools_manager;
mod pools_props;
mod reconfigure;
mod reference;
mod relogin;
mod staged_misfits;
mod staged_search;
mod suspension;
mod tls_ca_cert;
