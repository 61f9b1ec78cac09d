//! The imager: assembles a bootable talosbox image set (rootfs, initramfs, kernel, UKI, GPT
//! disk with GRUB, checksums) from the binary, a kernel and a profile under `images/`.
//!
//! It is build-time code and drives host tools where no library does the job: mksquashfs
//! (rootfs), zstd/lz4/xz/gzip (initramfs compression), depmod (module data), mkfs.xfs under
//! libfaketime (BOOT, as Talos formats it), grub-mkimage (GRUB images), apt/dpkg (the Debian
//! kernel) and dpkg-query (the packages of the host programs the rootfs carries). The cpio
//! archive, the UKI and the shared-library closure of a carried program are done here in Rust;
//! disk.raw's boot partitions (GPT, GRUB's boot code, the FAT32 ESP, slot A on BOOT) are
//! written by [`crate::boot`], the same code a node installs itself with.
//! Every artifact must be bit-identical across builds: nothing may read the clock, random
//! sources or the output path into an artifact; every time is the profile's epoch and every
//! GUID/volume id is derived from it.

pub mod cpio;
pub mod elf;
pub mod host;
pub mod kernel;
pub mod packages;
pub mod profile;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::block::gpt::{self, Guid};
use profile::{Compression, Profile};

use crate::boot::initramfs::{INITRAMFS_NAMES, initramfs_name_of};
/// Labels and type GUIDs of Talos's boot disk.
pub use crate::boot::{
    BIOS_BOOT_TYPE, BIOS_LABEL, BOOT_LABEL, EFI_LABEL, EFI_SYSTEM_TYPE, LINUX_DATA_TYPE, META_LABEL,
};
use crate::boot::{grub, uki};

/// Artifact names, in SHA256SUMS order, for an initramfs named `initramfs`.
pub fn artifact_names(initramfs: &str) -> Vec<&str> {
    let mut names = vec![
        "cmdline",
        "disk.raw",
        initramfs,
        "kernel-version",
        "rootfs-packages",
        "rootfs.sqsh",
        "talosbox.efi",
        "version",
        "vmlinuz",
    ];
    names.sort_unstable();
    names
}

/// Names in the rootfs that point at /sbin/init. `modprobe` is what the kernel runs for its
/// own module requests (`/proc/sys/kernel/modprobe`).
const ROOTFS_LINKS: &[&str] = &["machined", "apid", "trustd", "modprobe"];
/// Where the rootfs carries the profile's network documents, relative to the stage
/// (`boot::IMAGE_NETWORK_CONFIG_PATH`, which machined reads).
pub const IMAGE_NETWORK_CONFIG: &str = "usr/share/talosbox/platform-network.yaml";

/// The trusted roots the image carries, checked: a PEM bundle with at least one certificate.
fn trusted_roots(path: &Path) -> Result<Vec<u8>, ImagerError> {
    let what = "reading the trusted roots";
    let data = std::fs::read(path).map_err(io(what, path))?;
    crate::pki::pem::decode_certificates(&String::from_utf8_lossy(&data), "a trusted root").map_err(|e| {
        ImagerError::Io { what, path: path.to_path_buf(), source: std::io::Error::other(e.to_string()) }
    })?;
    Ok(data)
}

/// The `/etc` files machined renders at run time into `/system/etc` (a tmpfs; the rootfs is
/// read-only): the rootfs links each to its rendered copy, as Talos's does.
const ETC_RENDERED: &[&str] = &["hosts", "resolv.conf", "hostname"];

/// Empty mount points and directories in the rootfs.
const ROOTFS_DIRS: &[&str] = &[
    "boot", "dev", "etc", "lib", "mnt", "proc", "root", "run", "sbin", "sys", "system", "tmp", "usr", "usr/bin",
    "usr/lib", "var",
];

