//! MetaWrite and MetaDelete: set and remove keys of the META partition.
//!
//! The partition is the one the `META` volume's status names, once that volume is ready; a
//! node without one (container mode, a disk without META) answers FailedPrecondition, as Talos
//! does outside the modes that have META. Talos's rule for keys is only that they fit a byte:
//! any of them may be written, its own (the network config, the UUID override) included,
//! which is what `talosctl meta` is for. Tag 0 is refused (it marks the end of the keys and
//! would hide every key after it). Every change goes through the node's [`MetaStore`]: one at
//! a time, a second waiting for the first. The keys shown as `MetaKey` resources follow from
//! the controller that reads the partition after each write; this module never writes state.

use std::path::PathBuf;

use tonic::Status;

use super::machine_service::MachineApi;
use crate::block::meta::{MetaError, MetaStore};
use crate::proto::machine as m;
use crate::resources::block::{NAMESPACE, VolumePhase, VolumeStatus};

/// The id of the META volume's status.
const META_VOLUME: &str = "META";

/// The META key a request names.
fn tag(key: u32) -> Result<u8, Status> {
    match u8::try_from(key) {
        Ok(0) => Err(Status::invalid_argument(MetaError::EndTag.to_string())),
        Ok(tag) => Ok(tag),
        Err(_) => Err(Status::invalid_argument(format!("key must be a uint8: META keys are 1 to 255, not {key}"))),
    }
}

/// Where the META partition is, from its volume's status.
fn partition(api: &MachineApi) -> Result<PathBuf, Status> {
    let status = api
        .state
        .find::<VolumeStatus>(NAMESPACE, META_VOLUME)
        .map_err(|e| Status::internal(format!("reading the META volume's status: {e}")))?
        .ok_or_else(|| {
            Status::failed_precondition(
                "this node has no META partition: there is no META volume (a node run as a process has none)",
            )
        })?;
    let spec = status.spec();
    if spec.phase != VolumePhase::Ready {
        let why = if spec.error_message.is_empty() { String::new() } else { format!(": {}", spec.error_message) };
        return Err(Status::failed_precondition(format!("the META volume is {}, not ready{why}", spec.phase)));
    }
    // Talos opens the mount location; for a raw partition that is its device.
    let device = if spec.mount_location.is_empty() { &spec.location } else { &spec.mount_location };
    if device.is_empty() {
        return Err(Status::failed_precondition("the META volume is ready but names no device"));
    }
    Ok(PathBuf::from(device))
}

fn status(e: MetaError) -> Status {
    let message = e.to_string();
    match e.inner() {
        MetaError::TooLarge { .. } => Status::resource_exhausted(message),
        MetaError::NotFound { .. } => Status::not_found(message),
        MetaError::EndTag => Status::invalid_argument(message),
        MetaError::Damaged { .. } => Status::data_loss(message),
        _ => Status::internal(message),
    }
}

fn store(api: &MachineApi) -> std::sync::Arc<MetaStore> {
    api.node.meta()
}

pub async fn write(api: &MachineApi, r: m::MetaWriteRequest) -> Result<m::MetaWriteResponse, Status> {
    let tag = tag(r.key)?;
    let device = partition(api)?;
    let value = r.value;
    store(api).update(device, move |meta| meta.set(tag, value)).await.map_err(status)?;
    Ok(m::MetaWriteResponse { messages: vec![m::MetaWrite { metadata: None }] })
}

pub async fn delete(api: &MachineApi, r: m::MetaDeleteRequest) -> Result<m::MetaDeleteResponse, Status> {
    let tag = tag(r.key)?;
    let device = partition(api)?;
    let change = move |meta: &mut crate::block::meta::Meta| {
        if meta.delete(tag) { Ok(()) } else { Err(MetaError::NotFound { tag }) }
    };
    store(api).update(device, change).await.map_err(status)?;
    Ok(m::MetaDeleteResponse { messages: vec![m::MetaDelete { metadata: None }] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_one_to_255() {
        assert_eq!(tag(10).unwrap(), 10);
        assert_eq!(tag(255).unwrap(), 255);
        for bad in [0, 256, u32::MAX] {
            assert_eq!(tag(bad).unwrap_err().code(), tonic::Code::InvalidArgument, "{bad}");
        }
        assert!(tag(256).unwrap_err().message().contains("key must be a uint8"));
    }

    #[test]
    fn errors_have_the_codes_talos_gives() {
        let code = |e| status(e).code();
        assert_eq!(code(MetaError::TooLarge { tag: 1, size: 9, free: 0 }), tonic::Code::ResourceExhausted);
        assert_eq!(code(MetaError::NotFound { tag: 1 }), tonic::Code::NotFound);
        let wrapped = MetaError::At {
            path: "/dev/vda4".into(),
            source: Box::new(MetaError::Damaged {
                first: crate::block::meta::CopyFault::Blank,
                second: crate::block::meta::CopyFault::Blank,
            }),
        };
        let s = status(wrapped);
        assert_eq!(s.code(), tonic::Code::DataLoss);
        assert!(s.message().starts_with("/dev/vda4: META is damaged: copy 1 (at byte 0): blank"), "{}", s.message());
    }
}
