# The talosbox binary from Cargo.lock. With pkgsStatic's rustPlatform it is a static musl
# binary, as the node needs. `checkOnly` gives the unit-test check instead: the tests that need
# no root, QEMU or kernel (the rest run in tests/run).
{
  lib,
  rustPlatform,
  src,
  # The commit the binary reports (`talosctl version`); Nix's copy of the source has no `.git`.
  commit ? "unknown",
  checkOnly ? false,
}:
rustPlatform.buildRustPackage {
  pname = if checkOnly then "talosbox-unit-tests" else "talosbox";
  version = (builtins.fromTOML (builtins.readFile (src + "/Cargo.toml"))).package.version;
  inherit src;
  TALOSBOX_GIT_COMMIT = commit;
  cargoLock.lockFile = src + "/Cargo.lock";
  doCheck = checkOnly;
  cargoTestFlags = [ "--lib" ];
  meta = {
    description = "One binary, many names: init, machined, apid, trustd, talosctl, imager";
    license = lib.licenses.mpl20;
    mainProgram = "talosbox";
  };
}
