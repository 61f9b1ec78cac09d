//! Kernel module loading, for init (the few modules the root filesystem needs), for machined
//! (the devices present at boot), for controllers (a filesystem or cipher when first needed)
//! and for the kernel's own requests (the `modprobe` applet): which modules to load, in what
//! order, and the `finit_module` calls that load them.
//!
//! The pure part reads kmod's text indexes (`modules.dep`, `modules.alias`, `modules.builtin`),
//! matches device modaliases and request names (`fs-xfs`, `rtnl-link-bond`) against alias globs,
//! and turns "these modules are wanted" into waves where every module's dependencies are in an
//! earlier wave; the modules of one wave are loaded in parallel. The effectful part reads
//! modaliases from sysfs and loads `.ko` files. It never shells out to `modprobe`, never unloads a
//! module, and never guesses at a module it cannot find in the index.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where an image lists the modules to load at start, one name per line, in order: in the
/// initramfs, what init loads before mounting the root filesystem; in the rootfs, what
/// machined loads at start besides the modules of the devices present.
pub const FIXED_LIST: &str = "/etc/talosbox/modules";

/// Where the running kernel's modules live.
pub const MODULES_ROOT: &str = "/lib/modules";

/// The kernel's record of loaded modules.
pub const PROC_MODULES: &str = "/proc/modules";

/// Where the kernel looks for the program it runs for its own module requests.
pub const PROC_MODPROBE: &str = "/proc/sys/kernel/modprobe";

/// Errors reading module indexes or loading modules; each names the file or module.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    #[error("reading {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}:{line}: malformed line {text:?}", path.display())]
    Malformed { path: PathBuf, line: usize, text: String },
    #[error("module {name} is not in {}", dep_file.display())]
    Unknown { name: String, dep_file: PathBuf },
    #[error("module {name}: dependency cycle through {via}")]
    Cycle { name: String, via: String },
    #[error("opening module {name} at {}: {source}", path.display())]
    Open { name: String, path: PathBuf, source: std::io::Error },
    #[error("loading module {name} from {}: {source}", path.display())]
    Load { name: String, path: PathBuf, source: std::io::Error },
    #[error("no module in {} is named or aliased {request:?}", dir.display())]
    NoMatch { request: String, dir: PathBuf },
}

impl ModuleError {
    /// Whether loading failed only because the module found no device or firmware to drive.
    pub fn is_no_device(&self) -> bool {
        matches!(self, ModuleError::Load { source, .. } if source.raw_os_error() == Some(rustix::io::Errno::NODEV.raw_os_error()))
    }
}

/// A module as `modules.dep` describes it: its file (relative to the modules directory) and
/// the modules it needs, by normalized name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleEntry {
    pub name: String,
    pub path: PathBuf,
    pub deps: Vec<String>,
}

/// The module indexes of one kernel's module directory.
#[derive(Debug, Clone, Default)]
pub struct ModuleIndex {
    /// The module directory the paths are relative to (for messages and loading).
    pub dir: PathBuf,
    modules: BTreeMap<String, ModuleEntry>,
    aliases: Vec<(String, String)>,
    builtin: BTreeSet<String>,
}

/// Kernel module names treat `-` and `_` alike; the kernel reports `_`.
pub fn normalize(name: &str) -> String {
    name.trim().replace('-', "_")
}

/// The module name a `.ko` path stands for (`kernel/drivers/net/virtio_net.ko.xz` → `virtio_net`).
pub fn name_of_path(path: &str) -> Option<String> {
    let file = path.rsplit('/').next()?;
    let stem = [".ko", ".ko.xz", ".ko.gz", ".ko.zst"].iter().find_map(|ext| file.strip_suffix(ext))?;
    (!stem.is_empty()).then(|| normalize(stem))
}

impl ModuleIndex {
    /// Reads `modules.dep`, `modules.alias` and (if present) `modules.builtin` from `dir`.
    pub fn load(dir: &Path) -> Result<Self, ModuleError> {
        let read = |name: &str, required: bool| -> Result<String, ModuleError> {
            let path = dir.join(name);
            match std::fs::read_to_string(&path) {
                Ok(text) => Ok(text),
                Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
                Err(source) => Err(ModuleError::Read { path, source }),
            }
        };
        let dep = read("modules.dep", true)?;
        let alias = read("modules.alias", false)?;
        let builtin = read("modules.builtin", false)?;
        let mut index = Self::parse(dir, &dep, &alias, &builtin)?;
        index.dir = dir.to_path_buf();
        Ok(index)
    }

