/* tests/dpdk_eal.h: the EAL set up as the DPDK driver's test programs and its fuzz target set it up: on ordinary memory, one lcore. */
#ifndef TL_TESTS_DPDK_EAL_H
#define TL_TESTS_DPDK_EAL_H

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <rte_eal.h>

/* The EAL of a test program named name: on ordinary memory, no PCI, one
 * lcore, the first CPU the process may run on. 0, or -1 (said on stderr). */
static inline int dpf_eal_init(const char *name)
{
	char *eal[] = {(char *)name, "--no-huge", "-m", "128", "--no-pci", "--no-shconf",
		       "--no-telemetry", "-l", "0", "--log-level=*:error", NULL};
	cpu_set_t cs;
	char cpu[8];
	pthread_getaffinity_np(pthread_self(), sizeof cs, &cs);
	for (int k = 0; k < CPU_SETSIZE; k++)
		if (CPU_ISSET(k, &cs)) {
			snprintf(cpu, sizeof cpu, "%d", k);
			eal[8] = cpu;
			break;
		}
	if (rte_eal_init(10, eal) < 0) {
		fprintf(stderr, "%s: rte_eal_init failed\n", name);
		return -1;
	}
	return 0;
}

#endif
