//! ApplyConfiguration: validate, diff, and hand the text to the node's store in the mode asked.
//!
//! Talos's behaviour, kept: one apply at a time (a second is refused, FailedPrecondition); an
//! invalid configuration is InvalidArgument naming the field and changes nothing; REBOOT mode is
//! only accepted in maintenance (as no-reboot); AUTO resolves to NO_REBOOT; TRY falls back
//! after its timeout (one minute unless given); a dry run changes nothing and answers with
//! Talos's exact `mode_details` layout. Ours on top: the diff is redacted (no secret is ever
//! shown, only that it changed), `diff_json` carries it structured per document and path with
//! each change's effect (live or at the next reboot), and an apply that changes a field that
//! needs a reboot says which.

use std::time::Duration;

use tonic::Status;

use super::machine_service::MachineApi;
use super::node::{NodeMode, StoreMode};
use crate::proto::machine::{self as m, apply_configuration_request::Mode};

/// How long a TRY configuration stays unless confirmed (Talos's `ConfigTryTimeout`).
pub const DEFAULT_TRY_TIMEOUT: Duration = Duration::from_secs(60);

/// Go's `time.Duration.String()`, for Talos's wording: `1m0s`, `30s`, `1h2m3s`, `1.5s`.
pub fn go_duration(d: Duration) -> String {
    let total = d.as_secs();
    let nanos = d.subsec_nanos();
    if total == 0 && nanos == 0 {
        return "0s".to_string();
    }
    let (h, m, s) = (total / 3600, total % 3600 / 60, total % 60);
    let secs = if nanos == 0 {
        format!("{s}s")
    } else {
        let frac = format!("{nanos:09}");
        format!("{s}.{}s", frac.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

fn invalid(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(e.to_string())
}

pub async fn apply(api: &MachineApi, r: m::ApplyConfigurationRequest) -> Result<m::ApplyConfigurationResponse, Status> {
    let permit = api
        .node
        .begin_apply()
        .ok_or_else(|| Status::failed_precondition("another apply configuration is already in progress"))?;
    let maintenance = api.node.mode() == NodeMode::Maintenance;
    let requested = Mode::try_from(r.mode).map_err(|_| invalid(format!("mode: unknown value {}", r.mode)))?;

    let text = String::from_utf8(r.data).map_err(|_| invalid("data: the configuration is not UTF-8 text"))?;
    let loaded = crate::config::load(&text).map_err(invalid)?;
    if !maintenance && loaded.config.v1alpha1().is_none() {
        return Err(invalid(
            "the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?",
        ));
    }
    let mut warnings = crate::config::validate(&loaded.config).map_err(invalid)?;
    warnings.extend(loaded.warnings);

    #[allow(deprecated)]
    let (mode, summary) = match requested {
        Mode::Reboot if maintenance => (Mode::NoReboot, "Applied configuration without a reboot"),
        // As Talos's maintenance service: there is nothing to stage over or to fall back to.
        Mode::Staged | Mode::Try if maintenance => {
            let name = if requested == Mode::Staged { "staged" } else { "try" };
            return Err(Status::unimplemented(format!("--mode='{name}' is not supported in maintenance mode")));
        }
        Mode::Reboot => {
            return Err(Status::unimplemented(
                "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead",
            ));
        }
        Mode::Auto | Mode::NoReboot | Mode::Try => {
            (if requested == Mode::Try { Mode::Try } else { Mode::NoReboot }, "Applied configuration without a reboot")
        }
        Mode::Staged => (Mode::Staged, "Staged configuration to be applied after the next reboot"),
    };

    let (active, _) = api.node.configs();
    let old = active.as_deref().and_then(|t| crate::config::load(t).ok()).map(|l| l.config).unwrap_or_default();
    let diff = crate::config::diff(&old, &loaded.config);
    let diff_json = serde_json::to_string(&diff).unwrap_or_default();

    if r.dry_run {
        return Ok(m::ApplyConfigurationResponse {
            messages: vec![m::ApplyConfiguration {
                metadata: None,
                warnings,
                mode: mode as i32,
                mode_details: crate::config::mode_details(summary, &diff, true),
                diff_json,
            }],
        });
    }

    let mut details = summary.to_string();
    let store_mode = match mode {
        Mode::Try => {
            let timeout = r
                .try_mode_timeout
                .and_then(|d| Duration::try_from(d).ok())
                .filter(|d| !d.is_zero())
                .unwrap_or(DEFAULT_TRY_TIMEOUT);
            details.push_str(&format!(
                "\nThe config is applied in 'try' mode and will be automatically reverted back in {}",
                go_duration(timeout)
            ));
            StoreMode::Try(timeout)
        }
        Mode::Staged => StoreMode::Staged,
        _ => StoreMode::Now,
    };
    if mode != Mode::Staged && !maintenance && diff.requires_reboot() {
        let paths: Vec<String> =
            diff.changes().filter(|c| c.effect == crate::config::Effect::Reboot).map(|c| c.path.to_string()).collect();
        details.push_str(&format!("\nThese changes take effect at the next reboot: {}", paths.join(", ")));
    }
    permit.store(&text, store_mode)?;
    Ok(m::ApplyConfigurationResponse {
        messages: vec![m::ApplyConfiguration {
            metadata: None,
            warnings,
            mode: mode as i32,
            mode_details: details,
            diff_json,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_go_does() {
        assert_eq!(go_duration(Duration::from_secs(60)), "1m0s");
        assert_eq!(go_duration(Duration::from_secs(30)), "30s");
        assert_eq!(go_duration(Duration::from_secs(3723)), "1h2m3s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }
}
