//! Which Debian packages the host files a rootfs carries come from, at which versions: the
//! `rootfs-packages` artifact. A carried program's output (mkfs.xfs's and mke2fs's on-disk
//! defaults) depends on those versions, so an image says which it has.
//!
//! Asks `dpkg-query` (`-S` for owners, `-W` for versions) and renders the text; it never
//! installs or changes anything on the host.

use super::elf::{Carried, Closure};
use super::host::{self, HostError};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PackagesError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("hashing carried file {}: {source}", path.display())]
    Hash { path: PathBuf, source: std::io::Error },
}

/// The names a path may be registered under in dpkg's database on a merged-/usr host, where
/// `/lib` is `/usr/lib` but each package lists the name it was built with.
pub fn aliases(path: &Path) -> Vec<PathBuf> {
    let mut names = vec![path.to_path_buf()];
    match path.strip_prefix("/usr") {
        Ok(rest) => names.push(Path::new("/").join(rest)),
        Err(_) => names.push(Path::new("/usr").join(path.strip_prefix("/").unwrap_or(path))),
    }
    names
}

/// `dpkg-query -S` output: `pkg[, pkg…]: /path` per line; diversion lines are skipped.
pub fn parse_search(text: &str) -> BTreeMap<PathBuf, Vec<String>> {
    let mut owners = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with("diversion by ")) {
        if let Some((pkgs, path)) = line.split_once(": /") {
            let pkgs = pkgs.split(", ").map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect();
            owners.insert(Path::new("/").join(path), pkgs);
        }
    }
    owners
}

/// The packages owning each carried path (under any of its [`aliases`]); unowned paths are absent.
pub fn owners(closure: &Closure) -> Result<BTreeMap<PathBuf, Vec<String>>, PackagesError> {
    let mut cmd = host::command(host::DPKG_QUERY);
    cmd.arg("-S");
    for (path, _) in closure.entries() {
        cmd.args(aliases(path));
    }
    let what = "finding the packages of the carried files";
    let out =
        cmd.output().map_err(|source| HostError::Spawn { tool: host::DPKG_QUERY.name, what: what.into(), source })?;
    // Exit status 1: some name is in no package, which every path but one of its aliases is.
    if !matches!(out.status.code(), Some(0 | 1)) {
        return Err(HostError::Failed {
            tool: host::DPKG_QUERY.name,
            what: what.into(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
        .into());
    }
    let found = parse_search(&String::from_utf8_lossy(&out.stdout));
    Ok(closure
        .entries()
        .filter_map(|(path, _)| {
            let pkgs = aliases(path).iter().find_map(|a| found.get(a))?;
            Some((path.to_path_buf(), pkgs.clone()))
        })
        .collect())
}

/// `package version` for each package, as `dpkg-query -W` prints them.
pub fn versions(packages: &BTreeSet<String>) -> Result<Vec<String>, PackagesError> {
    if packages.is_empty() {
        return Ok(Vec::new());
    }
    let mut cmd = host::command(host::DPKG_QUERY);
    cmd.args(["-W", "-f", "${binary:Package} ${Version}\\n"]).args(packages);
    let out = host::run(host::DPKG_QUERY, "reading the versions of the carried packages", &mut cmd)?;
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    lines.sort();
    Ok(lines)
}

/// The `rootfs-packages` text: a `package: name version` line per package, then a line per
/// carried path, `file: path sha256 package` or `link: path -> target package` (`-` when no
/// package owns it).
pub fn render(
    closure: &Closure,
    owners: &BTreeMap<PathBuf, Vec<String>>,
    versions: &[String],
    sha256: &dyn Fn(&Path) -> std::io::Result<String>,
) -> Result<String, PackagesError> {
    let mut text: String = versions.iter().map(|v| format!("package: {v}\n")).collect();
    for (path, carried) in closure.entries() {
        let owner = owners.get(path).map_or_else(|| "-".to_string(), |p| p.join(","));
        match carried {
            Carried::File => {
                let sha = sha256(path).map_err(|source| PackagesError::Hash { path: path.to_path_buf(), source })?;
                text.push_str(&format!("file: {} {sha} {owner}\n", path.display()));
            }
            Carried::Symlink(target) => {
                text.push_str(&format!("link: {} -> {} {owner}\n", path.display(), target.display()));
            }
        }
    }
    Ok(text)
}

/// Owners, versions and the rendered text in one go.
pub fn manifest(closure: &Closure, sha256: &dyn Fn(&Path) -> std::io::Result<String>) -> Result<String, PackagesError> {
    if closure.is_empty() {
        return Ok(String::new());
    }
    let owners = owners(closure)?;
    let packages: BTreeSet<String> = owners.values().flatten().cloned().collect();
    render(closure, &owners, &versions(&packages)?, sha256)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_cross_merged_usr() {
        assert_eq!(
            aliases(Path::new("/usr/sbin/mkfs.xfs")),
            [Path::new("/usr/sbin/mkfs.xfs"), Path::new("/sbin/mkfs.xfs")]
        );
        assert_eq!(aliases(Path::new("/lib64/ld.so")), [Path::new("/lib64/ld.so"), Path::new("/usr/lib64/ld.so")]);
    }

    #[test]
    fn search_output() {
        let text = "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6\n\
                    diversion by dash from: /bin/sh\n\
                    diversion by dash to: /bin/sh.distrib\n\
                    dash, bash: /bin/sh\n\
                    e2fsprogs: /etc/mke2fs.conf\n";
        let owners = parse_search(text);
        assert_eq!(owners[Path::new("/lib/x86_64-linux-gnu/libc.so.6")], ["libc6:amd64"]);
        assert_eq!(owners[Path::new("/bin/sh")], ["dash", "bash"]);
        assert_eq!(owners[Path::new("/etc/mke2fs.conf")], ["e2fsprogs"]);
        assert_eq!(owners.len(), 3);
    }

    #[test]
    fn manifest_of_mkfs_ext4_names_e2fsprogs_at_its_version() {
        let mut c = Closure::default();
        c.add(Path::new("/usr/sbin/mkfs.ext4")).unwrap();
        c.add(Path::new("/etc/mke2fs.conf")).unwrap();
        let text = manifest(&c, &|p| super::super::sha256_file(p)).unwrap();
        let version =
            std::process::Command::new("dpkg-query").args(["-W", "-f", "${Version}", "e2fsprogs"]).output().unwrap();
        let want = format!("package: e2fsprogs {}", String::from_utf8_lossy(&version.stdout));
        assert!(text.lines().any(|l| l == want), "{want:?} missing:\n{text}");
        assert!(text.lines().any(|l| l.starts_with("package: libc6:amd64 ")), "{text}");
        assert!(text.lines().any(|l| l == "link: /usr/sbin/mkfs.ext4 -> mke2fs e2fsprogs"), "{text}");
        let conf = text.lines().find(|l| l.starts_with("file: /etc/mke2fs.conf ")).unwrap();
        assert!(conf.ends_with(" e2fsprogs") && conf.split(' ').nth(2).unwrap().len() == 64, "{conf}");
        // Every carried path has a line; every one comes from some package on a Debian host.
        assert_eq!(text.lines().filter(|l| l.starts_with("file: ") || l.starts_with("link: ")).count(), c.len());
        assert!(!text.lines().any(|l| l.ends_with(" -")), "an unowned file:\n{text}");
    }
}
