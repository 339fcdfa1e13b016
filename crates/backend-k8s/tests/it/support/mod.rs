//! Test support: the manifest combinations (the fake API server is `codalab_wm_fake_k8s`).

pub mod combos;