    /// Parses the three index texts; `dir` only names files in error messages.
    pub fn parse(dir: &Path, dep: &str, alias: &str, builtin: &str) -> Result<Self, ModuleError> {
        let malformed = |file: &str, line: usize, text: &str| ModuleError::Malformed {
            path: dir.join(file),
            line,
            text: text.into(),
        };
        let mut modules = BTreeMap::new();
        for (i, raw) in dep.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (path, deps) = line.split_once(':').ok_or_else(|| malformed("modules.dep", i + 1, raw))?;
            let name = name_of_path(path.trim()).ok_or_else(|| malformed("modules.dep", i + 1, raw))?;
            let deps = deps
                .split_whitespace()
                .map(|d| name_of_path(d).ok_or_else(|| malformed("modules.dep", i + 1, raw)))
                .collect::<Result<Vec<_>, _>>()?;
            modules.insert(name.clone(), ModuleEntry { name, path: PathBuf::from(path.trim()), deps });
        }
        let mut aliases = Vec::new();
        for (i, raw) in alias.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next(), words.next()) {
                (Some("alias"), Some(pattern), Some(module), None) => {
                    aliases.push((pattern.to_string(), normalize(module)));
                }
                _ => return Err(malformed("modules.alias", i + 1, raw)),
            }
        }
        let builtin = builtin.lines().filter_map(|l| name_of_path(l.trim())).collect();
        Ok(Self { dir: dir.to_path_buf(), modules, aliases, builtin })
    }

    /// The entry for a module, by any spelling of its name.
    pub fn get(&self, name: &str) -> Option<&ModuleEntry> {
        self.modules.get(&normalize(name))
    }

    /// Whether the module is compiled into the kernel (nothing to load).
    pub fn is_builtin(&self, name: &str) -> bool {
        self.builtin.contains(&normalize(name))
    }

    /// Modules whose alias pattern matches `modalias`, in index order, each once.
    pub fn match_alias(&self, modalias: &str) -> Vec<&str> {
        let mut seen = BTreeSet::new();
        self.aliases
            .iter()
            .filter(|(pattern, _)| glob_match(pattern.as_bytes(), modalias.as_bytes()))
            .map(|(_, module)| module.as_str())
            .filter(|m| seen.insert(*m))
            .collect()
    }

    /// The modules a request names, as modprobe reads it: a module of this index (or one built
    /// in, which needs nothing: empty), or else every module one of whose aliases matches
    /// (`fs-xfs`, `rtnl-link-bond`, `crypto-aes`, a device modalias). `None`: nothing does.
    pub fn resolve(&self, request: &str) -> Option<Vec<String>> {
        let name = normalize(request);
        if self.modules.contains_key(&name) {
            return Some(vec![name]);
        }
        if self.is_builtin(&name) {
            return Some(Vec::new());
        }
        let matched: Vec<String> = self.match_alias(request).into_iter().map(str::to_string).collect();
        (!matched.is_empty()).then_some(matched)
    }

    /// The load order for `wanted`: dependencies before dependents, each module once, wanted
    /// modules in the order given. Built-in modules are dropped; a name not in the index is an error.
    pub fn closure(&self, wanted: &[String]) -> Result<Vec<&ModuleEntry>, ModuleError> {
        let mut order = Vec::new();
        let mut done = BTreeSet::new();
        for name in wanted {
            let name = normalize(name);
            if self.is_builtin(&name) && !self.modules.contains_key(&name) {
                continue;
            }
            self.visit(&name, &mut Vec::new(), &mut done, &mut order)?;
        }
        Ok(order)
    }

    fn visit<'a>(
        &'a self,
        name: &str,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        order: &mut Vec<&'a ModuleEntry>,
    ) -> Result<(), ModuleError> {
        if done.contains(name) {
            return Ok(());
        }
        if stack.iter().any(|s| s == name) {
            return Err(ModuleError::Cycle { name: name.to_string(), via: stack.join(" -> ") });
        }
        let entry = self
            .modules
            .get(name)
            .ok_or_else(|| ModuleError::Unknown { name: name.to_string(), dep_file: self.dir.join("modules.dep") })?;
        stack.push(name.to_string());
        // modules.dep lists a module's dependencies with the ones to load last first (modprobe
        // walks the list backwards), so walk it backwards too.
        for dep in entry.deps.iter().rev() {
            self.visit(dep, stack, done, order)?;
        }
        stack.pop();
        done.insert(name.to_string());
        order.push(entry);
        Ok(())
    }
}

/// Reads the fixed module list: one name per line, `#` comments and blank lines ignored.
pub fn parse_fixed_list(text: &str) -> Vec<String> {
    text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()).map(normalize).collect()
}

/// What one round of loading should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanStep {
    pub name: String,
    pub path: PathBuf,
    /// On the fixed list or needed by a module on it: failing to load it fails the boot.
    pub required: bool,
}

