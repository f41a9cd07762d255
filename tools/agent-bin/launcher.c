/*
 * The front of the agent executable: one static file that unpacks the agent once and then only execs it.
 *
 * Why: workspace pods copy one file, /agent, into their shared volume and exec it for every step (`agent init`
 * in `fetch`, `agent serve` in `pulumi`) in whatever image the user runs, so it must be a single self-contained
 * file. A PyInstaller onefile is that, but unpacks its ~60 MB on every run before Python starts (most of a second
 * on a busy node). This launcher carries PyInstaller's onedir tree as an uncompressed tar after itself; the first
 * run unpacks it into a directory beside the executable (/share/.pko-agent-<id>, on the volume the pod's containers
 * share), later runs find it there and exec it at once.
 *
 * File layout: [this program][ustar archive of the onedir tree][trailer: see struct trailer].
 *
 * Robustness rules: the tree is unpacked into a private temporary directory and renamed into place only when
 * complete, so a crash or a concurrent run never leaves a half tree under the final name (the loser of a race
 * removes its copy and uses the winner's); <id> is the payload's hash, so another build never reuses this tree.
 * When the executable's own directory is not writable (e.g. /agent at the root of a read-only image), the tree
 * goes to $TMPDIR (or /tmp) as pko-agent-<uid>-<id>, which is used only if it is a directory owned by this user
 * that nobody else may write. The archive is trusted (it is part of this file) but entries that would leave the
 * directory are still refused.
 *
 * Must never: exec a tree it has not verified as described, or write outside the directory it unpacks into.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define MAGIC "PKOAGNT1"
#define ENTRY "pko-agent" /* the onedir executable inside the tree */

struct trailer {          /* the last 64 bytes of the file, integers little-endian */
    char magic[8];        /* MAGIC */
    uint64_t offset;      /* where the archive starts */
    uint64_t size;        /* the archive's length */
    char id[40];          /* hex digest identifying the archive, NUL-padded */
};

static const char *self_path;
static uid_t self_owner; /* whoever may replace this file may as well have unpacked the tree beside it */

static void die(const char *what, const char *detail) {
    fprintf(stderr, "pko agent launcher (%s): %s%s%s\n", self_path ? self_path : "?", what, detail ? ": " : "",
            detail ? detail : "");
    exit(127);
}

/* A path into `out` (PATH_MAX bytes); a path that does not fit is an error, never a truncated path. */
static void path(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, PATH_MAX, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= PATH_MAX) die("path too long", out);
}

static int read_at(int fd, void *buf, size_t len, off_t at) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, (char *)buf + done, len - done, at + (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        done += (size_t)n;
    }
    return 0;
}

static int write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static uint64_t octal(const char *field, size_t len) {
    uint64_t value = 0;
    for (size_t i = 0; i < len && field[i] >= '0' && field[i] <= '7'; i++)
        value = value * 8 + (uint64_t)(field[i] - '0');
    return value;
}

static int safe_name(const char *name) {
    if (name[0] == '\0' || name[0] == '/') return 0;
    for (const char *p = name; *p; p = strchr(p, '/') ? strchr(p, '/') + 1 : p + strlen(p)) {
        if (strncmp(p, "..", 2) == 0 && (p[2] == '/' || p[2] == '\0')) return 0;
    }
    return 1;
}

