//! The Azure Batch fake's integration tests, one binary: the backend against the in-process
//! fake Batch service.

mod cleanup;
mod fake_service;
