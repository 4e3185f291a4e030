/* drivers/sim.c: the simulation driver (placeholder until it lands: absent, init NULL). */
#include "internal.h"
const struct tl_driver tl__driver_sim = {.name = "sim"};
