//! Test support: the fake API server and its rules, and the manifest combinations.

pub mod combos;
pub mod fake_apiserver;
pub mod fake_rules;
