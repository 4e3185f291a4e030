/* tools/tlhttp/fcache.c: the open-file cache (see fcache.h): a set-associative table of names and descriptors, revalidated by reopening. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tlhttp/fcache.h"

struct ent {
	int fd;              /* -1: empty */
	uint32_t refs;       /* gets not yet put */
	uint8_t index;
	uint16_t len;
	uint64_t dev, ino;
	uint64_t opened;     /* when it was (re)validated by an open */
	uint64_t used;       /* last get */
	char name[TLHTTP_FCACHE_NAME_MAX];
};

struct tlhttp_fcache {
	int root;
	uint32_t mask, nopen;
	struct ent *e; /* (mask + 1) * WAYS */
};

int tlhttp_fcache_new(struct tlhttp_fcache **out, int root, uint32_t sets)
{
	struct tlhttp_fcache *c;

	if (!out || root < 0 || !sets || sets > 65536 || (sets & (sets - 1)))
		return -EINVAL;
	c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	c->e = calloc((size_t)sets * TLHTTP_FCACHE_WAYS, sizeof *c->e);
	if (!c->e) {
		free(c);
		return -ENOMEM;
	}
	for (size_t i = 0; i < (size_t)sets * TLHTTP_FCACHE_WAYS; i++)
		c->e[i].fd = -1;
	c->root = root;
	c->mask = sets - 1;
	*out = c;
	return 0;
}

void tlhttp_fcache_free(struct tlhttp_fcache *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < (size_t)(c->mask + 1) * TLHTTP_FCACHE_WAYS; i++)
		if (c->e[i].fd >= 0)
			close(c->e[i].fd);
	free(c->e);
	free(c);
}

static void drop(struct tlhttp_fcache *c, struct ent *e)
{
	close(e->fd);
	e->fd = -1;
	c->nopen--;
}

/* The file as it is now, from its descriptor. */
static int restat(struct ent *e, struct tlhttp_file *f)
{
	struct stat st;

	if (fstat(e->fd, &st) < 0)
		return -errno;
	f->fd = e->fd;
	f->index = e->index;
	f->size = (uint64_t)st.st_size;
	f->mtime = (int64_t)st.st_mtim.tv_sec;
	return 0;
}

int tlhttp_fcache_get(struct tlhttp_fcache *c, const char *name, uint64_t now,
		      struct tlhttp_file *f, uint32_t *ref)
{
	size_t n = strlen(name);
	uint32_t h = 2166136261u; /* FNV-1a */
	struct ent *set, *hit = NULL, *victim = NULL;
	struct stat st;
	int rc;

	*ref = 0;
	if (n >= TLHTTP_FCACHE_NAME_MAX)
		return tlhttp_path_open(c->root, name, f);
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)name[i]) * 16777619u;
	set = &c->e[(size_t)(h & c->mask) * TLHTTP_FCACHE_WAYS];
	for (int w = 0; w < TLHTTP_FCACHE_WAYS; w++) {
		struct ent *e = &set[w];
		if (e->fd >= 0 && e->len == n && !memcmp(e->name, name, n)) {
			hit = e;
			break;
		}
	}
	if (hit && now - hit->opened < TLHTTP_FCACHE_VALID_NS) {
		if ((rc = restat(hit, f)) < 0)
			return rc;
		hit->refs++;
		hit->used = now;
		*ref = (uint32_t)(hit - c->e) + 1;
		return 0;
	}
	/* Absent, or due to be opened again. */
	if ((rc = tlhttp_path_open(c->root, name, f)) < 0) {
		if (hit && !hit->refs)
			drop(c, hit);
		return rc;
	}
	if (fstat(f->fd, &st) < 0) {
		rc = -errno;
		close(f->fd);
		return rc;
	}
	if (hit && hit->dev == (uint64_t)st.st_dev && hit->ino == (uint64_t)st.st_ino &&
	    hit->index == f->index) {
		/* The same file: keep the descriptor the cache has. */
		close(f->fd);
		hit->opened = now;
		if ((rc = restat(hit, f)) < 0)
			return rc;
		hit->refs++;
		hit->used = now;
		*ref = (uint32_t)(hit - c->e) + 1;
		return 0;
	}
	if (hit) {
		if (hit->refs)
			return 0; /* still being sent: this one goes uncached */
		drop(c, hit);
		victim = hit;
	}
	for (int w = 0; !victim && w < TLHTTP_FCACHE_WAYS; w++)
		if (set[w].fd < 0)
			victim = &set[w];
	for (int w = 0; !victim && w < TLHTTP_FCACHE_WAYS; w++)
		if (!set[w].refs && (!victim || set[w].used < victim->used))
			victim = &set[w];
	if (!victim)
		return 0; /* every way is being sent */
	if (victim->fd >= 0)
		drop(c, victim);
	victim->fd = f->fd;
	victim->refs = 1;
	victim->index = (uint8_t)f->index;
	victim->len = (uint16_t)n;
	memcpy(victim->name, name, n);
	victim->dev = (uint64_t)st.st_dev;
	victim->ino = (uint64_t)st.st_ino;
	victim->opened = victim->used = now;
	c->nopen++;
	*ref = (uint32_t)(victim - c->e) + 1;
	return 0;
}

void tlhttp_fcache_put(struct tlhttp_fcache *c, uint32_t ref, int fd)
{
	if (!ref) {
		close(fd);
		return;
	}
	c->e[ref - 1].refs--;
}

uint32_t tlhttp_fcache_sweep(struct tlhttp_fcache *c, uint64_t now, uint64_t idle_ns)
{
	uint32_t closed = 0;

	if (!c->nopen)
		return 0;
	for (size_t i = 0; i < (size_t)(c->mask + 1) * TLHTTP_FCACHE_WAYS; i++) {
		struct ent *e = &c->e[i];
		if (e->fd >= 0 && !e->refs && now - e->used >= idle_ns) {
			drop(c, e);
			closed++;
		}
	}
	return closed;
}

uint32_t tlhttp_fcache_open(const struct tlhttp_fcache *c)
{
	return c->nopen;
}
