//! The Compute Engine backend's integration tests, one binary (a module per subject; each says
//! what it runs against: the in-repo fake validated against Google's discovery document, the
//! request vectors Google's own client produced, a real Docker engine).

mod chaos;
mod fake_compute;
mod fallback;
mod insert_vectors;
mod metadata_firewall;
mod preemption;
mod startup_script;
