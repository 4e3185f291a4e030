/* tests/test_stats_trust.c: nobody but a process's own user can squat, plant or forge its stats region, and the reader checks whose region it reads and that its writer lives (runs as root: the attacks come from other users). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "privs.h"
#include "shard_test.h"
#include "stats_region.h"

static const char *tlshard_path;
static uint32_t uid_base;
/* The other user who attacks: one of ours too (test_uid(15)). */
static uint32_t attacker;
static char attacker_id[16];

/* A user of our own for each test, so that tests running at the same time
 * (and other test programs' runtimes) never share a stats directory: a
 * block of 16 ids nobody uses (tests/privs.h). */
static uint32_t test_uid(int n)
{
	return uid_base + (uint32_t)n;
}

static void as_user(uint32_t uid)
{
	if (tp_become(uid) < 0)
		_exit(120);
}

static void dir_of(uint32_t uid, char *buf, size_t len)
{
	snprintf(buf, len, TL__STATS_DIR_FMT, uid);
}

/* Remove whatever is at /dev/shm/turnloop-<uid> (as root). */
static void clean_dir(uint32_t uid)
{
	char dir[64], cmd[160];
	int r;

	dir_of(uid, dir, sizeof dir);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	r = system(cmd);
	(void)r;
}

/* Run fn(arg) as uid in a child; its exit status (0 = it worked). */
static int as_child(uint32_t uid, int (*fn)(void *), void *arg)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		as_user(uid);
		_exit(fn(arg));
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

/* ---- a server: a runtime with stats in a child process of user uid ---- */

struct status {
	int rc;          /* tl_runtime_new, then tl_runtime_launch */
	char why[320];   /* tl_runtime_stats_published's detail */
};

struct server {
	pid_t pid;
	int go;          /* write 1 byte to start; close to stop */
	int st;          /* the child's status */
	struct status s;
};

static void server_child(uint32_t uid, int go, int st)
{
	tl_runtime_config cfg;
	tl_runtime *rt = NULL;
	struct status s = {0};
	char c;

	as_user(uid);
	if (read(go, &c, 1) != 1)
		_exit(121);
	st_config(&cfg, 1);
	cfg.stats = 1;
	cfg.loop.driver = TL_DRIVER_EPOLL;
	s.rc = tl_runtime_new(&rt, &cfg);
	if (s.rc == 0) {
		if (tl_runtime_stats_published(rt) < 0)
			snprintf(s.why, sizeof s.why, "%s", tl_error_detail());
		tl_runtime_counter(rt, "conns");
		s.rc = tl_runtime_launch(rt);
	}
	if (write(st, &s, sizeof s) != (ssize_t)sizeof s)
		_exit(122);
	/* Run until the parent closes go. */
	while (read(go, &c, 1) > 0)
		;
	tl_runtime_destroy(rt);
	_exit(0);
}

/* Fork the server; it waits for server_go() before it makes its runtime,
 * so that an attacker can prepare for its pid first. */
static int server_fork(struct server *sv, uint32_t uid)
{
	int go[2], st[2];

	memset(sv, 0, sizeof *sv);
	if (pipe2(go, O_CLOEXEC) || pipe2(st, O_CLOEXEC))
		return -1;
	sv->pid = fork();
	if (sv->pid == 0) {
		close(go[1]);
		close(st[0]);
		server_child(uid, go[0], st[1]);
	}
	close(go[0]);
	close(st[1]);
	sv->go = go[1];
	sv->st = st[0];
	return sv->pid > 0 ? 0 : -1;
}

static int server_go(struct server *sv)
{
	if (write(sv->go, "g", 1) != 1 || read(sv->st, &sv->s, sizeof sv->s) != (ssize_t)sizeof sv->s)
		return -1;
	sv->s.why[sizeof sv->s.why - 1] = '\0';
	return sv->s.rc;
}

/* Stop it (gracefully, or with SIGKILL) and reap it; its exit status. */
static int server_end(struct server *sv, int kill9)
{
	int st = -1;

	if (kill9)
		kill(sv->pid, SIGKILL);
	close(sv->go);
	close(sv->st);
	if (waitpid(sv->pid, &st, 0) != sv->pid)
		return -1;
	return st;
}

