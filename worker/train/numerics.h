/*
 * numerics.h - a rank's numeric identity: everything besides the job's
 * settings and data that decides the bits of a step (the BLAS library, its
 * kernel and thread count, ddp-train's kernel path and build, and on a GPU
 * the device model, driver, cuBLAS, NCCL and matmul precision), and the
 * comparison of every rank's against the job's.
 *
 * With --global_batch_size a job promises the bits of a 1-rank run; that
 * holds only when every rank computes a shard as every other would. The
 * trainer (trainer_numerics.c) gathers every rank's identity at its start and
 * at every re-formation, and refuses a rank whose identity differs from the
 * job's, naming both sides and what to set.
 *
 * Pure, but for numerics_of_cpu (which asks OpenBLAS) and numerics_of_gpu
 * (CUDA builds: the runtime, cuBLAS and NCCL).
 */
#ifndef DDP_WORKER_TRAIN_NUMERICS_H
#define DDP_WORKER_TRAIN_NUMERICS_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The fields compared, in the order a mismatch is reported (the first one
 * that differs is named). "" where a field does not apply (the BLAS on the
 * GPU path, the GPU on the CPU path). */
enum numerics_field {
	NUMERICS_KERNELS, /* ddp-train's kernel path: "cpu" or "cuda" */
	NUMERICS_CORE,	  /* OpenBLAS's kernel (openblas_get_corename) */
	NUMERICS_THREADS, /* BLAS threads */
	NUMERICS_BLAS,	  /* the library and its build (openblas_get_config, core removed) */
	NUMERICS_BUILD,	  /* ddp-train's version, compiler, compile flags' hash */
	NUMERICS_GPU,	  /* the device model */
	NUMERICS_DRIVER,  /* the CUDA driver version */
	NUMERICS_CUBLAS,  /* the cuBLAS version */
	NUMERICS_NCCL,	  /* the NCCL version */
	NUMERICS_MATMUL,  /* DDP_MATMUL_PRECISION */
	NUMERICS_NFIELDS,
};

#define NUMERICS_VALUE_MAX 96 /* bytes of a field, its NUL included */
#define NUMERICS_HOST_MAX  64

/* What a refused rank's ddp-train returns (exit 78: a restart meets it
 * again; the launcher does not retry). */
#define NUMERICS_REFUSED (-EDOM)

struct numerics_identity {
	char value[NUMERICS_NFIELDS][NUMERICS_VALUE_MAX];
	/* Not compared: */
	char host[NUMERICS_HOST_MAX]; /* names the rank's machine in messages */
	int node;		      /* GROUP_RANK, -1 when unknown */
	bool has_state;		      /* the rank holds the job's training state */
};

/* Fills the CPU path's fields: kernels "cpu", OpenBLAS's core, thread count
 * and configuration, ddp-train's build; the GPU fields "". Call after
 * setting the thread count. host and node from gethostname and GROUP_RANK. */
void numerics_of_cpu(struct numerics_identity *id);

/* CUDA builds (numerics_cuda.c): kernels "cuda", the current device's
 * model, the driver, cuBLAS, NCCL and DDP_MATMUL_PRECISION, the build; the
 * BLAS fields "". Returns 0, or -EIO when the runtime cannot say. */
int numerics_of_gpu(struct numerics_identity *id);

/* The build field: ddp-train's version, the compiler and the hash of the
 * compile flags (numerics_build_flags): two builds of one version with
 * other flags (-march=native's FMA, another -O) give other bits. */
void numerics_build(char *buf, size_t len);
/* The compile flags this build was made with (worker/train/meson.build). */
const char *numerics_build_flags(void);
/* FNV-1a of flags: the build field's "flags %08x". */
uint32_t numerics_flags_hash(const char *flags);

/* BLAS threads for the settings: threads when set (> 0); else 1 with a
 * fixed global batch (the job's bits must not depend on the machine's
 * cores or on how many workers ddplaunch put on it), else 0 (OpenBLAS's
 * own choice). */
int numerics_blas_threads(long long threads, long long global_batch_size);

/* Serialised identities travel as float32 words (the only types the
 * collectives move), three bytes to a word, which float32 holds exactly. */
#define NUMERICS_BYTES ((size_t)NUMERICS_NFIELDS * NUMERICS_VALUE_MAX + NUMERICS_HOST_MAX + 8)
#define NUMERICS_WORDS ((NUMERICS_BYTES + 2) / 3)

void numerics_encode(const struct numerics_identity *id, float words[NUMERICS_WORDS]);
/* Returns 0, or -EINVAL when words are not an encoding (a byte out of
 * range, a field without its NUL). */
int numerics_decode(const float words[NUMERICS_WORDS], struct numerics_identity *id);

/* The first difference among n ranks' identities. */
struct numerics_mismatch {
	int ref;       /* the job's reference: the lowest rank holding state, else 0 */
	int rank;      /* the lowest rank whose identity differs from ref's */
	int field;     /* enum numerics_field, the first that differs */
	bool at_start; /* no rank holds state: the job is starting */
	int nmismatch; /* how many ranks differ from ref */
};

/* Returns 0 when every rank's identity equals the reference's, 1 with *m
 * filled when not, -EINVAL for n < 1. */
int numerics_compare(const struct numerics_identity *ids, int n, struct numerics_mismatch *m);

/* Whether rank `rank` must refuse to go on: at the start, every rank (the
 * job does not start); at a join, the ranks without state whose identity
 * differs from the reference (the job goes on without them). */
bool numerics_refused(const struct numerics_identity *ids, int n, const struct numerics_mismatch *m,
		      int rank);

/* One line naming both sides and what to set, e.g. "rank 1 (host b, node
 * 1) uses OpenBLAS kernel Sandybridge, rank 0 (host a, node 0) Haswell: set
 * OPENBLAS_CORETYPE=Haswell on every node". No trailing fix for the
 * option; the caller adds it. */
void numerics_describe(const struct numerics_identity *ids, const struct numerics_mismatch *m,
		       char *buf, size_t len);

/* One line of the reference's identity ("cpu kernels, OpenBLAS Haswell, 1
 * BLAS thread, OpenBLAS 0.3.21 ..."), for the run's record. */
void numerics_summary(const struct numerics_identity *id, char *buf, size_t len);

/* What a run records of its identity (rank 0's end-of-run line and
 * metrics record): the job's reference identity, and whether the promise
 * of a 1-rank run's bits holds. */
struct numerics_record {
	bool checked;	 /* compared at least once (more than one rank) */
	bool dropped;	 /* --allow_numeric_mismatch accepted a difference */
	uint64_t step;	 /* when it was dropped */
	char ident[512]; /* numerics_summary of the reference */
	char why[1024];	 /* numerics_describe of the difference accepted */
};

/* The field's name in messages and records ("OpenBLAS kernel"). */
const char *numerics_field_name(int field);

#endif
