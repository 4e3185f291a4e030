/* tests/win/handles.h: the process's open handles on Windows (sockets, ports, events, threads, files), the leak check of the Windows tests (tests/harness.c's h_fd_count, tests/shard_test.h's st_fd_count); and whether they run under wine. */
#ifndef TL_TESTS_WIN_HANDLES_H
#define TL_TESTS_WIN_HANDLES_H

#include <stdlib.h>
#include <windows.h>
#include <winternl.h>

/* 1 under wine (its ntdll names its version), not on Windows itself: where
 * a test accepts what wine 8 does differently (docs/WINDOWS.md). */
static inline int win_under_wine(void)
{
	HMODULE nt = GetModuleHandleA("ntdll.dll");

	return nt && GetProcAddress(nt, "wine_get_version") != NULL;
}

/* One entry of NtQuerySystemInformation's SystemHandleInformation (16). */
struct win_sys_handle {
	ULONG pid;
	BYTE type, flags;
	USHORT value;
	PVOID object;
	ACCESS_MASK access;
};
typedef NTSTATUS(NTAPI *win_qsi_fn)(ULONG, PVOID, ULONG, PULONG);

/* The process's handles as the system lists them (wine's
 * GetProcessHandleCount says 0): the count, or -1. */
static inline int win_sys_handle_count(void)
{
	static win_qsi_fn q;
	static ULONG len = 1 << 16;
	if (!q) {
		HMODULE nt = GetModuleHandleA("ntdll.dll");
		q = nt ? (win_qsi_fn)(void (*)(void))GetProcAddress(nt, "NtQuerySystemInformation") : NULL;
		if (!q)
			return -1;
	}
	for (;;) {
		ULONG *b = malloc(len), got = 0;
		if (!b)
			return -1;
		NTSTATUS st = q(16, b, len, &got);
		if (st == (NTSTATUS)0xC0000004L) { /* STATUS_INFO_LENGTH_MISMATCH */
			free(b);
			len *= 2;
			continue;
		}
		if (st != 0) {
			free(b);
			return -1;
		}
		/* ULONG count, then the entries (pointer-aligned). */
		struct win_sys_handle *e = (struct win_sys_handle *)(void *)((char *)b + sizeof(void *));
		ULONG n = b[0], me = GetCurrentProcessId();
		int k = 0;
		for (ULONG i = 0; i < n; i++)
			k += e[i].pid == me;
		free(b);
		return k;
	}
}

/* Open handles of the process: GetProcessHandleCount, or the system's
 * list where it says 0 (wine). */
static inline int win_handle_count(void)
{
	DWORD n = 0;
	if (GetProcessHandleCount(GetCurrentProcess(), &n) && n > 0)
		return (int)n;
	return win_sys_handle_count();
}

#endif