/* ---- a process of a user that is not a turnloop process ---- */

struct sleeper {
	pid_t pid;
	int fd;
	uint64_t start;
};

static int sleeper_fork(struct sleeper *sl, uint32_t uid)
{
	int p[2];
	char state;

	if (pipe2(p, O_CLOEXEC))
		return -1;
	sl->pid = fork();
	if (sl->pid == 0) {
		char c;

		close(p[1]);
		as_user(uid);
		while (read(p[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(p[0]);
	sl->fd = p[1];
	/* Wait until it runs as uid (its status says so). */
	for (int i = 0; i < 200; i++) {
		char path[64], buf[4096];
		FILE *f;
		size_t n;

		snprintf(path, sizeof path, "/proc/%d/status", (int)sl->pid);
		f = fopen(path, "r");
		if (!f)
			break;
		n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[n] = '\0';
		char want[32];

		snprintf(want, sizeof want, "\nUid:\t%u\t", uid);
		if (strstr(buf, want))
			break;
		usleep(5000);
	}
	return tl__proc_stat(sl->pid, &sl->start, &state);
}

static void sleeper_end(struct sleeper *sl)
{
	close(sl->fd);
	waitpid(sl->pid, NULL, 0);
}

/* Write a valid region for (pid, uid, start) into uid's directory, made as
 * the runtime makes it; the caller then spoils what it tests. */
static void plant_region(uint32_t uid, int pid, uint64_t start, const char *family,
			 const char *driver, const char *label)
{
	uint32_t cap = 4;
	size_t size = tl__stats_header_size(cap) + tl__stats_stride(cap);
	uint8_t *buf = calloc(1, size);
	struct tl__stats_hdr *h = (void *)buf;
	struct tl__stats_fam *f = (void *)(buf + tl__stats_families_off());
	char dir[64], path[96];
	int fd;

	CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
	dir_of(uid, dir, sizeof dir);
	mkdir(dir, 0700);
	CU_ASSERT_EQUAL(chown(dir, uid, uid), 0);
	CU_ASSERT_EQUAL(chmod(dir, 0700), 0);
	h->magic = TL_STATS_MAGIC;
	h->version = TL_STATS_VERSION;
	h->header_size = (uint32_t)tl__stats_header_size(cap);
	h->shards = 1;
	h->stride = (uint32_t)tl__stats_stride(cap);
	h->record_size = sizeof(tl_stats_shard);
	h->capacity = cap;
	h->families_off = (uint32_t)tl__stats_families_off();
	h->labels_off = (uint32_t)tl__stats_labels_off(cap);
	h->pid = pid;
	h->uid = uid;
	h->start_time = start;
	h->state = TL_STATS_RUNNING;
	h->families = 1;
	h->values = 2;
	memcpy(h->driver, driver, strlen(driver) < 16 ? strlen(driver) : 16);
	memcpy(f[0].name, family, strlen(family) < 32 ? strlen(family) : 32);
	f[0].kind = TL_STAT_GAUGE;
	f[0].rows = 2;
	memcpy(buf + h->labels_off, label, strlen(label) < 48 ? strlen(label) : 48);
	snprintf(path, sizeof path, "%s/%d", dir, pid);
	fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_NOFOLLOW, 0600);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(write(fd, buf, size), (ssize_t)size);
	CU_ASSERT_EQUAL(fchown(fd, uid, uid), 0);
	close(fd);
	free(buf);
}

/* Run argv with stdout and stderr into out (NUL-terminated); its exit
 * status, or -1 if it did not end within ms (it is then killed). */
static int run_cmd(char *const argv[], char *out, size_t len, int ms)
{
	int p[2], st = 0;
	size_t got = 0;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC))
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	for (uint64_t end = st_now_ns() + (uint64_t)ms * 1000000;;) {
		struct pollfd pf = {.fd = p[0], .events = POLLIN};
		int64_t left = (int64_t)(end - st_now_ns()) / 1000000;

		if (left <= 0 || poll(&pf, 1, (int)left) <= 0) {
			kill(pid, SIGKILL);
			st = -1;
			break;
		}
		ssize_t n = read(p[0], out + got, len - 1 - got);

		if (n <= 0)
			break;
		got += (size_t)n;
		if (got == len - 1)
			break;
	}
	out[got] = '\0';
	close(p[0]);
	if (waitpid(pid, st < 0 ? NULL : &st, 0) != pid)
		return -1;
	return st < 0 ? -1 : (WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

static int region_exists(uint32_t uid, int pid)
{
	char dir[64], path[96];

	dir_of(uid, dir, sizeof dir);
	snprintf(path, sizeof path, "%s/%d", dir, pid);
	return access(path, F_OK) == 0;
}

/* ---- squatting: the runtime still starts ---- */

struct squat {
	uint32_t victim;
	int pid;
	int kind;
	char where[128];
};

enum { SQ_OLD_NAME, SQ_DIR_FILE, SQ_DIR_LINK, SQ_DIR_FOREIGN };

/* As the attacker: put something where the victim's region or directory goes. */
static int squat_as_attacker(void *arg)
{
	struct squat *q = arg;
	char dir[64], path[96];
	int fd;

	dir_of(q->victim, dir, sizeof dir);
	switch (q->kind) {
	case SQ_OLD_NAME:
		/* Where version 1 put the region, with the victim's pid. */
		snprintf(path, sizeof path, "/dev/shm/turnloop.%d", q->pid);
		fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
		if (fd < 0)
			return 1;
		close(fd);
		return 0;
	case SQ_DIR_FILE:
		fd = open(dir, O_CREAT | O_EXCL | O_WRONLY, 0666);
		if (fd < 0)
			return 1;
		close(fd);
		return 0;
	case SQ_DIR_LINK:
		/* A directory of the attacker's, open to all, behind a link. */
		if (!mkdtemp(q->where) || chmod(q->where, 0777))
			return 1;
		return symlink(q->where, dir) ? 2 : 0;
	default:
		if (mkdir(dir, 0777) || chmod(dir, 0777))
			return 1;
		return 0;
	}
}

static void squat_case(const char *name, int kind, int uidn, const char *expect)
{
	struct squat q = {.kind = kind, .victim = test_uid(uidn)};
	struct server sv;
	tl_stats_reader *r = NULL;
	char dir[64];
	struct stat st;
	int fds = st_begin(name), rc;

	clean_dir(q.victim);
	snprintf(q.where, sizeof q.where, "/tmp/tl-squat-XXXXXX");
	CU_ASSERT_EQUAL_FATAL(server_fork(&sv, q.victim), 0);
	q.pid = sv.pid;
	CU_ASSERT_EQUAL_FATAL(as_child(attacker, squat_as_attacker, &q), 0);
	/* The server starts whatever was planted. */
	rc = server_go(&sv);
	CU_ASSERT_EQUAL(rc, 0);
	rc = tl_stats_open(&r, sv.pid);
	if (kind == SQ_OLD_NAME) {
		/* The old name is not used any more: stats are on. */
		CU_ASSERT_STRING_EQUAL(sv.s.why, "");
		CU_ASSERT_EQUAL(rc, 0);
		if (rc)
			printf("\n  reader: %s\n", tl_error_detail());
	} else {
		/* Stats are off, and the runtime said why; the reader refuses
		 * what sits at the directory's name. */
		printf("\n  runtime: %s\n  reader: %s\n", sv.s.why, tl_error_detail());
		CU_ASSERT_PTR_NOT_NULL(strstr(sv.s.why, expect));
		CU_ASSERT_PTR_NOT_NULL(strstr(sv.s.why, attacker_id));
		CU_ASSERT_EQUAL(rc, -EPERM);
		CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "not trusted"));
	}
	tl_stats_close(r);
	dir_of(q.victim, dir, sizeof dir);
	/* Nothing of the victim's went into the attacker's directory. */
	if (kind == SQ_DIR_LINK) {
		char path[160];

		snprintf(path, sizeof path, "%s/%d", q.where, sv.pid);
		CU_ASSERT_EQUAL(access(path, F_OK), -1);
	}
	if (kind == SQ_DIR_FOREIGN) {
		char path[160];

		snprintf(path, sizeof path, "%s/%d", dir, sv.pid);
		CU_ASSERT_EQUAL(lstat(path, &st), -1);
	}
	CU_ASSERT_EQUAL(server_end(&sv, 0), 0);
	if (kind == SQ_OLD_NAME) {
		char path[64];

		snprintf(path, sizeof path, "/dev/shm/turnloop.%d", sv.pid);
		unlink(path);
	}
	if (kind == SQ_DIR_LINK) {
		rmdir(q.where);
		unlink(dir);
	}
	clean_dir(q.victim);
	st_end(fds);
}

static void test_squat_old_name(void)
{
	squat_case("trust/squat_old_name", SQ_OLD_NAME, 0, NULL);
}

static void test_squat_dir_file(void)
{
	squat_case("trust/squat_dir_file", SQ_DIR_FILE, 1, "is not a directory but a file");
}

static void test_squat_dir_symlink(void)
{
	squat_case("trust/squat_dir_symlink", SQ_DIR_LINK, 2, "symbolic link");
}

static void test_squat_dir_foreign(void)
{
	squat_case("trust/squat_dir_foreign", SQ_DIR_FOREIGN, 3, "belongs to uid");
}

/* The user's own directory with a loose mode is set back to 0700. */
static void test_own_dir_mode(void)
{
	uint32_t uid = test_uid(4);
	struct server sv;
	char dir[64];
	struct stat st;
	int fds = st_begin("trust/own_dir_mode");

	clean_dir(uid);
	dir_of(uid, dir, sizeof dir);
	CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
	CU_ASSERT_EQUAL(chown(dir, uid, uid), 0);
	CU_ASSERT_EQUAL(chmod(dir, 0755), 0);
	CU_ASSERT_EQUAL_FATAL(server_fork(&sv, uid), 0);
	CU_ASSERT_EQUAL(server_go(&sv), 0);
	CU_ASSERT_STRING_EQUAL(sv.s.why, "");
	CU_ASSERT_EQUAL(stat(dir, &st), 0);
	CU_ASSERT_EQUAL(st.st_mode & 07777, 0700);
	CU_ASSERT_TRUE(region_exists(uid, sv.pid));
	CU_ASSERT_EQUAL(server_end(&sv, 0), 0);
	clean_dir(uid);
	st_end(fds);
}

/* ---- the reader refuses a region that is not the process's user's ---- */

static int open_as_other(void *arg)
{
	tl_stats_reader *r;
	int rc = tl_stats_open(&r, *(int *)arg);

	tl_stats_close(r);
	return rc == -EACCES && strstr(tl_error_detail(), "permission denied") ? 0 : 1;
}

static void test_foreign_region(void)
{
	uint32_t uid = test_uid(5);
	struct server sv;
	tl_stats_reader *r = NULL;
	char dir[64], path[96], moved[112], belongs[48];
	int fds = st_begin("trust/foreign_region"), pid;

	snprintf(belongs, sizeof belongs, "belongs to uid %u", (unsigned)attacker);

	clean_dir(uid);
	CU_ASSERT_EQUAL_FATAL(server_fork(&sv, uid), 0);
	CU_ASSERT_EQUAL_FATAL(server_go(&sv), 0);
	CU_ASSERT_STRING_EQUAL(sv.s.why, "");
	pid = sv.pid;
	dir_of(uid, dir, sizeof dir);
	snprintf(path, sizeof path, "%s/%d", dir, pid);
	snprintf(moved, sizeof moved, "%s/moved", dir);
	/* As it is: it opens. */
	CU_ASSERT_EQUAL(tl_stats_open(&r, pid), 0);
	tl_stats_close(r);
	/* Another user (not root) may not look at all. */
	CU_ASSERT_EQUAL(as_child(attacker, open_as_other, &pid), 0);
	/* The region given to someone else. */
	CU_ASSERT_EQUAL(chown(path, attacker, attacker), 0);
	CU_ASSERT_EQUAL(tl_stats_open(&r, pid), -EPERM);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), belongs));
	CU_ASSERT_EQUAL(chown(path, uid, uid), 0);
	/* Readable or writable by others. */
	CU_ASSERT_EQUAL(chmod(path, 0644), 0);
	CU_ASSERT_EQUAL(tl_stats_open(&r, pid), -EPERM);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "mode 0644"));
	CU_ASSERT_EQUAL(chmod(path, 0600), 0);
	/* A symbolic link in its place. */
	CU_ASSERT_EQUAL(rename(path, moved), 0);
	CU_ASSERT_EQUAL(symlink(moved, path), 0);
	CU_ASSERT_EQUAL(tl_stats_open(&r, pid), -EPERM);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "symbolic link"));
	CU_ASSERT_EQUAL(unlink(path), 0);
	CU_ASSERT_EQUAL(rename(moved, path), 0);
	/* The directory given away, or opened up. */
	CU_ASSERT_EQUAL(chown(dir, attacker, attacker), 0);
	CU_ASSERT_EQUAL(tl_stats_open(&r, pid), -EPERM);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), belongs));
	CU_ASSERT_EQUAL(chown(dir, uid, uid), 0);
	CU_ASSERT_EQUAL(chmod(dir, 0711), 0);
	CU_ASSERT_EQUAL(tl_stats_open(&r, pid), -EPERM);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "mode 0711"));
	CU_ASSERT_EQUAL(chmod(dir, 0700), 0);
	/* Put back as the runtime made it: it opens again. */
	CU_ASSERT_EQUAL(tl_stats_open(&r, pid), 0);
	tl_stats_close(r);
	CU_ASSERT_EQUAL(server_end(&sv, 0), 0);
	clean_dir(uid);
	st_end(fds);
}

