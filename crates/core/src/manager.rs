//! The manager loop (placeholder, filled in below).
#![allow(missing_docs)]
use crate::codalab::CodaLabClient;
use crate::{WorkerBackend, Result};
use std::sync::Arc;
#[derive(Debug, Default)]
pub struct ManagerConfig;
#[derive(Debug)]
pub struct Manager;
impl Manager {
    pub fn new(_c: ManagerConfig, _client: CodaLabClient, _b: Arc<dyn WorkerBackend>) -> Self { Manager }
    pub async fn tick(&mut self) -> Result<()> { Ok(()) }
}
