{
  description = "talosbox: an immutable, API-only Linux OS in the design of Talos Linux, written in Rust";

  # One input, pinned in flake.lock. Every attribute and path used from it is listed, with where
  # it was confirmed, in nix/README.md.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.11";

  outputs =
    { self, nixpkgs }:
    let
      system = "x86_64-linux";
      pkgs = nixpkgs.legacyPackages.${system};
      talosbox = import ./nix/talosbox.nix {
        inherit (pkgs) lib;
        # musl, linked statically: the binary is the node's whole userland.
        rustPlatform = pkgs.pkgsStatic.rustPlatform;
        src = self;
        # Its first 12 digits, as tests/run gives it; a tree with uncommitted changes has no rev.
        commit = builtins.substring 0 12 (self.rev or "dirty");
      };
      images = import ./nix/images.nix {
        inherit pkgs talosbox;
        src = self;
      };
      vm = import ./nix/vm.nix { inherit pkgs talosbox images; };
    in
    {
      packages.${system} = {
        inherit talosbox;
        inherit (images)
          rootfs
          initramfs
          uki
          disk-image
          ;
        default = images.uki;
      };

      apps.${system} = {
        vm = {
          type = "app";
          program = "${vm}/bin/talosbox-vm";
        };
        default = self.apps.${system}.vm;
      };

      checks.${system} = {
        # The pure tests (no root, no QEMU); the rest run in tests/run.
        unit = import ./nix/talosbox.nix {
          inherit (pkgs) lib;
          rustPlatform = pkgs.pkgsStatic.rustPlatform;
          src = self;
          checkOnly = true;
        };
        boot = import ./nix/boot-check.nix { inherit pkgs images; };
      };

      devShells.${system}.default = pkgs.mkShell {
        packages = with pkgs; [
          cargo
          rustc
          clippy
          rustfmt
          squashfsTools
          xfsprogs
          dosfstools
          mtools
          kmod
          lz4
          zstd
          xz
          cpio
          grub2
          qemu
          swtpm
          libfaketime
        ];
      };

      formatter.${system} = pkgs.nixfmt-rfc-style;
    };
}
