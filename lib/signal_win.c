/* lib/signal_win.c: tl_signal_hook on Windows: SIGINT and SIGTERM as the console's control events (Ctrl+C; Ctrl+Break, the window closing, logoff, shutdown), so the sharded runtime drains on them as on POSIX. Subscriptions (tl_signal_start) stay -ENOTSUP (sys_absent.c). */
#include <errno.h>
#include <signal.h>
#include "os.h"
#include "turnloop/signal.h"

/*
 * Windows has no signals to deliver to a process from outside; what it has
 * is the console's control handler, which the system runs on a thread of
 * its own for each event. A hook here is that handler for its signal: it
 * runs fn(SIGINT) for Ctrl+C and fn(SIGTERM) for the others, and says the
 * event was handled, so the process is not ended there and then (for the
 * window closing, logoff and shutdown, Windows ends it once the handler
 * returns anyway). Without a hook for an event, the next handler (the
 * C runtime's signal(), or the default that ends the process) takes it.
 * The handler is registered while a hook exists.
 */

static void (*_Atomic hooks[2])(int); /* [0] SIGINT, [1] SIGTERM */
static tl__os_mutex mu = TL__OS_MUTEX_INIT;
static int registered;

static BOOL WINAPI on_ctrl(DWORD ev)
{
	int sig = ev == CTRL_C_EVENT ? SIGINT : SIGTERM;
	void (*fn)(int) = atomic_load(&hooks[sig == SIGINT ? 0 : 1]);
	if (!fn)
		return FALSE;
	fn(sig);
	return TRUE;
}

int tl_signal_hook(int sig, void (*fn)(int))
{
	if (sig != SIGINT && sig != SIGTERM)
		return sig >= 1 && sig <= 64 ? -ENOTSUP : -EINVAL;
	int r = 0, i = sig == SIGINT ? 0 : 1;
	tl__os_mutex_lock(&mu);
	void (*cur)(int) = atomic_load(&hooks[i]);
	if (fn && cur && cur != fn) {
		r = -EBUSY;
	} else {
		atomic_store(&hooks[i], fn);
		int want = atomic_load(&hooks[0]) || atomic_load(&hooks[1]);
		if (want != registered) {
			if (SetConsoleCtrlHandler(on_ctrl, want ? TRUE : FALSE)) {
				registered = want;
			} else if (want) {
				atomic_store(&hooks[i], cur);
				r = tl__os_win_error(GetLastError());
			}
		}
	}
	tl__os_mutex_unlock(&mu);
	return r;
}
