/* tests/win_stats.c: the live stats reader on Windows (shards/stats_open_win.c), run under wine: a runtime's region read by this process's id (header, families, labels, shard records with the program's values), -ENOENT once the runtime took its region away and a second runtime of the same process publishing again while an old reader is still open, another process's region and -ESRCH once that process is killed, the refusals (no process, no region, a file path), and mappings made under the region's name by someone else than the runtime: not owned by this user, admitting others, a forged header, a region of an earlier process. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <windows.h>
#include <aclapi.h>

#include <CUnit/Basic.h>

#include "stats_region.h"
#include "turnloop.h"

static DWORD self_pid(void)
{
	return GetCurrentProcessId();
}

static void st_config(tl_runtime_config *c, uint32_t shards)
{
	tl_runtime_config_init(c);
	c->plan.shards = shards;
	c->plan.overcommit = 1;
	c->no_env = 1;
	c->signals = 0;
	c->stats = 1;
	c->stats_period_ns = 1000000; /* 1 ms */
	c->stall_ns = 0;
}

/* Each shard adds its number + 1 to the counter at launch. */
static int hits_id = -1;
static atomic_int launched;

static int on_launch(tl_shard *s, void *arg)
{
	(void)arg;
	tl_shard_counter_add(s, hits_id, tl_shard_id(s) + 1);
	atomic_fetch_add(&launched, 1);
	return 0;
}

static tl_runtime *start_runtime(uint32_t shards)
{
	tl_runtime_config cfg;
	tl_runtime *rt = NULL;

	st_config(&cfg, shards);
	cfg.on_launch = on_launch;
	atomic_store(&launched, 0);
	if (tl_runtime_new(&rt, &cfg) != 0)
		return NULL;
	hits_id = tl_runtime_counter(rt, "hits");
	if (hits_id < 0 || tl_runtime_stat_label(rt, hits_id, "all-of-them") != 0 ||
	    tl_runtime_launch(rt) != 0) {
		tl_runtime_destroy(rt);
		return NULL;
	}
	return rt;
}

static void stop_runtime(tl_runtime *rt)
{
	tl_runtime_stop(rt);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
}

/* The user's relative id, as the region's header names it. */
static uint32_t self_rid(void)
{
	TOKEN_USER *tu = tl__win_process_user(GetCurrentProcess());
	uint32_t rid = tu ? tl__win_rid(tu->User.Sid) : 0;

	free(tu);
	return rid;
}

static void test_own_region(void)
{
	tl_runtime *rt = start_runtime(2);
	tl_stats_reader *r;
	tl_stats_info in;
	tl_stats_family f;
	tl_stats_shard sh;
	uint64_t v[1];
	char label[TL_STATS_LABEL_MAX];
	int seen = 0;

	CU_ASSERT_PTR_NOT_NULL_FATAL(rt);
	CU_ASSERT_EQUAL(tl_runtime_stats_published(rt), 1);
	CU_ASSERT_EQUAL_FATAL(tl_stats_open(&r, (int)self_pid()), 0);
	CU_ASSERT_EQUAL(tl_stats_info_get(r, &in), 0);
	CU_ASSERT_EQUAL(in.shards, 2);
	CU_ASSERT_EQUAL(in.version, TL_STATS_VERSION);
	CU_ASSERT_EQUAL((DWORD)in.pid, self_pid());
	CU_ASSERT_EQUAL(in.uid, self_rid());
	CU_ASSERT_EQUAL(in.families, 1);
	CU_ASSERT_EQUAL(in.values, 1);
	CU_ASSERT_STRING_EQUAL(in.driver, "iocp");
	CU_ASSERT_EQUAL(tl_stats_family_get(r, 0, &f), 0);
	CU_ASSERT_STRING_EQUAL(f.name, "hits");
	CU_ASSERT_EQUAL(f.kind, TL_STAT_COUNTER);
	CU_ASSERT_EQUAL(tl_stats_label_get(r, 0, label, sizeof label), (int)strlen("all-of-them"));
	CU_ASSERT_STRING_EQUAL(label, "all-of-them");
	CU_ASSERT_EQUAL(tl_stats_family_get(r, 1, &f), -EINVAL);
	/* Each shard publishes its count within a period or so. */
	for (int tries = 0; tries < 500 && seen != 3; tries++) {
		seen = 0;
		for (uint32_t i = 0; i < 2; i++)
			if (tl_stats_shard_get(r, i, &sh, v, 1) == 0 && sh.shard == i && v[0] == i + 1)
				seen |= 1 << i;
		if (seen != 3)
			Sleep(10);
	}
	CU_ASSERT_EQUAL(seen, 3);
	CU_ASSERT_EQUAL(tl_stats_shard_get(r, 2, &sh, NULL, 0), -EINVAL);
	CU_ASSERT_EQUAL(tl_stats_shard_get(r, 0, &sh, v, in.capacity + 1), -EINVAL);
	tl_stats_close(r);
	stop_runtime(rt);
}