/// Chooses the modules of one loading round: the fixed list (on the first round) and every
/// module a modalias matches, with their dependencies, minus modules already attempted. Names
/// that cannot be resolved are returned apart: a fixed-list name there is the caller's error.
pub fn plan(
    index: &ModuleIndex,
    fixed: &[String],
    modaliases: &[String],
    attempted: &BTreeSet<String>,
) -> (Vec<PlanStep>, Vec<String>) {
    let mut missing = Vec::new();
    let mut steps: Vec<PlanStep> = Vec::new();
    let mut required = BTreeSet::new();
    for name in fixed {
        match index.closure(std::slice::from_ref(name)) {
            Ok(entries) => required.extend(entries.iter().map(|e| e.name.clone())),
            Err(_) => missing.push(name.clone()),
        }
    }
    let mut wanted: Vec<String> = fixed.iter().filter(|n| !missing.contains(n)).cloned().collect();
    for alias in modaliases {
        for module in index.match_alias(alias) {
            if !wanted.iter().any(|w| w == module) {
                wanted.push(module.to_string());
            }
        }
    }
    for name in wanted {
        // Alias matches may name modules this image does not carry; they are simply not wanted.
        let Ok(entries) = index.closure(std::slice::from_ref(&name)) else { continue };
        for entry in entries {
            if attempted.contains(&entry.name) || steps.iter().any(|s| s.name == entry.name) {
                continue;
            }
            steps.push(PlanStep {
                name: entry.name.clone(),
                path: entry.path.clone(),
                required: required.contains(&entry.name),
            });
        }
    }
    (steps, missing)
}

/// fnmatch(3) without flags, as kmod matches aliases: `*` any run, `?` one byte, `[...]` a set
/// with ranges and `!`/`^` negation, `\` escapes; everything else literal.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    // Where to resume after the last `*`: pattern index after it, and text index it covers up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let step = match pattern.get(p) {
            Some(b'*') => {
                star = Some((p + 1, t));
                p += 1;
                continue;
            }
            Some(b'?') => Some(p + 1),
            Some(b'[') => match match_class(pattern, p, text[t]) {
                Some((true, next)) => Some(next),
                Some((false, _)) => None,
                // An unclosed `[` is a literal.
                None => (text[t] == b'[').then_some(p + 1),
            },
            Some(b'\\') if p + 1 < pattern.len() => (pattern[p + 1] == text[t]).then_some(p + 2),
            Some(&c) => (c == text[t]).then_some(p + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                t += 1;
            }
            (None, Some((sp, st))) => {
                p = sp;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            (None, None) => return false,
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the bracket expression starting at `pattern[start] == b'['`. Returns
/// whether it matched and the index after the closing `]`, or `None` if there is no closing `]`.
fn match_class(pattern: &[u8], start: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = matches!(pattern.get(i), Some(b'!') | Some(b'^'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let lo = *pattern.get(i)?;
        if lo == b']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        let (lo, after) = if lo == b'\\' { (*pattern.get(i + 1)?, i + 2) } else { (lo, i + 1) };
        if pattern.get(after) == Some(&b'-') && pattern.get(after + 1).is_some_and(|&h| h != b']') {
            let hi = *pattern.get(after + 1)?;
            matched |= lo <= c && c <= hi;
            i = after + 2;
        } else {
            matched |= lo == c;
            i = after;
        }
    }
}

/// Reads every `/sys/bus/*/devices/*/modalias` under `sys_bus` (normally `/sys/bus`), sorted.
/// Unreadable entries are skipped: devices come and go while we look.
pub fn read_modaliases(sys_bus: &Path) -> Vec<String> {
    let mut out = BTreeSet::new();
    let Ok(buses) = std::fs::read_dir(sys_bus) else { return Vec::new() };
    for bus in buses.flatten() {
        let Ok(devices) = std::fs::read_dir(bus.path().join("devices")) else { continue };
        for dev in devices.flatten() {
            if let Ok(text) = std::fs::read_to_string(dev.path().join("modalias")) {
                let alias = text.trim();
                if !alias.is_empty() {
                    out.insert(alias.to_string());
                }
            }
        }
    }
    out.into_iter().collect()
}

/// How loading one module went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadOutcome {
    Loaded,
    AlreadyLoaded,
}

/// How a module file is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleCompression {
    None,
    /// `.ko.xz`, as nixpkgs ships them.
    Xz,
    /// `.ko.zst` and `.ko.gz`: named, not decompressed here.
    Unsupported(&'static str),
}

impl ModuleCompression {
    pub fn of(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("xz") => ModuleCompression::Xz,
            Some("zst") => ModuleCompression::Unsupported("zstd"),
            Some("gz") => ModuleCompression::Unsupported("gzip"),
            _ => ModuleCompression::None,
        }
    }
}

