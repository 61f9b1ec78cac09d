//! The kernel and its modules: resolving Debian's cloud kernel (downloaded once into a
//! cache), or taking a kernel and module tree by path; choosing the modules an image carries
//! (named modules, modules matching device aliases, and their dependency closure); staging
//! them with fresh depmod data.
//!
//! Host tools: `apt-cache`/`apt-get download` to resolve and fetch the package, `dpkg -x` to
//! unpack it, `depmod -b` to compute dependency data. Selection itself is pure. It must never
//! modify a module tree given by path.

use super::host::{self, HostError};
use crate::kernel::modules::ModuleIndex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The Debian metapackage that names today's cloud kernel.
pub const DEBIAN_META: &str = "linux-image-cloud-amd64";

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("{what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("`apt-cache depends {DEBIAN_META}` names no linux-image package (run apt-get update?)")]
    NoPackage,
    #[error("kernel package {}: {message}", path.display())]
    Package { path: PathBuf, message: String },
    #[error("module tree {}: {message}", path.display())]
    Tree { path: PathBuf, message: String },
    #[error("module {name:?} (profile {field}) is neither a module nor built into kernel {release}")]
    UnknownModule { name: String, field: &'static str, release: String },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> KernelError + 'a {
    move |source| KernelError::Io { what, path: path.to_path_buf(), source }
}

/// A kernel ready to use: image, module tree (`.../lib/modules/<release>`) with modules.dep.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub vmlinuz: PathBuf,
    pub modules: PathBuf,
    pub release: String,
    /// Text for the `kernel-version` artifact: which kernel this is (package and version, or the
    /// content hashes of a kernel given by path), never where it was read from.
    pub description: String,
}

/// Where the kernel comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// Debian's cloud kernel, resolved now, cached in the directory.
    Debian { cache: PathBuf },
    /// A given .deb, unpacked into the cache directory.
    Deb { deb: PathBuf, cache: PathBuf },
    /// A kernel image and a module tree (`.../lib/modules/<release>`).
    Paths { kernel: PathBuf, modules: PathBuf },
}

/// Resolves the source into a usable kernel; `work` is scratch space for this build.
pub fn resolve(source: &Source, work: &Path, progress: &dyn Fn(&str)) -> Result<Kernel, KernelError> {
    match source {
        Source::Debian { cache } => {
            let deb = fetch_debian(cache, progress)?;
            unpack_deb(&deb, cache, progress)
        }
        Source::Deb { deb, cache } => unpack_deb(deb, cache, progress),
        Source::Paths { kernel, modules } => from_paths(kernel, modules, work, progress),
    }
}

/// `apt-cache depends` → package name; `apt-get download` into the cache unless present.
fn fetch_debian(cache: &Path, progress: &dyn Fn(&str)) -> Result<PathBuf, KernelError> {
    let out = host::run(
        host::APT_CACHE,
        "resolving the cloud kernel",
        host::command(host::APT_CACHE).args(["depends", DEBIAN_META]),
    )?;
    let text = String::from_utf8_lossy(&out.stdout);
    let package = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(str::trim)
        .find(|p| p.starts_with("linux-image-"))
        .ok_or(KernelError::NoPackage)?
        .to_string();
    std::fs::create_dir_all(cache).map_err(io("creating kernel cache", cache))?;
    if let Some(deb) = cached_deb(cache, &package)? {
        progress(&format!("kernel: {package} (cached {})", deb.display()));
        return Ok(deb);
    }
    progress(&format!("kernel: downloading {package} into {}", cache.display()));
    // Download into a private directory and rename into place, so a concurrent build never
    // sees a partial .deb.
    let staging = cache.join(format!(".download-{}", std::process::id()));
    std::fs::create_dir_all(&staging).map_err(io("creating", &staging))?;
    host::run(
        host::APT_GET,
        "downloading the kernel package",
        host::command(host::APT_GET).args(["download", "-q", &package]).current_dir(&staging),
    )?;
    let deb = cached_deb(&staging, &package)?.ok_or_else(|| KernelError::Package {
        path: staging.join(&package),
        message: "apt-get download left no .deb".into(),
    })?;
    let dest = cache.join(deb.file_name().unwrap_or_default());
    std::fs::rename(&deb, &dest).map_err(io("moving into the cache", &deb))?;
    std::fs::remove_dir_all(&staging).map_err(io("removing", &staging))?;
    Ok(dest)
}

