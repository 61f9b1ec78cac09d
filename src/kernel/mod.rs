//! Kernel adapters: thin, typed wrappers over the syscalls and kernel files the node needs
//! (mounts, loop devices, block devices and their partitions, module loading, the kernel
//! command line, rtnetlink, network namespaces, the hostname and UTS namespaces, swap areas).
//!
//! This is the only place in the crate allowed to hold `unsafe`, each block with a `// SAFETY:`
//! line. Parsing and decisions stay pure and table-tested here; the code that touches the kernel
//! stays thin. Nothing here shells out to `mount`, `losetup`, `modprobe` or `ip`, and nothing here may
//! panic on a runtime path: PID 1 calls into it.

pub mod blockdev;
pub mod clock;
pub mod cmdline;
pub mod console;
pub mod dm;
pub mod growfs;
pub mod input;
pub mod kmsg;
pub mod loopdev;
pub mod modules;
pub mod mount;
pub mod netlink;
pub mod netns;
pub mod power;
pub mod procfs;
pub mod rlimit;
pub mod swap;
pub mod udp;
pub mod uevent;
pub mod uts;

/// The resident set size of process `pid` in KiB (`VmRSS` of `/proc/<pid>/status`, or
/// `/proc/self/status` for `None`).
pub fn rss_kib(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_string(),
    };
    parse_rss_kib(&std::fs::read_to_string(path).ok()?)
}

/// Proportional set size in KiB (`Pss:` of `/proc/<pid>/smaps_rollup`) of `pid`, or of this
/// process: each shared page counted once across the processes that map it, so the sum over
/// machined, apid and trustd — one binary — is what they cost together.
pub fn pss_kib(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/smaps_rollup"),
        None => "/proc/self/smaps_rollup".to_string(),
    };
    parse_kib_field(&std::fs::read_to_string(path).ok()?, "Pss:")
}

fn parse_kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let mut words = line.split_whitespace().skip(1);
    let n = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then_some(n)
}

/// Memory in use on the machine in KiB: `MemTotal - MemAvailable` of `/proc/meminfo`.
pub fn memory_used_kib() -> Option<u64> {
    parse_memory_used_kib(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

fn parse_memory_used_kib(meminfo: &str) -> Option<u64> {
    let field = |name: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    field("MemTotal:")?.checked_sub(field("MemAvailable:")?)
}

fn parse_rss_kib(status: &str) -> Option<u64> {
    parse_kib_field(status, "VmRSS:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_from_status() {
        assert_eq!(parse_rss_kib("Name:\tx\nVmRSS:\t    8412 kB\nThreads: 3\n"), Some(8412));
        assert_eq!(parse_rss_kib("Name:\tkthreadd\n"), None);
        assert_eq!(parse_rss_kib("VmRSS:\t12 MB\n"), None);
        assert!(rss_kib(None).is_some_and(|k| k > 0));
    }

    #[test]
    fn pss_from_smaps_rollup() {
        let text = "00400000-7ffc [rollup]\nRss:    9000 kB\nPss:    4321 kB\nPss_Anon: 100 kB\n";
        assert_eq!(parse_kib_field(text, "Pss:"), Some(4321));
        let (pss, rss) = (pss_kib(None).unwrap(), rss_kib(None).unwrap());
        assert!(pss > 0 && pss <= rss, "pss {pss} rss {rss}");
    }

    #[test]
    fn used_memory_from_meminfo() {
        let text = "MemTotal:        1000 kB\nMemFree:          200 kB\nMemAvailable:     700 kB\n";
        assert_eq!(parse_memory_used_kib(text), Some(300));
        assert_eq!(parse_memory_used_kib("MemTotal: 1000 kB\n"), None);
        assert!(memory_used_kib().is_some());
    }
}
