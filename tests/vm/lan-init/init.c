/* /init for tests/vm/lan: proves the provisioner's node-to-node LAN, nothing else.
 *
 * Loads the virtio-net modules listed in /lan-modules (carried by the imager's initramfs, which
 * this archive is appended to), finds the NIC whose MAC says "LAN" (5th octet 01, see
 * src/provision/alloc.rs), gives it 10.5.0.(10 + node index)/24, then sends a UDP hello to every
 * other node (lan.nodes=N on the command line) each second and prints each peer it hears from.
 * Prints "[lan] all N peers heard" once every peer has been heard. Never exits (PID 1). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("[lan] ");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

static void idle(void) {
    for (;;) pause();
}

static int cmdline_nodes(void) {
    char buf[4096] = {0};
    FILE *f = fopen("/proc/cmdline", "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strstr(buf, "lan.nodes=");
    return p ? atoi(p + strlen("lan.nodes=")) : 0;
}

static void load_modules(void) {
    char line[512];
    FILE *f = fopen("/lan-modules", "r");
    if (!f) { say("FAILED: no /lan-modules"); return; }
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!line[0]) continue;
        int fd = open(line, O_RDONLY | O_CLOEXEC);
        if (fd < 0) { say("open %s: %s", line, strerror(errno)); continue; }
        if (syscall(SYS_finit_module, fd, "", 0) != 0 && errno != EEXIST)
            say("finit_module %s: %s", line, strerror(errno));
        close(fd);
    }
    fclose(f);
}

int main(void) {
    mount("proc", "/proc", "proc", 0, NULL);
    mount("sysfs", "/sys", "sysfs", 0, NULL);
    mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
    int nodes = cmdline_nodes();
    if (nodes < 2) { say("FAILED: lan.nodes=N (N >= 2) missing from the command line"); idle(); }
    load_modules();

    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct ifreq ifr;
    int me = -1;
    for (int tries = 0; tries < 100 && me < 0; tries++) {
        for (int i = 0; i < 4 && me < 0; i++) {
            memset(&ifr, 0, sizeof ifr);
            snprintf(ifr.ifr_name, IFNAMSIZ, "eth%d", i);
            if (ioctl(s, SIOCGIFHWADDR, &ifr) != 0) continue;
            unsigned char *m = (unsigned char *)ifr.ifr_hwaddr.sa_data;
            if (m[0] == 0x52 && m[1] == 0x54 && m[4] == 0x01) me = m[5];
        }
        if (me < 0) usleep(100000);
    }
    if (me < 0) { say("FAILED: no NIC with a LAN MAC"); idle(); }
    char name[IFNAMSIZ];
    memcpy(name, ifr.ifr_name, IFNAMSIZ);

    struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
    memset(&ifr.ifr_addr, 0, sizeof ifr.ifr_addr);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(0x0a050000u | (unsigned)(10 + me));
    if (ioctl(s, SIOCSIFADDR, &ifr) != 0) say("SIOCSIFADDR: %s", strerror(errno));
    sin->sin_addr.s_addr = htonl(0xffffff00u);
    if (ioctl(s, SIOCSIFNETMASK, &ifr) != 0) say("SIOCSIFNETMASK: %s", strerror(errno));
    if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) say("SIOCSIFFLAGS: %s", strerror(errno));
    }
    say("%s is 10.5.0.%d/24 (node %d of %d)", name, 10 + me, me, nodes);

    int u = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in any = {.sin_family = AF_INET, .sin_port = htons(9999), .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(u, (struct sockaddr *)&any, sizeof any) != 0) { say("FAILED: bind: %s", strerror(errno)); idle(); }
    struct timeval tv = {.tv_sec = 1};
    setsockopt(u, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

    int heard[256] = {0}, count = 0;
    for (;;) {
        char msg[64];
        int len = snprintf(msg, sizeof msg, "hello from node %d", me);
        for (int peer = 1; peer <= nodes; peer++) {
            if (peer == me) continue;
            struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9999),
                                     .sin_addr.s_addr = htonl(0x0a050000u | (unsigned)(10 + peer))};
            sendto(u, msg, (size_t)len, 0, (struct sockaddr *)&to, sizeof to);
        }
        char buf[128];
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        ssize_t n;
        /* One receive (up to 1 s) per round, so hellos keep going out while peers come up. */
        if ((n = recvfrom(u, buf, sizeof buf - 1, 0, (struct sockaddr *)&from, &fl)) > 0) {
            buf[n] = 0;
            int peer = (int)(ntohl(from.sin_addr.s_addr) & 0xff) - 10;
            if (peer > 0 && peer < 256 && !heard[peer]) {
                heard[peer] = 1;
                count++;
                say("heard \"%s\" from %s", buf, inet_ntoa(from.sin_addr));
                if (count == nodes - 1) say("all %d peers heard", count);
            }
        }
    }
}