fn cached_deb(cache: &Path, package: &str) -> Result<Option<PathBuf>, KernelError> {
    let prefix = format!("{package}_");
    let mut found: Vec<PathBuf> = std::fs::read_dir(cache)
        .map_err(io("reading kernel cache", cache))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            name.starts_with(&prefix) && name.ends_with(".deb")
        })
        .collect();
    found.sort();
    Ok(found.pop())
}

fn deb_field(deb: &Path, field: &str) -> Result<String, KernelError> {
    let out = host::run(
        host::DPKG_DEB,
        "reading the kernel package",
        host::command(host::DPKG_DEB).arg("-f").arg(deb).arg(field),
    )?;
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if v.is_empty() {
        return Err(KernelError::Package { path: deb.to_path_buf(), message: format!("no {field} field") });
    }
    Ok(v)
}

/// Unpacks the .deb once into `cache/<package>_<version>/` and runs depmod there.
fn unpack_deb(deb: &Path, cache: &Path, progress: &dyn Fn(&str)) -> Result<Kernel, KernelError> {
    let package = deb_field(deb, "Package")?;
    let version = deb_field(deb, "Version")?;
    let root = cache.join(format!("{package}_{version}"));
    let done = root.join(".talosbox-unpacked");
    if !done.exists() {
        progress(&format!("kernel: unpacking {} and running depmod", deb.display()));
        if root.exists() {
            std::fs::remove_dir_all(&root).map_err(io("removing partial unpack", &root))?;
        }
        // Unpack privately and rename into place: a concurrent build sees all or nothing.
        let staging = cache.join(format!(".unpack-{}", std::process::id()));
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(io("removing", &staging))?;
        }
        host::run(host::DPKG, "unpacking the kernel", host::command(host::DPKG).arg("-x").arg(deb).arg(&staging))?;
        let release = single_release(&staging.join("lib/modules"))?;
        depmod(&staging, &release)?;
        let marker = staging.join(".talosbox-unpacked");
        std::fs::write(&marker, b"").map_err(io("marking unpack complete", &marker))?;
        if std::fs::rename(&staging, &root).is_err() {
            if !done.exists() {
                return Err(KernelError::Package {
                    path: root,
                    message: "could not move the unpacked tree into place".into(),
                });
            }
            // Another build finished the same unpack first.
            std::fs::remove_dir_all(&staging).map_err(io("removing", &staging))?;
        }
    }
    let release = single_release(&root.join("lib/modules"))?;
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{release}"));
    if !vmlinuz.is_file() {
        return Err(KernelError::Package { path: deb.to_path_buf(), message: format!("no boot/vmlinuz-{release}") });
    }
    let sha = super::sha256_file(deb).map_err(io("hashing", deb))?;
    Ok(Kernel {
        vmlinuz,
        modules: root.join("lib/modules").join(&release),
        description: format!("package: {package}\nversion: {version}\nrelease: {release}\ndeb-sha256: {sha}\n"),
        release,
    })
}

fn single_release(dir: &Path) -> Result<String, KernelError> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(io("reading module directory", dir))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    match names.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(KernelError::Tree {
            path: dir.to_path_buf(),
            message: format!("expected exactly one kernel release directory, found {names:?}"),
        }),
    }
}

/// A kernel given by path. Without modules.dep the tree is copied into `work` and depmod'ed
/// there, leaving the given tree untouched.
fn from_paths(kernel: &Path, modules: &Path, work: &Path, progress: &dyn Fn(&str)) -> Result<Kernel, KernelError> {
    let release = modules
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| KernelError::Tree { path: modules.to_path_buf(), message: "no release name".into() })?;
    if !kernel.is_file() {
        return Err(KernelError::Tree { path: kernel.to_path_buf(), message: "kernel image not found".into() });
    }
    let mut tree = modules.to_path_buf();
    if !modules.join("modules.dep").is_file() {
        progress(&format!("kernel: {} has no modules.dep; running depmod on a copy", modules.display()));
        let base = work.join("kernel-tree");
        tree = base.join("lib/modules").join(&release);
        copy_tree(modules, &tree)?;
        depmod(&base, &release)?;
    }
    // Identify the inputs by content, never by where they live: the same kernel given from two
    // directories (e.g. two Nix store paths) must give a bit-identical artifact.
    let kernel_sha = super::sha256_file(kernel).map_err(io("hashing kernel image", kernel))?;
    let modules_sha = tree_sha256(modules)?;
    let description = format!("release: {release}\nkernel-sha256: {kernel_sha}\nmodules-sha256: {modules_sha}\n");
    Ok(Kernel { vmlinuz: kernel.to_path_buf(), modules: tree, release, description })
}

