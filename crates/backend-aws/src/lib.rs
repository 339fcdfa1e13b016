//! AWS Batch backend of codalab-wm (not implemented yet).
#![warn(missing_docs)]
