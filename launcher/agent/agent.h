/*
 * agent.h - the supervising loop of ddplaunch on one node, the same for a
 * job of one node or many: per attempt, join a rendezvous round (rdzv.h),
 * spawn the workers, watch them (exits and output are libuv events), stop
 * the group on the first failure, tell the rendezvous how the group ended,
 * and join its next round or finish.
 */
#ifndef DDP_LAUNCHER_AGENT_H
#define DDP_LAUNCHER_AGENT_H

#include <stddef.h>

#include "opts.h"

/* Runs the job described by `o` (already checked with opts_check) to the
 * end and returns ddplaunch's exit status (see rdzv_exit_status). Errors
 * before any worker starts are reported and return 1 (2 for a usage
 * problem such as a taken --strict_port). */
int agent_run(const struct launch_opts *o, char **environ_in);

/* The checks agent_run makes of `o` before it starts anything (the number
 * of workers, ddp-exec, the rendezvous, a --strict_port port that is
 * taken), so that --dry_run refuses what a real run would. Returns 0, or
 * -EINVAL/-ENOTSUP/-ENOENT/-EADDRINUSE with err filled. */
int agent_check(const struct launch_opts *o, char **environ_in, char *err, size_t errlen);

#endif