/// SHA-256 over a directory tree, independent of where the tree lives: for every regular file
/// and symlink, in byte order of its path relative to `root`, a type byte (`f` or `l`), the
/// relative path, a NUL, the length of the contents (u64 little-endian) and the contents (a
/// symlink's contents are its target, which is not followed). Directories count only through
/// the entries in them.
pub fn tree_sha256(root: &Path) -> Result<String, KernelError> {
    use sha2::Digest;
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    let mut entries = Vec::new();
    walk(root, Path::new(""), &mut entries)?;
    entries.sort_by(|a, b| a.0.as_os_str().as_bytes().cmp(b.0.as_os_str().as_bytes()));
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    for (rel, is_link) in entries {
        let path = root.join(&rel);
        h.update(if is_link { b"l" } else { b"f" });
        h.update(rel.as_os_str().as_bytes());
        h.update([0u8]);
        if is_link {
            let target = std::fs::read_link(&path).map_err(io("reading symlink", &path))?;
            let target = target.as_os_str().as_bytes();
            h.update((target.len() as u64).to_le_bytes());
            h.update(target);
        } else {
            let mut f = std::fs::File::open(&path).map_err(io("hashing", &path))?;
            let len = f.metadata().map_err(io("hashing", &path))?.len();
            h.update(len.to_le_bytes());
            let mut read = 0u64;
            loop {
                let n = f.read(&mut buf).map_err(io("hashing", &path))?;
                if n == 0 {
                    break;
                }
                read += n as u64;
                h.update(&buf[..n]);
            }
            if read != len {
                return Err(KernelError::Tree { path, message: "file changed size while being hashed".into() });
            }
        }
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Collects (path relative to `root`, is symlink) for every file and symlink under `root/rel`.
fn walk(root: &Path, rel: &Path, out: &mut Vec<(PathBuf, bool)>) -> Result<(), KernelError> {
    let dir = root.join(rel);
    for e in std::fs::read_dir(&dir).map_err(io("reading", &dir))? {
        let e = e.map_err(io("reading", &dir))?;
        let child = rel.join(e.file_name());
        let kind = e.file_type().map_err(io("reading", &e.path()))?;
        if kind.is_dir() {
            walk(root, &child, out)?;
        } else if kind.is_file() || kind.is_symlink() {
            out.push((child, kind.is_symlink()));
        } else {
            return Err(KernelError::Tree {
                path: e.path(),
                message: "neither a file, a directory nor a symlink".into(),
            });
        }
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), KernelError> {
    std::fs::create_dir_all(to).map_err(io("creating", to))?;
    for e in std::fs::read_dir(from).map_err(io("reading", from))? {
        let e = e.map_err(io("reading", from))?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).map_err(io("copying", &src))?;
        }
    }
    Ok(())
}

/// `depmod -b BASE RELEASE` with an empty configuration, so the host's /etc/depmod.d cannot
/// change the output.
pub fn depmod(base: &Path, release: &str) -> Result<(), KernelError> {
    let conf = base.join(".depmod.conf");
    std::fs::write(&conf, b"").map_err(io("writing", &conf))?;
    host::run(
        host::DEPMOD,
        "computing module dependencies",
        host::command(host::DEPMOD).arg("-C").arg(&conf).arg("-b").arg(base).arg(release),
    )?;
    std::fs::remove_file(&conf).map_err(io("removing", &conf))?;
    Ok(())
}

/// The file stem of a module path (`kernel/drivers/md/dm-mod.ko` → `dm-mod`), the spelling
/// written to `/etc/talosbox/modules`.
fn stem(path: &Path) -> String {
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    file.split(".ko").next().unwrap_or(&file).to_string()
}

/// What the image carries: module files (tree-relative paths) and the always-load list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    pub files: BTreeSet<String>,
    /// File stems (e.g. `dm-mod`) of the always-load modules, profile order, built-ins left out.
    pub load: Vec<String>,
    pub builtin: Vec<String>,
    pub by_alias: BTreeSet<String>,
}

/// One list of module names a selection starts from.
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    /// The profile field, for errors (`modules.boot`).
    pub field: &'static str,
    pub names: &'a [String],
    /// Whether these go on the image's load list.
    pub load: bool,
}

