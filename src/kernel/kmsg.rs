//! The kernel log (`/dev/kmsg`): records parsed and formatted as Talos's Dmesg sends them,
//! `<facility>: <priority, right-aligned to 7>: [<RFC 3339 time>]: <message>`.
//!
//! Each `read` of /dev/kmsg yields one record; records overwritten before they were read
//! (EPIPE) are skipped; the end of the buffer is EAGAIN, after which a follower waits for the
//! descriptor to become readable. Parsing is pure.

use std::os::fd::OwnedFd;
use std::time::{Duration, SystemTime};

use rustix::fs::{Mode, OFlags, SeekFrom};
use tokio::io::unix::AsyncFd;

const FACILITIES: [&str; 24] = [
    "kern",
    "user",
    "mail",
    "daemon",
    "auth",
    "syslog",
    "lpr",
    "news",
    "uucp",
    "cron",
    "authpriv",
    "ftp",
    "ntp",
    "security",
    "console",
    "solaris-cron",
    "local0",
    "local1",
    "local2",
    "local3",
    "local4",
    "local5",
    "local6",
    "local7",
];
const PRIORITIES: [&str; 8] = ["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"];

/// One kernel log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub facility: u32,
    pub priority: u32,
    pub sequence: u64,
    /// Since boot.
    pub timestamp: Duration,
    pub message: String,
}

impl Record {
    /// The record's wall-clock time, given when the machine booted.
    pub fn time(&self, boot_time: SystemTime) -> SystemTime {
        boot_time + self.timestamp
    }

    /// Talos's Dmesg line, with the record's time already written as RFC 3339.
    pub fn format(&self, time_rfc3339: &str) -> String {
        let facility = FACILITIES.get(self.facility as usize).copied().unwrap_or("unknown");
        let priority = PRIORITIES.get(self.priority as usize).copied().unwrap_or("unknown");
        format!("{facility}: {priority:>7}: [{time_rfc3339}]: {}", self.message)
    }
}

/// Parses one record: `prio,seq,usec,flags[,…];message` then optional `\n KEY=value` lines.
pub fn parse(record: &str) -> Option<Record> {
    let (head, rest) = record.split_once(';')?;
    let mut fields = head.split(',');
    let prio: u32 = fields.next()?.parse().ok()?;
    let sequence = fields.next()?.parse().ok()?;
    let usec: u64 = fields.next()?.parse().ok()?;
    let message = rest.split('\n').next().unwrap_or("").to_string();
    Some(Record {
        facility: prio >> 3,
        priority: prio & 7,
        sequence,
        timestamp: Duration::from_micros(usec),
        message: unescape(&message),
    })
}

/// The kernel escapes non-printable bytes as `\xNN`.
fn unescape(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && b.get(i + 1) == Some(&b'x')
            && let Some(v) = s.get(i + 2..i + 4).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// When the machine booted, by the wall clock.
pub fn boot_time() -> SystemTime {
    let boot = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let since = Duration::new(boot.tv_sec as u64, boot.tv_nsec as u32);
    SystemTime::now().checked_sub(since).unwrap_or(SystemTime::UNIX_EPOCH)
}

/// A reader of /dev/kmsg.
pub struct Reader {
    fd: AsyncFd<OwnedFd>,
    follow: bool,
    buf: Vec<u8>,
}

impl Reader {
    /// Opens the kernel log at its start, or (`from_tail`) past its last record.
    pub fn open(from_tail: bool, follow: bool) -> std::io::Result<Self> {
        Self::open_path("/dev/kmsg", from_tail, follow)
    }

    fn open_path(path: &str, from_tail: bool, follow: bool) -> std::io::Result<Self> {
        let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())?;
        if from_tail {
            rustix::fs::seek(&fd, SeekFrom::End(0))?;
        }
        // SAFETY: `fd` is an open descriptor the AsyncFd owns from here on; nothing else
        // closes or replaces it, so it stays the same open file for the AsyncFd's lifetime.
        let fd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(Reader { fd, follow, buf: vec![0; 8192] })
    }

    /// The next record; `None` at the end of the buffer when not following.
    pub async fn next(&mut self) -> std::io::Result<Option<Record>> {
        loop {
            match rustix::io::read(self.fd.get_ref(), &mut self.buf) {
                Ok(n) => {
                    if let Some(r) = std::str::from_utf8(&self.buf[..n]).ok().and_then(parse) {
                        return Ok(Some(r));
                    }
                }
                // Overwritten before we read it: carry on with the next one.
                Err(rustix::io::Errno::PIPE) => continue,
                Err(rustix::io::Errno::AGAIN) => {
                    if !self.follow {
                        return Ok(None);
                    }
                    let mut ready = self.fd.readable().await?;
                    ready.clear_ready();
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_records_and_formats_them_as_talos() {
        let r = parse("6,339,5140900,-;NET: Registered protocol family 10\n SUBSYSTEM=net\n").unwrap();
        assert_eq!((r.facility, r.priority, r.sequence), (0, 6, 339));
        assert_eq!(r.timestamp, Duration::from_micros(5_140_900));
        assert_eq!(r.message, "NET: Registered protocol family 10");
        let boot = SystemTime::UNIX_EPOCH + Duration::from_secs(1_704_885_645);
        assert_eq!(r.time(boot), boot + Duration::from_micros(5_140_900));
        assert_eq!(
            r.format("2024-01-10T11:20:50.1409Z"),
            "kern:    info: [2024-01-10T11:20:50.1409Z]: NET: Registered protocol family 10"
        );
        let user = parse("12,1,0,-;a\\x09tab").unwrap();
        assert_eq!((user.facility, user.priority, user.message.as_str()), (1, 4, "a\ttab"));
        assert!(parse("garbage").is_none());
    }

    #[tokio::test]
    async fn reads_the_kernel_log_to_its_end() {
        // Unprivileged runs may not read it; root (CI) must.
        let mut r = match Reader::open(false, false) {
            Ok(r) => r,
            Err(e) if !rustix::process::geteuid().is_root() => return eprintln!("not root: {e}"),
            Err(e) => panic!("opening /dev/kmsg as root: {e}"),
        };
        let mut n = 0;
        let mut last = None;
        while let Some(rec) = r.next().await.unwrap() {
            assert!(last < Some(rec.sequence), "records come in order");
            last = Some(rec.sequence);
            n += 1;
        }
        assert!(n > 0, "the kernel log has records");
        let mut tail = Reader::open(true, false).unwrap();
        assert_eq!(tail.next().await.unwrap(), None, "from the tail there is nothing yet");
    }
}