/// Decompresses an xz module image in memory.
pub fn unxz(data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(data.len() * 4);
    lzma_rs::xz_decompress(&mut std::io::BufReader::new(data), &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// Loads one module file (no parameters): a plain `.ko` with `finit_module`, a `.ko.xz`
/// decompressed here and passed with `init_module` (kernels without in-kernel module
/// decompression, Debian's among them, cannot take it compressed). `EEXIST` means it was
/// already in.
pub fn load_module(dir: &Path, name: &str, rel_path: &Path) -> Result<LoadOutcome, ModuleError> {
    let path = dir.join(rel_path);
    let open_err = |source| ModuleError::Open { name: name.to_string(), path: path.clone(), source };
    let loaded = match ModuleCompression::of(&path) {
        ModuleCompression::None => {
            let file = std::fs::File::open(&path).map_err(open_err)?;
            rustix::system::finit_module(&file, c"", 0)
        }
        ModuleCompression::Xz => {
            let data = std::fs::read(&path).map_err(open_err)?;
            let image = unxz(&data).map_err(|e| ModuleError::Load {
                name: name.to_string(),
                path: path.clone(),
                source: std::io::Error::other(format!("decompressing xz: {e}")),
            })?;
            rustix::system::init_module(&image, c"")
        }
        ModuleCompression::Unsupported(how) => {
            return Err(ModuleError::Load {
                name: name.to_string(),
                path,
                source: std::io::Error::other(format!(
                    "{how}-compressed modules are not supported (use .ko or .ko.xz)"
                )),
            });
        }
    };
    match loaded {
        Ok(()) => Ok(LoadOutcome::Loaded),
        Err(rustix::io::Errno::EXIST) => Ok(LoadOutcome::AlreadyLoaded),
        Err(e) => Err(ModuleError::Load { name: name.to_string(), path, source: e.into() }),
    }
}

/// What [`load_all`] reports as it goes, for the console.
#[derive(Debug)]
pub enum LoadEvent<'a> {
    Loaded { name: &'a str, outcome: LoadOutcome },
    Skipped { name: &'a str, error: &'a ModuleError },
}

/// Summary of a [`load_all`] run.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LoadSummary {
    pub loaded: usize,
    pub already: usize,
    pub skipped: usize,
    pub rounds: usize,
}

/// Splits an ordered list (dependencies first, as [`plan`] and [`ModuleIndex::closure`] give
/// it) into waves: each module goes in the wave after the last of its dependencies on the list,
/// so the modules of one wave never need each other and can load at once.
pub fn waves(index: &ModuleIndex, steps: Vec<PlanStep>) -> Vec<Vec<PlanStep>> {
    let mut wave_of: BTreeMap<String, usize> = BTreeMap::new();
    let mut out: Vec<Vec<PlanStep>> = Vec::new();
    for step in steps {
        let deps = index.get(&step.name).map(|e| e.deps.as_slice()).unwrap_or(&[]);
        let wave = deps.iter().filter_map(|d| wave_of.get(d)).map(|w| w + 1).max().unwrap_or(0);
        wave_of.insert(step.name.clone(), wave);
        if out.len() <= wave {
            out.resize_with(wave + 1, Vec::new);
        }
        out[wave].push(step);
    }
    out
}

/// Loads one wave, each module on a thread of its own; results in the wave's order.
fn load_wave(dir: &Path, wave: &[PlanStep]) -> Vec<Result<LoadOutcome, ModuleError>> {
    if wave.len() == 1 {
        return vec![load_module(dir, &wave[0].name, &wave[0].path)];
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> =
            wave.iter().map(|step| scope.spawn(move || load_module(dir, &step.name, &step.path))).collect();
        handles
            .into_iter()
            .zip(wave)
            .map(|(h, step)| {
                h.join().unwrap_or_else(|_| {
                    Err(ModuleError::Load {
                        name: step.name.clone(),
                        path: dir.join(&step.path),
                        source: std::io::Error::other("the loading thread panicked"),
                    })
                })
            })
            .collect()
    })
}

/// The names of the modules the kernel has loaded now (`/proc/modules`); empty if unreadable.
pub fn loaded_modules(proc_modules: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(proc_modules)
        .map(|t| t.lines().filter_map(|l| l.split_whitespace().next()).map(normalize).collect())
        .unwrap_or_default()
}

/// The module tree of the running kernel, for loading modules on demand. Cheap to share.
#[derive(Debug)]
pub struct Loader {
    index: ModuleIndex,
}

impl Loader {
    /// The index of the tree at `dir` (`/lib/modules/<release>`).
    pub fn open(dir: &Path) -> Result<Self, ModuleError> {
        Ok(Loader { index: ModuleIndex::load(dir)? })
    }

    /// The running kernel's tree, `/lib/modules/$(uname -r)`.
    pub fn running() -> Result<Self, ModuleError> {
        let release = rustix::system::uname().release().to_string_lossy().into_owned();
        Self::open(&Path::new(MODULES_ROOT).join(release))
    }

