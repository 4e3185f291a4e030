/* tools/tlproxy/sdnotify.c: telling systemd the process's state (sd_notify's protocol, without libsystemd). */
/* Calls: none (a leaf). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sdnotify.h"

void tlp_sd_notify(const char *state)
{
	const char *p = getenv("NOTIFY_SOCKET");
	struct sockaddr_un su;
	socklen_t len;
	int fd;

	if (!p || !*p || strlen(p) >= sizeof su.sun_path)
		return;
	memset(&su, 0, sizeof su);
	su.sun_family = AF_UNIX;
	memcpy(su.sun_path, p, strlen(p));
	if (p[0] == '@')
		su.sun_path[0] = '\0'; /* the abstract namespace */
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(p));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&su, len);
	close(fd);
}