static void test_removed_and_again(void)
{
	tl_runtime *rt = start_runtime(1), *rt2;
	tl_stats_reader *old, *r;
	tl_stats_info in;

	CU_ASSERT_PTR_NOT_NULL_FATAL(rt);
	CU_ASSERT_EQUAL_FATAL(tl_stats_open(&old, (int)self_pid()), 0);
	CU_ASSERT_EQUAL(tl_stats_info_get(old, &in), 0);
	stop_runtime(rt);
	/* The writer's handle is gone and the reader holds none: no name. */
	CU_ASSERT_EQUAL(tl_stats_info_get(old, &in), -ENOENT);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "removed its stats region"));
	CU_ASSERT_EQUAL(tl_stats_open(&r, (int)self_pid()), -ENOENT);
	/* A new runtime of this process publishes again, the old reader
	 * still open: it sees that the name is another region's. */
	rt2 = start_runtime(1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(rt2);
	CU_ASSERT_EQUAL(tl_runtime_stats_published(rt2), 1);
	CU_ASSERT_EQUAL(tl_stats_info_get(old, &in), -ENOENT);
	CU_ASSERT_EQUAL_FATAL(tl_stats_open(&r, (int)self_pid()), 0);
	CU_ASSERT_EQUAL(tl_stats_info_get(r, &in), 0);
	CU_ASSERT_EQUAL(in.shards, 1);
	tl_stats_close(r);
	tl_stats_close(old);
	stop_runtime(rt2);
}

static void test_refusals(void)
{
	tl_stats_reader *r = (tl_stats_reader *)&r;

	CU_ASSERT_EQUAL(tl_stats_open(&r, 0), -EINVAL);
	CU_ASSERT_PTR_NULL(r);
	CU_ASSERT_EQUAL(tl_stats_open(NULL, 4), -EINVAL);
	/* Windows' ids are multiples of 4; wine's stay far below this one. */
	CU_ASSERT_EQUAL(tl_stats_open(&r, 0x3fff0000), -ESRCH);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "no such process"));
	/* A live process without a runtime: this one, now. */
	CU_ASSERT_EQUAL(tl_stats_open(&r, (int)self_pid()), -ENOENT);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "no stats region"));
	CU_ASSERT_EQUAL(tl_stats_open_path(&r, "C:\\region"), -ENOTSUP);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "not supported on Windows"));
	CU_ASSERT_EQUAL(tl_stats_open_path(&r, NULL), -EINVAL);
}

/* Another process's region: this program run as "child" publishes one and
 * waits to be killed; its region is read by its id, and once it is killed
 * (TerminateProcess: no runtime_destroy) the reader says it has exited. */
static int child_main(void)
{
	tl_runtime *rt = start_runtime(1);

	if (!rt)
		return 1;
	Sleep(60000);
	stop_runtime(rt);
	return 0;
}

