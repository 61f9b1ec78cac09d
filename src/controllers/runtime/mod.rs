//! Runtime controllers: the machine's view of itself (kernel cmdline, version, stage), how
//! apid serves, and the services' state, one controller per file.

pub mod api_service_config;
pub mod kernel_cmdline;
pub mod machine_status;
pub mod service;
pub mod version;

pub use api_service_config::ApiServiceConfigController;
pub use kernel_cmdline::KernelCmdlineController;
pub use machine_status::MachineStatusController;
pub use service::ServiceController;
pub use version::VersionController;
