//! Input event devices (evdev): watching every `/dev/input/event*` for a press of the power
//! key (KEY_POWER) and reporting it. QEMU's `system_powerdown` arrives this way once `button`
//! and `evdev` are loaded.
//!
//! For PID 1 on a node only (in container mode the host's button is not ours). Each device
//! is read on its own thread with plain blocking reads; a device that fails is dropped
//! quietly. Never touches anything but the event devices.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;

/// `struct input_event` on 64-bit Linux: timeval (16) + type (2) + code (2) + value (4).
pub const EVENT_SIZE: usize = 24;
const EV_KEY: u16 = 0x01;
const KEY_POWER: u16 = 116;

/// Whether one raw input event is a press of the power key.
pub fn is_power_press(event: &[u8; EVENT_SIZE]) -> bool {
    let kind = u16::from_ne_bytes([event[16], event[17]]);
    let code = u16::from_ne_bytes([event[18], event[19]]);
    let value = i32::from_ne_bytes([event[20], event[21], event[22], event[23]]);
    kind == EV_KEY && code == KEY_POWER && value == 1
}

/// Watches `dir` (normally `/dev/input`) for event devices, now and every few seconds (for
/// devices that appear later), and sends `()` on each power key press.
pub fn watch_power_button(dir: PathBuf, presses: mpsc::UnboundedSender<()>) {
    let spawned = std::thread::Builder::new().name("power-button".into()).spawn(move || {
        let mut open: HashSet<PathBuf> = HashSet::new();
        loop {
            for device in event_devices(&dir) {
                if open.insert(device.clone()) {
                    let presses = presses.clone();
                    let _ = std::thread::Builder::new()
                        .name("input-event".into())
                        .spawn(move || read_device(&device, presses));
                }
            }
            if presses.is_closed() {
                return;
            }
            std::thread::sleep(Duration::from_secs(5));
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("cannot watch the power button: {e}");
    }
}

fn event_devices(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("event")))
        .collect()
}

fn read_device(path: &Path, presses: mpsc::UnboundedSender<()>) {
    let Ok(mut file) = std::fs::File::open(path) else { return };
    let mut event = [0u8; EVENT_SIZE];
    while file.read_exact(&mut event).is_ok() {
        if is_power_press(&event) && presses.send(()).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: u16, code: u16, value: i32) -> [u8; EVENT_SIZE] {
        let mut e = [0u8; EVENT_SIZE];
        e[16..18].copy_from_slice(&kind.to_ne_bytes());
        e[18..20].copy_from_slice(&code.to_ne_bytes());
        e[20..24].copy_from_slice(&value.to_ne_bytes());
        e
    }

    #[test]
    fn only_a_power_key_press_counts() {
        assert!(is_power_press(&event(EV_KEY, KEY_POWER, 1)));
        assert!(!is_power_press(&event(EV_KEY, KEY_POWER, 0)), "release");
        assert!(!is_power_press(&event(EV_KEY, 30, 1)), "another key");
        assert!(!is_power_press(&event(0, 0, 0)), "sync event");
    }

    #[tokio::test]
    async fn presses_written_to_an_event_file_are_reported() {
        let dir = std::env::temp_dir().join(format!("talosbox-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&event(EV_KEY, 30, 1));
        bytes.extend_from_slice(&event(EV_KEY, KEY_POWER, 1));
        std::fs::write(dir.join("event0"), bytes).unwrap();
        std::fs::write(dir.join("mice"), [0u8; 3]).unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        watch_power_button(dir.clone(), tx);
        let got = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
        assert_eq!(got.ok().flatten(), Some(()));
        let _ = std::fs::remove_dir_all(dir);
    }
}