static void test_other_process_killed(void)
{
	char exe[MAX_PATH], cmd[MAX_PATH + 16];
	STARTUPINFOA si = {.cb = sizeof si};
	PROCESS_INFORMATION pi;
	tl_stats_reader *r = NULL;
	tl_stats_info in;
	int rc = -1;

	CU_ASSERT_FATAL(GetModuleFileNameA(NULL, exe, sizeof exe) > 0);
	snprintf(cmd, sizeof cmd, "\"%s\" child", exe);
	CU_ASSERT_FATAL(CreateProcessA(exe, cmd, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi));
	for (int tries = 0; tries < 1000 && rc != 0; tries++) {
		rc = tl_stats_open(&r, (int)pi.dwProcessId);
		if (rc != 0)
			Sleep(10);
	}
	CU_ASSERT_EQUAL(rc, 0);
	if (rc == 0) {
		/* The region is there from tl_runtime_new; running once
		 * launched. */
		for (int tries = 0; tries < 1000; tries++) {
			if (tl_stats_info_get(r, &in) != 0 || in.state == TL_STATS_RUNNING)
				break;
			Sleep(10);
		}
		CU_ASSERT_EQUAL((DWORD)in.pid, pi.dwProcessId);
		CU_ASSERT_EQUAL(in.state, TL_STATS_RUNNING);
	}
	TerminateProcess(pi.hProcess, 9);
	WaitForSingleObject(pi.hProcess, INFINITE);
	if (rc == 0) {
		CU_ASSERT_EQUAL(tl_stats_info_get(r, &in), -ESRCH);
		CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "the process has exited"));
		tl_stats_close(r);
	}
	/* This one still holds the process: no reuse of its id yet. */
	CU_ASSERT_EQUAL(tl_stats_open(&r, (int)pi.dwProcessId), -ESRCH);
	CloseHandle(pi.hThread);
	CloseHandle(pi.hProcess);
}

/* ---- mappings made by someone else under the region's name ---- */

#define PLANT_SIZE 65536

/* A mapping under this process's region name: owner (NULL: the default
 * one), its access list allowing owner_only ? the user : the user and
 * everyone; the caller closes it. *view: a writable view of it. */
static HANDLE plant(PSID owner, int owner_only, void **view)
{
	TOKEN_USER *tu = tl__win_process_user(GetCurrentProcess());
	SID_IDENTIFIER_AUTHORITY world = {SECURITY_WORLD_SID_AUTHORITY};
	PSID everyone = NULL;
	SECURITY_DESCRIPTOR sd;
	SECURITY_ATTRIBUTES sa = {sizeof sa, &sd, FALSE};
	char aclbuf[512], name[64], id[16];
	ACL *acl = (ACL *)aclbuf;
	HANDLE map = NULL;

	snprintf(id, sizeof id, "%lu", (unsigned long)self_pid());
	snprintf(name, sizeof name, TL__STATS_WIN_NAME_FMT, id);
	if (tu && AllocateAndInitializeSid(&world, 1, SECURITY_WORLD_RID, 0, 0, 0, 0, 0, 0, 0, &everyone) &&
	    InitializeAcl(acl, sizeof aclbuf, ACL_REVISION) &&
	    AddAccessAllowedAce(acl, ACL_REVISION, GENERIC_ALL, tu->User.Sid) &&
	    (owner_only || AddAccessAllowedAce(acl, ACL_REVISION, GENERIC_ALL, everyone)) &&
	    InitializeSecurityDescriptor(&sd, SECURITY_DESCRIPTOR_REVISION) &&
	    (!owner || SetSecurityDescriptorOwner(&sd, owner == (PSID)1 ? tu->User.Sid : owner, FALSE)) &&
	    SetSecurityDescriptorDacl(&sd, TRUE, acl, FALSE))
		map = CreateFileMappingA(INVALID_HANDLE_VALUE, &sa, PAGE_READWRITE, 0, PLANT_SIZE, name);
	if (map)
		*view = MapViewOfFile(map, FILE_MAP_READ | FILE_MAP_WRITE, 0, 0, PLANT_SIZE);
	if (map && !*view) {
		CloseHandle(map);
		map = NULL;
	}
	if (everyone)
		FreeSid(everyone);
	free(tu);
	return map;
}

/* A region's header as this process's runtime would write it (one shard,
 * no program values). */
static void forge(void *view, int32_t pid, uint64_t start)
{
	struct tl__stats_hdr *h = view;

	memset(view, 0, PLANT_SIZE);
	h->version = TL_STATS_VERSION;
	h->capacity = 0;
	h->families_off = (uint32_t)tl__stats_families_off();
	h->labels_off = (uint32_t)tl__stats_labels_off(0);
	h->header_size = (uint32_t)tl__stats_header_size(0);
	h->stride = (uint32_t)tl__stats_stride(0);
	h->record_size = sizeof(tl_stats_shard);
	h->shards = 1;
	h->pid = pid;
	h->uid = self_rid();
	h->start_time = start;
	memcpy(h->driver, "forged", 7);
	h->magic = TL_STATS_MAGIC;
}

