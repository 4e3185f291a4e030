/* shards/stats_open_win.c: the stats reader's Windows part (stats_reader.h): a process's region opened by its mapping's name (stats_shm_win.c makes it) and trusted only once the process is this user's and alive, the mapping is owned by this user and admits no one else, and its header names the process (id, user, creation time); mapped read-only, the process held by a handle. The format is stats.c's; POSIX's part is stats_open.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <aclapi.h>
#include <sddl.h>

#include "os.h"
#include "stats_reader.h"

#define say tl__stats_say

/*
 * What stands in for POSIX's checks. POSIX trusts a region because of the
 * directory it is in and the file's owner and mode; here the name is in the
 * session's namespace, where anyone of the session could make an object
 * first, so the mapping itself is checked: its owner must be this user
 * (the writer names its user as owner) and its access list must admit no
 * one else, the analogue of mode 0600. Since that list admits its user
 * alone, only that user can open a real region: the reader first checks
 * that the process is this user's (-EACCES otherwise, as POSIX's permission
 * denied). A held process handle is the pidfd: the process's id is not
 * reused while it is open, and it is signalled once the process has ended.
 * The reader closes its handle to the mapping once it has mapped it, so the
 * name goes with the writer's handle (a view keeps the memory, not the
 * name): a runtime that stops and starts again in the same process can make
 * its region anew, and a reader can tell that the old one was taken away.
 */

/* Copy len bytes at off out of the view: whole aligned words as single
 * loads (a sequence number is never seen torn), then an acquire fence, so
 * that everything this copy read is read before anything the next copy
 * reads: the reader's side of the shards' sequence locks. */
