use super::machine_service::MachineApi;
use super::proto::machine as m;
use tonic::Status;
pub async fn apply(_api: &MachineApi, _r: m::ApplyConfigurationRequest) -> Result<m::ApplyConfigurationResponse, Status> {
    Err(Status::unimplemented("wip"))
}
