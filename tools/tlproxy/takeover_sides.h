/* tools/tlproxy/takeover_sides.h: private to takeover.c and takeover_old.c: the state both sides of a takeover share, and the helpers of each that the other uses. */
#ifndef TLP_TAKEOVER_SIDES_H
#define TLP_TAKEOVER_SIDES_H

/* Calls: takeover -> world (the process side calls no shard code). */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

#include "takeover.h"

/* The handover socket's temporary name: PATH.new-PID. */
#define TMP_SUFFIX ".new-%ld"
#define TMP_SUFFIX_MAX 16

/* A record waiting for the old side's thread to send it, or sent and not
 * yet acknowledged (its descriptors stay open until then). */
struct qrec {
	struct qrec *next;
	int nfds, fds[2];
	uint32_t len;
	uint8_t data[];
};

/* A client of the handover socket that has not said HELLO yet. */
struct peer {
	int fd;
	pid_t pid;
	uint64_t t0;
	uint32_t got;
	uint8_t b[TLP_HO_HDR + 8];
};
#define MAX_PEERS 16

struct tlp_to {
	const char *serve_path;    /* --handover-socket */
	const char *take_path;     /* --takeover */
	uint64_t deadline_ns;      /* --handover-deadline */
	int lfd;                   /* the handover socket */
	ino_t lino;                /* its inode: removed only if still ours */
	char tmp_path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* its name until published */
	int published;             /* renamed to serve_path */
	int tfd;                   /* new side: the conversation with the old process */
	pthread_t th_srv, th_rx;   /* old side's server, new side's receiver */
	int srv_started, rx_started;
	_Atomic int stop;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct qrec *head, *tail;  /* under mu */
	uint32_t listen_acks, go_acks, stop_acks, fin_acks; /* shards that answered; under mu */
	_Atomic int64_t pending;   /* connections marked, not yet sent or ended */
	_Atomic uint64_t carried;  /* bytes carried in the CONN records */
	_Atomic uint32_t left;     /* connections that carry on here after the deadline */
	_Atomic uint32_t adopted, cut; /* records the shards carried on, or could not */
	uint64_t t_ready;          /* new side: READY sent */
	/* Old side, the server thread's own: */
	struct peer peers[MAX_PEERS];
	uint32_t npeers;
	pid_t taker;               /* the peer of the session under way, or that took over */
	int taken;                 /* taken over: every later peer is refused */
	struct qrec *unacked, **unacked_tail; /* sent CONN records, in order */
	uint32_t sent, acked;      /* CONN records sent, and acknowledged */
	uint8_t ackbuf[TLP_HO_HDR + 4];
	uint32_t ackgot;
	uint8_t end_sent, end_acked; /* END written; its acknowledgement read */
};
extern struct tlp_to tlp_to;

/* Set in the old side's thread while a takeover is under way: its waits
 * answer newcomers of the handover socket (refuse_newcomers). */
extern _Thread_local int tlp_to_in_session;

/* Helpers of both sides (takeover.c), and of the old side's thread
 * (takeover_old.c) that the new side uses. */
uint64_t tlp_to_now_ns(void);
/* Read exactly n bytes (and up to 2 descriptors into fds, *nfds of them)
 * by deadline: 0, or a negative errno (-ETIMEDOUT, -EPIPE at an end). */
int tlp_to_read_full(int fd, void *buf, size_t n, int *fds, int *nfds, uint64_t deadline);
/* Send message m: 0 or a negative errno. */
int tlp_to_send_msg(int fd, const struct tlp_ho_msg *m);
/* Receive one message (header h, decoded m, descriptors) by deadline: 0
 * or a negative errno. */
int tlp_to_recv_msg(int fd, struct tlp_ho_hdr *h, struct tlp_ho_msg *m, int *fds, int *nfds,
		    uint64_t deadline);
/* Close the n descriptors of fds that are open (>= 0). */
void tlp_to_close_fds(int *fds, int n);
/* A connection record as a shard adopts it, or NULL (see takeover.c). */
struct tlp_ho_in *tlp_to_in_new(const struct tlp_ho_hdr *h, const uint8_t *b, const int fds[2]);
/* Hand in to shard 0: 0, or a negative errno (in is still the caller's). */
int tlp_to_post_in(struct tlp_ho_in *in);
/* Wait (bounded) for the shards to carry on or cut n records; how many
 * they cut. */
uint32_t tlp_to_wait_adopted(uint32_t n);
/* Answer every peer of the handover socket that waits (busy). */
void tlp_to_refuse_newcomers(void);
/* Free q, closing its descriptors if close_them. */
void tlp_to_qrec_free(struct qrec *q, int close_them);
/* Give the handover socket its name (the temporary one renamed). */
void tlp_to_publish(void);

#endif /* TLP_TAKEOVER_SIDES_H */
