# A STAND-IN for nixpkgs, for machines where nixpkgs cannot be fetched. It is not nixpkgs: its
# few attributes are thin wrappers over the host's own tools (Debian's cargo, kernel, systemd
# EFI stub, GRUB, OVMF …), shaped like the nixpkgs attributes the flake uses, so that
#   nix build .#uki --override-input nixpkgs path:nix/stub-nixpkgs
# really runs the flake's own build scripts here (with the sandbox off). It proves the flake's
# wiring and scripts; it proves nothing about nixpkgs' packages (nix/README.md says which
# attributes were checked against the pinned nixpkgs, and where).
{
  description = "stand-in nixpkgs wrapping host tools, for checking talosbox's flake offline";
  outputs =
    { self }:
    {
      lib = import ./lib.nix;
      legacyPackages.x86_64-linux = import ./pkgs.nix;
    };
}
