/* Where the pool's threads run (placement.c): which CPUs a worker may use and how long the
 * scheduler lets it wait for one. Only the pool calls these; none changes what a task computes. */
#ifndef TGRAD_CPU_PLACEMENT_H
#define TGRAD_CPU_PLACEMENT_H

#include "../internal.h"

#define TG_PLACE_MAX_WORKERS 256

/* Once, before the first worker starts: the CPUs this process may use now are the pool's. */
TG_HIDDEN void tg_place_init(void);
/* In worker `id`'s own thread, when it starts: record its thread id, ask for a short time slice. */
TG_HIDDEN void tg_place_worker_start(int32_t id);
/* The CPU the calling thread runs on now (-1 where unknown). */
TG_HIDDEN int tg_place_current_cpu(void);
/* In worker `id`'s own thread, on picking up a job published from CPU `caller_cpu`: keep off
 * that CPU (a syscall only when the caller's CPU changed since this worker last looked). */
TG_HIDDEN void tg_place_worker_job(int32_t id, int caller_cpu);
/* From the caller, for a worker blocked in its sleep (the caller holds the pool's state lock):
 * keep it off `caller_cpu` before waking it. */
TG_HIDDEN void tg_place_steer_sleeper(int32_t id, int caller_cpu);

#endif
