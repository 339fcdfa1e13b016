//! What `cl-worker-manager simulate` prints and draws of a simulation's report: the text table
//! ([`text`]) and the SVG plot ([`svg`]). The
//! simulator itself (the engine, the workload, the report's numbers) is core's
//! ([`codalab_wm_core::simulate`]).

mod svg;
#[cfg(test)]
mod tests;
mod text;

pub use svg::svg;
pub use text::text;
