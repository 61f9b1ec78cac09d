//! `talosbox.volume.VolumeService`: `Unlock`, the passphrase for an encrypted volume no
//! configured key opens (see `controllers::block::unlock`). The node tries it; this service
//! checks the request and spaces out attempts that fail, so a passphrase cannot be guessed at
//! the speed of the network: after each failure the next attempt waits twice as long as the
//! last (1 s, 2 s, 4 s, up to 5 minutes), and one attempt runs at a time. A success clears
//! the count. Who may call is the authorization table's decision (admin; a reader in
//! maintenance mode, over server-side TLS).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tonic::{Request, Response, Status};
use zeroize::Zeroizing;

use super::node::Node;
use crate::proto::talosbox::volume::{self as v, volume_service_server::VolumeService};

/// The wait after the first failure; doubled after each further one, up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_secs(1);
const MAX_WAIT: Duration = Duration::from_secs(300);
/// The longest passphrase taken (cryptsetup's limit is 8 MiB; no one types more than this).
const MAX_PASSPHRASE: usize = 4096;

/// The spacing of attempts (see the module's text).
#[derive(Debug, Default)]
pub struct Throttle {
    failures: u32,
    not_before: Option<Instant>,
    busy: bool,
}

impl Throttle {
    /// Whether an attempt may start `now`; the refusal says when one may.
    pub fn begin(&mut self, now: Instant) -> Result<(), String> {
        if self.busy {
            return Err("another unlock attempt is running".into());
        }
        if let Some(t) = self.not_before
            && now < t
        {
            let left = t - now;
            return Err(format!(
                "too many failed attempts ({}): try again in {}s",
                self.failures,
                left.as_secs() + u64::from(left.subsec_nanos() > 0)
            ));
        }
        self.busy = true;
        Ok(())
    }

    /// The attempt begun is over; a failure makes the next one wait.
    pub fn end(&mut self, now: Instant, failed: bool) {
        self.busy = false;
        if failed {
            self.failures = self.failures.saturating_add(1);
            let wait = FIRST_WAIT.saturating_mul(1u32 << self.failures.saturating_sub(1).min(16)).min(MAX_WAIT);
            self.not_before = Some(now + wait);
        } else {
            self.failures = 0;
            self.not_before = None;
        }
    }
}

pub struct VolumeApi {
    node: Arc<dyn Node>,
    throttle: Mutex<Throttle>,
}

impl VolumeApi {
    pub fn new(node: Arc<dyn Node>) -> Self {
        VolumeApi { node, throttle: Mutex::new(Throttle::default()) }
    }

    fn throttle(&self) -> std::sync::MutexGuard<'_, Throttle> {
        self.throttle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The volume a request names: STATE when it names none.
fn volume_of(volume_id: &str, passphrase: &[u8]) -> Result<String, Status> {
    let id = if volume_id.is_empty() { "STATE" } else { volume_id };
    if id.len() > 255 || id.chars().any(|c| c.is_control() || c == '/') {
        return Err(Status::invalid_argument(format!("volume_id: {id:?} is not a volume id")));
    }
    if passphrase.is_empty() {
        return Err(Status::invalid_argument("passphrase: empty"));
    }
    if passphrase.len() > MAX_PASSPHRASE {
        return Err(Status::invalid_argument(format!("passphrase: longer than {MAX_PASSPHRASE} bytes")));
    }
    Ok(id.to_string())
}

#[tonic::async_trait]
impl VolumeService for VolumeApi {
    async fn unlock(&self, request: Request<v::UnlockRequest>) -> Result<Response<v::UnlockResponse>, Status> {
        let mut request = request.into_inner();
        let passphrase = Zeroizing::new(std::mem::take(&mut request.passphrase));
        let volume = volume_of(&request.volume_id, &passphrase)?;
        self.throttle().begin(Instant::now()).map_err(Status::resource_exhausted)?;
        let outcome = self.node.unlock_volume(&volume, passphrase).await;
        // Only a passphrase that was tried and opened nothing counts against the caller.
        let wrong = matches!(&outcome, Err(s) if s.code() == tonic::Code::PermissionDenied);
        self.throttle().end(Instant::now(), wrong);
        let slot = outcome?;
        crate::kernel::console::line(&format!("unlock: volume {volume} opened with key slot {slot}"));
        Ok(Response::new(v::UnlockResponse {
            messages: vec![v::Unlock { metadata: None, volume_id: volume, key_slot: slot }],
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_space_out_attempts_and_a_success_clears_them() {
        let t0 = Instant::now();
        let mut t = Throttle::default();
        t.begin(t0).unwrap();
        assert_eq!(t.begin(t0).unwrap_err(), "another unlock attempt is running");
        t.end(t0, true);
        assert_eq!(t.begin(t0).unwrap_err(), "too many failed attempts (1): try again in 1s");
        let t1 = t0 + Duration::from_secs(1);
        t.begin(t1).unwrap();
        t.end(t1, true);
        assert!(t.begin(t1 + Duration::from_millis(1500)).unwrap_err().ends_with("try again in 1s"));
        let t2 = t1 + Duration::from_secs(2);
        t.begin(t2).unwrap();
        t.end(t2, true);
        assert!(t.begin(t2 + Duration::from_secs(3)).unwrap_err().contains("(3): try again in 1s"));
        // Many failures wait at most five minutes.
        for _ in 0..20 {
            t.end(t2, true);
        }
        assert!(t.begin(t2 + MAX_WAIT - Duration::from_secs(1)).is_err());
        t.begin(t2 + MAX_WAIT).unwrap();
        t.end(t2 + MAX_WAIT, false);
        t.begin(t2 + MAX_WAIT).unwrap();
    }

    #[test]
    fn a_request_names_a_volume_and_a_passphrase() {
        assert_eq!(volume_of("", b"x").unwrap(), "STATE");
        assert_eq!(volume_of("u-data", b"x").unwrap(), "u-data");
        assert!(volume_of("STATE", b"").unwrap_err().message().starts_with("passphrase: "));
        assert!(volume_of("../x", b"x").unwrap_err().message().starts_with("volume_id: "));
        assert!(volume_of("", &[0; MAX_PASSPHRASE + 1]).unwrap_err().message().contains("longer"));
    }
}
