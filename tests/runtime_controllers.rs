//! The runtime controllers through the harness: cmdline and version published, the stage
//! following config presence and shutdown requests, services mirrored from a real
//! supervisor running real processes.

use std::path::PathBuf;
use std::time::Duration;

use talosbox::controllers::config::{MachineConfigController, StoredConfig};
use talosbox::controllers::runtime::{
    KernelCmdlineController, MachineStatusController, ServiceController, VersionController,
};
use talosbox::cosi::{Controller, Harness};
use talosbox::resources::runtime::{
    KernelCmdline, MachineConfigStatus, MachineStage, MachineStatus, NAMESPACE, Service, ServiceState, ShutdownAction,
    ShutdownRequest, Version,
};
use talosbox::services::{Program, ReapMode, Reaper, RestartPolicy, ServiceDefinition, Supervisor};
use tokio::sync::watch;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("talosbox-rtc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stage_is(want: MachineStage) -> impl Fn(Option<&talosbox::cosi::Resource<MachineStatus>>) -> bool {
    move |r| r.is_some_and(|r| r.spec().stage == want)
}

/// The runtime controllers over a configuration store that holds nothing yet; the sender stands
/// for the store (what an apply publishes).
fn machine_with_store(cmdline: PathBuf) -> (Vec<Box<dyn Controller>>, watch::Sender<StoredConfig>) {
    let (tx, rx) = watch::channel(StoredConfig::default());
    let controllers: Vec<Box<dyn Controller>> = vec![
        Box::new(KernelCmdlineController::from_path(cmdline)),
        Box::new(VersionController),
        Box::new(MachineConfigController::new(rx, "memory")),
        Box::new(MachineStatusController),
    ];
    (controllers, tx)
}

fn machine(cmdline: PathBuf) -> Vec<Box<dyn Controller>> {
    let (controllers, tx) = machine_with_store(cmdline);
    // The store lives as long as the test: a closed channel would read as a store that is gone.
    std::mem::forget(tx);
    controllers
}

