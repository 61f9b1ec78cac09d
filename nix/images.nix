# The image set, built by the same `talosbox imager` the tests run, from nixpkgs' kernel (its
# modules come .ko.xz: the imager carries them as they are, init decompresses them), systemd's
# EFI stub, GRUB, libfaketime and the CA bundle. One build; each artifact is a derivation of its
# own file.
{
  pkgs,
  talosbox,
  src,
  kernel ? pkgs.linuxPackages.kernel,
}:
let
  all =
    pkgs.runCommand "talosbox-images"
      {
        nativeBuildInputs = with pkgs; [
          squashfsTools
          xfsprogs
          dosfstools
          mtools
          kmod
          lz4
          grub2
        ];
      }
      ''
        modules=$(echo ${kernel}/lib/modules/*)
        ${talosbox}/bin/talosbox imager \
          --profile ${src}/images/qemu.yaml \
          --output "$out" \
          --binary ${talosbox}/bin/talosbox \
          --kernel ${kernel}/bzImage \
          --modules "$modules" \
          --efi-stub ${pkgs.systemd}/lib/systemd/boot/efi/linuxx64.efi.stub \
          --grub-pc-dir ${pkgs.grub2}/lib/grub/i386-pc \
          --grub-efi-dir ${pkgs.grub2_efi}/lib/grub/x86_64-efi \
          --faketime-lib ${pkgs.libfaketime}/lib/libfaketimeMT.so.1 \
          --trusted-roots ${pkgs.cacert}/etc/ssl/certs/ca-bundle.crt
      '';
  pick = name: file: pkgs.runCommand name { } "cp ${all}/${file} $out";
in
{
  inherit all;
  rootfs = pick "rootfs.sqsh" "rootfs.sqsh";
  initramfs = pick "initramfs.lz4" "initramfs.lz4";
  uki = pick "talosbox.efi" "talosbox.efi";
  disk-image = pick "disk.raw" "disk.raw";
}
