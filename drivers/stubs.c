/* drivers/stubs.c: driver tables for backends not built into this library (init NULL = absent). */
#include "internal.h"

#ifndef TL_HAVE_URING_DRIVER
const struct tl_driver tl__driver_uring = {.name = "uring"};
#endif
#ifndef TL_HAVE_SIM_DRIVER
const struct tl_driver tl__driver_sim = {.name = "sim"};
#endif
