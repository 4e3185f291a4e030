/* tools/tlproxy/netlist.h: CIDR networks (IPv4, IPv6, IPv4-mapped IPv6 as IPv4), sets of them for matching, and a listener's allow/deny decision. */
#ifndef TLP_NETLIST_H
#define TLP_NETLIST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/*
 * One network. family is AF_INET or AF_INET6; addr holds the address in
 * network byte order (IPv4 in addr[0..3], the rest zero), with every bit
 * past prefix cleared. An IPv4-mapped IPv6 network (::ffff:a.b.c.d/96+) is
 * stored as the IPv4 network it names, so that it matches IPv4 peers.
 */
struct tlp_cidr {
	uint8_t family;
	uint8_t prefix;   /* 0..32 (AF_INET) or 0..128 (AF_INET6) */
	uint8_t addr[16];
};

/*
 * Parse one network from s[0..len) (no NUL needed): "10.0.0.0/8",
 * "2001:db8::/32", "::ffff:10.0.0.0/104", or a bare address for one host
 * ("10.1.2.3" is 10.1.2.3/32, "::1" is ::1/128). No spaces, no leading zeros
 * in the prefix, and no bits set past the prefix ("10.1.0.0/8" is refused:
 * it names 10.0.0.0/8 and is most likely a typo for /16).
 * Returns 0 with *out filled; -EINVAL with a one-line reason in err (err
 * may be NULL or errlen 0; cut to errlen - 1 bytes), *out then unspecified.
 */
int tlp_cidr_parse(const char *s, size_t len, struct tlp_cidr *out, char *err, size_t errlen);

/*
 * Write c as text ("10.0.0.0/8", "2001:db8::/32") into buf of len bytes,
 * NUL-terminated. Returns the length written (without the NUL); -EINVAL for
 * a NULL argument or a bad family or prefix; -ENOBUFS if len is too small
 * (64 bytes always suffice).
 */
int tlp_cidr_format(const struct tlp_cidr *c, char *buf, size_t len);

/*
 * Parse a list of networks separated by commas and/or blanks ("10.0.0.0/8,
 * ::1/128") from s[0..len) into out[0..cap). Empty items are skipped, so an
 * empty or blank string is an empty list. Returns the count (0..cap);
 * -EINVAL (bad item, reason in err naming it) or -ENOBUFS (more than cap
 * items); out[] is then partly written.
 */
int tlp_netlist_parse(const char *s, size_t len, struct tlp_cidr *out, uint32_t cap, char *err,
		      size_t errlen);

/* Inclusive address ranges, host byte order (IPv6 as two 64-bit halves). */
struct tlp_range4 {
	uint32_t lo, hi;
};
struct tlp_range6 {
	uint64_t lo_hi, lo_lo; /* first address: high half, low half */
	uint64_t hi_hi, hi_lo; /* last address */
};

/*
 * A set of networks ready for matching: per family, sorted disjoint ranges
 * (overlapping and adjacent networks merged), so a match is one binary
 * search. The arrays belong to whoever passed them to tlp_netset_build.
 * A zeroed struct is the empty set.
 */
struct tlp_netset {
	uint32_t n4, n6;
	struct tlp_range4 *r4;
	struct tlp_range6 *r6;
};

/*
 * Build *set from c[0..n). r4 and r6 are caller storage of n entries each
 * (either may be NULL when n is 0); the set points into them, so they must
 * outlive it. May sort with qsort (setup, not steady state).
 * Returns 0; -EINVAL if set is NULL, c, r4 or r6 is NULL while n > 0, or an
 * entry has a bad family or prefix.
 */
int tlp_netset_build(struct tlp_netset *set, const struct tlp_cidr *c, uint32_t n,
		     struct tlp_range4 *r4, struct tlp_range6 *r6);

/* Number of ranges in the set: 0 means empty. */
static inline uint32_t tlp_netset_count(const struct tlp_netset *set)
{
	return set ? set->n4 + set->n6 : 0;
}

/*
 * Is the address sa (AF_INET, or AF_INET6 where an IPv4-mapped address is
 * looked up as IPv4) inside the set? An IPv6 network never holds a mapped
 * address, even one as wide as ::/80 that spans ::ffff:0:0/96: the peer is
 * an IPv4 one, matched against the set's IPv4 networks. Allocation-free,
 * O(log n).
 * Returns 1 (inside), 0 (outside, or sa of another family such as AF_UNIX);
 * -EINVAL if set or sa is NULL.
 */
int tlp_netset_match(const struct tlp_netset *set, const struct sockaddr *sa);

/*
 * The listener's decision for a peer: refused if deny matches (deny wins);
 * else allowed if allow is empty or matches; else refused. Peers that are
 * not IP (AF_UNIX) are always allowed: file permissions guard Unix sockets,
 * and the lists could never name them. allow and deny may be NULL (empty).
 * Returns 1 (allowed), 0 (refused); -EINVAL if sa is NULL.
 */
int tlp_acl_check(const struct tlp_netset *allow, const struct tlp_netset *deny,
		  const struct sockaddr *sa);

#endif /* TLP_NETLIST_H */