/* A region in the right place whose header names another process. */
static void test_forged_header(void)
{
	uint32_t uid = test_uid(6);
	struct sleeper sl;
	tl_stats_reader *r = NULL;
	int fds = st_begin("trust/forged_header");

	clean_dir(uid);
	CU_ASSERT_EQUAL_FATAL(sleeper_fork(&sl, uid), 0);
	plant_region(uid, (int)sl.pid + 1, sl.start, "x", "epoll", "");
	/* Planted under the sleeper's name but naming pid + 1. */
	{
		char dir[64], from[96], to[96];

		dir_of(uid, dir, sizeof dir);
		snprintf(from, sizeof from, "%s/%d", dir, (int)sl.pid + 1);
		snprintf(to, sizeof to, "%s/%d", dir, (int)sl.pid);
		CU_ASSERT_EQUAL(rename(from, to), 0);
	}
	CU_ASSERT_EQUAL(tl_stats_open(&r, sl.pid), -EPERM);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "names pid"));
	/* The same, naming the right pid: it opens (the test's region is
	 * good but for what it spoils). */
	plant_region(uid, (int)sl.pid, sl.start, "x", "epoll", "");
	CU_ASSERT_EQUAL(tl_stats_open(&r, sl.pid), 0);
	tl_stats_close(r);
	sleeper_end(&sl);
	clean_dir(uid);
	st_end(fds);
}

