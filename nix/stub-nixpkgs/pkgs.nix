# The stand-in package set. Every derivation runs the host's bash with the host's PATH (the
# sandbox must be off); a tool is its host binaries linked into $out/bin.
let
  system = "x86_64-linux";
  lib = import ./lib.nix;
  hostPath = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

  mkDerivation =
    {
      name,
      script,
      nativeBuildInputs ? [ ],
      passthru ? { },
      ...
    }@attrs:
    let
      env = removeAttrs attrs [
        "script"
        "nativeBuildInputs"
        "passthru"
        "meta"
      ];
      drv = derivation (
        env
        // {
          inherit system;
          builder = "/bin/bash";
          # The script ends on a builtin. Otherwise bash execs its last command, and a
          # coreutils one closes stdout before it exits: Nix takes the log pipe's EOF for
          # the builder's end, kills it, and reports "failed due to signal 9".
          args = [
            "-euc"
            (script + "\n:\n")
          ];
          PATH = lib.makeBinPath nativeBuildInputs + ":" + hostPath;
        }
      );
    in
    drv // passthru // { meta = attrs.meta or { }; };

  runCommand =
    name: env: script:
    mkDerivation (env // { inherit name script; });

  # A host tool: its binaries (absolute paths) linked into $out/bin.
  hostTool =
    name: binaries:
    runCommand name { } ''
      mkdir -p $out/bin
      for b in ${builtins.concatStringsSep " " binaries}; do
        [ -e "$b" ] || { echo "stand-in ${name}: host binary $b is missing" >&2; exit 1; }
        ln -s "$b" $out/bin/
      done
    '';

  # Debian's cloud kernel, unpacked by the imager into its cache (tests/run does that first).
  kernel = runCommand "linux-debian-cloud" { } ''
    tree=$(ls -d /var/cache/talosbox/kernel/*/ 2>/dev/null | head -1)
    [ -n "$tree" ] || { echo "stand-in kernel: no unpacked kernel under /var/cache/talosbox/kernel" >&2; exit 1; }
    mkdir -p $out/lib/modules
    ln -s "$tree"boot/vmlinuz-* $out/bzImage
    for m in "$tree"lib/modules/*; do ln -s "$m" $out/lib/modules/; done
  '';

  # Debian's cargo with the crates cached on this machine, offline; glibc static (no musl here).
  buildRustPackage =
    {
      pname,
      version,
      src,
      doCheck ? true,
      cargoTestFlags ? [ ],
      ...
    }@attrs:
    # Every other string attribute is the build's environment, as in nixpkgs.
    let
      rest = removeAttrs attrs [
        "pname"
        "version"
        "src"
      ];
      env = builtins.listToAttrs (
        builtins.concatMap (
          n:
          if builtins.isString rest.${n} then
            [
              {
                name = n;
                value = rest.${n};
              }
            ]
          else
            [ ]
        ) (builtins.attrNames rest)
      );
    in
    runCommand "${pname}-${version}" env ''
      export HOME=/root CARGO_HOME=''${CARGO_HOME:-/root/.cargo}
      # The host's target directory when tests/nix-flake links it here (what tests/run built
      # is in it), and one fixed source directory brought level with the flake's source: a
      # file whose content differs is written anew (a new mtime, so cargo rebuilds from it),
      # one that is the same keeps its mtime, a file the source lacks goes. Cargo's artifacts
      # are keyed by paths relative to the workspace, so a build tests/run made from the same
      # files is fresh here, as a binary cache would make it under real Nix.
      export CARGO_TARGET_DIR=/var/cache/talosbox/nix-target
      export PATH="$CARGO_HOME/bin:$PATH"
      python3 - ${src} /var/cache/talosbox/nix-src <<'TALOSBOX_SYNC_EOF'
      import filecmp, os, shutil, sys
      src, dst = sys.argv[1], sys.argv[2]
      os.makedirs(dst, exist_ok=True)
      want = set()
      for root, dirs, files in os.walk(src):
          rel = os.path.relpath(root, src)
          os.makedirs(os.path.join(dst, rel), exist_ok=True)
          for f in files:
              s, d = os.path.join(root, f), os.path.normpath(os.path.join(dst, rel, f))
              want.add(d)
              if os.path.islink(d) or not os.path.isfile(d) or not filecmp.cmp(s, d, shallow=False):
                  if os.path.lexists(d):
                      os.remove(d)
                  shutil.copyfile(s, d)
                  os.chmod(d, 0o755 if os.access(s, os.X_OK) else 0o644)
      for root, dirs, files in os.walk(dst, topdown=False):
          for f in files:
              p = os.path.join(root, f)
              if p not in want:
                  os.remove(p)
          if root != dst and not os.listdir(root):
              os.rmdir(root)
      TALOSBOX_SYNC_EOF
      cd /var/cache/talosbox/nix-src
      ${
        if doCheck then
          ''
            cargo test --offline --locked ${builtins.concatStringsSep " " cargoTestFlags}
            mkdir -p $out
            echo passed > $out/result
          ''
        else
          ''
            RUSTFLAGS="-C target-feature=+crt-static" cargo build --offline --locked --release \
              --target x86_64-unknown-linux-gnu --bin talosbox
            mkdir -p $out/bin
            cp "$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/talosbox" $out/bin/
          ''
      }
    '';
  rustPlatform = { inherit buildRustPackage; };

  ovmf = runCommand "OVMF-debian" { } ''
    mkdir -p $out/FV
    ln -s /usr/share/OVMF/OVMF_CODE_4M.fd $out/FV/OVMF_CODE.fd
    ln -s /usr/share/OVMF/OVMF_VARS_4M.fd $out/FV/OVMF_VARS.fd
  '';
in
{
  inherit lib runCommand rustPlatform;
  pkgsStatic = { inherit rustPlatform; };

  writeShellScriptBin =
    name: text:
    runCommand name { } ''
      mkdir -p $out/bin
      cat > $out/bin/${name} <<'TALOSBOX_STUB_EOF'
      #!/bin/bash
      ${text}
      TALOSBOX_STUB_EOF
      chmod +x $out/bin/${name}
    '';

  mkShell =
    {
      packages ? [ ],
      ...
    }:
    runCommand "shell" { nativeBuildInputs = packages; } "echo $PATH > $out";

  linuxPackages = { inherit kernel; };

  systemd = runCommand "systemd-debian" { } ''
    mkdir -p $out/lib/systemd/boot/efi
    ln -s /usr/lib/systemd/boot/efi/linuxx64.efi.stub $out/lib/systemd/boot/efi/
  '';

  grub2 = runCommand "grub-debian-pc" { } ''
    mkdir -p $out/lib/grub $out/bin
    ln -s /usr/lib/grub/i386-pc $out/lib/grub/
    ln -s /usr/bin/grub-mkimage $out/bin/
  '';
  grub2_efi = runCommand "grub-debian-efi" { } ''
    mkdir -p $out/lib/grub
    ln -s /usr/lib/grub/x86_64-efi $out/lib/grub/
  '';

  OVMF = ovmf // {
    firmware = "${ovmf}/FV/OVMF_CODE.fd";
    variables = "${ovmf}/FV/OVMF_VARS.fd";
  };

  libfaketime = runCommand "libfaketime-debian" { } ''
    mkdir -p $out/lib
    ln -s /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 $out/lib/
  '';

  # nixpkgs' cacert keeps its bundle at etc/ssl/certs/ca-bundle.crt.
  cacert = runCommand "cacert-debian" { } ''
    mkdir -p $out/etc/ssl/certs
    ln -s /etc/ssl/certs/ca-certificates.crt $out/etc/ssl/certs/ca-bundle.crt
  '';

  squashfsTools = hostTool "squashfs-tools" [
    "/usr/bin/mksquashfs"
    "/usr/bin/unsquashfs"
  ];
  xfsprogs = hostTool "xfsprogs" [ "/usr/sbin/mkfs.xfs" ];
  dosfstools = hostTool "dosfstools" [ "/usr/sbin/mkfs.fat" ];
  mtools = hostTool "mtools" [
    "/usr/bin/mmd"
    "/usr/bin/mcopy"
  ];
  kmod = hostTool "kmod" [ "/usr/sbin/depmod" ];
  lz4 = hostTool "lz4" [ "/usr/bin/lz4" ];
  zstd = hostTool "zstd" [ "/usr/bin/zstd" ];
  xz = hostTool "xz" [ "/usr/bin/xz" ];
  cpio = hostTool "cpio" [ "/usr/bin/cpio" ];
  qemu = hostTool "qemu" [ "/usr/bin/qemu-system-x86_64" ];
  swtpm = hostTool "swtpm" [ "/usr/bin/swtpm" ];
  coreutils = hostTool "coreutils" [ "/usr/bin/timeout" ];
  cargo = hostTool "cargo" [ "/root/.cargo/bin/cargo" ];
  rustc = hostTool "rustc" [ "/root/.cargo/bin/rustc" ];
  clippy = hostTool "clippy" [ "/root/.cargo/bin/cargo-clippy" ];
  rustfmt = hostTool "rustfmt" [ "/root/.cargo/bin/rustfmt" ];
  nixfmt-rfc-style = runCommand "nixfmt-stand-in" { } ''
    mkdir -p $out/bin
    printf '#!/bin/sh\necho "the stand-in nixpkgs has no nixfmt: use the real nixpkgs" >&2\nexit 1\n' > $out/bin/nixfmt
    chmod +x $out/bin/nixfmt
  '';
}
