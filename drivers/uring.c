/* drivers/uring.c: the io_uring driver (placeholder until it lands: absent, init NULL). */
#include "internal.h"
const struct tl_driver tl__driver_uring = {.name = "uring"};
