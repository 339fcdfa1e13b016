//! The request and response bodies the backend sends and reads, named as the Compute Engine
//! discovery document names them (`Instance`, `Operation` …): only the fields used. Requests
//! serialize in the API's JSON (camelCase, int64 as strings, unset fields left out).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `Instance`, as inserted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceResource {
    /// `cl-worker-<unique>`.
    pub name: String,
    /// `zones/<zone>/machineTypes/<type>`.
    pub machine_type: String,
    /// Ownership labels.
    pub labels: BTreeMap<String, String>,
    /// The boot disk.
    pub disks: Vec<AttachedDisk>,
    /// One interface.
    pub network_interfaces: Vec<NetworkInterface>,
    /// GPUs, when asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub guest_accelerators: Vec<AcceleratorConfig>,
    /// The instance's service account.
    pub service_accounts: Vec<ServiceAccount>,
    /// Spot or standard.
    pub scheduling: Scheduling,
    /// The startup script.
    pub metadata: Metadata,
}

/// `AttachedDisk`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachedDisk {
    /// Always true (one disk).
    pub boot: bool,
    /// Deleted with the instance.
    pub auto_delete: bool,
    /// The new disk.
    pub initialize_params: AttachedDiskInitializeParams,
}

/// `AttachedDiskInitializeParams`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachedDiskInitializeParams {
    /// The image or image family.
    pub source_image: String,
    /// The size, in GB (int64: a string in JSON).
    pub disk_size_gb: String,
}

/// `NetworkInterface`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// The network, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// The subnetwork, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subnetwork: Option<String>,
    /// One NAT access config for an external IP, or none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub access_configs: Vec<AccessConfig>,
}

/// `AccessConfig`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccessConfig {
    /// `External NAT`.
    pub name: String,
    /// `ONE_TO_ONE_NAT`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// `AcceleratorConfig`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AcceleratorConfig {
    /// `zones/<zone>/acceleratorTypes/<type>`.
    pub accelerator_type: String,
    /// How many.
    pub accelerator_count: u32,
}

/// `ServiceAccount`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServiceAccount {
    /// The email, or `default`.
    pub email: String,
    /// The OAuth scopes.
    pub scopes: Vec<String>,
}

/// `Scheduling`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Scheduling {
    /// `SPOT` or `STANDARD`.
    pub provisioning_model: String,
    /// `DELETE` for Spot VMs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_termination_action: Option<String>,
    /// False for Spot VMs (required) and GPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub automatic_restart: Option<bool>,
    /// `TERMINATE` for Spot VMs and GPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_host_maintenance: Option<String>,
}

/// `Metadata`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Metadata {
    /// Key/value items.
    pub items: Vec<MetadataItem>,
}

/// An item of `Metadata.items`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MetadataItem {
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
}

/// `Instance`, as listed: what the backend reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Instance {
    /// The name.
    pub name: String,
    /// PROVISIONING, STAGING, RUNNING, STOPPING, TERMINATED …
    pub status: String,
    /// The zone's URL.
    pub zone: String,
    /// The labels.
    pub labels: BTreeMap<String, String>,
    /// RFC 3339.
    pub creation_timestamp: Option<String>,
    /// How it is scheduled.
    pub scheduling: Option<ListedScheduling>,
}

impl Instance {
    /// The zone's name (the last segment of its URL).
    pub fn zone_name(&self) -> &str {
        self.zone.rsplit('/').next().unwrap_or("")
    }

    /// Whether it is a Spot (or preemptible) VM.
    pub fn is_spot(&self) -> bool {
        self.scheduling.as_ref().is_some_and(|s| {
            s.provisioning_model.as_deref() == Some("SPOT") || s.preemptible == Some(true)
        })
    }
}

/// `Scheduling`, as listed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListedScheduling {
    /// `SPOT`, `STANDARD` …
    pub provisioning_model: Option<String>,
    /// The older preemptible VMs.
    pub preemptible: Option<bool>,
}

/// `InstanceAggregatedList`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct InstanceAggregatedList {
    /// `zones/<zone>` → its instances.
    pub items: BTreeMap<String, InstancesScopedList>,
    /// The next page, if any.
    pub next_page_token: Option<String>,
}

/// `InstancesScopedList`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct InstancesScopedList {
    /// The zone's instances on this page.
    pub instances: Vec<Instance>,
}

/// `Operation`: what the backend reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Operation {
    /// Its name.
    pub name: String,
    /// The zone's URL (zonal operations).
    pub zone: Option<String>,
    /// PENDING, RUNNING or DONE.
    pub status: String,
    /// `insert`, `delete`, `compute.instances.preempted` …
    pub operation_type: String,
    /// The instance's URL.
    pub target_link: String,
    /// Set when it failed.
    pub error: Option<OperationError>,
}

impl Operation {
    /// The zone's name.
    pub fn zone_name(&self) -> &str {
        self.zone
            .as_deref()
            .and_then(|z| z.rsplit('/').next())
            .unwrap_or("")
    }

    /// The first error code (`ZONE_RESOURCE_POOL_EXHAUSTED` …) and message, if it failed.
    pub fn first_error(&self) -> Option<(&str, &str)> {
        let error = self.error.as_ref()?.errors.first()?;
        Some((error.code.as_str(), error.message.as_str()))
    }
}

/// `Operation.error`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct OperationError {
    /// The errors.
    pub errors: Vec<OperationErrorItem>,
}

/// One of `Operation.error.errors`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct OperationErrorItem {
    /// `ZONE_RESOURCE_POOL_EXHAUSTED`, `QUOTA_EXCEEDED` …
    pub code: String,
    /// What it says.
    pub message: String,
}

/// `OperationAggregatedList`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OperationAggregatedList {
    /// `zones/<zone>` (or `global`, `regions/…`) → its operations.
    pub items: BTreeMap<String, OperationsScopedList>,
    /// The next page, if any.
    pub next_page_token: Option<String>,
}

/// `OperationsScopedList`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct OperationsScopedList {
    /// The scope's operations on this page.
    pub operations: Vec<Operation>,
}

/// The service's error body: `{"error": {"code", "message", "errors": [{"reason"}]}}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The `error` of an error body.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ErrorDetail {
    /// The HTTP status.
    pub code: u16,
    /// What it says.
    pub message: String,
    /// The reasons (`rateLimitExceeded`, `notFound` …).
    pub errors: Vec<ErrorReason>,
}

/// One of `error.errors`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ErrorReason {
    /// `rateLimitExceeded`, `notFound`, `alreadyExists` …
    pub reason: String,
}