#[derive(Debug, thiserror::Error)]
pub enum ImagerError {
    #[error(transparent)]
    Profile(#[from] profile::ProfileError),
    #[error(transparent)]
    Host(#[from] host::HostError),
    #[error(transparent)]
    Kernel(#[from] kernel::KernelError),
    #[error(transparent)]
    Elf(#[from] elf::ElfError),
    #[error("building the initramfs: {0}")]
    Cpio(#[from] cpio::CpioError),
    #[error("assembling talosbox.efi: {0}")]
    Pe(#[from] uki::PeError),
    #[error("planning disk.raw: {0}")]
    Gpt(#[from] gpt::GptError),
    #[error("installing GRUB into disk.raw: {0}")]
    Grub(#[from] grub::GrubError),
    #[error("writing rootfs-packages: {0}")]
    Packages(#[from] packages::PackagesError),
    #[error("{what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("carrying {} in the rootfs: the imager puts its own file there", path.display())]
    Collision { path: PathBuf },
    #[error("work path {} contains whitespace, which mkfs.xfs protofiles cannot express", path.display())]
    Whitespace { path: PathBuf },
    #[error("--initramfs {}: neither a cpio archive nor zstd, xz, lz4 or gzip", path.display())]
    UnknownInitramfs { path: PathBuf },
    #[error("--os-version {0:?}: one token of letters, digits, '.', '-', '+' and '_'")]
    Version(String),
    #[error("writing disk.raw: {0}")]
    Install(#[from] crate::boot::install::InstallError),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ImagerError + 'a {
    move |source| ImagerError::Io { what, path: path.to_path_buf(), source }
}

/// What to build from.
#[derive(Debug, Clone)]
pub struct Options {
    pub profile: PathBuf,
    pub output: PathBuf,
    pub binary: PathBuf,
    pub kernel: kernel::Source,
    pub files: host::Files,
    /// An initramfs to carry instead of building the rootfs and initramfs (a custom init, the
    /// boot bench's trivial one): the UKI and the disk are built around it.
    pub initramfs: Option<PathBuf>,
    /// The version the image says it is (os-release, the UKI's `.osrel`, the `version`
    /// artifact, the node's `talosctl version`); this binary's own by default.
    pub version: Option<String>,
}

/// One line per step, with the elapsed time.
pub struct Progress {
    start: Instant,
}

impl Progress {
    pub fn new() -> Self {
        Self { start: Instant::now() }
    }
    pub fn step(&self, msg: &str) {
        eprintln!("[imager {:6.1}s] {msg}", self.start.elapsed().as_secs_f64());
    }
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

/// Builds every artifact into `opts.output`; returns (name, size, sha256) per artifact.
pub fn build(opts: &Options, progress: &Progress) -> Result<Vec<(String, u64, String)>, ImagerError> {
    let profile = Profile::load(&opts.profile)?;
    let mut tools = vec![host::MKSQUASHFS, host::DEPMOD, host::MKFS_XFS, host::GRUB_MKIMAGE];
    tools.extend(compressor(profile.initramfs_compression));
    if !matches!(opts.kernel, kernel::Source::Paths { .. }) {
        tools.extend([host::DPKG, host::DPKG_DEB]);
    }
    if matches!(opts.kernel, kernel::Source::Debian { .. }) {
        tools.extend([host::APT_GET, host::APT_CACHE]);
    }
    host::require(&tools, &opts.files.with_packages())?;

    let out = &opts.output;
    std::fs::create_dir_all(out).map_err(io("creating output directory", out))?;
    let out = &out.canonicalize().map_err(io("resolving output directory", out))?;
    let work = out.join(".imager-work");
    if work.exists() {
        std::fs::remove_dir_all(&work).map_err(io("removing stale work directory", &work))?;
    }
    mkdir(&work)?;
    if work.to_string_lossy().contains(char::is_whitespace) {
        return Err(ImagerError::Whitespace { path: work });
    }

    let version = opts.version.clone().unwrap_or_else(|| crate::version::VERSION.to_string());
    if version.is_empty() || !version.chars().all(|c| c.is_ascii_alphanumeric() || ".-+_".contains(c)) {
        return Err(ImagerError::Version(version));
    }
    progress.step("GRUB: the EFI application and the BIOS core image (grub-mkimage)");
    let grub = build_grub_images(&work, &opts.files)?;

    let kernel = kernel::resolve(&opts.kernel, &work, &|m| progress.step(m))?;
    progress.step(&format!("kernel: release {}", kernel.release));

    let binary = std::fs::read(&opts.binary).map_err(io("reading binary", &opts.binary))?;
    // What the binary needs to run (nothing when static), in the initramfs and the rootfs.
    let mut needs = elf::Closure::default();
    needs.add_dependencies(&opts.binary, &binary)?;
    if needs.is_empty() {
        progress.step(&format!("binary: {} is static", opts.binary.display()));
    } else {
        progress.step(&format!(
            "binary: {} is dynamic; carrying its loader and shared libraries ({} paths) in rootfs and initramfs",
            opts.binary.display(),
            needs.len()
        ));
    }

    let (initramfs_name, initramfs) = match &opts.initramfs {
        Some(given) => {
            let data = std::fs::read(given).map_err(io("reading", given))?;
            let name = initramfs_name_of(&data).ok_or_else(|| ImagerError::UnknownInitramfs { path: given.clone() })?;
            progress.step(&format!("{name}: carrying {} as it is; no rootfs", given.display()));
            remove_stale_initramfs(out, name)?;
            for stale in ["rootfs.sqsh", "rootfs-packages"] {
                let path = out.join(stale);
                if path.exists() {
                    std::fs::remove_file(&path).map_err(io("removing", &path))?;
                }
            }
            write_file(&out.join(name), &data, 0o644)?;
            (name, out.join(name))
        }
        None => {
            let name = profile.initramfs_compression.initramfs_name();
            remove_stale_initramfs(out, name)?;
            let roots = trusted_roots(&opts.files.trusted_roots)?;
            build_root(&work, out, &binary, &needs, &kernel, &profile, &grub, &roots, &version, progress)?;
            (name, out.join(name))
        }
    };

    let vmlinuz = out.join("vmlinuz");
    std::fs::copy(&kernel.vmlinuz, &vmlinuz).map_err(io("copying kernel", &kernel.vmlinuz))?;
    set_mode(&vmlinuz, 0o644)?;
    std::fs::write(out.join("kernel-version"), &kernel.description).map_err(io("writing", out))?;

    // What a slot on BOOT holds beside the kernel and initramfs, and what an upgrade takes.
    std::fs::write(out.join("cmdline"), format!("{}\n", profile.cmdline.trim()))
        .map_err(io("writing cmdline in", out))?;
    std::fs::write(out.join("version"), format!("{version}\n")).map_err(io("writing version in", out))?;

    progress.step("talosbox.efi: assembling the UKI");
    write_uki(&out.join("talosbox.efi"), &opts.files, &profile, &vmlinuz, &initramfs, &version)?;

    progress.step("disk.raw: GPT, GRUB, the ESP (FAT32) and BOOT (xfs) with slot A");
    let artifacts = crate::boot::artifacts::Artifacts {
        dir: out.to_path_buf(),
        vmlinuz: vmlinuz.clone(),
        initramfs: initramfs.clone(),
        cmdline: profile.cmdline.trim().to_string(),
        version: version.clone(),
    };
    write_disk(&work, &out.join("disk.raw"), &opts.files, &profile, &grub, &artifacts)?;

    std::fs::remove_dir_all(&work).map_err(io("removing work directory", &work))?;
    progress.step("SHA256SUMS: hashing artifacts");
    let mut sums = String::new();
    let mut report = Vec::new();
    let names: Vec<&str> = artifact_names(initramfs_name)
        .into_iter()
        .filter(|n| opts.initramfs.is_none() || !n.starts_with("rootfs"))
        .collect();
    for name in names {
        let path = out.join(name);
        let sha = sha256_file(&path).map_err(io("hashing", &path))?;
        let size = std::fs::metadata(&path).map_err(io("reading", &path))?.len();
        sums.push_str(&format!("{sha}  {name}\n"));
        report.push((name.to_string(), size, sha));
    }
    std::fs::write(out.join("SHA256SUMS"), sums).map_err(io("writing SHA256SUMS in", out))?;
    Ok(report)
}

fn remove_stale_initramfs(out: &Path, keep: &str) -> Result<(), ImagerError> {
    for stale in INITRAMFS_NAMES.iter().filter(|n| **n != keep) {
        let path = out.join(stale);
        if path.exists() {
            std::fs::remove_file(&path).map_err(io("removing a stale initramfs", &path))?;
        }
    }
    Ok(())
}

/// The rootfs and the initramfs that carries it, with their modules, and the
/// `rootfs-packages` list of the host files the rootfs carries.
#[allow(clippy::too_many_arguments)]
fn build_root(
    work: &Path,
    out: &Path,
    binary: &[u8],
    needs: &elf::Closure,
    kernel: &kernel::Kernel,
    profile: &Profile,
    grub: &crate::boot::install::GrubImages,
    roots: &[u8],
    version: &str,
    progress: &Progress,
) -> Result<(), ImagerError> {
    let mut carried = needs.clone();
    for path in profile.programs.iter().chain(&profile.program_files) {
        carried.add(path)?;
    }
    let manifest = if carried.is_empty() {
        String::new()
    } else {
        host::require(&[host::DPKG_QUERY], &[])?;
        packages::manifest(&carried, &|p| sha256_file(p))?
    };
    progress.step(&format!(
        "rootfs: carrying {} programs and {} data files with their loader and libraries: {} host paths from {} packages",
        profile.programs.len(),
        profile.program_files.len(),
        carried.len(),
        manifest.lines().filter(|l| l.starts_with("package: ")).count()
    ));
    std::fs::write(out.join("rootfs-packages"), &manifest).map_err(io("writing rootfs-packages in", out))?;

    progress.step("modules: choosing the initramfs's and the rootfs's, running depmod");
    let boot_stage = work.join("boot-modules");
    let boot = stage_modules(kernel, &boot_stage, |dep, alias, builtin| {
        kernel::boot_selection(dep, alias, builtin, &profile.modules, &kernel.release)
    })?;
    let rootfs_stage = work.join("rootfs");
    let modules = stage_modules(kernel, &rootfs_stage, |dep, alias, builtin| {
        kernel::rootfs_selection(dep, alias, builtin, &profile.modules, &kernel.release)
    })?;
    progress.step(&format!(
        "modules: initramfs {} files (init loads {}); rootfs {} files (machined loads {} and {} for present devices; built in: {})",
        boot.files.len(),
        boot.load.join(" "),
        modules.files.len(),
        if modules.load.is_empty() { "none".to_string() } else { modules.load.join(" ") },
        modules.by_alias.len(),
        if modules.builtin.is_empty() { "none".to_string() } else { modules.builtin.join(" ") }
    ));

    progress.step(&format!("rootfs.sqsh: staging and running mksquashfs ({:?})", profile.rootfs_compression));
    let rootfs = out.join("rootfs.sqsh");
    stage_rootfs(&rootfs_stage, binary, &carried, &modules.load, profile.network.as_deref(), grub, roots, version)?;
    mksquashfs(&rootfs_stage, &rootfs, profile.source_date_epoch, profile.rootfs_compression)?;

    let name = profile.initramfs_compression.initramfs_name();
    progress.step(&format!("{name}: writing cpio and compressing ({:?})", profile.initramfs_compression));
    write_initramfs(work, &out.join(name), binary, needs, &rootfs, &boot_stage, &boot.load, profile)
}

/// SHA-256 of a file, lowercase hex.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    use sha2::Digest;
    let mut f = File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn mkdir(p: &Path) -> Result<(), ImagerError> {
    std::fs::create_dir_all(p).map_err(io("creating directory", p))?;
    set_mode(p, 0o755)
}

fn set_mode(p: &Path, mode: u32) -> Result<(), ImagerError> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).map_err(io("setting mode of", p))
}

fn write_file(p: &Path, data: &[u8], mode: u32) -> Result<(), ImagerError> {
    if let Some(parent) = p.parent() {
        mkdir(parent)?;
    }
    std::fs::write(p, data).map_err(io("writing", p))?;
    set_mode(p, mode)
}

/// The os-release both the rootfs and the UKI's `.osrel` carry.
pub fn os_release(v: &str) -> String {
    format!(
        "NAME=\"talosbox\"\nID=talosbox\nVERSION_ID={v}\nPRETTY_NAME=\"talosbox {v}\"\n\
         HOME_URL=\"https://github.com/siderolabs/talos\"\n"
    )
}

/// The rootfs: the binary as `/sbin/init` and its names, os-release, the modules machined
/// loads at start (`load`), the profile's network documents, and the host files `carried`
/// (programs, their data, loader and libraries) at their own paths. The module tree is
/// already staged under `lib/modules`.
#[allow(clippy::too_many_arguments)]
fn stage_rootfs(
    stage: &Path,
    binary: &[u8],
    carried: &elf::Closure,
    load: &[String],
    network: Option<&str>,
    grub: &crate::boot::install::GrubImages,
    roots: &[u8],
    version: &str,
) -> Result<(), ImagerError> {
    mkdir(stage)?;
    for d in ROOTFS_DIRS {
        mkdir(&stage.join(d))?;
    }
    write_file(&stage.join("sbin/init"), binary, 0o755)?;
    for name in ROOTFS_LINKS {
        let link = stage.join("sbin").join(name);
        std::os::unix::fs::symlink("init", &link).map_err(io("linking", &link))?;
    }
    write_file(&stage.join("etc/os-release"), os_release(version).as_bytes(), 0o644)?;
    // GRUB's images, for a node that installs itself onto a disk.
    let grub_dir = stage.join(crate::boot::GRUB_IMAGES_DIR.trim_start_matches('/'));
    mkdir(&grub_dir)?;
    for (name, data) in [
        (crate::boot::GRUB_EFI_IMAGE, &grub.efi),
        (crate::boot::GRUB_CORE_IMAGE, &grub.core),
        (crate::boot::GRUB_BOOT_IMAGE, &grub.boot),
    ] {
        write_file(&grub_dir.join(name), data, 0o644)?;
    }
    write_file(&stage.join("etc/talosbox/modules"), module_list(load).as_bytes(), 0o644)?;
    // The image's trusted roots, and the rendered bundle (these plus the configuration's
    // TrustedRootsConfig certificates) where programs look for it.
    let image_roots = stage.join(crate::boot::IMAGE_TRUSTED_ROOTS.trim_start_matches('/'));
    mkdir(image_roots.parent().unwrap_or(stage))?;
    write_file(&image_roots, roots, 0o644)?;
    mkdir(&stage.join("etc/ssl/certs"))?;
    for name in ETC_RENDERED.iter().chain([&crate::resources::files::TRUSTED_ROOTS_FILE]) {
        let link = stage.join("etc").join(name);
        std::os::unix::fs::symlink(Path::new("/system/etc").join(name), &link).map_err(io("linking", &link))?;
    }
    if let Some(network) = network {
        write_file(&stage.join(IMAGE_NETWORK_CONFIG), network.as_bytes(), 0o644)?;
    }
    for (path, how) in carried.entries() {
        let dst = stage.join(path.strip_prefix("/").unwrap_or(path));
        if dst.symlink_metadata().is_ok() {
            return Err(ImagerError::Collision { path: path.to_path_buf() });
        }
        match how {
            elf::Carried::File => {
                let data = std::fs::read(path).map_err(io("reading carried file", path))?;
                write_file(&dst, &data, carried_mode(path)?)?;
            }
            elf::Carried::Symlink(target) => {
                if let Some(parent) = dst.parent() {
                    mkdir(parent)?;
                }
                std::os::unix::fs::symlink(target, &dst).map_err(io("linking", &dst))?;
            }
        }
    }
    Ok(())
}

/// 0755 for a host file anyone may execute, 0644 otherwise: the host's umask and any
/// write bits never reach the image.
fn carried_mode(path: &Path) -> Result<u32, ImagerError> {
    let mode = std::fs::metadata(path).map_err(io("reading carried file", path))?.permissions().mode();
    Ok(if mode & 0o111 != 0 { 0o755 } else { 0o644 })
}

/// `/etc/talosbox/modules`: one name per line.
fn module_list(names: &[String]) -> String {
    names.iter().map(|n| format!("{n}\n")).collect()
}

fn mksquashfs(stage: &Path, out: &Path, epoch: u32, comp: Compression) -> Result<(), ImagerError> {
    if out.exists() {
        std::fs::remove_file(out).map_err(io("removing", out))?;
    }
    let mut cmd = host::command(host::MKSQUASHFS);
    let n = epoch.to_string();
    cmd.arg(stage).arg(out).args(["-noappend", "-no-progress", "-quiet", "-reproducible", "-all-root"]);
    cmd.args(["-mkfs-time", &n, "-all-time", &n, "-processors", "1", "-no-xattrs"]);
    match comp {
        Compression::None => cmd.args(["-noI", "-noD", "-noF", "-noX"]),
        Compression::Gzip => cmd.args(["-comp", "gzip"]),
        Compression::Xz => cmd.args(["-comp", "xz"]),
        // Level 9: within 7 % of 19 in size, twenty times faster to build.
        Compression::Zstd => cmd.args(["-comp", "zstd", "-Xcompression-level", "9"]),
        Compression::Lz4 => cmd.args(["-comp", "lz4", "-Xhc"]),
    };
    cmd.env_remove("SOURCE_DATE_EPOCH");
    host::run(host::MKSQUASHFS, "building rootfs.sqsh", &mut cmd)?;
    set_mode(out, 0o644)
}

/// Copies the modules `choose` picks (from the tree's indexes) into
/// `stage/lib/modules/<release>` with the tree's builtin and order lists, then regenerates the
/// dependency data for just that set.
fn stage_modules(
    k: &kernel::Kernel,
    stage: &Path,
    choose: impl FnOnce(&str, &str, &str) -> Result<kernel::Selection, kernel::KernelError>,
) -> Result<kernel::Selection, ImagerError> {
    let read = |name: &str| {
        let path = k.modules.join(name);
        std::fs::read_to_string(&path).map_err(io("reading", &path))
    };
    let builtin = if k.modules.join("modules.builtin").exists() { read("modules.builtin")? } else { String::new() };
    let sel = choose(&read("modules.dep")?, &read("modules.alias")?, &builtin)?;
    let dst = stage.join("lib/modules").join(&k.release);
    mkdir(&dst)?;
    for f in &sel.files {
        let data = std::fs::read(k.modules.join(f)).map_err(io("reading module", &k.modules.join(f)))?;
        write_file(&dst.join(f), &data, 0o644)?;
    }
    for extra in ["modules.builtin", "modules.builtin.modinfo", "modules.order"] {
        let src = k.modules.join(extra);
        if src.exists() {
            let data = std::fs::read(&src).map_err(io("reading", &src))?;
            write_file(&dst.join(extra), &data, 0o644)?;
        }
    }
    kernel::depmod(stage, &k.release)?;
    Ok(sel)
}

/// Adds every file under `dir` to the archive at `prefix/<relative path>`, in sorted order.
fn add_tree(a: &mut cpio::Archive, dir: &Path, prefix: &str) -> Result<(), ImagerError> {
    let mut entries: Vec<_> =
        std::fs::read_dir(dir).map_err(io("reading", dir))?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let rel = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        if path.is_dir() {
            a.dir(&rel)?;
            add_tree(a, &path, &rel)?;
        } else {
            a.file(&rel, 0o644, std::fs::read(&path).map_err(io("reading", &path))?)?;
        }
    }
    Ok(())
}

/// The tool that compresses the initramfs, if any.
fn compressor(c: Compression) -> Option<host::Tool> {
    match c {
        Compression::None => None,
        Compression::Gzip => Some(host::GZIP),
        Compression::Xz => Some(host::XZ),
        Compression::Zstd => Some(host::ZSTD),
        Compression::Lz4 => Some(host::LZ4),
    }
}

/// The initramfs: init (the binary), the boot modules and their list, the rootfs image, the
/// device nodes init needs before devtmpfs, and a dynamic binary's libraries.
#[allow(clippy::too_many_arguments)]
fn write_initramfs(
    work: &Path,
    out: &Path,
    binary: &[u8],
    needs: &elf::Closure,
    rootfs: &Path,
    modules_stage: &Path,
    load: &[String],
    p: &Profile,
) -> Result<(), ImagerError> {
    let mut a = cpio::Archive::new();
    a.file("init", 0o755, binary.to_vec())?;
    a.file("rootfs.sqsh", 0o644, std::fs::read(rootfs).map_err(io("reading", rootfs))?)?;
    add_tree(&mut a, modules_stage, "")?;
    a.file("etc/talosbox/modules", 0o644, module_list(load).into_bytes())?;
    for d in ["dev", "proc", "sys", "run", "tmp"] {
        a.dir(d)?;
    }
    // The kernel opens /dev/console for /init's stdio before anything mounts devtmpfs.
    a.add("dev/console", cpio::Entry { mode: 0o600, kind: cpio::Kind::CharDev(5, 1) })?;
    for (path, how) in needs.entries() {
        let rel = path.strip_prefix("/").unwrap_or(path).to_string_lossy().into_owned();
        match how {
            elf::Carried::File => {
                let data = std::fs::read(path).map_err(io("reading shared library", path))?;
                a.file(&rel, carried_mode(path)?, data)?;
            }
            elf::Carried::Symlink(target) => a.symlink(&rel, &target.to_string_lossy())?,
        }
    }
    let cpio_path = work.join("initramfs.cpio");
    std::fs::write(&cpio_path, a.encode(p.source_date_epoch)?).map_err(io("writing", &cpio_path))?;
    let Some(tool) = compressor(p.initramfs_compression) else {
        std::fs::rename(&cpio_path, out).map_err(io("moving the initramfs to", out))?;
        return set_mode(out, 0o644);
    };
    let mut cmd = host::command(tool);
    match p.initramfs_compression {
        // Every level decodes at the same speed. Most of the archive is the already compressed
        // rootfs: level 19 saves 4 % over 9 and takes twenty times as long.
        Compression::Zstd => cmd.args(["-q", "-T1", "-9", "--no-progress", "-c"]),
        // The kernel reads only lz4's legacy frame format.
        Compression::Lz4 => cmd.args(["-q", "-l", "-9", "-c"]),
        // The kernel's xz decoder wants crc32.
        Compression::Xz => cmd.args(["--check=crc32", "-T1", "-6", "-c"]),
        Compression::Gzip => cmd.args(["-n", "-9", "-c"]),
        Compression::None => &mut cmd,
    };
    let file = File::create(out).map_err(io("creating", out))?;
    host::run(tool, "compressing the initramfs", cmd.arg(&cpio_path).stdout(file))?;
    set_mode(out, 0o644)
}

fn write_uki(
    out: &Path,
    files: &host::Files,
    p: &Profile,
    vmlinuz: &Path,
    initramfs: &Path,
    version: &str,
) -> Result<(), ImagerError> {
    let stub_path = &files.efi_stub;
    let stub = std::fs::read(stub_path).map_err(io("reading EFI stub", stub_path))?;
    let osrel = os_release(version);
    let linux = std::fs::read(vmlinuz).map_err(io("reading", vmlinuz))?;
    let initrd = std::fs::read(initramfs).map_err(io("reading", initramfs))?;
    let sections = [
        uki::Section { name: ".osrel", data: osrel.as_bytes() },
        uki::Section { name: ".cmdline", data: p.cmdline.as_bytes() },
        uki::Section { name: ".linux", data: &linux },
        uki::Section { name: ".initrd", data: &initrd },
    ];
    let image = uki::assemble(&stub, &sections, p.source_date_epoch)?;
    write_file(out, &image, 0o644)
}

/// `YYYY-MM-DD HH:MM:SS` in UTC, for libfaketime.
pub fn utc_datetime(epoch: u32) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::from(epoch));
    crate::cosi::timestamp::format(t).replace('T', " ").trim_end_matches('Z').to_string()
}

fn grub_mkimage(format: &str, dir: &Path, early: &Path, out: &Path, modules: &[&str]) -> Result<(), ImagerError> {
    let mut cmd = host::command(host::GRUB_MKIMAGE);
    cmd.args(["-O", format, "-d"]).arg(dir).args(["-p", "/grub", "-c"]).arg(early).arg("-o").arg(out).args(modules);
    host::run(host::GRUB_MKIMAGE, &format!("building the {format} image"), &mut cmd)?;
    Ok(())
}

fn seed(epoch: u32, what: &str) -> Vec<u8> {
    format!("talosbox disk.raw {epoch} {what}").into_bytes()
}

/// GRUB's EFI application and BIOS core image (each with the early configuration that finds
/// BOOT), and the BIOS boot sector's code: in the rootfs for a node that installs itself, and
/// on disk.raw.
fn build_grub_images(work: &Path, files: &host::Files) -> Result<crate::boot::install::GrubImages, ImagerError> {
    let early = work.join("early.cfg");
    write_file(&early, grub::early_config(BOOT_LABEL).as_bytes(), 0o644)?;
    let efi_app = work.join("BOOTX64.EFI");
    let efi_modules: Vec<&str> = grub::COMMON_MODULES.iter().chain(grub::EFI_MODULES).copied().collect();
    grub_mkimage("x86_64-efi", &files.grub_efi, &early, &efi_app, &efi_modules)?;
    let core_path = work.join("core.img");
    let pc_modules: Vec<&str> = grub::COMMON_MODULES.iter().chain(grub::PC_MODULES).copied().collect();
    grub_mkimage("i386-pc", &files.grub_pc, &early, &core_path, &pc_modules)?;
    let boot_code_path = files.grub_pc.join("boot.img");
    let read = |p: &Path| std::fs::read(p).map_err(io("reading", p));
    Ok(crate::boot::install::GrubImages { efi: read(&efi_app)?, core: read(&core_path)?, boot: read(&boot_code_path)? })
}

/// disk.raw: the boot partitions as a node's install writes them (the same code), sized to
/// hold them, with BOOT made here by mkfs.xfs from a protofile.
fn write_disk(
    work: &Path,
    out: &Path,
    files: &host::Files,
    p: &Profile,
    grub: &crate::boot::install::GrubImages,
    artifacts: &crate::boot::artifacts::Artifacts,
) -> Result<(), ImagerError> {
    let epoch = p.source_date_epoch;
    let boot_img = work.join("boot.img");
    write_boot_fs(work, &boot_img, &files.faketime, p, artifacts)?;

    let specs =
        crate::boot::partition_specs(&p.disk, |name| Guid::derived(&seed(epoch, &format!("partition {name}"))))?;
    let table = gpt::plan(Guid::derived(&seed(epoch, "disk")), &specs)?;
    let boot_part = table
        .partitions()
        .into_iter()
        .find(|x| x.partition.name == BOOT_LABEL)
        .ok_or(ImagerError::Gpt(gpt::GptError::TooMany(0)))?;
    if out.exists() {
        std::fs::remove_file(out).map_err(io("removing", out))?;
    }
    let disk = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(out)
        .map_err(io("creating", out))?;
    disk.set_len(table.size_bytes()).map_err(io("sizing", out))?;
    let volid =
        u32::from_le_bytes(Guid::derived(&seed(epoch, "EFI volume id")).to_disk()[..4].try_into().unwrap_or([0; 4]));
    let planned = crate::boot::install::Planned { table, kept: false };
    crate::boot::install::write_boot_area(&disk, out, &planned, grub, volid)?;
    let mut disk = disk;
    copy_sparse(&boot_img, &mut disk, boot_part.offset, boot_part.size, out)?;
    disk.sync_all().map_err(io("syncing", out))?;
    set_mode(out, 0o644)
}

/// Copies a filesystem image into the disk at `offset`, skipping all-zero blocks so the
/// disk stays sparse.
fn copy_sparse(src: &Path, disk: &mut File, offset: u64, room: u64, out: &Path) -> Result<(), ImagerError> {
    let mut f = File::open(src).map_err(io("reading", src))?;
    let len = f.metadata().map_err(io("reading", src))?.len();
    if len > room {
        return Err(ImagerError::Io {
            what: "fitting filesystem image",
            path: src.to_path_buf(),
            source: std::io::Error::other(format!("{len} bytes exceed the {room}-byte partition")),
        });
    }
    let mut buf = vec![0u8; 1 << 16];
    let mut pos = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(io("reading", src))?;
        if n == 0 {
            break;
        }
        if buf[..n].iter().any(|b| *b != 0) {
            disk.seek(SeekFrom::Start(offset + pos))
                .and_then(|_| disk.write_all(&buf[..n]))
                .map_err(io("writing", out))?;
        }
        pos += n as u64;
    }
    Ok(())
}

fn write_boot_fs(
    work: &Path,
    img: &Path,
    faketime: &Path,
    p: &Profile,
    artifacts: &crate::boot::artifacts::Artifacts,
) -> Result<(), ImagerError> {
    // BOOT's tree staged as a node's install writes it (slot A, grub.cfg, grubenv), then put
    // into the filesystem by a protofile: no mount at build time.
    let tree = work.join("boot-tree");
    if tree.exists() {
        std::fs::remove_dir_all(&tree).map_err(io("removing", &tree))?;
    }
    mkdir(&tree)?;
    let boot = crate::boot::slots::Boot::at(&tree);
    boot.write_slot(crate::boot::slots::Slot::A, None, artifacts).map_err(|e| ImagerError::Io {
        what: "staging BOOT",
        path: tree.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let staged = |e: crate::boot::slots::SlotError| ImagerError::Io {
        what: "staging BOOT",
        path: tree.clone(),
        source: std::io::Error::other(e.to_string()),
    };
    // The profile's menu timeout: grub.cfg keeps the one it finds.
    let cfg = boot.grub_cfg();
    mkdir(cfg.parent().unwrap_or(&tree))?;
    write_file(&cfg, format!("set timeout={}\n", p.grub_timeout).as_bytes(), 0o644)?;
    boot.write_config().map_err(staged)?;
    boot.create_env(crate::boot::slots::Slot::A).map_err(staged)?;
    let proto_path = work.join("boot.proto");
    write_file(&proto_path, protofile(&tree)?.as_bytes(), 0o644)?;
    let f = File::create(img).map_err(io("creating", img))?;
    f.set_len(p.disk.boot_mib << 20).map_err(io("sizing", img))?;
    drop(f);
    let uuid = Guid::derived(&seed(p.source_date_epoch, "BOOT filesystem uuid")).to_string();
    let mut cmd: Command = host::command(host::MKFS_XFS);
    cmd.args(["-q", "-f", "-L", BOOT_LABEL, "-m"]).arg(format!("uuid={uuid}")).arg("-p").arg(&proto_path).arg(img);
    cmd.env("LD_PRELOAD", faketime)
        .env("FAKETIME", utc_datetime(p.source_date_epoch))
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("TZ", "UTC");
    if p.disk.boot_mib < 300 {
        // mkfs.xfs refuses filesystems under 300 MB outside its own test suite.
        cmd.env("TEST_DIR", "1").env("TEST_DEV", "1").env("QA_CHECK_FS", "1");
    }
    host::run(host::MKFS_XFS, "formatting BOOT", &mut cmd)?;
    Ok(())
}

/// An mkfs.xfs protofile for the tree at `root`: directories 0755, files 0644, owned by root,
/// in name order.
fn protofile(root: &Path) -> Result<String, ImagerError> {
    fn walk(dir: &Path, depth: usize, out: &mut String) -> Result<(), ImagerError> {
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(dir).map_err(io("reading", dir))?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        let indent = " ".repeat(depth);
        for path in entries {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if path.is_dir() {
                out.push_str(&format!("{indent}{name} d--755 0 0\n"));
                walk(&path, depth + 1, out)?;
                out.push_str(&format!("{indent}$\n"));
            } else {
                out.push_str(&format!("{indent}{name} ---644 0 0 {}\n", path.display()));
            }
        }
        Ok(())
    }
    let mut out = String::from("/dev/null\n0 0\nd--755 0 0\n");
    walk(root, 1, &mut out)?;
    out.push_str("$\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_imager_puts_the_file_where_machined_reads_it() {
        assert_eq!(format!("/{}", IMAGE_NETWORK_CONFIG), crate::boot::IMAGE_NETWORK_CONFIG_PATH);
    }

    #[test]
    fn utc_datetime_table() {
        for (epoch, want) in [
            (0, "1970-01-01 00:00:00"),
            (1_700_000_000, "2023-11-14 22:13:20"),
            (951_782_400, "2000-02-29 00:00:00"),
            (4_102_444_799, "2099-12-31 23:59:59"),
        ] {
            assert_eq!(utc_datetime(epoch), want);
        }
    }
}
