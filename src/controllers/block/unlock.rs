//! Passphrases handed to the node by `talosctl unlock`, on their way to the volume manager.
//!
//! A volume no configured key opens (STATE after a TPM's PCRs moved, with its recovery slot's
//! passphrase kept nowhere on the node) fails, and the node waits in maintenance. The unlock
//! RPC gives a passphrase here for one volume; the volume manager, woken by it, tries that
//! volume again at once, with the passphrase in the recovery slots (and, when the volume's
//! keys name none, in every slot), and answers whether it opened. A passphrase lives here in
//! memory only, until the one attempt it was given for: it is never written to a resource,
//! to META or to a disk.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::{oneshot, watch};
use zeroize::Zeroizing;

/// How one attempt went: the key slot that opened the volume, or why none did.
pub type Outcome = Result<u32, String>;

/// A passphrase waiting for its attempt, and where its outcome goes.
pub struct Given {
    pub passphrase: Zeroizing<Vec<u8>>,
    pub reply: oneshot::Sender<Outcome>,
}

/// The passphrases given and not yet tried, by volume id.
pub struct Unlocks {
    given: Mutex<HashMap<String, Given>>,
    /// Bumped whenever a passphrase is given: the volume manager's event source.
    generation: watch::Sender<u64>,
}

impl Default for Unlocks {
    fn default() -> Self {
        Unlocks { given: Mutex::new(HashMap::new()), generation: watch::Sender::new(0) }
    }
}

impl Unlocks {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Given>> {
        self.given.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives `passphrase` for `volume`; the receiver gets the outcome of the attempt. A
    /// passphrase given before for the same volume and not yet tried is dropped, and its
    /// caller told so.
    pub fn give(&self, volume: &str, passphrase: Zeroizing<Vec<u8>>) -> oneshot::Receiver<Outcome> {
        let (reply, outcome) = oneshot::channel();
        if let Some(old) = self.lock().insert(volume.to_string(), Given { passphrase, reply }) {
            let _ = old.reply.send(Err("another passphrase was given for the volume".into()));
        }
        self.generation.send_modify(|g| *g += 1);
        outcome
    }

    /// Whether a passphrase waits for `volume`.
    pub fn waiting(&self, volume: &str) -> bool {
        self.lock().contains_key(volume)
    }

    /// The passphrase waiting for `volume`, taken for its attempt.
    pub fn take(&self, volume: &str) -> Option<Given> {
        self.lock().remove(volume)
    }

    /// Drops what waits for `volume` unanswered (its caller gave up waiting).
    pub fn withdraw(&self, volume: &str) {
        self.lock().remove(volume);
    }

    /// Changes whenever a passphrase is given.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passphrase_waits_for_one_attempt_and_hears_its_outcome() {
        let u = Unlocks::default();
        let changes = u.subscribe();
        let mut outcome = u.give("STATE", Zeroizing::new(b"recover".to_vec()));
        assert!(changes.has_changed().unwrap(), "giving wakes the volume manager");
        assert!(u.waiting("STATE") && !u.waiting("EPHEMERAL"));
        let given = u.take("STATE").unwrap();
        assert_eq!(given.passphrase.as_slice(), b"recover");
        assert!(!u.waiting("STATE"), "taken once");
        given.reply.send(Ok(2)).unwrap();
        assert_eq!(outcome.try_recv().unwrap(), Ok(2));
    }

    #[test]
    fn a_second_passphrase_replaces_the_first_and_says_so() {
        let u = Unlocks::default();
        let mut first = u.give("STATE", Zeroizing::new(b"one".to_vec()));
        let _second = u.give("STATE", Zeroizing::new(b"two".to_vec()));
        assert!(first.try_recv().unwrap().unwrap_err().contains("another passphrase"));
        assert_eq!(u.take("STATE").unwrap().passphrase.as_slice(), b"two");
    }
}
