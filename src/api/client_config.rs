use super::machine_service::MachineApi;
use super::proto::machine as m;
use tonic::Status;
pub fn generate(_api: &MachineApi, _r: m::GenerateClientConfigurationRequest) -> Result<m::GenerateClientConfigurationResponse, Status> {
    Err(Status::unimplemented("wip"))
}
