/*
 * status.h - `ddplaunch status`: a running multi-node job's live state,
 * read from its rendezvous store (status_main.c; what it shows:
 * status_view.h; what the agents publish: launcher/agent/agent_status.c).
 */
#ifndef DDP_LAUNCHER_STATUS_H
#define DDP_LAUNCHER_STATUS_H

/* argv[0] is "status"; returns ddplaunch's exit status: 0, 1 (the job is not
 * there, the store cannot be reached or read), 2 (usage). */
int status_main(int argc, char **argv, char **envp);

#endif
