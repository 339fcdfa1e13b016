//! The tools around the configuration file, for people: `config check` ([`check`], every
//! problem of a file with its line), `config init` ([`template`], a commented file) and what
//! both read the file's possible keys from ([`schema`], asked of the settings types themselves).
//! The settings types, their layers and the one assembly into pools are core's
//! ([`codalab_wm_core::settings`], [`codalab_wm_core::layout`]): these tools only read them.

pub mod check;
pub mod schema;
pub mod template;
