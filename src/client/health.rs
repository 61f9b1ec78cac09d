//! Reading a node's health from the Talos API's replies: the checks `talosctl health` and the
//! operator's wait for a node both make, written once so the two judge a node alike. Pure: it
//! reads replies already fetched and never calls a node itself.

use crate::proto::cosi::resource as wire;
use crate::proto::machine as m;

/// The spec of a `State.Get` reply (sent as YAML), for reading its fields by name. A reply
/// without a resource, or a spec that does not parse, reads as empty.
pub fn spec_of(reply: wire::GetResponse) -> serde_json::Value {
    let yaml = reply.resource.and_then(|r| r.spec).map(|s| s.yaml_spec).unwrap_or_default();
    serde_saphyr::from_str(&yaml).unwrap_or_default()
}

/// What is wrong with a MachineStatus spec's stage: anything but `running` (a missing stage
/// reads as `unknown`).
pub fn stage_problem(machine_status: &serde_json::Value) -> Option<String> {
    let stage = machine_status["stage"].as_str().unwrap_or("unknown");
    (stage != "running").then(|| format!("stage is {stage}, not running"))
}

/// One line per service that is neither running nor finished, or that runs but reports
/// itself unhealthy (a health not yet known is no problem).
pub fn service_problems(reply: m::ServiceListResponse) -> Vec<String> {
    let mut problems = Vec::new();
    for s in reply.messages.into_iter().flat_map(|m| m.services) {
        if s.state != "Running" && s.state != "Finished" {
            problems.push(format!("service {} is {}", s.id, s.state));
        } else if s.health.as_ref().is_some_and(|h| !h.unknown && !h.healthy) {
            problems.push(format!("service {} is unhealthy", s.id));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(id: &str, state: &str, health: Option<(bool, bool)>) -> m::ServiceInfo {
        m::ServiceInfo {
            id: id.into(),
            state: state.into(),
            health: health.map(|(unknown, healthy)| m::ServiceHealth { unknown, healthy, ..Default::default() }),
            ..Default::default()
        }
    }

    #[test]
    fn services_down_or_unhealthy_are_problems() {
        let reply = m::ServiceListResponse {
            messages: vec![m::ServiceList {
                services: vec![
                    service("apid", "Running", Some((false, true))),
                    service("trustd", "Running", Some((true, false))),
                    service("udevd", "Finished", None),
                    service("etcd", "Preparing", None),
                    service("kubelet", "Running", Some((false, false))),
                ],
                ..Default::default()
            }],
        };
        assert_eq!(service_problems(reply), ["service etcd is Preparing", "service kubelet is unhealthy"]);
    }

    #[test]
    fn only_a_running_stage_is_no_problem() {
        let reply = |yaml: &str| wire::GetResponse {
            resource: Some(wire::Resource {
                spec: Some(wire::Spec { yaml_spec: yaml.into(), ..Default::default() }),
                ..Default::default()
            }),
        };
        assert_eq!(stage_problem(&spec_of(reply("stage: running\n"))), None);
        assert_eq!(
            stage_problem(&spec_of(reply("stage: booting\n"))).as_deref(),
            Some("stage is booting, not running")
        );
        assert_eq!(stage_problem(&spec_of(reply(""))).as_deref(), Some("stage is unknown, not running"));
        assert_eq!(
            stage_problem(&spec_of(wire::GetResponse::default())).as_deref(),
            Some("stage is unknown, not running")
        );
    }
}
