//! # codalab-wm-app
//!
//! What `cl-worker-manager` shows people, and the tools around its configuration. Nothing here
//! is needed to embed the manager loop: that is `codalab-wm-core` (policy, pools, the CodaLab
//! client, the backend trait, the loop with its status snapshot and events), which this crate
//! only reads.
//!
//! - [`dashboard`]: the page of `--listen`'s `/`, HTML rendered from the status snapshots, and
//!   the bounded history of them it charts;
//! - [`present`]: the one presenter of a status snapshot: its sections, headings, rows, cells
//!   and sentences, every word written once, which the page and the view lay out;
//! - [`view`]: the terminal rendering of `/status` (`cl-worker-manager status`);
//! - [`config`]: `config check` (with the file's line numbers), `config init`'s template, and
//!   the schema both read from the settings types;
//! - [`metrics`]: the Prometheus registry, fed from the status snapshots, and a metering
//!   [`WorkerBackend`](codalab_wm_core::WorkerBackend) wrapper (as OpenDAL's Prometheus layer
//!   wraps its core trait); [`metrics::health`], the `/healthz` and `/livez` rules;
//! - [`simulate`]: the simulator's text table and SVG plot;
//! - [`chart`]: what the page's charts and the simulator's plot share (one y scale, one legend,
//!   one escape);
//! - [`listen`]: what `--listen`'s server promises: the bounds of its connections and the
//!   `Host` names it answers.
#![warn(missing_docs)]

pub mod chart;
pub mod config;
pub mod dashboard;
pub mod listen;
pub mod logging;
pub mod metrics;
pub mod present;
pub mod simulate;
pub mod view;
