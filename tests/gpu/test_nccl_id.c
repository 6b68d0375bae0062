/*
 * test_nccl_id.c - the NCCL unique-id exchange through the store, which
 * needs no GPU (ncclGetUniqueId only opens the bootstrap socket): rank 0
 * publishes under the attempt's key and a waiting rank (another process)
 * receives the same bytes; a new attempt gets a new id; a rank whose rank 0
 * never publishes fails within its deadline with a message naming rank 0 and
 * the key; a value of the wrong size is refused. Uses the file:// store so
 * no server is needed. Also the device choice: without a GPU, asking for
 * the NCCL backend (backend_nccl_pick_device, and ddp_init with
 * DDP_BACKEND=nccl) fails with a message that names the fix.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend_nccl.h"
#include "cudak_probe.h"
#include "ddp.h"
#include "kv.h"
#include "timeutil.h"

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);            \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static char store_path[256];

static struct kv *open_kv(void)
{
	char err[256];
	struct kv *kv = NULL;
	int rc = kv_file_new(store_path, &kv, err, sizeof(err));

	if (rc < 0)
		fprintf(stderr, "kv_file_new: %s\n", err);
	CHECK(rc == 0);
	return kv;
}

/* Rank 1 in a child process: waits for the id, writes it to the pipe. */
static pid_t start_rank1(const char *prefix, int fd)
{
	pid_t pid = fork();
	unsigned char id[BACKEND_NCCL_ID_BYTES];
	char err[512];

	CHECK(pid >= 0);
	if (pid > 0)
		return pid;
	struct kv *kv = open_kv();
	int rc = backend_nccl_exchange_id(kv, prefix, 1, 20000, id, err, sizeof(err));

	if (rc < 0)
		fprintf(stderr, "rank 1: %s\n", err);
	if (rc == 0 && write(fd, id, sizeof(id)) != (ssize_t)sizeof(id))
		rc = -EIO;
	kv_free(kv);
	_exit(rc == 0 ? 0 : 1);
}

static void exchange(const char *prefix, unsigned char *id0)
{
	unsigned char id1[BACKEND_NCCL_ID_BYTES];
	char err[512];
	int fds[2], status;
	pid_t pid;
	struct kv *kv;

	CHECK(pipe(fds) == 0);
	pid = start_rank1(prefix, fds[1]);
	close(fds[1]);
	kv = open_kv();
	if (backend_nccl_exchange_id(kv, prefix, 0, 1000, id0, err, sizeof(err)) < 0) {
		fprintf(stderr, "rank 0: %s\n", err);
		CHECK(0);
	}
	CHECK(read(fds[0], id1, sizeof(id1)) == (ssize_t)sizeof(id1));
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(memcmp(id0, id1, sizeof(id1)) == 0);
	close(fds[0]);
	kv_free(kv);
}

static void test_timeout_and_bad_value(void)
{
	unsigned char id[BACKEND_NCCL_ID_BYTES];
	char err[512] = "", key[256];
	struct kv *kv = open_kv();
	uint64_t t0 = time_now_ms();
	int rc =
	    backend_nccl_exchange_id(kv, "/ddp/t/attempt_9/backend", 1, 300, id, err, sizeof(err));
	uint64_t took = time_now_ms() - t0;

	printf("timeout: rc %d after %llu ms: %s\n", rc, (unsigned long long)took, err);
	CHECK(rc == -ETIMEDOUT);
	CHECK(took >= 250 && took < 10000);
	CHECK(strstr(err, "rank 0") && strstr(err, "/ddp/t/attempt_9/backend/nccl_id"));

	backend_nccl_id_key("/ddp/t/attempt_10/backend", key, sizeof(key));
	CHECK(kv_set(kv, key, "short", 5) == 0);
	rc = backend_nccl_exchange_id(kv, "/ddp/t/attempt_10/backend", 1, 1000, id, err,
				      sizeof(err));
	printf("bad value: rc %d: %s\n", rc, err);
	CHECK(rc == -EPROTO && strstr(err, "5 bytes"));
	kv_free(kv);
}

/* Without a GPU: -ENODEV and "use DDP_BACKEND=cpu", from the backend and
 * through ddp_init. With one: LOCAL_RANK modulo the count, DDP_CUDA_DEVICE
 * checked. */
static void test_device_choice(void)
{
	char err[512] = "", init[300];
	int ndev = cudak_probe_devices(NULL, 0);
	struct ddp_options opts;
	struct ddp_ctx *ctx = NULL;
	int rc;

	unsetenv("DDP_CUDA_DEVICE");
	rc = backend_nccl_pick_device(0, 3, err, sizeof(err));
	printf("pick_device(local rank 3): %d %s\n", rc, err);
	if (ndev == 0) {
		CHECK(rc == -ENODEV && strstr(err, "DDP_BACKEND=cpu"));
		ddp_options_init(&opts);
		snprintf(init, sizeof(init), "file://%s.init", store_path);
		opts.init_method = init;
		opts.rank = 0;
		opts.world_size = 1;
		opts.backend = DDP_BACKEND_NCCL;
		opts.timeout_ms = 5000;
		rc = ddp_init(&opts, &ctx, err, sizeof(err));
		printf("ddp_init(nccl) without a GPU: %d %s\n", rc, err);
		CHECK(rc < 0 && !ctx && strstr(err, "DDP_BACKEND=cpu"));
		unlink(init + strlen("file://"));
		return;
	}
	CHECK(rc == 3 % ndev);
	setenv("DDP_CUDA_DEVICE", "99", 1);
	rc = backend_nccl_pick_device(0, 0, err, sizeof(err));
	CHECK(rc == -ENODEV && strstr(err, "DDP_CUDA_DEVICE"));
	unsetenv("DDP_CUDA_DEVICE");
}

int main(void)
{
	unsigned char a[BACKEND_NCCL_ID_BYTES], b[BACKEND_NCCL_ID_BYTES];
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

	/* NCCL picks eth0 for its bootstrap socket unless told otherwise. */
	setenv("NCCL_SOCKET_IFNAME", "lo", 0);
	snprintf(store_path, sizeof(store_path), "%s/ddp-nccl-id-%d.store", tmp, (int)getpid());
	exchange("/ddp/t/attempt_0/backend", a);
	exchange("/ddp/t/attempt_1/backend", b);
	CHECK(memcmp(a, b, sizeof(a)) != 0); /* a restart gets a fresh id */
	test_timeout_and_bad_value();
	test_device_choice();
	unlink(store_path);
	printf("nccl unique-id exchange: ok\n");
	return 0;
}
