//! The TalosMachine reconciler: moves a machine through its states by acting on its node.
//!
//! ```text
//! (none) --probe: mTLS Version answers--> Available (StatusRestored)
//! (none) --probe fails--> Pending --maintenance apply (insecure)--> Installing
//! (none) + import --> Available (imported)
//! Drifted --node version == spec.version--> re-apply --> Installing
//! Drifted --node version differs--> Upgrade RPC with spec.image --> Upgrading
//! Available --spec changed (generation, config hash, version)--> as Drifted
//! Installing | Upgrading --healthy: stage running, spec.version, empty dry-run diff, services up--> Available
//! any --its credentials' Secret is gone--> Orphaned (halted until the spec changes)
//! ```
//!
//! Applying consumes the drift: the move to Installing or Upgrading clears Drifted, so a
//! handled drift is not applied twice, and a node still diverged at the next poll is simply
//! marked again. A healthy, unchanged Available machine causes no write at all. Every status
//! write is conditional on the resourceVersion read at the start; a conflict means someone
//! else moved the machine, and the reconcile runs again on the fresh copy.
//!
//! `dryrun` machines get events saying what would be done and nothing else; `disable`
//! machines are left alone. The decision of what to do is [`plan`], pure and table-tested;
//! the rest is its effects.

use std::time::Duration;

use super::engine::Context;
use super::model::{
    DeletionPolicy, FINALIZER, MachineEvent, MachineKey, MachineState, MachineStatus, ReconcileMode, TalosMachine,
    now_rfc3339,
};
use super::node::{NodeError, NodeTarget};
use super::render::{DesiredConfig, RenderError};
use super::store::StoreError;
use super::watcher::Watcher;

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Render(#[from] RenderError),
    #[error("{machine}: {0}", machine = .1)]
    Node(#[source] NodeError, MachineKey),
    #[error("{machine}: {detail}")]
    Refused { machine: MachineKey, detail: String },
}

/// When to look at a machine again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    Never,
    Now,
    After(Duration),
}

/// What a reconcile does, from the machine alone (and its desired config's hash).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Leave it: disabled, Orphaned, or Available and unchanged.
    Nothing,
    /// Report what would be done, change nothing.
    DryRun,
    /// Carry out the deletion policy and let the machine go.
    Finalize,
    /// Put the operator's finalizer on, so a deletion waits for the policy.
    AddFinalizer,
    /// Adopt the node as it is.
    Import,
    /// No state (new, or its status lost): find out whether the node is already configured.
    Probe,
    /// Pending: configure the node in maintenance mode.
    InstallMaintenance,
    /// Installing or Upgrading: Available once healthy.
    CheckHealth,
    /// Drifted, or Available with a changed spec: upgrade or re-apply.
    Converge,
}

/// The pure decision. `desired_hash` is the rendered config's hash when it could be rendered.
pub fn plan(m: &TalosMachine, mode: ReconcileMode, desired_hash: Option<&str>) -> Plan {
    let has_finalizer = m.metadata.finalizers.iter().any(|f| f == FINALIZER);
    if m.deleting() {
        return if has_finalizer { Plan::Finalize } else { Plan::Nothing };
    }
    match mode {
        ReconcileMode::Disable => return Plan::Nothing,
        ReconcileMode::DryRun => return Plan::DryRun,
        ReconcileMode::Reconcile | ReconcileMode::Import => {}
    }
    if !has_finalizer {
        return Plan::AddFinalizer;
    }
    let spec_changed = m.status.observed_generation != m.metadata.generation;
    match m.state() {
        None if mode == ReconcileMode::Import => Plan::Import,
        None => Plan::Probe,
        Some(MachineState::Pending) => Plan::InstallMaintenance,
        Some(MachineState::Installing | MachineState::Upgrading) => Plan::CheckHealth,
        Some(MachineState::Drifted) => Plan::Converge,
        Some(MachineState::Orphaned) if spec_changed => Plan::Probe,
        Some(MachineState::Orphaned) => Plan::Nothing,
        Some(MachineState::Available) => {
            let config_changed = desired_hash.is_some_and(|h| h != m.status.config_hash);
            if spec_changed || config_changed || m.status.observed_version != m.spec.version {
                Plan::Converge
            } else {
                Plan::Nothing
            }
        }
    }
}

