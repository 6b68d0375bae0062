/*
 * progress_layout.c - common/progress.h as the compiler lays it out, for
 * the Python mirror's test (test_progress.py): "field NAME OFFSET SIZE"
 * for each field of struct ddp_progress, the constants, and each enum
 * value by name. "read FILE": the page in FILE through ddp_progress_read,
 * "NAME VALUE" per field, or "unread" when no consistent copy is had.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "progress.h"

#define FIELDS(X)                                                                                  \
	X(magic)                                                                                   \
	X(version)                                                                                 \
	X(gen)                                                                                     \
	X(pid)                                                                                     \
	X(round)                                                                                   \
	X(rank)                                                                                    \
	X(world)                                                                                   \
	X(phase)                                                                                   \
	X(op)                                                                                      \
	X(seq)                                                                                     \
	X(bytes)                                                                                   \
	X(bucket)                                                                                  \
	X(waiting_on)                                                                              \
	X(entered_ns)                                                                              \
	X(left_ns)                                                                                 \
	X(phase_ns)                                                                                \
	X(step)                                                                                    \
	X(step_ns)                                                                                 \
	X(compute_ns)                                                                              \
	X(wait_ns)                                                                                 \
	X(written_ns)                                                                              \
	X(shards)                                                                                  \
	X(reserved0)                                                                               \
	X(steps_total)                                                                             \
	X(step_ns_sum)

#define PRINT_FIELD(f)                                                                             \
	printf("field %s %zu %zu\n", #f, offsetof(struct ddp_progress, f),                         \
	       sizeof(((struct ddp_progress *)0)->f));
#define PRINT_VALUE(f)                                                                             \
	_Generic(p.f, int32_t                                                                      \
		 : printf("%s %" PRId64 "\n", #f, (int64_t)p.f), default                           \
		 : printf("%s %" PRIu64 "\n", #f, (uint64_t)p.f));
#define ENUM(kind, v) printf("%s %s %d\n", kind, #v, (int)v);

static int read_page(const char *path)
{
	struct ddp_progress p;
	void *m;
	int fd = open(path, O_RDONLY);

	if (fd < 0) {
		perror(path);
		return 1;
	}
	m = mmap(NULL, DDP_PROGRESS_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	if (!ddp_progress_read(m, &p)) {
		printf("unread\n");
		return 0;
	}
	FIELDS(PRINT_VALUE)
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "read") == 0)
		return read_page(argv[2]);
	printf("size %zu\n", sizeof(struct ddp_progress));
	printf("const MAGIC %u\nconst VERSION %d\nconst SIZE %d\nenv %s\n", DDP_PROGRESS_MAGIC,
	       DDP_PROGRESS_VERSION, DDP_PROGRESS_SIZE, DDP_PROGRESS_ENV);
	FIELDS(PRINT_FIELD)
	ENUM("phase", DDP_PHASE_NONE)
	ENUM("phase", DDP_PHASE_STARTUP)
	ENUM("phase", DDP_PHASE_REFORM)
	ENUM("phase", DDP_PHASE_HANDOVER)
	ENUM("phase", DDP_PHASE_COMPUTE)
	ENUM("phase", DDP_PHASE_COLLECTIVE)
	ENUM("phase", DDP_PHASE_CHECKPOINT)
	ENUM("phase", DDP_PHASE_EVAL)
	ENUM("phase", DDP_PHASE_FINAL)
	ENUM("phase", DDP_PHASE_SHUTDOWN)
	ENUM("phase", DDP_PHASE_COUNT)
	ENUM("op", DDP_OP_NONE)
	ENUM("op", DDP_OP_ALLREDUCE)
	ENUM("op", DDP_OP_BROADCAST)
	ENUM("op", DDP_OP_BARRIER)
	ENUM("op", DDP_OP_ALLGATHER)
	ENUM("op", DDP_OP_OTHER)
	ENUM("op", DDP_OP_COUNT)
	return 0;
}