int tl__stats_os_read(const tl_stats_reader *r, void *buf, size_t len, uint64_t off)
{
	const unsigned char *p;
	unsigned char *d = buf;
	size_t i = 0;

	if (!r->view || off > r->size || len > r->size - off)
		return -EPROTO;
	p = r->view + off;
	if (!(off & 7))
		for (; i + 8 <= len; i += 8) {
			uint64_t w = __atomic_load_n((const uint64_t *)(const void *)(p + i),
						     __ATOMIC_RELAXED);

			memcpy(d + i, &w, 8);
		}
	for (; i < len; i++)
		d[i] = __atomic_load_n(p + i, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return 0;
}

/* Is the process the reader holds still running? 0 or -ESRCH. */
int tl__stats_os_alive(const tl_stats_reader *r)
{
	if (!r->pid)
		return 0;
	return r->proc && WaitForSingleObject(r->proc, 0) == WAIT_TIMEOUT ? 0 : -ESRCH;
}

void tl__stats_os_init(tl_stats_reader *r)
{
	r->view = NULL;
	r->proc = NULL;
}

/* The mapping under the reader's name now is the one it mapped? Its
 * header's identity and creation instant, compared with the view's. */
static int same_region(const tl_stats_reader *r, HANDLE map)
{
	const struct tl__stats_hdr *now = MapViewOfFile(map, FILE_MAP_READ, 0, 0, sizeof *now);
	struct tl__stats_hdr a, b;
	int same;

	if (!now)
		return 0;
	if (tl__stats_os_read(r, &a, sizeof a, 0) < 0) {
		UnmapViewOfFile(now);
		return 0;
	}
	memcpy(&b, now, sizeof b);
	same = a.magic == b.magic && a.pid == b.pid && a.start_time == b.start_time &&
	       a.started_ns == b.started_ns;
	UnmapViewOfFile(now);
	return same;
}

/* The view's size; gone: a pid reader's region no longer has its name
 * (the writer closed its mapping: tl_runtime_destroy), or the name is now
 * another mapping's (a new runtime of the process made one). */
int tl__stats_os_size(tl_stats_reader *r, uint64_t *size, int *gone, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	*size = r->size;
	if (gone && r->pid) {
		HANDLE map = OpenFileMappingA(FILE_MAP_READ, FALSE, r->map_name);
		DWORD e = map ? 0 : GetLastError();

		/* Nothing by that name, or something this user may not open
		 * (so not what it mapped), or not a mapping: gone. Another
		 * failure tells nothing: the view is still read. */
		*gone = map ? !same_region(r, map)
			    : e == ERROR_FILE_NOT_FOUND || e == ERROR_ACCESS_DENIED ||
				      e == ERROR_INVALID_HANDLE;
		if (map)
			CloseHandle(map);
	} else if (gone) {
		*gone = 0;
	}
	return 0;
}

int tl__stats_os_open_path(tl_stats_reader *r, const char *path, char *err, size_t errlen)
{
	(void)path;
	say(err, errlen, "%s: reading a copy of a region from a file is not supported on "
			 "Windows; tl_stats_open reads a running process's region", r->name);
	return -ENOTSUP;
}

/* A SID as text for a message ("S-1-5-21-..."), or "?". */
static const char *sid_text(PSID sid, char *buf, size_t len)
{
	char *s = NULL;

	if (sid && ConvertSidToStringSidA(sid, &s)) {
		snprintf(buf, len, "%s", s);
		LocalFree(s);
	} else {
		snprintf(buf, len, "?");
	}
	return buf;
}

/* The process behind pid, held: it must run, and run as this reader's
 * user. Sets r->proc and r->start_time. */
static int open_process(tl_stats_reader *r, int pid, PSID me, char *err, size_t errlen)
{
	char who[192], mine[192];
	TOKEN_USER *tu;
	DWORD e;
	int rc;

	r->proc = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION | SYNCHRONIZE, FALSE, (DWORD)pid);
	if (!r->proc) {
		e = GetLastError();
		if (e == ERROR_INVALID_PARAMETER) {
			say(err, errlen, "%s: no such process (it has exited)", r->name);
			return -ESRCH;
		}
		if (e == ERROR_ACCESS_DENIED)
			say(err, errlen, "%s: permission denied: this user may not look at the process "
					 "(its stats are readable by its own user only)", r->name);
		else
			say(err, errlen, "%s: cannot open the process: Windows error %lu", r->name,
			    (unsigned long)e);
		return tl__os_win_error(e);
	}
	if (WaitForSingleObject(r->proc, 0) != WAIT_TIMEOUT) {
		say(err, errlen, "%s: no such process (it has exited)", r->name);
		return -ESRCH;
	}
	rc = tl__win_process_created(r->proc, &r->start_time);
	if (rc < 0) {
		say(err, errlen, "%s: cannot read the process's creation time: %s", r->name,
		    strerror(-rc));
		return rc;
	}
	tu = tl__win_process_user(r->proc);
	if (!tu) {
		e = GetLastError();
		if (e == ERROR_ACCESS_DENIED)
			say(err, errlen, "%s: permission denied: the process is another user's, or runs "
					 "elevated (its stats are readable by its own user only)", r->name);
		else
			say(err, errlen, "%s: cannot read the process's user: Windows error %lu",
			    r->name, (unsigned long)e);
		return tl__os_win_error(e);
	}
	if (!EqualSid(tu->User.Sid, me)) {
		say(err, errlen, "%s: permission denied: the process runs as %s, this reader as %s; "
				 "its stats are readable by that user only",
		    r->name, sid_text(tu->User.Sid, who, sizeof who), sid_text(me, mine, sizeof mine));
		free(tu);
		return -EACCES;
	}
	free(tu);
	return 0;
}

/* The mapping's owner must be this user, and its access list must admit
 * no one else (deny entries may stay). */
static int check_owner(tl_stats_reader *r, HANDLE map, PSID me, char *err, size_t errlen)
{
	PSECURITY_DESCRIPTOR sd = NULL;
	PSID owner = NULL;
	PACL dacl = NULL;
	char who[192];
	DWORD e;
	int rc = 0;

	e = GetSecurityInfo(map, SE_KERNEL_OBJECT, OWNER_SECURITY_INFORMATION | DACL_SECURITY_INFORMATION,
			    &owner, NULL, &dacl, NULL, &sd);
	if (e != ERROR_SUCCESS) {
		say(err, errlen, "%s: cannot read the security of %s: Windows error %lu", r->name,
		    r->map_name, (unsigned long)e);
		return tl__os_win_error(e);
	}
	if (!owner || !EqualSid(owner, me)) {
		say(err, errlen, "%s: %s belongs to %s, not to the process's user: not trusted",
		    r->name, r->map_name, sid_text(owner, who, sizeof who));
		rc = -EPERM;
	} else if (!dacl) {
		say(err, errlen, "%s: %s has no access list (anyone may write it): not trusted",
		    r->name, r->map_name);
		rc = -EPERM;
	}
	for (DWORD i = 0; !rc && i < dacl->AceCount; i++) {
		ACE_HEADER *ace;

		if (!GetAce(dacl, i, (void **)&ace)) {
			rc = -EPERM;
		} else if (ace->AceType == ACCESS_DENIED_ACE_TYPE) {
			continue;
		} else if (ace->AceType != ACCESS_ALLOWED_ACE_TYPE ||
			   !EqualSid((PSID)&((ACCESS_ALLOWED_ACE *)ace)->SidStart, me)) {
			rc = -EPERM;
		}
		if (rc)
			say(err, errlen, "%s: %s admits others than its user (entry %lu of its "
					 "access list): not trusted", r->name, r->map_name, (unsigned long)i);
	}
	LocalFree(sd);
	return rc;
}

