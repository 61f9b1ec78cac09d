//! `MachineStatusController`: derives the machine's stage and readiness from what the other
//! runtime resources say.
//!
//! The decision is the pure function [`decide`]: booting until the kernel cmdline, the
//! version and the config status are known; then maintenance without a configuration and
//! running with one; rebooting or shutting down once a shutdown is requested. Ready means
//! the stage is settled and every service runs.

use crate::cosi::{Context, Controller, Input, Output, Phase, ReconcileError, Resource, ResourceSpec};
use crate::resources::runtime::{
    KernelCmdline, MachineConfigStatus, MachineStage, MachineStatus, MachineStatusStatus, NAMESPACE, Service,
    ServiceState, ShutdownAction, ShutdownRequest, UnmetCondition, Version,
};

/// What the stage is decided from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageInputs {
    pub cmdline_known: bool,
    pub version_known: bool,
    /// `None`: nobody has looked yet.
    pub config_present: Option<bool>,
    pub shutdown: Option<ShutdownAction>,
    /// (service name, state).
    pub services: Vec<(String, ServiceState)>,
}

pub fn decide(inputs: &StageInputs) -> MachineStatus {
    let mut unmet = Vec::new();
    let mut missing = |known: bool, name: &str, reason: &str| {
        if !known {
            unmet.push(UnmetCondition { name: name.to_string(), reason: reason.to_string() });
        }
    };
    missing(inputs.cmdline_known, "kernelCmdline", "kernel command line not read yet");
    missing(inputs.version_known, "version", "version not published yet");
    missing(inputs.config_present.is_some(), "machineConfig", "configuration source not checked yet");
    let stage = match (inputs.shutdown, inputs.config_present) {
        (Some(ShutdownAction::Reboot), _) => MachineStage::Rebooting,
        (Some(ShutdownAction::PowerOff), _) => MachineStage::ShuttingDown,
        _ if !unmet.is_empty() => MachineStage::Booting,
        (None, Some(true)) => MachineStage::Running,
        (None, _) => MachineStage::Maintenance,
    };
    for (name, state) in &inputs.services {
        if *state != ServiceState::Running {
            unmet.push(UnmetCondition { name: format!("service {name}"), reason: format!("service is {state}") });
        }
    }
    let settled = matches!(stage, MachineStage::Running | MachineStage::Maintenance);
    MachineStatus { stage, status: MachineStatusStatus { ready: settled && unmet.is_empty(), unmet_conditions: unmet } }
}

#[derive(Default)]
pub struct MachineStatusController;

fn alive<T: ResourceSpec>(r: Option<Resource<T>>) -> Option<Resource<T>> {
    r.filter(|r| r.metadata().phase == Phase::Running)
}

#[async_trait::async_trait]
impl Controller for MachineStatusController {
    fn name(&self) -> String {
        "MachineStatusController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak::<KernelCmdline>(NAMESPACE),
            Input::weak::<Version>(NAMESPACE),
            Input::weak::<MachineConfigStatus>(NAMESPACE),
            Input::weak::<ShutdownRequest>(NAMESPACE),
            Input::weak::<Service>(NAMESPACE),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<MachineStatus>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let inputs = StageInputs {
            cmdline_known: alive(ctx.get::<KernelCmdline>(NAMESPACE, KernelCmdline::ID)?).is_some(),
            version_known: alive(ctx.get::<Version>(NAMESPACE, Version::ID)?).is_some(),
            config_present: alive(ctx.get::<MachineConfigStatus>(NAMESPACE, MachineConfigStatus::ID)?)
                .map(|r| r.spec().present),
            shutdown: alive(ctx.get::<ShutdownRequest>(NAMESPACE, ShutdownRequest::ID)?).map(|r| r.spec().action),
            services: ctx
                .list::<Service>(NAMESPACE)?
                .into_iter()
                .filter(|r| r.metadata().phase == Phase::Running)
                .map(|r| (r.id().to_string(), r.spec().state))
                .collect(),
        };
        ctx.apply(NAMESPACE, MachineStatus::ID, decide(&inputs))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(config: Option<bool>) -> StageInputs {
        StageInputs { cmdline_known: true, version_known: true, config_present: config, ..Default::default() }
    }

    #[test]
    fn stage_table() {
        let running = |name: &str| (name.to_string(), ServiceState::Running);
        let cases: Vec<(&str, StageInputs, MachineStage, bool)> = vec![
            ("nothing known", StageInputs::default(), MachineStage::Booting, false),
            ("config not checked", known(None), MachineStage::Booting, false),
            ("no config", known(Some(false)), MachineStage::Maintenance, true),
            ("config", known(Some(true)), MachineStage::Running, true),
            (
                "cmdline missing",
                StageInputs { cmdline_known: false, ..known(Some(true)) },
                MachineStage::Booting,
                false,
            ),
            (
                "service waiting",
                StageInputs {
                    services: vec![running("apid"), ("trustd".into(), ServiceState::Waiting)],
                    ..known(Some(true))
                },
                MachineStage::Running,
                false,
            ),
            (
                "services up",
                StageInputs { services: vec![running("apid")], ..known(Some(false)) },
                MachineStage::Maintenance,
                true,
            ),
            (
                "poweroff wins",
                StageInputs { shutdown: Some(ShutdownAction::PowerOff), ..known(Some(true)) },
                MachineStage::ShuttingDown,
                false,
            ),
            (
                "reboot while booting",
                StageInputs { shutdown: Some(ShutdownAction::Reboot), ..Default::default() },
                MachineStage::Rebooting,
                false,
            ),
        ];
        for (name, inputs, stage, ready) in cases {
            let got = decide(&inputs);
            assert_eq!((got.stage, got.status.ready), (stage, ready), "case {name:?}: {got:?}");
        }
    }

    #[test]
    fn unmet_conditions_name_what_is_missing() {
        let got = decide(&StageInputs { services: vec![("apid".into(), ServiceState::Failed)], ..known(None) });
        let names: Vec<&str> = got.status.unmet_conditions.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, vec!["machineConfig", "service apid"]);
        assert_eq!(got.status.unmet_conditions[1].reason, "service is Failed");
    }
}
