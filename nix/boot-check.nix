# `checks.boot`: the flake's kernel and initramfs boot to machined's maintenance stage under
# QEMU (TCG, no network: the build sandbox has none); the serial log is the output, copied
# once QEMU has exited.
{ pkgs, images }:
pkgs.runCommand "talosbox-boot-check" { nativeBuildInputs = [ pkgs.qemu ]; } ''
  log="$PWD/serial.log"
  qemu-system-x86_64 -accel tcg -m 1024 -smp 2 -display none -monitor none -no-reboot \
    -nic none -serial "file:$log" -kernel ${images.all}/vmlinuz -initrd ${images.initramfs} \
    -append "console=ttyS0,115200 printk.devkmsg=on talos.platform=metal" \
    </dev/null >qemu.out 2>&1 &
  qemu=$!
  booted=0
  for _ in $(seq 1 300); do
    if grep -aq '\[talosbox\] stage: maintenance' "$log" 2>/dev/null; then
      booted=1
      break
    fi
    kill -0 "$qemu" 2>/dev/null || break
    sleep 1
  done
  kill "$qemu" 2>/dev/null || true
  wait "$qemu" || true
  if [ "$booted" != 1 ]; then
    echo "no maintenance stage within 300 s; serial log:" >&2
    tail -40 "$log" qemu.out >&2
    exit 1
  fi
  cp "$log" "$out"
''
