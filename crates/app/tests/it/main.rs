//! The app's integration tests, one binary; each module says what it tests.

mod described_once;
mod metered_backend;