/// Chooses modules: named ones, those whose alias matches a device modalias, and the
/// dependency closure of all of them, from the texts of modules.dep/.alias/.builtin. The
/// indexes are read and resolved by the same code init uses on the node.
pub fn select(
    dep: &str,
    alias: &str,
    builtin: &str,
    wanted: &[Wanted<'_>],
    device_modaliases: &[String],
    release: &str,
) -> Result<Selection, KernelError> {
    let dir = Path::new("/lib/modules").join(release);
    let index = ModuleIndex::parse(&dir, dep, alias, builtin)
        .map_err(|e| KernelError::Tree { path: dir.clone(), message: e.to_string() })?;
    let mut sel = Selection::default();
    let mut roots: Vec<String> = Vec::new();
    for w in wanted {
        for name in w.names {
            if let Some(entry) = index.get(name) {
                if w.load {
                    sel.load.push(stem(&entry.path));
                }
                roots.push(entry.name.clone());
            } else if index.is_builtin(name) {
                sel.builtin.push(name.clone());
            } else {
                return Err(KernelError::UnknownModule { name: name.clone(), field: w.field, release: release.into() });
            }
        }
    }
    for modalias in device_modaliases {
        // Aliases of built-in drivers name no module file: nothing to carry.
        for entry in index.match_alias(modalias).into_iter().filter_map(|m| index.get(m)) {
            sel.by_alias.insert(stem(&entry.path));
            roots.push(entry.name.clone());
        }
    }
    let closure = index.closure(&roots).map_err(|e| KernelError::Tree { path: dir.clone(), message: e.to_string() })?;
    sel.files = closure.iter().map(|e| e.path.to_string_lossy().into_owned()).collect();
    Ok(sel)
}

/// What the initramfs carries: the boot modules, which init loads, and their dependencies.
pub fn boot_selection(
    dep: &str,
    alias: &str,
    builtin: &str,
    m: &super::profile::Modules,
    release: &str,
) -> Result<Selection, KernelError> {
    select(dep, alias, builtin, &[Wanted { field: "modules.boot", names: &m.boot, load: true }], &[], release)
}

/// What the rootfs carries: every module of the profile (boot ones too, so its index is
/// whole), with the load list machined loads at start.
pub fn rootfs_selection(
    dep: &str,
    alias: &str,
    builtin: &str,
    m: &super::profile::Modules,
    release: &str,
) -> Result<Selection, KernelError> {
    let wanted = [
        Wanted { field: "modules.boot", names: &m.boot, load: false },
        Wanted { field: "modules.load", names: &m.load, load: true },
        Wanted { field: "modules.include", names: &m.include, load: false },
    ];
    select(dep, alias, builtin, &wanted, &m.device_modaliases, release)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::imager::profile::Modules;

    const DEP: &str = "\
kernel/fs/xfs/xfs.ko: kernel/lib/libcrc32c.ko
kernel/lib/libcrc32c.ko:
kernel/drivers/md/dm-mod.ko:
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
kernel/drivers/acpi/button.ko:
";
    const ALIAS: &str = "\
alias virtio:d00000001v* virtio_net
alias acpi*:PNP0C0C:* button
";

    fn modules(load: &[&str], include: &[&str], aliases: &[&str]) -> Modules {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect();
        Modules { boot: Vec::new(), load: v(load), include: v(include), device_modaliases: v(aliases) }
    }

    #[test]
    fn selection_table() {
        // (load, include, device modaliases, expected files, expected load list)
        type List = &'static [&'static str];
        let cases: &[(List, List, List, List, List)] = &[
            (&["xfs"], &[], &[], &["kernel/fs/xfs/xfs.ko", "kernel/lib/libcrc32c.ko"], &["xfs"]),
            (&["dm_mod", "ext4"], &[], &[], &["kernel/drivers/md/dm-mod.ko"], &["dm-mod"]),
            (
                &["dm-mod"],
                &[],
                &["virtio:d00000001v00001AF4", "acpi:PNP0C0C:"],
                &[
                    "kernel/drivers/acpi/button.ko",
                    "kernel/drivers/md/dm-mod.ko",
                    "kernel/drivers/net/net_failover.ko",
                    "kernel/drivers/net/virtio_net.ko",
                    "kernel/net/core/failover.ko",
                ],
                &["dm-mod"],
            ),
            (
                &["failover"],
                &["xfs"],
                &[],
                &["kernel/fs/xfs/xfs.ko", "kernel/lib/libcrc32c.ko", "kernel/net/core/failover.ko"],
                &["failover"],
            ),
        ];
        for (load, include, aliases, files, want_load) in cases {
            let s = rootfs_selection(DEP, ALIAS, "kernel/fs/ext4/ext4.ko\n", &modules(load, include, aliases), "r")
                .unwrap();
            assert_eq!(s.files.iter().map(String::as_str).collect::<Vec<_>>(), *files, "{load:?} {aliases:?}");
            assert_eq!(s.load, *want_load);
        }
    }

    /// A kernel image (`abc`) and a module tree with modules.dep (so no depmod runs) under `dir`.
    fn kernel_by_path(dir: &Path) -> (PathBuf, PathBuf) {
        let modules = dir.join("lib/modules/6.1.0-test");
        std::fs::create_dir_all(modules.join("kernel/fs")).unwrap();
        std::fs::write(modules.join("modules.dep"), "kernel/fs/x.ko:\n").unwrap();
        std::fs::write(modules.join("kernel/fs/x.ko"), b"\x7fELF x").unwrap();
        std::os::unix::fs::symlink("/usr/src/linux-headers-6.1.0-test", modules.join("build")).unwrap();
        let vmlinuz = dir.join("vmlinuz");
        std::fs::write(&vmlinuz, b"abc").unwrap();
        (vmlinuz, modules)
    }

    #[test]
    fn kernel_version_by_path_is_independent_of_the_directory() {
        let base = std::env::temp_dir().join(format!("talosbox-kernel-id-{}", std::process::id()));
        let (a, b) = (base.join("one"), base.join("two/nested"));
        let describe = |dir: &Path| {
            let (vmlinuz, modules) = kernel_by_path(dir);
            from_paths(&vmlinuz, &modules, &dir.join("work"), &|_| {}).unwrap().description
        };
        let (da, db) = (describe(&a), describe(&b));
        assert_eq!(da, db, "same kernel from two directories");
        assert!(!da.contains(base.to_str().unwrap()), "{da}");
        // The digests are pinned (computed independently) so the artifact's format cannot drift.
        assert_eq!(
            da,
            "release: 6.1.0-test\n\
             kernel-sha256: ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n\
             modules-sha256: c23ffcc1e3a5a9bed5bf6e158c9640c4d59833dcc484f35508dfc94c8f5c2e39\n"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn tree_sha256_covers_names_and_contents() {
        let base = std::env::temp_dir().join(format!("talosbox-tree-sha-{}", std::process::id()));
        let (_, modules) = kernel_by_path(&base);
        let before = tree_sha256(&modules).unwrap();
        let x = modules.join("kernel/fs/x.ko");
        std::fs::write(&x, b"\x7fELF y").unwrap();
        let changed = tree_sha256(&modules).unwrap();
        assert_ne!(changed, before, "a module's contents changed");
        std::fs::rename(&x, modules.join("kernel/fs/y.ko")).unwrap();
        let renamed = tree_sha256(&modules).unwrap();
        assert_ne!(renamed, changed, "a module was renamed");
        // Name and contents cannot run into each other: `ab` empty vs `a` holding `b`.
        let (p, q) = (base.join("p"), base.join("q"));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::create_dir_all(&q).unwrap();
        std::fs::write(p.join("ab"), b"").unwrap();
        std::fs::write(q.join("a"), b"b").unwrap();
        assert_ne!(tree_sha256(&p).unwrap(), tree_sha256(&q).unwrap());
        let err = tree_sha256(&base.join("absent")).unwrap_err().to_string();
        assert!(err.starts_with(&format!("reading {}", base.join("absent").display())), "{err}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn unknown_module_is_named() {
        let err =
            rootfs_selection(DEP, ALIAS, "", &modules(&["xfs"], &["nosuch"], &[]), "6.1").unwrap_err().to_string();
        assert_eq!(err, "module \"nosuch\" (profile modules.include) is neither a module nor built into kernel 6.1");
    }

    #[test]
    fn the_initramfs_carries_only_the_boot_modules() {
        let mut m = modules(&["failover"], &["xfs"], &["virtio:d00000001v00001AF4"]);
        m.boot = vec!["xfs".into()];
        let boot = boot_selection(DEP, ALIAS, "", &m, "r").unwrap();
        assert_eq!(
            boot.files.iter().map(String::as_str).collect::<Vec<_>>(),
            ["kernel/fs/xfs/xfs.ko", "kernel/lib/libcrc32c.ko"]
        );
        assert_eq!(boot.load, ["xfs"]);
        let rootfs = rootfs_selection(DEP, ALIAS, "", &m, "r").unwrap();
        assert!(
            rootfs.files.contains("kernel/fs/xfs/xfs.ko") && rootfs.files.contains("kernel/drivers/net/virtio_net.ko")
        );
        assert_eq!(rootfs.load, ["failover"], "boot modules are not loaded twice");
    }
}
