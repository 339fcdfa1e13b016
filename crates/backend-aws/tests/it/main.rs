//! The AWS Batch backend's integration tests, one binary (a module per subject; each says what
//! it runs against: `aws-sdk-batch` against moto, the SDK's transport).

mod down;
mod moto;
mod moto_fallback;
mod support;
mod transport;
