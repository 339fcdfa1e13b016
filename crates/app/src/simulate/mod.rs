//! What `cl-worker-manager simulate` prints and draws of a simulation's report: the text table
//! ([`text`]) and the SVG plot ([`svg`]); what `advise` prints ([`advice_text`]) and draws
//! ([`advice_svg`]); and both commands' long help ([`help`]). The
//! simulator itself (the engine, the workload, the report's numbers) is core's
//! ([`codalab_wm_core::simulate`]).

mod advice;
mod advice_svg;
pub mod help;
mod saved;
mod svg;
#[cfg(test)]
mod tests;
mod text;

pub use advice::{Names, advice_text};
pub use advice_svg::advice_svg;
pub use saved::{SAVED_ADVICE, SavedAdvice};
pub use svg::svg;
pub use text::text;