fn event(type_: &str, reason: &str, note: impl Into<String>) -> MachineEvent {
    MachineEvent {
        type_: type_.into(),
        reason: reason.into(),
        action: reason.into(),
        note: note.into(),
        time: now_rfc3339(),
    }
}

async fn emit(ctx: &Context, key: &MachineKey, e: MachineEvent) {
    if let Err(err) = ctx.store.record_event(key, &e).await {
        tracing::warn!(machine = %key, "recording event {}: {err}", e.reason);
    }
}

/// Writes `status` over `m` conditionally; a conflict asks for a fresh reconcile.
async fn write(ctx: &Context, m: &TalosMachine, status: MachineStatus) -> Result<Option<TalosMachine>, ReconcileError> {
    match ctx.store.update_status(&m.key(), &m.metadata.resource_version, &status).await {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.is_conflict() => {
            tracing::debug!(machine = %m.key(), "status write lost to a newer change; reconciling again");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

fn with_state(m: &TalosMachine, state: MachineState) -> MachineStatus {
    let mut s = m.status.clone();
    s.state = Some(state);
    s
}

/// Reconciles one machine.
pub async fn reconcile(
    ctx: &Context,
    watcher: &std::sync::Arc<Watcher>,
    key: &MachineKey,
) -> Result<Requeue, ReconcileError> {
    let Some(m) = ctx.store.get(key).await? else { return Ok(Requeue::Never) };
    let (mode, mode_error) = m.reconcile_mode();
    if let Some(e) = mode_error {
        tracing::warn!(machine = %key, "{e}; leaving the machine alone");
    }
    let desired = DesiredConfig::resolve(ctx.store.as_ref(), &m).await;
    let credentials = ctx.credentials.resolve(ctx.store.as_ref(), &m).await;
    let step = plan(&m, mode, desired.as_ref().ok().map(|d| d.hash.as_str()));
    tracing::debug!(machine = %key, state = ?m.state(), ?mode, ?step, "reconcile");

    // A machine whose credentials' Secret is gone has lost its fleet: Orphaned, halted.
    if let Err(e) = &credentials
        && e.orphans()
        && !matches!(step, Plan::Nothing | Plan::Finalize | Plan::DryRun | Plan::AddFinalizer)
    {
        let mut status = with_state(&m, MachineState::Orphaned);
        status.observed_generation = m.metadata.generation;
        status.set_condition("Ready", false, "Orphaned", &e.to_string(), &now_rfc3339());
        if write(ctx, &m, status).await?.is_some() {
            emit(ctx, key, event("Warning", "Orphaned", e.to_string())).await;
            return Ok(Requeue::Never);
        }
        return Ok(Requeue::Now);
    }

    match step {
        Plan::Nothing => Ok(Requeue::Never),
        Plan::AddFinalizer => ctx
            .store
            .add_finalizer(key, &m.metadata.resource_version)
            .await
            .map(|_| Requeue::Now)
            .or_else(|e| if e.is_conflict() { Ok(Requeue::Now) } else { Err(e.into()) }),
        Plan::Finalize => finalize(ctx, &m, mode, credentials.ok()).await,
        Plan::Import => {
            let desired = desired?;
            let mut status = with_state(&m, MachineState::Available);
            status.imported = true;
            status.config_hash = desired.hash;
            status.observed_version = m.spec.version.clone();
            status.observed_generation = m.metadata.generation;
            status.set_condition("Ready", true, "Imported", "adopted as found", &now_rfc3339());
            if let Some(m) = write(ctx, &m, status).await? {
                emit(ctx, key, event("Normal", "Imported", "Machine adopted; its configuration is taken as desired"))
                    .await;
                watcher.ready_hint(&m);
                return Ok(Requeue::Never);
            }
            Ok(Requeue::Now)
        }
        Plan::Probe | Plan::InstallMaintenance => {
            let desired = desired?;
            // Probe first in both: a node that answers over mutual TLS is configured already,
            // and must not be sent a maintenance apply.
            if let Ok(credentials) = &credentials {
                let target = NodeTarget { endpoint: m.spec.endpoint.clone(), credentials: credentials.clone() };
                let version = tokio::time::timeout(ctx.config.probe_timeout, ctx.nodes.version(&target)).await;
                if let Ok(Ok(version)) = version {
                    let diff = ctx
                        .nodes
                        .dry_run(&target, &desired.text)
                        .await
                        .map_err(|e| ReconcileError::Node(e, key.clone()))?;
                    let mut status = with_state(&m, MachineState::Available);
                    status.observed_version = version.clone();
                    // An unknown hash makes the next reconcile converge the node.
                    status.config_hash = if diff.is_empty() { desired.hash.clone() } else { String::new() };
                    if m.state() == Some(MachineState::Orphaned) {
                        status.observed_generation = m.metadata.generation;
                    }
                    if let Some(m) = write(ctx, &m, status).await? {
                        emit(
                            ctx,
                            key,
                            event("Normal", "StatusRestored", format!("Node answers with {version}: Available")),
                        )
                        .await;
                        watcher.ready_hint(&m);
                    }
                    return Ok(Requeue::Now);
                }
            }
            if step == Plan::Probe {
                let mut status = with_state(&m, MachineState::Pending);
                status.observed_generation = m.metadata.generation;
                write(ctx, &m, status).await?;
                return Ok(Requeue::Now);
            }
            ctx.nodes
                .apply_maintenance(&m.spec.endpoint, &desired.text)
                .await
                .map_err(|e| ReconcileError::Node(e, key.clone()))?;
            let mut status = with_state(&m, MachineState::Installing);
            status.config_hash = desired.hash.clone();
            status.observed_generation = m.metadata.generation;
            if write(ctx, &m, status).await?.is_some() {
                emit(ctx, key, event("Normal", "ConfigApplied", "Configuration applied in maintenance mode")).await;
            }
            Ok(Requeue::After(ctx.config.health_recheck))
        }
        Plan::Converge => {
            let desired = desired?;
            let target = NodeTarget { endpoint: m.spec.endpoint.clone(), credentials: credentials? };
            let version = ctx.nodes.version(&target).await.map_err(|e| ReconcileError::Node(e, key.clone()))?;
            if version != m.spec.version {
                let Some(image) = m.spec.image.clone().filter(|i| !i.trim().is_empty()) else {
                    let detail = format!(
                        "node reports {version}, spec.version is {}, and spec.image is empty: nothing to upgrade with",
                        m.spec.version
                    );
                    emit(ctx, key, event("Warning", "UpgradeImpossible", detail.clone())).await;
                    return Err(ReconcileError::Refused { machine: key.clone(), detail });
                };
                ctx.nodes.upgrade(&target, &image).await.map_err(|e| ReconcileError::Node(e, key.clone()))?;
                let mut status = with_state(&m, MachineState::Upgrading);
                status.observed_generation = m.metadata.generation;
                status.set_condition(
                    "Drifted",
                    false,
                    "Upgrading",
                    &format!("upgrading {version} to {}", m.spec.version),
                    &now_rfc3339(),
                );
                if write(ctx, &m, status).await?.is_some() {
                    emit(
                        ctx,
                        key,
                        event(
                            "Normal",
                            "UpgradeStarted",
                            format!("Upgrading from {version} to {} with {image}", m.spec.version),
                        ),
                    )
                    .await;
                }
                return Ok(Requeue::After(ctx.config.health_recheck));
            }
            ctx.nodes.apply(&target, &desired.text).await.map_err(|e| ReconcileError::Node(e, key.clone()))?;
            let mut status = with_state(&m, MachineState::Installing);
            status.config_hash = desired.hash.clone();
            status.observed_generation = m.metadata.generation;
            status.set_condition("Drifted", false, "ConfigApplied", "desired configuration re-applied", &now_rfc3339());
            if write(ctx, &m, status).await?.is_some() {
                emit(ctx, key, event("Normal", "ConfigApplied", "Desired configuration applied")).await;
            }
            Ok(Requeue::After(ctx.config.health_recheck))
        }
        Plan::CheckHealth => {
            let desired = desired?;
            let target = NodeTarget { endpoint: m.spec.endpoint.clone(), credentials: credentials? };
            let mut problems = Vec::new();
            match healthy(ctx, &target, &m, &desired).await {
                Ok(p) => problems = p,
                Err(e) => problems.push(e.to_string()),
            }
            if !problems.is_empty() {
                tracing::info!(machine = %key, state = ?m.state(), "not healthy yet: {}", problems.join("; "));
                // An upgraded node on the right version whose config still differs gets it.
                if m.state() == Some(MachineState::Upgrading)
                    && problems.iter().all(|p| p.starts_with("config differs"))
                {
                    ctx.nodes.apply(&target, &desired.text).await.map_err(|e| ReconcileError::Node(e, key.clone()))?;
                    let mut status = with_state(&m, MachineState::Installing);
                    status.config_hash = desired.hash.clone();
                    write(ctx, &m, status).await?;
                }
                return Ok(Requeue::After(ctx.config.health_recheck));
            }
            let mut status = with_state(&m, MachineState::Available);
            status.observed_version = m.spec.version.clone();
            status.config_hash = desired.hash.clone();
            status.observed_generation = m.metadata.generation;
            status.set_condition(
                "Ready",
                true,
                "Healthy",
                "stage running, desired version and config, services up",
                &now_rfc3339(),
            );
            if let Some(m) = write(ctx, &m, status).await? {
                emit(ctx, key, event("Normal", "Available", format!("Node is healthy on {}", m.spec.version))).await;
                watcher.ready_hint(&m);
                return Ok(Requeue::Never);
            }
            Ok(Requeue::Now)
        }
        Plan::DryRun => {
            dry_run(ctx, &m, desired?, credentials.ok()).await;
            Ok(Requeue::After(ctx.config.dryrun_requeue))
        }
    }
}

/// What keeps the node from being healthy: version, config diff, stage and services.
async fn healthy(
    ctx: &Context,
    target: &NodeTarget,
    m: &TalosMachine,
    desired: &DesiredConfig,
) -> Result<Vec<String>, NodeError> {
    let mut problems = Vec::new();
    let version = ctx.nodes.version(target).await?;
    if version != m.spec.version {
        problems.push(format!("version is {version}, not {}", m.spec.version));
    }
    let diff = ctx.nodes.dry_run(target, &desired.text).await?;
    if !diff.is_empty() {
        problems.push(format!("config differs from the desired one:\n{diff}"));
    }
    problems.extend(ctx.nodes.unhealthy(target).await?);
    Ok(problems)
}

async fn finalize(
    ctx: &Context,
    m: &TalosMachine,
    mode: ReconcileMode,
    credentials: Option<super::render::NodeCredentials>,
) -> Result<Requeue, ReconcileError> {
    let key = m.key();
    let reset = m.spec.deletion_policy == DeletionPolicy::Reset && m.state() != Some(MachineState::Orphaned);
    if reset {
        match (mode, credentials) {
            (ReconcileMode::Reconcile | ReconcileMode::Import, Some(credentials)) => {
                let target = NodeTarget { endpoint: m.spec.endpoint.clone(), credentials };
                ctx.nodes.reset(&target).await.map_err(|e| ReconcileError::Node(e, key.clone()))?;
                emit(ctx, &key, event("Normal", "Reset", "Node reset (deletionPolicy: reset)")).await;
            }
            (ReconcileMode::Reconcile | ReconcileMode::Import, None) => {
                return Err(ReconcileError::Refused {
                    machine: key,
                    detail: "deletionPolicy is reset but the node's credentials cannot be read".into(),
                });
            }
            (ReconcileMode::DryRun, _) => emit(ctx, &key, event("Normal", "DryRun", "Would reset the node")).await,
            (ReconcileMode::Disable, _) => {}
        }
    }
    match ctx.store.remove_finalizer(&key, &m.metadata.resource_version).await {
        Ok(()) => Ok(Requeue::Never),
        Err(e) if e.is_conflict() => Ok(Requeue::Now),
        Err(StoreError::NotFound { .. }) => Ok(Requeue::Never),
        Err(e) => Err(e.into()),
    }
}

/// Reports, as a DryRun event, what a reconcile would do; writes nothing.
async fn dry_run(
    ctx: &Context,
    m: &TalosMachine,
    desired: DesiredConfig,
    credentials: Option<super::render::NodeCredentials>,
) {
    let key = m.key();
    let note = match credentials {
        Some(credentials) => {
            let target = NodeTarget { endpoint: m.spec.endpoint.clone(), credentials };
            match (ctx.nodes.version(&target).await, ctx.nodes.dry_run(&target, &desired.text).await) {
                (Ok(v), Ok(diff)) => {
                    let mut would = Vec::new();
                    if v != m.spec.version {
                        would.push(format!("Would upgrade from {v} to {}", m.spec.version));
                    }
                    if !diff.is_empty() {
                        would.push(format!("Would apply the desired configuration:\n{diff}"));
                    }
                    would.join("\n")
                }
                _ => "Would apply the desired configuration in maintenance mode (the node does not answer over mutual TLS)".into(),
            }
        }
        None => String::new(),
    };
    if !note.is_empty() {
        tracing::info!(machine = %key, "dry run: {note}");
        let note = super::model::truncate_note(&note, super::model::EVENT_NOTE_LIMIT, "\n… (truncated)");
        emit(ctx, &key, event("Normal", "DryRun", note)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::testing::machine;

    #[test]
    fn the_plan_follows_the_state_machine() {
        use MachineState::*;
        let h = Some("h1");
        type Case = (Option<MachineState>, ReconcileMode, bool, bool, i64, &'static str, &'static str, Plan);
        let cases: &[Case] = &[
            // state, mode, finalizer, deleting, observedGeneration, observedVersion, hash, plan
            (None, ReconcileMode::Reconcile, false, false, 0, "", "", Plan::AddFinalizer),
            (None, ReconcileMode::Reconcile, true, false, 0, "", "", Plan::Probe),
            (None, ReconcileMode::Import, true, false, 0, "", "", Plan::Import),
            (Some(Pending), ReconcileMode::Reconcile, true, false, 1, "", "", Plan::InstallMaintenance),
            (Some(Installing), ReconcileMode::Reconcile, true, false, 1, "", "h1", Plan::CheckHealth),
            (Some(Upgrading), ReconcileMode::Reconcile, true, false, 1, "", "h1", Plan::CheckHealth),
            (Some(Drifted), ReconcileMode::Reconcile, true, false, 1, "v1", "h1", Plan::Converge),
            (Some(Available), ReconcileMode::Reconcile, true, false, 1, "v1", "h1", Plan::Nothing),
            (Some(Available), ReconcileMode::Reconcile, true, false, 0, "v1", "h1", Plan::Converge),
            (Some(Available), ReconcileMode::Reconcile, true, false, 1, "v0", "h1", Plan::Converge),
            (Some(Available), ReconcileMode::Reconcile, true, false, 1, "v1", "h0", Plan::Converge),
            (Some(Orphaned), ReconcileMode::Reconcile, true, false, 1, "v1", "h1", Plan::Nothing),
            (Some(Orphaned), ReconcileMode::Reconcile, true, false, 0, "v1", "h1", Plan::Probe),
            (Some(Drifted), ReconcileMode::Disable, true, false, 1, "v1", "h1", Plan::Nothing),
            (Some(Drifted), ReconcileMode::DryRun, false, false, 1, "v1", "h1", Plan::DryRun),
            (Some(Available), ReconcileMode::Reconcile, true, true, 1, "v1", "h1", Plan::Finalize),
            (Some(Available), ReconcileMode::Disable, true, true, 1, "v1", "h1", Plan::Finalize),
            (Some(Available), ReconcileMode::Reconcile, false, true, 1, "v1", "h1", Plan::Nothing),
        ];
        for (i, (state, mode, finalizer, deleting, og, ov, hash, want)) in cases.iter().enumerate() {
            let mut m = machine("a");
            m.spec.version = "v1".into();
            m.metadata.generation = 1;
            m.status.state = *state;
            m.status.observed_generation = *og;
            m.status.observed_version = ov.to_string();
            m.status.config_hash = hash.to_string();
            if *finalizer {
                m.metadata.finalizers.push(FINALIZER.into());
            }
            if *deleting {
                m.metadata.deletion_timestamp = Some(now_rfc3339());
            }
            assert_eq!(plan(&m, *mode, h), *want, "case {i}: {state:?} {mode:?}");
        }
    }
}
