//! Kernel modules at machined's start on a node: the kernel's own module requests are pointed
//! at this binary's `modprobe`, then the image's start list and the modules of every device
//! present are loaded on a thread of their own, in parallel waves, while the controllers
//! come up. Nothing waits for it; a module that fails is reported on the console and skipped.
//! Modules the node needs later (a filesystem, a cipher, a link kind) are loaded by whoever
//! needs them, through [`crate::kernel::modules::Loader`] or the kernel's request.

use std::path::Path;

use crate::kernel::console;
use crate::kernel::modules::{self, LoadEvent, ModuleIndex};

/// The program the kernel runs for module requests: the rootfs's link to this binary.
pub const MODPROBE: &str = "/sbin/modprobe";

/// Registers `modprobe` with the kernel (and says what the kernel now holds) and starts
/// loading the start modules.
pub fn start() {
    let registered = std::fs::write(modules::PROC_MODPROBE, format!("{MODPROBE}\n"))
        .and_then(|()| std::fs::read_to_string(modules::PROC_MODPROBE));
    match registered {
        Ok(now) => console::line(&format!("machined: kernel module requests go to {}", now.trim())),
        Err(e) => console::line(&format!("machined: cannot register {MODPROBE} in {}: {e}", modules::PROC_MODPROBE)),
    }
    let spawned = std::thread::Builder::new().name("modules".into()).spawn(load_start_modules);
    if let Err(e) = spawned {
        console::line(&format!("machined: cannot start loading modules: {e}"));
    }
}

fn load_start_modules() {
    let release = rustix::system::uname().release().to_string_lossy().into_owned();
    let dir = Path::new(modules::MODULES_ROOT).join(&release);
    if !dir.join("modules.dep").exists() {
        console::line(&format!("machined: no modules for kernel {release}"));
        return;
    }
    let fixed = match std::fs::read_to_string(modules::FIXED_LIST) {
        Ok(text) => modules::parse_fixed_list(&text),
        Err(_) => Vec::new(),
    };
    let index = match ModuleIndex::load(&dir) {
        Ok(i) => i,
        Err(e) => {
            console::line(&format!("machined: modules: {e}"));
            return;
        }
    };
    let summary = modules::load_all(&index, &fixed, Path::new("/sys/bus"), |event| {
        if let LoadEvent::Skipped { name, error } = event {
            console::line(&format!("machined: module {name} skipped: {error}"));
        }
    });
    match summary {
        Ok(s) => console::line(&format!(
            "uptime {} machined modules: {} loaded, {} already, {} skipped, in {} rounds",
            console::uptime(),
            s.loaded,
            s.already,
            s.skipped,
            s.rounds
        )),
        Err(e) => console::line(&format!("machined: modules: {e}")),
    }
}
