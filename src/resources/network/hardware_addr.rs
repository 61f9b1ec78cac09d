//! The node's first hardware address.

use serde::{Deserialize, Serialize};

use super::{HardwareAddress, NAMESPACE};
use crate::cosi::{ResourceDefinition, ResourceSpec, Sensitivity};

/// The node's first hardware address (id `first`): what identifies a machine before it has
/// a name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct HardwareAddr {
    /// The link it belongs to.
    pub name: String,
    pub hardware_addr: HardwareAddress,
}

impl HardwareAddr {
    pub const FIRST_ID: &'static str = "first";
}

impl ResourceSpec for HardwareAddr {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "HardwareAddresses.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::NonSensitive,
    };
}
