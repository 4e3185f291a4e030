/* tools/tlproxy/sdnotify.h: telling systemd the process's state. */
#ifndef TLP_SDNOTIFY_H
#define TLP_SDNOTIFY_H

/* Calls: none (a leaf: the process, reload and takeover use it). */

/* Tell systemd (NOTIFY_SOCKET) a state line such as "READY=1"; nothing
 * when not run under it or when the socket cannot be reached. */
void tlp_sd_notify(const char *state);

#endif /* TLP_SDNOTIFY_H */
