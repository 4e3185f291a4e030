/* tests/dns_responder.h: a tiny DNS server on loopback for the resolver's tests: A and AAAA for a few names, NXDOMAIN otherwise. */
#ifndef TL_TESTS_DNS_RESPONDER_H
#define TL_TESTS_DNS_RESPONDER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/*
 * Names it knows (case-insensitive):
 *   one.tl.test   A 192.0.2.1
 *   two.tl.test   A 192.0.2.2, AAAA 2001:db8::2
 *   six.tl.test   AAAA 2001:db8::6
 * A known name asked for a type it lacks gets an empty answer (NODATA);
 * any other name NXDOMAIN. A silent responder counts queries and answers
 * none (for timeouts and cancellations).
 */
struct dnsr {
	int fd;
	uint16_t port;     /* its UDP port on 127.0.0.1 */
	int silent;
	pthread_t thread;
	atomic_int stop;
	atomic_uint queries;
};

/* Bind 127.0.0.1 on a free port and start answering: 0 or -errno. */
int dnsr_start(struct dnsr *r, int silent);
/* Stop the thread and close the socket. */
void dnsr_stop(struct dnsr *r);

#endif