/* ---- the writer must live and be the one that wrote it ---- */

static void test_dead_target(void)
{
	uint32_t uid = test_uid(7);
	struct server sv, sv2;
	tl_stats_reader *r = NULL, *r2 = NULL;
	tl_stats_info info;
	int fds = st_begin("trust/dead_target"), pid, st;

	clean_dir(uid);
	CU_ASSERT_EQUAL_FATAL(server_fork(&sv, uid), 0);
	CU_ASSERT_EQUAL_FATAL(server_go(&sv), 0);
	pid = sv.pid;
	CU_ASSERT_EQUAL_FATAL(tl_stats_open(&r, pid), 0);
	CU_ASSERT_EQUAL(tl_stats_info_get(r, &info), 0);
	CU_ASSERT_EQUAL(info.state, TL_STATS_RUNNING);
	kill(pid, SIGKILL);
	/* Dead but not reaped: a zombie is no writer. */
	for (int i = 0; i < 200; i++) {
		char state = 0;
		uint64_t t;

		if (tl__proc_stat(pid, &t, &state) < 0 || state == 'Z')
			break;
		usleep(5000);
	}
	st = tl_stats_info_get(r, &info);
	if (st != -ESRCH)
		printf("\n  info_get of a zombie: %d\n", st);
	CU_ASSERT_EQUAL(st, -ESRCH);
	CU_ASSERT_EQUAL(tl_stats_open(&r2, pid), -ESRCH);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "exited"));
	tl_stats_close(r);
	st = server_end(&sv, 1);
	CU_ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	/* It left its region behind, which says "running" and is refused. */
	CU_ASSERT_TRUE(region_exists(uid, pid));
	CU_ASSERT_EQUAL(tl_stats_open(&r2, pid), -ESRCH);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "no such process"));
	/* The user's next runtime clears it away. */
	CU_ASSERT_EQUAL_FATAL(server_fork(&sv2, uid), 0);
	CU_ASSERT_EQUAL(server_go(&sv2), 0);
	CU_ASSERT_FALSE(region_exists(uid, pid));
	CU_ASSERT_TRUE(region_exists(uid, sv2.pid));
	CU_ASSERT_EQUAL(server_end(&sv2, 0), 0);
	clean_dir(uid);
	st_end(fds);
}