    /// The running kernel's tree, read once per process: what controllers load through
    /// (from a blocking task: loading a module takes a while).
    pub fn shared() -> Result<std::sync::Arc<Self>, ModuleError> {
        static SHARED: std::sync::OnceLock<std::sync::Arc<Loader>> = std::sync::OnceLock::new();
        if let Some(l) = SHARED.get() {
            return Ok(std::sync::Arc::clone(l));
        }
        let loader = std::sync::Arc::new(Self::running()?);
        Ok(std::sync::Arc::clone(SHARED.get_or_init(|| loader)))
    }

    pub fn index(&self) -> &ModuleIndex {
        &self.index
    }

    /// Loads what `request` names (a module or an alias, see [`ModuleIndex::resolve`]) and
    /// its dependencies, skipping modules already loaded; independent modules load in
    /// parallel. Returns the modules loaded now.
    pub fn load(&self, request: &str) -> Result<Vec<String>, ModuleError> {
        let wanted = self
            .index
            .resolve(request)
            .ok_or_else(|| ModuleError::NoMatch { request: request.to_string(), dir: self.index.dir.clone() })?;
        let loaded = loaded_modules(Path::new(PROC_MODULES));
        let steps: Vec<PlanStep> = self
            .index
            .closure(&wanted)?
            .into_iter()
            .filter(|e| !loaded.contains(&e.name))
            .map(|e| PlanStep { name: e.name.clone(), path: e.path.clone(), required: true })
            .collect();
        let mut now = Vec::new();
        for wave in waves(&self.index, steps) {
            for (step, result) in wave.iter().zip(load_wave(&self.index.dir, &wave)) {
                if result? == LoadOutcome::Loaded {
                    now.push(step.name.clone());
                }
            }
        }
        Ok(now)
    }
}

/// Most rounds of "load, then look for newly appeared devices" before giving up on quiet.
const MAX_ROUNDS: usize = 8;

