/* tools/tlhttp/path.c: request paths decoded, normalised and opened beneath a root with openat2(2). */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tlhttp/path.h"

static int hex(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int tlhttp_path_normalize(const char *path, size_t n, char *out, size_t cap)
{
	const unsigned char *p = (const unsigned char *)path;
	size_t i = 1, o = 0;
	int dir = 0; /* the last segment asks for a directory */

	if (!path || !out)
		return -EINVAL;
	if (n == 0 || p[0] != '/')
		return -EINVAL;
	/* out holds "seg/seg/.../": o is where the next segment goes. */
	while (i <= n && (i == n || p[i] != '?')) {
		size_t s = o;
		for (; i < n && p[i] != '/' && p[i] != '?'; i++) {
			int c = p[i];
			if (c == '%') {
				int h = i + 2 < n ? hex(p[i + 1]) : -1, l = h >= 0 ? hex(p[i + 2]) : -1;
				if (h < 0 || l < 0)
					return -EINVAL;
				c = h * 16 + l;
				i += 2;
				if (c == '/')
					return -ENOENT;
			}
			if (c == 0)
				return -EINVAL;
			if (o + 2 >= cap) /* room for this byte, a '/' and the NUL */
				return -ENAMETOOLONG;
			out[o++] = (char)c;
		}
		size_t len = o - s;
		if (len == 0 || (len == 1 && out[s] == '.')) {
			o = s;
			dir = 1;
		} else if (len == 2 && out[s] == '.' && out[s + 1] == '.') {
			if (s == 0)
				return -ENOENT;
			o = s - 1; /* the '/' ending the segment before */
			while (o > 0 && out[o - 1] != '/')
				o--;
			dir = 1;
		} else {
			out[o++] = '/';
			dir = 0;
		}
		if (i < n && p[i] == '/')
			i++;
		else
			break;
	}
	if (o == 0) {
		if (cap < 2)
			return -ENAMETOOLONG;
		memcpy(out, ".", 2);
		return 1;
	}
	if (!dir)
		o--; /* a file: no trailing '/' */
	out[o] = 0;
	return (int)o;
}

int tlhttp_open_how(struct open_how *how)
{
	if (!how)
		return -EINVAL;
	memset(how, 0, sizeof *how);
	how->flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
	how->resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
	return 0;
}

/* glibc 2.36 has no openat2 wrapper. */
static int openat2_fd(int dirfd, const char *name, struct open_how *how)
{
	long fd = syscall(SYS_openat2, dirfd, name, how, sizeof *how);
	return fd < 0 ? -errno : (int)fd;
}

int tlhttp_root_open(const char *dir)
{
	struct open_how how;
	int fd, probe;

	if (!dir)
		return -EINVAL;
	fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	tlhttp_open_how(&how);
	how.flags = O_PATH | O_CLOEXEC;
	probe = openat2_fd(fd, ".", &how);
	if (probe < 0) {
		close(fd);
		return probe;
	}
	close(probe);
	return fd;
}

static int open_regular(int dirfd, const char *name, struct tlhttp_file *f, int allow_dir)
{
	struct open_how how;
	struct stat st;
	int fd;

	tlhttp_open_how(&how);
	fd = openat2_fd(dirfd, name, &how);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	if (S_ISDIR(st.st_mode) && allow_dir) {
		int rc = open_regular(fd, "index.html", f, 0);
		close(fd);
		if (rc == 0)
			f->index = 1;
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return -ENODEV;
	}
	f->fd = fd;
	f->index = 0;
	f->size = (uint64_t)st.st_size;
	f->mtime = (int64_t)st.st_mtim.tv_sec;
	return 0;
}

int tlhttp_path_open(int root, const char *name, struct tlhttp_file *f)
{
	if (root < 0 || !name || !f)
		return -EINVAL;
	return open_regular(root, name, f, 1);
}

int tlhttp_path_status(int err)
{
	switch (err) {
	case -EINVAL:
		return 400;
	case -ENOENT:
	case -ENOTDIR:
	case -EXDEV:
	case -ELOOP:
	case -ENODEV:
	case -ENXIO:
	case -EISDIR:
	case -ENAMETOOLONG:
		return 404;
	case -EACCES:
	case -EPERM:
		return 403;
	case -EMFILE:
	case -ENFILE:
	case -ENOMEM:
		return 503;
	default:
		return err >= 0 ? 200 : 500;
	}
}