/* A region under a live process's pid, left by an earlier process that had
 * the same pid: its start time gives it away. */
static void test_reused_pid(void)
{
	uint32_t uid = test_uid(8);
	struct sleeper sl;
	tl_stats_reader *r = NULL;
	int fds = st_begin("trust/reused_pid");

	clean_dir(uid);
	CU_ASSERT_EQUAL_FATAL(sleeper_fork(&sl, uid), 0);
	CU_ASSERT_TRUE(sl.start > 0);
	plant_region(uid, sl.pid, sl.start - 1, "x", "epoll", "");
	CU_ASSERT_EQUAL(tl_stats_open(&r, sl.pid), -ESRCH);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "earlier process with this pid"));
	plant_region(uid, sl.pid, sl.start, "x", "epoll", "");
	CU_ASSERT_EQUAL(tl_stats_open(&r, sl.pid), 0);
	tl_stats_close(r);
	sleeper_end(&sl);
	clean_dir(uid);
	st_end(fds);
}

/* ---- tlshard prints no control character from a region ---- */

/* Printable ASCII, newlines and the tabs that indent JSON. */
static int printable(const char *s)
{
	for (; *s; s++)
		if (((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t') || (unsigned char)*s >= 0x7f)
			return 0;
	return 1;
}

static void test_control_chars(void)
{
	static const char *const formats[][2] = {{NULL, NULL}, {"--json", NULL},
						  {"--format", "prometheus"}};
	uint32_t uid = test_uid(9);
	struct sleeper sl;
	char out[65536], pidarg[16];
	int fds = st_begin("trust/control_chars");

	clean_dir(uid);
	CU_ASSERT_EQUAL_FATAL(sleeper_fork(&sl, uid), 0);
	/* Its user may write what it likes into its own region: a terminal
	 * clear and a title change, a bell, an 8-bit CSI, a stray byte. */
	plant_region(uid, sl.pid, sl.start, "evil\x1b[2J\x07", "ep\x1b]0;pwn\x07", "lbl\x9b\xff");
	snprintf(pidarg, sizeof pidarg, "%d", (int)sl.pid);
	for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++) {
		char *argv[] = {(char *)tlshard_path, "stats", pidarg, (char *)formats[k][0],
				(char *)formats[k][1], NULL};
		int rc = run_cmd(argv, out, sizeof out, 10000);

		printf("\n  tlshard stats %s %s: exit %d\n%s", formats[k][0] ? formats[k][0] : "",
		       formats[k][1] ? formats[k][1] : "", rc, out);
		CU_ASSERT_EQUAL(rc, 0);
		CU_ASSERT_TRUE(printable(out));
		CU_ASSERT_PTR_NULL(strchr(out, '\x1b'));
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "x1b"));
		/* The labels too, in the formats that show them. */
		if (k > 0)
			CU_ASSERT_PTR_NOT_NULL(strstr(out, "lbl"));
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "x9b"));
	}
	sleeper_end(&sl);
	clean_dir(uid);
	st_end(fds);
}