static uint64_t self_start(void)
{
	uint64_t t = 0;

	tl__win_process_created(GetCurrentProcess(), &t);
	return t;
}

static void test_planted(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	tl_stats_reader *r;
	tl_stats_info in;
	void *view = NULL;
	HANDLE map;
	const int pid = (int)self_pid();

	/* Owned by this user, open to everyone: not trusted (the analogue of
	 * mode 0644), and the runtime does not take it for its own. */
	map = plant((PSID)1, 0, &view);
	CU_ASSERT_PTR_NOT_NULL_FATAL(map);
	forge(view, pid, self_start());
	CU_ASSERT_EQUAL(tl_stats_open(&r, pid), -EPERM);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "admits others"));
	st_config(&cfg, 1);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_stats_published(rt), -EEXIST);
	tl_runtime_destroy(rt);
	UnmapViewOfFile(view);
	CloseHandle(map);

	/* With the default owner: a group under wine (the user's primary
	 * group), so not this user: not trusted. */
	map = plant(NULL, 1, &view);
	CU_ASSERT_PTR_NOT_NULL_FATAL(map);
	forge(view, pid, self_start());
	{
		PSID owner = NULL;
		PSECURITY_DESCRIPTOR sd = NULL;
		TOKEN_USER *tu = tl__win_process_user(GetCurrentProcess());
		int mine;

		CU_ASSERT_EQUAL(GetSecurityInfo(map, SE_KERNEL_OBJECT, OWNER_SECURITY_INFORMATION,
						&owner, NULL, NULL, NULL, &sd), ERROR_SUCCESS);
		mine = owner && tu && EqualSid(owner, tu->User.Sid);
		if (mine) {
			/* Windows names the user as the default owner of what a
			 * non-elevated process makes: then this case is the
			 * first one's, checked above. */
			printf("\n    (the default owner is this user here)");
		} else {
			CU_ASSERT_EQUAL(tl_stats_open(&r, pid), -EPERM);
			CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "not to the process's user"));
		}
		LocalFree(sd);
		free(tu);
	}
	UnmapViewOfFile(view);
	CloseHandle(map);

	/* Owned by this user and admitting it alone: the header decides. */
	map = plant((PSID)1, 1, &view);
	CU_ASSERT_PTR_NOT_NULL_FATAL(map);
	forge(view, pid, self_start());
	CU_ASSERT_EQUAL(tl_stats_open(&r, pid), 0);
	if (r) {
		CU_ASSERT_EQUAL(tl_stats_info_get(r, &in), 0);
		CU_ASSERT_STRING_EQUAL(in.driver, "forged");
		tl_stats_close(r);
	}
	forge(view, pid + 4, self_start());
	CU_ASSERT_EQUAL(tl_stats_open(&r, pid), -EPERM);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "names pid"));
	forge(view, pid, self_start() - 1);
	CU_ASSERT_EQUAL(tl_stats_open(&r, pid), -ESRCH);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "earlier process"));
	forge(view, pid, self_start());
	((struct tl__stats_hdr *)view)->magic = 0;
	CU_ASSERT_EQUAL(tl_stats_open(&r, pid), -EPROTO);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "magic"));
	forge(view, pid, self_start());
	((struct tl__stats_hdr *)view)->shards = 1000; /* more than the mapping holds */
	CU_ASSERT_EQUAL(tl_stats_open(&r, pid), -EPROTO);
	UnmapViewOfFile(view);
	CloseHandle(map);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		CU_TestFunc fn;
	} tests[] = {
		{"own region", test_own_region},
		{"removed, and published again", test_removed_and_again},
		{"another process, killed", test_other_process_killed},
		{"refusals", test_refusals},
		{"planted mappings", test_planted},
	};
	CU_pSuite suite;
	unsigned failures;

	if (argc == 2 && !strcmp(argv[1], "child"))
		return child_main();
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("win stats", NULL, NULL);
	if (!suite)
		goto fail;
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
		if (!CU_add_test(suite, tests[i].name, tests[i].fn))
			goto fail;
	CU_basic_set_mode(CU_BRM_VERBOSE);
	if (CU_basic_run_tests() != CUE_SUCCESS)
		goto fail;
	failures = CU_get_number_of_failures();
	CU_cleanup_registry();
	return failures ? 1 : 0;
fail:
	CU_cleanup_registry();
	return 1;
}
