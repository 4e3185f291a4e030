/* shards/stats_shm_win.c: the live stats region's home on Windows (contract 9.7): a named shared mapping, Local\turnloop-stats-<pid>, whose access list admits this process's user alone; the writer's identity (pid, its user's RID, creation time), and a process's user and creation time, which the reader (stats_open_win.c) checks. POSIX's is stats_shm.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_int.h"

/*
 * The mapping lives in the session's Local namespace under the name
 * TL__STATS_WIN_NAME_FMT gives with this process's id. Its security
 * descriptor has one entry, full access for the user the process runs as,
 * so another user (or a sandboxed process) can neither map it nor write it;
 * a reader of the same user maps it read-only. It names that user as its
 * owner too (the default owner may be a group: Administrators for an
 * elevated process, or the user's primary group), so that a reader can
 * tell it from a mapping someone else made under the name first. The name
 * goes with the last handle: a writer that dies leaves nothing to sweep,
 * unlike a file in /dev/shm, and a second writer with a recycled id cannot
 * meet a stale one (readers close theirs once they have mapped it).
 */

/* A process's user, as a token-user record (free it); NULL with
 * GetLastError's reason. The writer's identity and the reader's checks
 * (stats_open_win.c) use it. */
TOKEN_USER *tl__win_process_user(HANDLE process)
{
	HANDLE tok;
	DWORD len = 0, e;
	TOKEN_USER *tu = NULL;

	if (!OpenProcessToken(process, TOKEN_QUERY, &tok))
		return NULL;
	GetTokenInformation(tok, TokenUser, NULL, 0, &len);
	e = len ? 0 : GetLastError();
	if (len && !(tu = malloc(len))) {
		e = ERROR_NOT_ENOUGH_MEMORY;
	} else if (tu && !GetTokenInformation(tok, TokenUser, tu, len, &len)) {
		e = GetLastError();
		free(tu);
		tu = NULL;
	}
	CloseHandle(tok);
	if (!tu)
		SetLastError(e);
	return tu;
}

/* The calling process's user. */
static TOKEN_USER *token_user(void)
{
	return tl__win_process_user(GetCurrentProcess());
}

uint32_t tl__win_rid(PSID sid)
{
	if (!sid || !IsValidSid(sid) || !*GetSidSubAuthorityCount(sid))
		return 0;
	return (uint32_t)*GetSidSubAuthority(sid, *GetSidSubAuthorityCount(sid) - 1u);
}

int tl__rt_shm_create(tl_runtime *rt, size_t size)
{
	TOKEN_USER *tu = token_user();
	SECURITY_DESCRIPTOR sd;
	SECURITY_ATTRIBUTES sa = {sizeof sa, &sd, FALSE};
	char aclbuf[256];
	ACL *acl = (ACL *)aclbuf;
	HANDLE map;
	void *mem;
	DWORD e;

	snprintf(rt->region_name, sizeof rt->region_name, "%lu", (unsigned long)GetCurrentProcessId());
	snprintf(rt->stats_dir, sizeof rt->stats_dir, TL__STATS_WIN_NAME_FMT, rt->region_name);
	if (!tu || !InitializeAcl(acl, sizeof aclbuf, ACL_REVISION) ||
	    !AddAccessAllowedAce(acl, ACL_REVISION, GENERIC_ALL, tu->User.Sid) ||
	    !InitializeSecurityDescriptor(&sd, SECURITY_DESCRIPTOR_REVISION) ||
	    !SetSecurityDescriptorOwner(&sd, tu->User.Sid, FALSE) ||
	    !SetSecurityDescriptorDacl(&sd, TRUE, acl, FALSE)) {
		e = GetLastError();
		free(tu);
		tl__rt_stats_off(rt, "cannot make the access list of %s: Windows error %lu", rt->stats_dir,
				 (unsigned long)e);
		return tl__os_win_error(e);
	}
	map = CreateFileMappingA(INVALID_HANDLE_VALUE, &sa, PAGE_READWRITE, (DWORD)((uint64_t)size >> 32),
				 (DWORD)size, rt->stats_dir);
	e = GetLastError();
	free(tu);
	if (map && e == ERROR_ALREADY_EXISTS) { /* someone else's, under our name */
		CloseHandle(map);
		map = NULL;
	}
	if (!map) {
		tl__rt_stats_off(rt, "cannot create the mapping %s: Windows error %lu", rt->stats_dir,
				 (unsigned long)e);
		return e == ERROR_ALREADY_EXISTS ? -EEXIST : tl__os_win_error(e);
	}
	mem = MapViewOfFile(map, FILE_MAP_READ | FILE_MAP_WRITE, 0, 0, size);
	if (!mem) {
		e = GetLastError();
		CloseHandle(map);
		tl__rt_stats_off(rt, "cannot map %s: Windows error %lu", rt->stats_dir, (unsigned long)e);
		return tl__os_win_error(e);
	}
	rt->region = mem; /* a new mapping of the paging file reads as zeroes */
	rt->region_size = size;
	rt->region_shm = 1;
	rt->region_map = map;
	return 0;
}

void tl__rt_shm_destroy(tl_runtime *rt)
{
	UnmapViewOfFile(rt->region);
	CloseHandle(rt->region_map);
	rt->region_map = NULL;
}

/* A process's creation time in FILETIME units; 0 or a negative errno. */
int tl__win_process_created(HANDLE p, uint64_t *out)
{
	FILETIME c, x, k, u;

	if (!GetProcessTimes(p, &c, &x, &k, &u))
		return tl__os_win_error(GetLastError());
	*out = (uint64_t)c.dwHighDateTime << 32 | c.dwLowDateTime;
	return 0;
}

void tl__rt_shm_identity(int32_t *pid, uint32_t *uid, uint64_t *start)
{
	TOKEN_USER *tu = token_user();
	*pid = (int32_t)GetCurrentProcessId();
	/* The user's relative id (the last part of its SID): what a reader
	 * compares, as POSIX's readers compare uids. */
	*uid = tu ? tl__win_rid(tu->User.Sid) : 0;
	free(tu);
	*start = 0;
	tl__win_process_created(GetCurrentProcess(), start);
}

/* Windows' stand-in for /proc/<pid>/stat (stats_region.h): the process's
 * creation time, and its state: 'R' while it runs, 'Z' once it has ended
 * but a handle still holds it. -ESRCH when there is no such process. */
int tl__proc_stat(int pid, uint64_t *start_time, char *state)
{
	HANDLE p = pid ? OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, (DWORD)pid) : GetCurrentProcess();
	DWORD code = 0;
	int rc;

	if (!p)
		return GetLastError() == ERROR_INVALID_PARAMETER ? -ESRCH : tl__os_win_error(GetLastError());
	rc = tl__win_process_created(p, start_time);
	if (!rc && state)
		*state = GetExitCodeProcess(p, &code) && code != STILL_ACTIVE ? 'Z' : 'R';
	if (pid)
		CloseHandle(p);
	return rc;
}
