# `checks.boot`: the flake's kernel and initramfs boot to machined's maintenance stage under
# QEMU (TCG, no network: the build sandbox has none); the serial log is the output.
{ pkgs, images }:
pkgs.runCommand "talosbox-boot-check" { nativeBuildInputs = [ pkgs.qemu ]; } ''
  log="$out"
  qemu-system-x86_64 -accel tcg -m 1024 -smp 2 -display none -monitor none -no-reboot \
    -serial "file:$log" -kernel ${images.all}/vmlinuz -initrd ${images.initramfs} \
    -append "console=ttyS0,115200 printk.devkmsg=on talos.platform=metal" -daemonize -pidfile qemu.pid
  for _ in $(seq 1 300); do
    if grep -aq '\[talosbox\] stage: maintenance' "$log"; then
      kill "$(cat qemu.pid)"
      exit 0
    fi
    sleep 1
  done
  kill "$(cat qemu.pid)" || true
  echo "no maintenance stage within 300 s; serial log:" >&2
  tail -40 "$log" >&2
  exit 1
''
