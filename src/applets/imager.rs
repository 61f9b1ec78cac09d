//! `imager`: builds the image set (rootfs, initramfs, kernel, UKI, GRUB disk, checksums)
//! from this binary (or another), a kernel and a profile. Thin: flags here, work in
//! `crate::imager`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use crate::imager::{self, kernel::Source};

#[derive(Debug, Parser)]
#[command(name = "imager", about = "Assemble talosbox boot artifacts", version = crate::version::VERSION)]
struct Cli {
    /// Image profile (YAML), e.g. images/qemu.yaml.
    #[arg(long)]
    profile: PathBuf,
    /// Output directory for the artifacts.
    #[arg(long)]
    output: PathBuf,
    /// The talosbox binary to put into the image (default: this executable).
    #[arg(long)]
    binary: Option<PathBuf>,
    /// A Debian linux-image .deb to use instead of resolving the cloud kernel.
    #[arg(long, conflicts_with_all = ["kernel", "modules"])]
    kernel_deb: Option<PathBuf>,
    /// A kernel image to use (with --modules).
    #[arg(long, requires = "modules")]
    kernel: Option<PathBuf>,
    /// The module tree for --kernel: the `lib/modules/<release>` directory.
    #[arg(long, requires = "kernel")]
    modules: Option<PathBuf>,
    /// Where Debian kernel packages are downloaded and unpacked, reused across builds.
    #[arg(long, default_value = "/var/cache/talosbox/kernel")]
    kernel_cache: PathBuf,
    /// systemd's EFI stub [default: Debian's systemd-boot-efi path].
    #[arg(long)]
    efi_stub: Option<PathBuf>,
    /// GRUB's i386-pc directory [default: /usr/lib/grub/i386-pc].
    #[arg(long)]
    grub_pc_dir: Option<PathBuf>,
    /// GRUB's x86_64-efi directory [default: /usr/lib/grub/x86_64-efi].
    #[arg(long)]
    grub_efi_dir: Option<PathBuf>,
    /// libfaketime's libfaketimeMT.so.1 [default: Debian's libfaketime path].
    #[arg(long)]
    faketime_lib: Option<PathBuf>,
    /// The PEM bundle of CAs the node trusts for https, carried in the rootfs
    /// [default: /etc/ssl/certs/ca-certificates.crt].
    #[arg(long, value_name = "PEM")]
    trusted_roots: Option<PathBuf>,
    /// Carry this initramfs (cpio, zstd, xz, lz4 or gzip) instead of building the rootfs and the
    /// initramfs: a custom init booted down every path (the boot bench's trivial init).
    #[arg(long)]
    initramfs: Option<PathBuf>,
    /// The version the image says it is (os-release, the UKI, the `version` artifact, what a
    /// node's `talosctl version` reports) [default: this binary's].
    #[arg(long, value_name = "VERSION")]
    os_version: Option<String>,
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    let binary = match cli.binary {
        Some(b) => b,
        None => match std::env::current_exe() {
            Ok(b) => b,
            Err(e) => {
                eprintln!("imager: finding this executable: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let kernel = match (cli.kernel_deb, cli.kernel, cli.modules) {
        (Some(deb), _, _) => Source::Deb { deb, cache: cli.kernel_cache },
        (None, Some(kernel), Some(modules)) => Source::Paths { kernel, modules },
        _ => Source::Debian { cache: cli.kernel_cache },
    };
    let mut files = imager::host::Files::default();
    for (flag, slot) in [
        (cli.efi_stub, &mut files.efi_stub),
        (cli.grub_pc_dir, &mut files.grub_pc),
        (cli.grub_efi_dir, &mut files.grub_efi),
        (cli.faketime_lib, &mut files.faketime),
        (cli.trusted_roots, &mut files.trusted_roots),
    ] {
        if let Some(path) = flag {
            *slot = path;
        }
    }
    let opts = imager::Options {
        profile: cli.profile,
        output: cli.output.clone(),
        binary,
        kernel,
        files,
        initramfs: cli.initramfs,
        version: cli.os_version,
    };
    let progress = imager::Progress::new();
    match imager::build(&opts, &progress) {
        Ok(report) => {
            progress.step(&format!("done: {}", cli.output.display()));
            for (name, size, sha) in report {
                println!("{sha}  {size:>12}  {name}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("imager: {e}");
            ExitCode::FAILURE
        }
    }
}
