# `nix run .#vm`: one node from the flake's UKI under OVMF, with `talosctl cluster create`;
# KVM when a guest really runs under it, TCG otherwise, and it says which. Arguments go to
# cluster create (`--name`, `--workers N`, `--with-tpm` …).
{
  pkgs,
  talosbox,
  images,
}:
pkgs.writeShellScriptBin "talosbox-vm" ''
  set -eu
  export PATH=${
    pkgs.lib.makeBinPath (
      with pkgs;
      [
        qemu
        dosfstools
        mtools
        swtpm
        coreutils
      ]
    )
  }:$PATH
  accel=tcg
  # /dev/kvm can open and still hang the first vCPU: boot the kernel under KVM for a moment and
  # look for its first line on the serial console.
  if [ -w /dev/kvm ] && timeout 20 qemu-system-x86_64 -accel kvm -m 256 -nodefaults -display none \
      -no-reboot -serial stdio -kernel ${images.all}/vmlinuz -append "console=ttyS0 panic=-1" \
      2>/dev/null | grep -a -m1 -q "Linux version"; then
    accel=kvm
    echo "talosbox-vm: /dev/kvm works: booting with KVM"
  else
    echo "talosbox-vm: no working /dev/kvm: booting under TCG (software emulation, slower)"
  fi
  exec ${talosbox}/bin/talosbox talosctl cluster create \
    --uki ${images.uki} \
    --ovmf-code ${pkgs.OVMF.firmware} \
    --ovmf-vars ${pkgs.OVMF.variables} \
    --accel "$accel" \
    --wait "$@"
''
