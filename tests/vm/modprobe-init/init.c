/* /init for tests/init_boot.rs's module-request test: proves the kernel's own module requests
 * reach talosbox's `modprobe` applet, nothing else.
 *
 * Points /proc/sys/kernel/modprobe at /sbin/modprobe (the talosbox binary under that name, as
 * machined does on a node), asks for an xfs mount, which makes the kernel request "fs-xfs"
 * before it can fail for want of a device, then reports whether xfs is in /proc/modules and
 * powers off. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <unistd.h>

static void say(const char *msg) {
    printf("[modprobe-test] %s\n", msg);
    fflush(stdout);
}

static int loaded(const char *name) {
    char line[256];
    size_t n = strlen(name);
    FILE *f = fopen("/proc/modules", "r");
    if (!f) return 0;
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, name, n) == 0 && line[n] == ' ') found = 1;
    fclose(f);
    return found;
}

int main(void) {
    mount("proc", "/proc", "proc", 0, NULL);
    mount("sysfs", "/sys", "sysfs", 0, NULL);
    mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
    mkdir("/mnt", 0755);
    int fd = open("/proc/sys/kernel/modprobe", O_WRONLY);
    if (fd < 0 || write(fd, "/sbin/modprobe\n", 15) != 15) say("FAILED: cannot set /proc/sys/kernel/modprobe");
    if (fd >= 0) close(fd);
    if (loaded("xfs")) say("FAILED: xfs loaded before the request");
    /* No device: the mount fails, but only after the kernel has looked for the filesystem. */
    mount("/dev/nonexistent", "/mnt", "xfs", MS_RDONLY, NULL);
    say(loaded("xfs") ? "xfs loaded by the kernel's request" : "FAILED: xfs not loaded");
    say(loaded("libcrc32c") ? "its dependency libcrc32c loaded" : "FAILED: libcrc32c not loaded");
    sync();
    reboot(RB_POWER_OFF);
    for (;;) pause();
}
