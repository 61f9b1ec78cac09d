# The few nixpkgs `lib` functions the flake uses.
{
  makeBinPath = paths: builtins.concatStringsSep ":" (map (p: "${p}/bin") paths);
  licenses.mpl20 = {
    spdxId = "MPL-2.0";
  };
}
