//! Test support: the manifest combinations (the fake API server is `codalab_wm_k8s::fake`).

pub mod combos;
