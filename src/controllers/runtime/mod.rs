//! Runtime controllers: the machine's view of itself (kernel cmdline, version, stage), how
//! apid serves, the services' state and the META keys, one controller per file.

pub mod api_service_config;
pub mod kernel_cmdline;
pub mod machine_status;
pub mod meta_load;
pub mod service;
pub mod version;

pub use api_service_config::ApiServiceConfigController;
pub use kernel_cmdline::KernelCmdlineController;
pub use machine_status::MachineStatusController;
pub use meta_load::MetaLoadController;
pub use service::ServiceController;
pub use version::VersionController;