#[tokio::test]
async fn cmdline_and_version_are_published() {
    let dir = scratch("cmdline");
    let cmdline = dir.join("cmdline");
    std::fs::write(&cmdline, "console=ttyS0,115200 talos.platform=metal\n").unwrap();
    let h = Harness::start(machine(cmdline)).unwrap();
    h.assert_spec(
        NAMESPACE,
        KernelCmdline::ID,
        &KernelCmdline { cmdline: "console=ttyS0,115200 talos.platform=metal".into() },
    )
    .await;
    let v = h.assert_eventually::<Version, _>(NAMESPACE, Version::ID, "version", |r| r.is_some()).await.unwrap();
    assert_eq!(v.spec().version, format!("v{}", talosbox::version::VERSION));
    assert_eq!(v.metadata().owner, "VersionController");
    h.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn real_proc_cmdline_is_read() {
    let h = Harness::start(vec![Box::new(KernelCmdlineController::from_path("/proc/cmdline"))]).unwrap();
    let want = std::fs::read_to_string("/proc/cmdline").unwrap().trim().to_string();
    h.assert_spec(NAMESPACE, KernelCmdline::ID, &KernelCmdline { cmdline: want }).await;
    h.stop().await;
}

#[tokio::test]
async fn no_config_source_means_maintenance() {
    let h = Harness::start(machine("/proc/cmdline".into())).unwrap();
    let status = h
        .assert_eventually(NAMESPACE, MachineStatus::ID, "maintenance", stage_is(MachineStage::Maintenance))
        .await
        .unwrap();
    assert!(status.spec().status.ready, "{:?}", status.spec());
    h.assert_spec(
        NAMESPACE,
        MachineConfigStatus::ID,
        &MachineConfigStatus { present: false, source: "none yet (memory)".into() },
    )
    .await;
    h.stop().await;
}

#[tokio::test]
async fn a_stored_config_moves_maintenance_to_running() {
    let (controllers, store) = machine_with_store("/proc/cmdline".into());
    let h = Harness::start(controllers).unwrap();
    h.assert_eventually(NAMESPACE, MachineStatus::ID, "maintenance", stage_is(MachineStage::Maintenance)).await;
    // A text that does not load is reported and never used: the machine stays in maintenance.
    store.send_replace(StoredConfig { active: Some("machine: {typo: 1}\n".into()), ..Default::default() });
    let status = h
        .assert_eventually::<MachineConfigStatus, _>(NAMESPACE, MachineConfigStatus::ID, "rejected", |r| {
            r.is_some_and(|r| r.spec().source.contains("does not load"))
        })
        .await
        .unwrap();
    assert!(!status.spec().present);
    assert!(status.spec().source.contains("machine.typo"), "{}", status.spec().source);
    let text = "version: v1alpha1\nmachine:\n  type: worker\n";
    store.send_replace(StoredConfig { active: Some(text.into()), persisted: Some(text.into()), ..Default::default() });
    h.assert_eventually(NAMESPACE, MachineStatus::ID, "running", stage_is(MachineStage::Running)).await;
    let active = h
        .assert_eventually::<talosbox::resources::config::MachineConfig, _>(
            talosbox::resources::config::NAMESPACE,
            talosbox::resources::config::MachineConfig::ACTIVE_ID,
            "active config",
            |r| r.is_some(),
        )
        .await
        .unwrap();
    assert_eq!(active.spec().yaml, text);
    h.stop().await;
}

#[tokio::test]
async fn a_missing_cmdline_keeps_the_machine_booting() {
    let h = Harness::start(machine("/nonexistent/cmdline".into())).unwrap();
    let status =
        h.assert_eventually(NAMESPACE, MachineStatus::ID, "booting", stage_is(MachineStage::Booting)).await.unwrap();
    let unmet: Vec<&str> = status.spec().status.unmet_conditions.iter().map(|c| c.name.as_str()).collect();
    assert!(unmet.contains(&"kernelCmdline"), "{unmet:?}");
    h.stop().await;
}

#[tokio::test]
async fn shutdown_request_sets_the_stage() {
    let h = Harness::start(machine("/proc/cmdline".into())).unwrap();
    h.assert_eventually(NAMESPACE, MachineStatus::ID, "maintenance", stage_is(MachineStage::Maintenance)).await;
    h.seed(NAMESPACE, ShutdownRequest::ID, ShutdownRequest { action: ShutdownAction::Reboot }).unwrap();
    h.assert_eventually(NAMESPACE, MachineStatus::ID, "rebooting", stage_is(MachineStage::Rebooting)).await;
    h.seed(NAMESPACE, ShutdownRequest::ID, ShutdownRequest { action: ShutdownAction::PowerOff }).unwrap();
    h.assert_eventually(NAMESPACE, MachineStatus::ID, "shutting down", stage_is(MachineStage::ShuttingDown)).await;
    h.stop().await;
}

#[tokio::test]
async fn services_are_mirrored_and_readiness_follows_them() {
    let reaper = Reaper::new(ReapMode::Own);
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(reaper.clone().run(cancel.clone()));
    let supervisor = Supervisor::new(reaper, "/bin/true".into(), Duration::from_secs(5), |_| {});
    let mut controllers = machine("/proc/cmdline".into());
    controllers.push(Box::new(ServiceController::new(supervisor.clone())));
    let h = Harness::start(controllers).unwrap();

    let service = ServiceDefinition {
        name: "sleeper".into(),
        program: Program::Exec { path: "/bin/sleep".into(), args: vec!["30".into()] },
        uid: None,
        gid: None,
        restart: RestartPolicy::default(),
        log_capacity: 1024,
    };
    supervisor.start(service).unwrap();
    let svc = h
        .assert_eventually::<Service, _>(NAMESPACE, "sleeper", "running", |r| r.is_some_and(|r| r.spec().running))
        .await
        .unwrap();
    assert_eq!(svc.spec().state, ServiceState::Running);
    assert!(svc.spec().pid.is_some());
    assert_eq!(svc.metadata().owner, "ServiceController");
    h.assert_eventually::<MachineStatus, _>(NAMESPACE, MachineStatus::ID, "ready with the service up", |r| {
        r.is_some_and(|r| r.spec().stage == MachineStage::Maintenance && r.spec().status.ready)
    })
    .await;

    supervisor.stop_all().await;
    h.assert_eventually::<Service, _>(NAMESPACE, "sleeper", "finished", |r| {
        r.is_some_and(|r| r.spec().state == ServiceState::Finished && !r.spec().running)
    })
    .await;
    h.assert_eventually::<MachineStatus, _>(NAMESPACE, MachineStatus::ID, "not ready with the service down", |r| {
        r.is_some_and(|r| !r.spec().status.ready)
    })
    .await;
    h.stop().await;
    cancel.cancel();
}