/// Loads the fixed list and every module matching a device's modalias, with dependencies,
/// wave by wave (each wave in parallel); then looks again, since loaded drivers (virtio_pci) reveal new devices (virtio_net), and
/// repeats until nothing new turns up. A fixed-list module that fails is an error, except with
/// ENODEV (nothing to drive on this machine, like efivarfs under BIOS); others are reported and
/// skipped.
pub fn load_all(
    index: &ModuleIndex,
    fixed: &[String],
    sys_bus: &Path,
    mut report: impl FnMut(LoadEvent<'_>),
) -> Result<LoadSummary, ModuleError> {
    let mut attempted = BTreeSet::new();
    let mut summary = LoadSummary::default();
    let mut fixed_pending = fixed;
    while summary.rounds < MAX_ROUNDS {
        let aliases = read_modaliases(sys_bus);
        let (steps, missing) = plan(index, fixed_pending, &aliases, &attempted);
        if let Some(name) = missing.into_iter().next() {
            return Err(ModuleError::Unknown { name, dep_file: index.dir.join("modules.dep") });
        }
        fixed_pending = &[];
        if steps.is_empty() {
            break;
        }
        summary.rounds += 1;
        attempted.extend(steps.iter().map(|s| s.name.clone()));
        for wave in waves(index, steps) {
            for (step, result) in wave.iter().zip(load_wave(&index.dir, &wave)) {
                match result {
                    Ok(outcome) => {
                        match outcome {
                            LoadOutcome::Loaded => summary.loaded += 1,
                            LoadOutcome::AlreadyLoaded => summary.already += 1,
                        }
                        report(LoadEvent::Loaded { name: &step.name, outcome });
                    }
                    // ENODEV: the module is fine but found nothing to drive (efivarfs under BIOS).
                    Err(e) if step.required && !e.is_no_device() => return Err(e),
                    Err(e) => {
                        summary.skipped += 1;
                        report(LoadEvent::Skipped { name: &step.name, error: &e });
                    }
                }
            }
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEP: &str = "\
kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/virtio/virtio_pci_legacy_dev.ko:
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_legacy_dev.ko kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/net/core/failover.ko:
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/char/hw_random/virtio-rng.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/fs/squashfs/squashfs.ko:
kernel/drivers/block/loop.ko:
kernel/drivers/md/dm-mod.ko.xz:
kernel/drivers/md/dm-crypt.ko.xz: kernel/drivers/md/dm-mod.ko.xz
";
    const ALIAS: &str = "\
# Aliases extracted from modules themselves.
alias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci
alias virtio:d00000001v* virtio_net
alias virtio:d00000004v* virtio_rng
alias virtio:d0000000[2-3]v* virtio_blk
alias fs-squashfs squashfs
alias devname:loop-control loop
alias net-pf-99 not_in_this_image
";
    const BUILTIN: &str = "kernel/fs/ext4/ext4.ko\nkernel/drivers/nvme/host/nvme.ko\n";

    fn index() -> ModuleIndex {
        ModuleIndex::parse(Path::new("/lib/modules/test"), DEP, ALIAS, BUILTIN).expect("test index parses")
    }

    fn names(entries: &[&ModuleEntry]) -> Vec<String> {
        entries.iter().map(|e| e.name.clone()).collect()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_of_paths() {
        let cases = [
            ("kernel/drivers/net/virtio_net.ko", Some("virtio_net")),
            ("kernel/drivers/char/hw_random/virtio-rng.ko", Some("virtio_rng")),
            ("kernel/drivers/md/dm-mod.ko.xz", Some("dm_mod")),
            ("x.ko.zst", Some("x")),
            ("x.ko.gz", Some("x")),
            ("kernel/readme.txt", None),
            (".ko", None),
        ];
        for (path, want) in cases {
            assert_eq!(name_of_path(path).as_deref(), want, "path {path}");
        }
    }

    #[test]
    fn globs() {
        let cases = [
            ("abc", "abc", true),
            ("abc", "abd", false),
            ("abc", "ab", false),
            ("ab", "abc", false),
            ("*", "", true),
            ("*", "anything", true),
            ("a*c", "abbbc", true),
            ("a*c", "abbbd", false),
            ("a*b*c", "aXbYbZc", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("[abc]x", "bx", true),
            ("[abc]x", "dx", false),
            ("[!abc]x", "dx", true),
            ("[^abc]x", "ax", false),
            ("[0-9]", "7", true),
            ("[0-9]", "a", false),
            ("[]]", "]", true),
            ("[a-]", "-", true),
            ("a[", "a[", true),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("pci:v00001AF4d*sv*sd*bc*sc*i*", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00", true),
            ("pci:v00001AF4d*sv*sd*bc*sc*i*", "pci:v00008086d00001000sv00001AF4sd00000001bc02sc00i00", false),
            ("virtio:d0000000[2-3]v*", "virtio:d00000002v00001AF4", true),
            ("virtio:d0000000[2-3]v*", "virtio:d00000004v00001AF4", false),
            ("pci:v00008086d*", "pci:v00001AF4d00001000", false),
            ("acpi*:PNP0C0C:*", "acpi:PNP0C0C:", true),
            ("input:b*v*p*e*-e*k*r*a*m*l*s*f*w*", "input:b0019v0000p0001e0000-e0,1,k74,ramlsfw", true),
            ("virtio:d00000001v*", "virtio:d00000002v00001AF4", false),
            ("a[0-9]b", "a5b", true),
            ("a[!0-9]b", "a5b", false),
            ("abc", "abcd", false),
            (
                "cpu:type:x86,ven*fam*mod*:feature:*0081*",
                "cpu:type:x86,ven0000fam0006mod003D:feature:,0000,0081,00C0",
                true,
            ),
            ("*a", "aaaa", true),
            ("*ab", "aaab", true),
            ("*ab", "aaaba", false),
        ];
        for (pattern, text, want) in cases {
            assert_eq!(glob_match(pattern.as_bytes(), text.as_bytes()), want, "{pattern:?} vs {text:?}");
        }
    }

    #[test]
    fn parses_indexes() {
        let idx = index();
        assert_eq!(
            idx.get("virtio-rng").map(|e| e.path.clone()),
            Some("kernel/drivers/char/hw_random/virtio-rng.ko".into())
        );
        assert_eq!(idx.get("dm_crypt").map(|e| e.deps.clone()), Some(vec!["dm_mod".to_string()]));
        assert!(idx.is_builtin("ext4"));
        assert!(!idx.is_builtin("squashfs"));
        assert!(ModuleIndex::parse(Path::new("/x"), "no colon here\n", "", "").is_err());
        assert!(ModuleIndex::parse(Path::new("/x"), "", "alias onlypattern\n", "").is_err());
        let err = ModuleIndex::parse(Path::new("/x"), "", "bogus a b\n", "").map(|_| ()).unwrap_err();
        assert_eq!(err.to_string(), "/x/modules.alias:1: malformed line \"bogus a b\"");
    }

    #[test]
    fn alias_matches() {
        let idx = index();
        let cases: &[(&str, &[&str])] = &[
            ("pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00", &["virtio_pci"]),
            ("virtio:d00000001v00001AF4", &["virtio_net"]),
            ("virtio:d00000003v00001AF4", &["virtio_blk"]),
            ("virtio:d00000009v00001AF4", &[]),
            ("fs-squashfs", &["squashfs"]),
        ];
        for (alias, want) in cases {
            assert_eq!(idx.match_alias(alias), *want, "alias {alias}");
        }
    }

    #[test]
    fn closure_orders_dependencies_first_each_once() {
        let idx = index();
        let cases: &[(&[&str], &[&str])] = &[
            (&["virtio_net"], &["virtio_ring", "virtio", "failover", "net_failover", "virtio_net"]),
            (
                &["virtio_pci", "virtio_net"],
                &[
                    "virtio",
                    "virtio_ring",
                    "virtio_pci_modern_dev",
                    "virtio_pci_legacy_dev",
                    "virtio_pci",
                    "failover",
                    "net_failover",
                    "virtio_net",
                ],
            ),
            (&["dm-crypt", "dm_mod"], &["dm_mod", "dm_crypt"]),
            (&["ext4", "squashfs"], &["squashfs"]),
            (&["squashfs", "squashfs"], &["squashfs"]),
            (&[], &[]),
        ];
        for (wanted, want) in cases {
            let got = idx.closure(&strings(wanted)).expect("closure resolves");
            assert_eq!(names(&got), strings(want), "wanted {wanted:?}");
        }
        let err = idx.closure(&strings(&["nope"])).map(|_| ()).unwrap_err();
        assert_eq!(err.to_string(), "module nope is not in /lib/modules/test/modules.dep");
    }

    #[test]
    fn closure_detects_cycles() {
        let idx = ModuleIndex::parse(Path::new("/x"), "a.ko: b.ko\nb.ko: a.ko\n", "", "").expect("parses");
        assert!(matches!(idx.closure(&strings(&["a"])), Err(ModuleError::Cycle { .. })));
    }

    #[test]
    fn fixed_list() {
        let text = "# profile\nvirtio_pci\n\n  virtio-rng  \nsquashfs # for the rootfs\n";
        assert_eq!(parse_fixed_list(text), strings(&["virtio_pci", "virtio_rng", "squashfs"]));
    }

    #[test]
    fn plans_rounds() {
        let idx = index();
        let fixed = strings(&["squashfs", "loop", "ext4", "missing_one"]);
        let aliases = strings(&["pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00", "net-pf-99", "acpi:NOPE:"]);
        let (steps, missing) = plan(&idx, &fixed, &aliases, &BTreeSet::new());
        assert_eq!(missing, strings(&["missing_one"]));
        let got: Vec<(&str, bool)> = steps.iter().map(|s| (s.name.as_str(), s.required)).collect();
        assert_eq!(
            got,
            vec![
                ("squashfs", true),
                ("loop", true),
                ("virtio", false),
                ("virtio_ring", false),
                ("virtio_pci_modern_dev", false),
                ("virtio_pci_legacy_dev", false),
                ("virtio_pci", false),
            ]
        );

        // Second round: virtio_pci revealed a network device; what was attempted is not repeated.
        let attempted: BTreeSet<String> = steps.iter().map(|s| s.name.clone()).collect();
        let aliases = strings(&["pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00", "virtio:d00000001v00001AF4"]);
        let (steps, missing) = plan(&idx, &[], &aliases, &attempted);
        assert!(missing.is_empty());
        let got: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(got, vec!["failover", "net_failover", "virtio_net"]);

        // Third round: nothing new.
        let attempted: BTreeSet<String> = attempted.into_iter().chain(got.iter().map(|s| s.to_string())).collect();
        assert!(plan(&idx, &[], &aliases, &attempted).0.is_empty());
    }

    #[test]
    fn dependencies_of_fixed_modules_are_required() {
        let idx = index();
        let (steps, _) = plan(&idx, &strings(&["dm-crypt"]), &[], &BTreeSet::new());
        assert!(steps.iter().all(|s| s.required), "{steps:?}");
        assert_eq!(steps.len(), 2);
    }

    #[test]
    fn reads_modaliases_from_a_sysfs_shaped_tree() {
        let dir = std::env::temp_dir().join(format!("talosbox-modalias-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (bus, dev, alias) in
            [("pci", "0000:00:03.0", "pci:vX\n"), ("virtio", "virtio0", "virtio:d1\n"), ("virtio", "virtio1", "\n")]
        {
            let d = dir.join(bus).join("devices").join(dev);
            std::fs::create_dir_all(&d).expect("mkdir");
            std::fs::write(d.join("modalias"), alias).expect("write");
        }
        std::fs::create_dir_all(dir.join("empty")).expect("mkdir");
        let got = read_modaliases(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(got, strings(&["pci:vX", "virtio:d1"]));
        assert!(read_modaliases(Path::new("/nonexistent/sys/bus")).is_empty());
    }

    #[test]
    fn parses_the_real_kernel_tree() {
        // The kernel tree tests/run unpacks (pure parsing only); a test run without it says so.
        let Some(root) = std::env::var_os("TALOSBOX_KERNEL_ROOT") else {
            use std::io::Write;
            let reason = "skipped: TALOSBOX_KERNEL_ROOT is not set (tests/run sets it to the unpacked kernel)";
            let _ = writeln!(std::io::stderr(), "{reason}");
            return;
        };
        let modules = Path::new(&root).join("lib/modules");
        let release = std::fs::read_dir(&modules).expect("lib/modules").flatten().next().expect("a release").path();
        let dir = release.as_path();
        let idx = ModuleIndex::load(dir).expect("real index parses");
        let order = idx.closure(&strings(&["virtio_net", "xfs", "dm-crypt"])).expect("resolves");
        let pos = |n: &str| names(&order).iter().position(|x| x == n);
        assert!(pos("virtio_ring") < pos("virtio_net") && pos("failover") < pos("net_failover"));
        assert!(pos("libcrc32c") < pos("xfs") && pos("dm_mod") < pos("dm_crypt"));
        assert!(idx.match_alias("virtio:d00000001v00001AF4").contains(&"virtio_net"));
        assert_eq!(idx.resolve("fs-xfs"), Some(strings(&["xfs"])), "request names resolve through aliases");
        assert_eq!(idx.resolve("ext4"), Some(Vec::new()), "built in");
        let steps: Vec<PlanStep> =
            order.iter().map(|e| PlanStep { name: e.name.clone(), path: e.path.clone(), required: true }).collect();
        let waves = waves(&idx, steps);
        let wave_of = |n: &str| waves.iter().position(|w| w.iter().any(|s| s.name == n));
        assert!(wave_of("virtio_ring") < wave_of("virtio_net") && wave_of("libcrc32c") < wave_of("xfs"));
    }

    #[test]
    fn requests_resolve_by_name_builtin_or_alias() {
        let idx = index();
        assert_eq!(idx.resolve("dm-crypt"), Some(strings(&["dm_crypt"])));
        assert_eq!(idx.resolve("ext4"), Some(Vec::new()));
        assert_eq!(idx.resolve("fs-squashfs"), Some(strings(&["squashfs"])));
        assert_eq!(idx.resolve("virtio:d00000001v00001AF4"), Some(strings(&["virtio_net"])));
        assert_eq!(idx.resolve("net-pf-99"), Some(strings(&["not_in_this_image"])));
        assert_eq!(idx.resolve("rtnl-link-bond"), None);
    }

    #[test]
    fn waves_put_every_module_after_its_dependencies() {
        let idx = index();
        let order = idx.closure(&strings(&["virtio_net", "virtio_pci", "dm-crypt", "loop"])).unwrap();
        let steps: Vec<PlanStep> =
            order.iter().map(|e| PlanStep { name: e.name.clone(), path: e.path.clone(), required: true }).collect();
        let got: Vec<Vec<String>> =
            waves(&idx, steps).into_iter().map(|w| w.into_iter().map(|s| s.name).collect()).collect();
        assert_eq!(
            got,
            vec![
                strings(&[
                    "virtio_ring",
                    "virtio",
                    "failover",
                    "virtio_pci_modern_dev",
                    "virtio_pci_legacy_dev",
                    "dm_mod",
                    "loop"
                ]),
                strings(&["net_failover", "virtio_pci", "dm_crypt"]),
                strings(&["virtio_net"]),
            ]
        );
    }

    #[test]
    fn xz_modules_decompress_and_others_are_named() {
        let plain = b"\x7fELF pretend module body".repeat(50);
        let mut xz = Vec::new();
        lzma_rs::xz_compress(&mut std::io::BufReader::new(plain.as_slice()), &mut xz).unwrap();
        assert_eq!(unxz(&xz).unwrap(), plain);
        assert!(unxz(b"not xz").is_err());
        let cases = [
            ("a/x.ko", ModuleCompression::None),
            ("a/x.ko.xz", ModuleCompression::Xz),
            ("a/x.ko.zst", ModuleCompression::Unsupported("zstd")),
            ("a/x.ko.gz", ModuleCompression::Unsupported("gzip")),
        ];
        for (p, want) in cases {
            assert_eq!(ModuleCompression::of(Path::new(p)), want, "{p}");
        }
        let err = load_module(Path::new("/nonexistent"), "x", Path::new("x.ko.zst")).unwrap_err();
        assert!(err.to_string().contains("zstd-compressed modules are not supported"), "{err}");
    }

    #[test]
    fn proc_modules_names() {
        let dir = std::env::temp_dir().join(format!("talosbox-procmod-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("modules");
        std::fs::write(&f, "virtio_net 65536 0 - Live 0x0\ndm_crypt 61440 0 - Live 0x0\n").unwrap();
        assert_eq!(loaded_modules(&f), ["dm_crypt", "virtio_net"].iter().map(|s| s.to_string()).collect());
        assert!(loaded_modules(&dir.join("absent")).is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }
}
