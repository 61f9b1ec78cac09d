//! Runtime controllers: the machine's view of itself (kernel cmdline, version, config
//! presence, stage) and the services' state, one controller per file.

pub mod kernel_cmdline;
pub mod machine_config_file;
pub mod machine_status;
pub mod service;
pub mod version;

pub use kernel_cmdline::KernelCmdlineController;
pub use machine_config_file::MachineConfigFileController;
pub use machine_status::MachineStatusController;
pub use service::ServiceController;
pub use version::VersionController;