/* ---- tlshard stats --watch ends, non-zero, when its target goes ---- */

static void watch_case(int kill9)
{
	uint32_t uid = test_uid(10 + kill9);
	struct server sv;
	char out[65536], pidarg[16];
	int p[2], rc, st;
	pid_t w;

	clean_dir(uid);
	CU_ASSERT_EQUAL_FATAL(server_fork(&sv, uid), 0);
	CU_ASSERT_EQUAL_FATAL(server_go(&sv), 0);
	snprintf(pidarg, sizeof pidarg, "%d", (int)sv.pid);
	CU_ASSERT_EQUAL_FATAL(pipe2(p, O_CLOEXEC), 0);
	w = fork();
	if (w == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		execl(tlshard_path, tlshard_path, "stats", pidarg, "--watch", "0.1", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	usleep(400000);
	st = server_end(&sv, kill9);
	CU_ASSERT_TRUE(kill9 ? WIFSIGNALED(st) : WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* It notices within a few intervals. */
	rc = -1;
	for (int i = 0; i < 300; i++) {
		int s;

		if (waitpid(w, &s, WNOHANG) == w) {
			rc = WIFEXITED(s) ? WEXITSTATUS(s) : 128;
			break;
		}
		usleep(10000);
	}
	if (rc < 0) {
		kill(w, SIGKILL);
		waitpid(w, NULL, 0);
	}
	ssize_t n = read(p[0], out, sizeof out - 1);

	out[n > 0 ? n : 0] = '\0';
	close(p[0]);
	printf("\n  ...%s\n", out + (strlen(out) > 300 ? strlen(out) - 300 : 0));
	CU_ASSERT_TRUE(rc > 0);
	CU_ASSERT_TRUE(strstr(out, "has exited") || strstr(out, "removed its stats region"));
	clean_dir(uid);
}

static void test_watch_exit(void)
{
	int fds = st_begin("trust/watch_exit");

	watch_case(0);
	st_end(fds);
}

static void test_watch_kill(void)
{
	int fds = st_begin("trust/watch_kill");

	watch_case(1);
	st_end(fds);
}

int main(int argc, char **argv)
{
	CU_pSuite s;

	if (argc < 2) {
		fprintf(stderr, "usage: test_stats_trust PATH-TO-TLSHARD\n");
		return 2;
	}
	tlshard_path = argv[1];
	if (geteuid() != 0) {
		printf("SKIP stats-trust: needs root, to play the attacker and the victim as other "
		       "users\n");
		return 77;
	}
	char why[256];
	int can;

	if (tp_own_uids(16, &uid_base, why, sizeof why) < 0) {
		printf("SKIP stats-trust: %s\n", why);
		return 77;
	}
	can = tp_can_become(uid_base, why, sizeof why);
	if (can < 0) {
		fprintf(stderr, "stats-trust: becoming user %u failed: %s\n", (unsigned)uid_base,
			strerror(-can));
		return 1;
	}
	if (can == 0) {
		printf("SKIP stats-trust: %s\n", why);
		return 77;
	}
	attacker = test_uid(15);
	snprintf(attacker_id, sizeof attacker_id, "%u", (unsigned)attacker);
	signal(SIGPIPE, SIG_IGN);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("trust", NULL, NULL);
	st_add(s, "squat_old_name", test_squat_old_name);
	st_add(s, "squat_dir_file", test_squat_dir_file);
	st_add(s, "squat_dir_symlink", test_squat_dir_symlink);
	st_add(s, "squat_dir_foreign", test_squat_dir_foreign);
	st_add(s, "own_dir_mode", test_own_dir_mode);
	st_add(s, "foreign_region", test_foreign_region);
	st_add(s, "forged_header", test_forged_header);
	st_add(s, "dead_target", test_dead_target);
	st_add(s, "reused_pid", test_reused_pid);
	st_add(s, "control_chars", test_control_chars);
	st_add(s, "watch_exit", test_watch_exit);
	st_add(s, "watch_kill", test_watch_kill);
	return st_run();
}