/* Open the mapping by name, check it, map it read-only and let the
 * mapping's handle go (the view keeps the memory). */
static int map_region(tl_stats_reader *r, PSID me, char *err, size_t errlen)
{
	MEMORY_BASIC_INFORMATION mi;
	HANDLE map;
	DWORD e;
	int rc;

	map = OpenFileMappingA(FILE_MAP_READ | READ_CONTROL, FALSE, r->map_name);
	if (!map) {
		e = GetLastError();
		if (e == ERROR_FILE_NOT_FOUND) {
			say(err, errlen, "%s: no stats region (no %s: not a turnloop process, or its "
					 "stats are off)", r->name, r->map_name);
			return -ENOENT;
		}
		if (e == ERROR_ACCESS_DENIED)
			say(err, errlen, "%s: permission denied: %s does not admit this user", r->name,
			    r->map_name);
		else
			say(err, errlen, "%s: cannot open %s: Windows error %lu", r->name, r->map_name,
			    (unsigned long)e);
		return tl__os_win_error(e);
	}
	rc = check_owner(r, map, me, err, errlen);
	if (rc == 0) {
		r->view = MapViewOfFile(map, FILE_MAP_READ, 0, 0, 0);
		if (!r->view || !VirtualQuery(r->view, &mi, sizeof mi)) {
			e = GetLastError();
			say(err, errlen, "%s: cannot map %s: Windows error %lu", r->name, r->map_name,
			    (unsigned long)e);
			rc = tl__os_win_error(e);
		} else {
			/* The mapping's size rounded up to a page: the rest reads
			 * as zeroes. */
			r->size = mi.RegionSize;
		}
	}
	CloseHandle(map);
	return rc;
}

int tl__stats_os_open_pid(tl_stats_reader *r, int pid, char *err, size_t errlen)
{
	struct tl__stats_hdr h;
	TOKEN_USER *me = tl__win_process_user(GetCurrentProcess());
	char id[16];
	uint32_t uid;
	int rc;

	r->pid = pid;
	snprintf(r->name, sizeof r->name, "pid %d", pid);
	snprintf(id, sizeof id, "%lu", (unsigned long)(DWORD)pid);
	snprintf(r->map_name, sizeof r->map_name, TL__STATS_WIN_NAME_FMT, id);
	if (!me) {
		DWORD e = GetLastError();

		say(err, errlen, "%s: cannot read this reader's own user: Windows error %lu", r->name,
		    (unsigned long)e);
		return tl__os_win_error(e);
	}
	rc = open_process(r, pid, me->User.Sid, err, errlen);
	if (rc == 0)
		rc = map_region(r, me->User.Sid, err, errlen);
	uid = tl__win_rid(me->User.Sid);
	free(me);
	if (rc < 0)
		return rc;
	rc = tl__stats_load(r, &h, NULL, err, errlen);
	if (rc < 0)
		return rc;
	if (h.pid != pid || h.uid != uid) {
		say(err, errlen, "%s: the region names pid %d of user %u: not trusted", r->name,
		    (int)h.pid, (unsigned)h.uid);
		return -EPERM;
	}
	if (h.start_time != r->start_time) {
		say(err, errlen, "%s: the region was left by an earlier process with this id "
				 "(created at %llu, this one at %llu); that one has exited",
		    r->name, (unsigned long long)h.start_time, (unsigned long long)r->start_time);
		return -ESRCH;
	}
	/* The handle has held the process since before its creation time was
	 * read, so the process checked is the one held. */
	if (tl__stats_os_alive(r) < 0) {
		say(err, errlen, "%s: the process has exited", r->name);
		return -ESRCH;
	}
	return 0;
}

void tl__stats_os_close(tl_stats_reader *r)
{
	if (r->view)
		UnmapViewOfFile(r->view);
	if (r->proc)
		CloseHandle(r->proc);
	r->view = NULL;
	r->proc = NULL;
}
