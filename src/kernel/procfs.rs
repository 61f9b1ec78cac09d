//! What `/proc` says about memory, processes and mounts, parsed into plain structs for the
//! machine API's Memory, Processes and Mounts calls. Parsing is pure and tested on captured
//! text; reading is a thin layer over the files. A process that exits while it is being read
//! is skipped, not an error.

use std::collections::BTreeMap;
use std::path::Path;

/// `/proc/meminfo` as field name → value in kB (the unit the file uses; Talos reports the same).
pub fn meminfo() -> std::io::Result<BTreeMap<String, u64>> {
    Ok(parse_meminfo(&std::fs::read_to_string("/proc/meminfo")?))
}

pub fn parse_meminfo(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let value = rest.split_whitespace().next()?.parse().ok()?;
            Some((name.trim().to_string(), value))
        })
        .collect()
}

/// One process, as Talos's `ProcessInfo` describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Process {
    pub pid: i32,
    pub ppid: i32,
    pub state: String,
    pub threads: i32,
    /// User plus system CPU time, seconds.
    pub cpu_time: f64,
    pub virtual_memory: u64,
    pub resident_memory: u64,
    pub command: String,
    pub executable: String,
    pub args: String,
}

/// The fields of `/proc/<pid>/stat` after the command (which may hold spaces and parens).
pub fn parse_stat(stat: &str) -> Option<(String, Vec<&str>)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let command = stat.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    Some((command, rest))
}

fn clock_ticks() -> f64 {
    // USER_HZ is 100 on every architecture Linux exposes to user space.
    100.0
}

fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// Every process now, by pid.
pub fn processes() -> std::io::Result<Vec<Process>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if let Some(p) = process(&entry.path(), pid) {
            out.push(p);
        }
    }
    out.sort_by_key(|p| p.pid);
    Ok(out)
}

fn process(dir: &Path, pid: i32) -> Option<Process> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let (command, f) = parse_stat(&stat)?;
    // Fields after the command, 0-based: state 0, ppid 1, utime 11, stime 12,
    // num_threads 17, vsize 20, rss 21 (pages).
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
    let args = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let executable = std::fs::read_link(dir.join("exe")).map(|p| p.display().to_string()).unwrap_or_default();
    Some(Process {
        pid,
        ppid: f.get(1).and_then(|v| v.parse().ok()).unwrap_or(0),
        state: f.first().map(|s| s.to_string()).unwrap_or_default(),
        threads: num(17) as i32,
        cpu_time: (num(11) + num(12)) as f64 / clock_ticks(),
        virtual_memory: num(20),
        resident_memory: num(21) * page_size(),
        command,
        executable,
        args,
    })
}

/// One mounted filesystem with its size, as Talos's `MountStat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountStat {
    pub filesystem: String,
    pub size: u64,
    pub available: u64,
    pub mounted_on: String,
}

/// `/proc/mounts` as (source, mount point) pairs, octal escapes decoded.
pub fn parse_mounts(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((unescape(w.next()?), unescape(w.next()?)))
        })
        .collect()
}

fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(v) = u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("x"), 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every mount with its statfs figures (a mount that cannot be stat'ed reports zero sizes).
pub fn mounts() -> std::io::Result<Vec<MountStat>> {
    let text = std::fs::read_to_string("/proc/mounts")?;
    Ok(parse_mounts(&text)
        .into_iter()
        .map(|(filesystem, mounted_on)| {
            let (size, available) = rustix::fs::statfs(mounted_on.as_str())
                .map(|s| {
                    let bsize = s.f_bsize as u64;
                    (s.f_blocks * bsize, s.f_bavail * bsize)
                })
                .unwrap_or((0, 0));
            MountStat { filesystem, size, available, mounted_on }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_in_kb() {
        let m = parse_meminfo("MemTotal:       16318428 kB\nMemFree:  1 kB\nHugePages_Total:       0\nbogus\n");
        assert_eq!(m["MemTotal"], 16318428);
        assert_eq!(m["HugePages_Total"], 0);
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn stat_with_a_command_holding_spaces_and_parens() {
        let (cmd, f) = parse_stat("42 (my (odd) cmd) S 1 42 42 0 -1 4194560 1 0 0 0 7 3 0 0 20 0 4 0").unwrap();
        assert_eq!(cmd, "my (odd) cmd");
        assert_eq!((f[0], f[1], f[11], f[12], f[17]), ("S", "1", "7", "3", "4"));
    }

    #[test]
    fn mounts_decode_escapes() {
        let m = parse_mounts("/dev/vda1 / xfs rw 0 0\nnone /var/mnt/a\\040b tmpfs rw 0 0\n");
        assert_eq!(m[1], ("none".to_string(), "/var/mnt/a b".to_string()));
    }

    #[test]
    fn reads_this_host() {
        let me = std::process::id() as i32;
        let procs = processes().unwrap();
        let p = procs.iter().find(|p| p.pid == me).expect("this process is listed");
        assert!(p.resident_memory > 0 && p.threads >= 1, "{p:?}");
        assert!(meminfo().unwrap().contains_key("MemAvailable"));
        assert!(mounts().unwrap().iter().any(|m| m.mounted_on == "/"));
    }
}
