//! Block controllers: the node's devices and disks, what is on them, and the volumes made and
//! mounted from them — Talos's `controllers/block`, one controller per file. The decisions of
//! the volume manager are pure, each in its phase's file of [`volume_manager`]; the controllers
//! gather facts and carry them out.

pub mod devices;
pub mod discovery;
pub mod disk_wipe;
pub mod disks;
pub mod state_meta;
pub mod system_disk;
pub mod unlock;
pub mod volume_config;
pub mod volume_manager;

pub use devices::DevicesController;
pub use disks::DisksController;
pub use state_meta::StateEncryptionMetaController;
pub use system_disk::SystemDiskController;
pub use volume_config::VolumeConfigController;
pub mod mount;
pub mod mount_request;
pub mod mount_status;
pub use discovery::DiscoveryController;
pub use mount::MountController;
pub use mount_request::MountRequestController;
pub use mount_status::MountStatusController;
pub use volume_manager::VolumeManagerController;
