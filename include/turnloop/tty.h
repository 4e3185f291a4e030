/* turnloop/tty.h: the process's stdin, stdout and stderr (or any terminal, pipe or file descriptor) as handles; raw mode and window size (contract 5: terminals). */
#ifndef TURNLOOP_TTY_H
#define TURNLOOP_TTY_H

#include "turnloop/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What tl_stdio_open() found. */
enum tl_stdio_kind {
	TL_STDIO_TTY = 1, /* a terminal */
	TL_STDIO_PIPE,    /* a pipe, FIFO or socket */
	TL_STDIO_FILE,    /* a regular file or another device (/dev/null) */
};

/*
 * Open descriptor fd (0, 1, 2, or any other) as a handle of the loop, and
 * say what it is: returns its enum tl_stdio_kind (> 0) and sets *h. The
 * handle takes tl_read, tl_read_pooled, tl_read_start, tl_write and
 * tl_writev like a stream (same completions, same rules; tl_shutdown, the
 * socket calls and caps are -EINVAL), in submission order per direction.
 *
 * fd stays the caller's: the loop works on a descriptor of its own, a new
 * open of the same terminal or pipe (through /proc/self/fd) where it can,
 * so that making it non-blocking does not change the caller's (or a shell
 * sharing it) open file. Where that is not possible (a socket: it uses
 * MSG_DONTWAIT instead; a pipe /proc cannot reopen) it uses a duplicate,
 * and a duplicate it had to make non-blocking gets its flags back when the
 * handle is released. A terminal or pipe is read and written when the
 * driver says it is ready; a file never waits (each read or write is done
 * at once, in the turn: a file on a slow disk blocks the loop for that
 * long, so prefer the pool's file requests, turnloop/pool.h, for those).
 *
 * Returns the kind, or -EINVAL (fd < 0, h NULL, a directory), -EBADF (fd
 * not open), -ENOBUFS (handle table full), -ENOTSUP (the driver lacks
 * TL_CAP_POLL: the simulation driver), or the OS error of the reopen or
 * duplicate (-EMFILE).
 */
int tl_stdio_open(tl_loop *loop, int fd, tl_handle *h);

/* Terminal modes (tl_tty_mode). */
enum tl_tty_mode {
	/* Back to the settings the terminal had when this process first
	 * changed its mode. */
	TL_TTY_NORMAL = 0,
	/* Raw input: bytes as typed, one at a time (no line editing, no echo,
	 * no signals from ^C or ^Z, no CR/NL translation, no flow control,
	 * 8 bits); output still turns "\n" into "\r\n". */
	TL_TTY_RAW,
};

/*
 * Set the mode of terminal handle h. The first change in the process saves
 * the terminal's settings; they are put back when h is released (its
 * Closed handed out) and, for a handle still open then, at exit (an atexit
 * handler; a process ended by a signal's default action runs none, so a
 * program that must leave the terminal sane subscribes to SIGTERM and
 * exits). A forked child's exit does not restore its parent's terminal.
 * Returns 0, -ENOENT (stale or foreign), -EINVAL (not a terminal handle,
 * closing, mode unknown), or the OS error of tcsetattr.
 */
int tl_tty_mode(tl_loop *loop, tl_handle h, int mode);

/* The window size of terminal handle h: 0 with *cols and *rows set, or
 * -ENOENT, -EINVAL (not a terminal handle, cols or rows NULL), or the OS
 * error. To follow resizes, subscribe to SIGWINCH (turnloop/signal.h) and
 * read the size again on each completion: the kernel sends it to the
 * terminal's foreground process group when the size changes. */
int tl_tty_winsize(tl_loop *loop, tl_handle h, uint16_t *cols, uint16_t *rows);

#ifdef __cplusplus
}
#endif
#endif