/* Unpack the ustar archive at [offset, offset+size) of fd into the directory dirfd. 0 on success. */
static int unpack(int fd, uint64_t offset, uint64_t size, int dirfd) {
    static char buf[1 << 20];
    char header[512];
    uint64_t at = offset, end = offset + size;
    while (at + 512 <= end) {
        if (read_at(fd, header, 512, (off_t)at) != 0) return -1;
        at += 512;
        if (header[0] == '\0') return 0; /* end-of-archive block */
        char name[256 + 1 + 100 + 1];
        if (header[345] != '\0')
            snprintf(name, sizeof name, "%.155s/%.100s", header + 345, header);
        else
            snprintf(name, sizeof name, "%.100s", header);
        size_t n = strlen(name);
        while (n > 0 && name[n - 1] == '/') name[--n] = '\0';
        uint64_t length = octal(header + 124, 12);
        mode_t mode = (mode_t)octal(header + 100, 8) & 0755;
        char type = header[156];
        if (!safe_name(name)) { errno = EINVAL; return -1; }
        if (type == '5') {
            if (mkdirat(dirfd, name, mode | 0700) != 0 && errno != EEXIST) return -1;
        } else if (type == '0' || type == '\0') {
            int out = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode | 0400);
            if (out < 0) return -1;
            for (uint64_t left = length; left > 0;) {
                size_t chunk = left < sizeof buf ? (size_t)left : sizeof buf;
                if (read_at(fd, buf, chunk, (off_t)at) != 0 || write_all(out, buf, chunk) != 0) {
                    close(out);
                    return -1;
                }
                at += chunk;
                left -= chunk;
            }
            if (close(out) != 0) return -1;
            at += (512 - length % 512) % 512;
        } else {
            errno = ENOTSUP; /* the build writes only directories and regular files */
            return -1;
        }
    }
    errno = EINVAL; /* no end-of-archive block */
    return -1;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* A usable tree: a directory (not a link) owned by us, root or this file's owner, writable by nobody else, holding
   the entry executable. */
static int usable(const char *dir, const char *exe) {
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    if ((st.st_uid != getuid() && st.st_uid != 0 && st.st_uid != self_owner) || (st.st_mode & 022)) return 0;
    return access(exe, X_OK) == 0;
}

/* Unpack into `dir` through a temporary sibling; 0 when `dir` holds a complete tree afterwards. */
static int install(int fd, const struct trailer *t, const char *dir, const char *exe) {
    char tmp[PATH_MAX];
    path(tmp, "%s.tmp-XXXXXX", dir);
    if (mkdtemp(tmp) == NULL) return -1;
    mode_t umask_was = umask(022); /* the tree must be readable by the pod's other users, whatever our umask */
    int dirfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int ok = dirfd >= 0 && unpack(fd, t->offset, t->size, dirfd) == 0 && chmod(tmp, 0755) == 0;
    int saved = errno;
    umask(umask_was);
    if (dirfd >= 0) close(dirfd);
    if (ok && rename(tmp, dir) == 0) return 0;
    if (ok) saved = errno;
    nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (ok && (saved == EEXIST || saved == ENOTEMPTY) && usable(dir, exe)) return 0; /* another run won the race */
    errno = saved;
    return -1;
}

int main(int argc, char **argv) {
    (void)argc;
    static char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) die("cannot find its own executable (/proc/self/exe)", strerror(errno));
    self[len] = '\0';
    self_path = self;

    int fd = open(self, O_RDONLY | O_CLOEXEC);
    struct stat st;
    struct trailer t;
    if (fd < 0 || fstat(fd, &st) != 0) die("cannot read itself", strerror(errno));
    self_owner = st.st_uid;
    if (st.st_size < (off_t)sizeof t || read_at(fd, &t, sizeof t, st.st_size - (off_t)sizeof t) != 0 ||
        memcmp(t.magic, MAGIC, 8) != 0 || t.offset + t.size > (uint64_t)st.st_size - sizeof t)
        die("no agent archive in this file", NULL);
    char id[sizeof t.id + 1];
    memcpy(id, t.id, sizeof t.id);
    id[sizeof t.id] = '\0';

    char dir[PATH_MAX], exe[PATH_MAX];
    char *slash = strrchr(self, '/');
    path(dir, "%.*s/.pko-agent-%s", (int)(slash - self), self, id);
    path(exe, "%s/" ENTRY, dir);
    if (!usable(dir, exe) && install(fd, &t, dir, exe) != 0) {
        int beside = errno;
        const char *tmpdir = getenv("TMPDIR");
        path(dir, "%s/pko-agent-%ld-%s", tmpdir && *tmpdir ? tmpdir : "/tmp", (long)getuid(), id);
        path(exe, "%s/" ENTRY, dir);
        if (!usable(dir, exe) && install(fd, &t, dir, exe) != 0) {
            fprintf(stderr, "pko agent launcher: cannot unpack beside %s (%s)\n", self, strerror(beside));
            die("cannot unpack the agent into", dir);
        }
    }
    close(fd);
    execv(exe, argv);
    die("cannot exec", exe);
}
