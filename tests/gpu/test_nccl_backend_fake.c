/*
 * test_nccl_backend_fake.c - libddp's NCCL backend on a machine without a
 * GPU, against the host-memory stand-in for CUDA and NCCL
 * (fake_cuda_nccl.c), one rank: non-blocking initialisation that reports
 * ncclInProgress first; collectives on device and on host buffers (staged
 * and copied back); the reducer's buckets (in place, or alloc, copy in,
 * all-reduce, copy out); finalize at ddp_free; and the watchdog: a collective
 * that never completes fails with -ETIMEDOUT within the deadline naming the
 * operation, an asynchronous NCCL error fails with -ECONNRESET, ddp_abort()
 * stops a waiting collective, an initialisation that never finishes times
 * out; after each the communicator is aborted and later calls are refused.
 * ddp_reform aborts the old communicator, makes a new one and keeps the
 * application's device memory.
 * And ddp_set_compute_stream: which stream the backend's events are
 * recorded on and waited by (the CPU backend ignores it). And a
 * re-formation superseded by the launcher's next round while NCCL creates
 * the communicator ends at once (-ESTALE), not at its deadline.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "agent_wire.h"
#include "ddp.h"
#include "fake_cuda_nccl.h"
#include "reducer.h"
#include "timeutil.h"

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);            \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static char dir[256];
static int ncase;

/* A one-rank context on the NCCL backend with a fresh file store. */
static int open_ctx(uint64_t timeout_ms, struct ddp_ctx **ctx, char *err, size_t errlen)
{
	struct ddp_options o;
	char init[300];

	ddp_options_init(&o);
	snprintf(init, sizeof(init), "file://%s/store%d", dir, ncase++);
	o.init_method = init;
	o.rank = 0;
	o.world_size = 1;
	o.local_rank = 0;
	o.local_world_size = 1;
	o.backend = DDP_BACKEND_NCCL;
	o.timeout_ms = timeout_ms;
	return ddp_init(&o, ctx, err, errlen);
}

static void test_collectives(void)
{
	struct fake_state st = {.init_polls = 3, .hang_after = -1, .sum_factor = 2.0f};
	float host[5] = {1, 2, 3, 4, 5}, *dev;
	double mine = 7.5, all[1] = {0};
	char err[512];
	struct ddp_ctx *ctx;

	fake_set(&st);
	CHECK(open_ctx(5000, &ctx, err, sizeof(err)) == 0);
	CHECK(strcmp(ddp_backend_name(ctx), "nccl") == 0 && ddp_device_memory(ctx) == 1);
	CHECK(ddp_device(ctx) == 0);
	CHECK(cudaMalloc((void **)&dev, sizeof(host)) == cudaSuccess);
	memcpy(dev, host, sizeof(host));
	CHECK(ddp_allreduce(ctx, dev, 5, DDP_FLOAT32, DDP_SUM) == 0);
	CHECK(dev[0] == 2 && dev[4] == 10); /* the fake doubles a sum */
	/* Host buffers are staged through device memory and copied back. */
	CHECK(ddp_allreduce(ctx, host, 5, DDP_FLOAT32, DDP_SUM) == 0);
	CHECK(host[0] == 2 && host[4] == 10);
	CHECK(ddp_broadcast(ctx, host, 5, DDP_FLOAT32, 0) == 0 && host[2] == 6);
	CHECK(ddp_allgather(ctx, &mine, all, 1, DDP_FLOAT64) == 0 && all[0] == 7.5);
	CHECK(ddp_allreduce(ctx, host, 0, DDP_FLOAT32, DDP_SUM) == 0);
	CHECK(ddp_barrier(ctx) == 0);
	st = fake_get();
	printf("collectives: %d NCCL calls, ok\n", st.collectives);
	CHECK(st.collectives >= 5 && st.aborts == 0);
	cudaFree(dev);
	ddp_free(ctx);
	st = fake_get();
	CHECK(st.comms == 0 && st.destroys == 1 && st.aborts == 0); /* finalized, not aborted */
	CHECK(st.device_allocs == 0);
}

/* The reducer on the NCCL backend (the fake all-reduce adds 0.5 to an
 * average): bucket 0 (p2 alone) is reduced in place in p2's gradient;
 * bucket 1 (p0 and p1, whose gradients are apart) gets a buffer from the
 * backend's alloc(), gradients packed with copy(), unpacked with copy(). */
static void test_reducer(void)
{
	struct fake_state st = {.hang_after = -1, .avg_add = 0.5f};
	static const int64_t sizes[3] = {5, 1031, 7};
	struct ddp_param params[3];
	struct ddp_reducer_options ro = {.bucket_cap_bytes = 8192, .first_bucket_cap_bytes = 64};
	struct ddp_reducer *r;
	struct ddp_ctx *ctx;
	char err[512], names[3][8];
	int allocs;

	fake_set(&st);
	CHECK(open_ctx(5000, &ctx, err, sizeof(err)) == 0);
	allocs = fake_get().device_allocs;
	for (int i = 0; i < 3; i++) {
		float *d, *g;

		CHECK(cudaMalloc((void **)&d, sizes[i] * 4) == cudaSuccess);
		CHECK(cudaMalloc((void **)&g, sizes[i] * 4) == cudaSuccess);
		for (int64_t j = 0; j < sizes[i]; j++)
			g[j] = (float)(i * 10000 + j);
		snprintf(names[i], sizeof(names[i]), "p%d", i);
		params[i] = (struct ddp_param){.name = names[i],
					       .dtype = DDP_FLOAT32,
					       .ndim = 1,
					       .shape = {sizes[i]},
					       .data = d,
					       .grad = g,
					       .requires_grad = 1};
	}
	CHECK(ddp_reducer_new(ctx, params, 3, NULL, 0, &ro, &r) == 0);
	printf("reducer: %zu buckets\n", ddp_reducer_num_buckets(r));
	CHECK(ddp_reducer_num_buckets(r) == 2 && reducer_num_in_place(r) == 1);
	CHECK(fake_get().device_allocs == allocs + 7); /* one bucket buffer */
	CHECK(ddp_reducer_prepare(r, 1) == 0);
	for (int i = 2; i >= 0; i--)
		CHECK(ddp_reducer_grad_ready(r, (size_t)i) == 0);
	CHECK(ddp_reducer_finish(r) == 0);
	for (int i = 0; i < 3; i++)
		for (int64_t j = 0; j < sizes[i]; j++)
			CHECK(((float *)params[i].grad)[j] == (float)(i * 10000 + j) + 0.5f);
	ddp_reducer_free(r);
	CHECK(fake_get().device_allocs == allocs + 6); /* the buckets are freed */
	for (int i = 0; i < 3; i++) {
		cudaFree(params[i].data);
		cudaFree(params[i].grad);
	}
	ddp_free(ctx);
	CHECK(fake_get().comms == 0 && fake_get().aborts == 0);
}

/* ddp_set_compute_stream: a collective on the application's memory waits
 * for an event recorded on the stream set (none on the backend's own
 * memory); the reducer's copies wait for it and the stream waits for them;
 * NULL goes back to the legacy default stream. */
static void test_compute_stream(void)
{
	struct fake_state st = {.hang_after = -1};
	const int64_t n = 8;
	struct ddp_param param = {
	    .name = "w", .dtype = DDP_FLOAT32, .ndim = 1, .shape = {n}, .requires_grad = 1};
	struct ddp_reducer *r;
	struct ddp_ctx *ctx;
	cudaStream_t app;
	float *dev, *own;
	char err[512];
	int legacy, rec, waits;

	fake_set(&st);
	CHECK(open_ctx(5000, &ctx, err, sizeof(err)) == 0);
	CHECK(cudaStreamCreateWithFlags(&app, cudaStreamNonBlocking) == cudaSuccess);
	CHECK(cudaMalloc((void **)&dev, n * 4) == cudaSuccess);
	CHECK(ddp_mem_alloc(ctx, n * 4, (void **)&own) == 0);
	/* Until it is set, the legacy default stream. */
	legacy = fake_get().legacy_records;
	CHECK(ddp_allreduce(ctx, dev, (size_t)n, DDP_FLOAT32, DDP_SUM) == 0);
	CHECK(fake_get().legacy_records == legacy + 1);
	st = fake_get();
	st.watch_stream = app;
	fake_set(&st);
	CHECK(ddp_set_compute_stream(ctx, app) == 0);
	CHECK(ddp_allreduce(ctx, dev, (size_t)n, DDP_FLOAT32, DDP_SUM) == 0);
	st = fake_get();
	CHECK(st.watch_records == 1 && st.watch_waits == 0 && st.legacy_records == legacy + 1);
	/* The backend's own memory does not wait for the compute stream. */
	CHECK(ddp_allreduce(ctx, own, (size_t)n, DDP_FLOAT32, DDP_SUM) == 0);
	CHECK(fake_get().watch_records == 1);
	/* The reducer: the broadcast of the parameter records on the stream.
	 * Its one bucket is reduced in place: grad_ready's fence and the
	 * all-reduce on the application's memory each record on the stream;
	 * no copy, so the stream waits for nothing (finish returns once the
	 * all-reduce is done). */
	param.data = dev;
	CHECK(cudaMalloc(&param.grad, n * 4) == cudaSuccess);
	CHECK(ddp_reducer_new(ctx, &param, 1, NULL, 0, NULL, &r) == 0);
	rec = fake_get().watch_records;
	waits = fake_get().watch_waits;
	CHECK(rec == 2 && waits == 0);
	CHECK(ddp_reducer_prepare(r, 1) == 0);
	CHECK(ddp_reducer_grad_ready(r, 0) == 0);
	CHECK(ddp_reducer_finish(r) == 0);
	st = fake_get();
	printf("compute stream: %d events recorded on it, %d waits by it\n", st.watch_records,
	       st.watch_waits);
	CHECK(reducer_num_in_place(r) == 1);
	CHECK(st.watch_records == rec + 2 && st.watch_waits == waits);
	ddp_reducer_free(r);
	/* Reset: back to the legacy default stream; the stream may go. */
	CHECK(ddp_set_compute_stream(ctx, NULL) == 0);
	CHECK(cudaStreamDestroy(app) == cudaSuccess);
	CHECK(ddp_allreduce(ctx, dev, (size_t)n, DDP_FLOAT32, DDP_SUM) == 0);
	st = fake_get();
	CHECK(st.watch_records == rec + 2 && st.legacy_records == legacy + 2);
	CHECK(ddp_set_compute_stream(NULL, NULL) == -EINVAL);
	ddp_mem_free(ctx, own);
	cudaFree(param.grad);
	cudaFree(dev);
	ddp_free(ctx);
	CHECK(fake_get().comms == 0 && fake_get().aborts == 0 && fake_get().device_allocs == 0);
}

/* The CPU backend has no streams: it accepts one and ignores it. */
static void test_compute_stream_cpu(void)
{
	struct ddp_options o;
	struct ddp_ctx *ctx;
	char init[300], err[512];
	float x[3] = {1, 2, 3};

	ddp_options_init(&o);
	snprintf(init, sizeof(init), "file://%s/store%d", dir, ncase++);
	o.init_method = init;
	o.rank = 0;
	o.world_size = 1;
	o.backend = DDP_BACKEND_CPU;
	CHECK(ddp_init(&o, &ctx, err, sizeof(err)) == 0);
	CHECK(ddp_device_memory(ctx) == 0);
	CHECK(ddp_set_compute_stream(ctx, (void *)&o) == 0);
	CHECK(ddp_allreduce(ctx, x, 3, DDP_FLOAT32, DDP_SUM) == 0 && x[2] == 3);
	CHECK(ddp_set_compute_stream(ctx, NULL) == 0);
	ddp_free(ctx);
}

/* A collective that never completes (hang) or reports an NCCL error. */
static void test_fault(int async_error)
{
	struct fake_state st = {.hang_after = 0, .async_error = 0};
	struct ddp_ctx *ctx;
	char err[512];
	float *dev;
	uint64_t t0, took;
	int rc;

	fake_set(&st);
	CHECK(open_ctx(400, &ctx, err, sizeof(err)) == 0);
	st = fake_get();
	st.async_error = async_error;
	fake_set(&st);
	CHECK(cudaMalloc((void **)&dev, 64) == cudaSuccess);
	t0 = time_now_ms();
	rc = ddp_allreduce(ctx, dev, 16, DDP_FLOAT32, DDP_AVG);
	took = time_now_ms() - t0;
	printf("%s: rc %d after %llu ms: %s\n", async_error ? "async error" : "hang", rc,
	       (unsigned long long)took, ddp_error(ctx));
	CHECK(strstr(ddp_error(ctx), "all-reduce of 16 elements on rank 0 of 1"));
	CHECK(strstr(ddp_error(ctx), "aborted"));
	if (async_error) {
		CHECK(rc == -ECONNRESET && took < 2000 && strstr(ddp_error(ctx), "failed"));
	} else {
		CHECK(rc == -ETIMEDOUT && took >= 390 && took < 5000);
		CHECK(strstr(ddp_error(ctx), "did not complete within 400 ms"));
	}
	CHECK(fake_get().aborts == 1 && fake_get().comms == 0);
	t0 = time_now_ms();
	CHECK(ddp_barrier(ctx) == -ECANCELED && time_now_ms() - t0 < 1000);
	cudaFree(dev);
	ddp_free(ctx);
	CHECK(fake_get().aborts == 1 && fake_get().device_allocs == 0);
}

static void test_abort(void)
{
	struct fake_state st = {.hang_after = 0};
	struct ddp_ctx *ctx;
	struct ddp_work *w;
	char err[512];
	float *dev;
	uint64_t t0;
	int rc;

	fake_set(&st);
	CHECK(open_ctx(60000, &ctx, err, sizeof(err)) == 0);
	CHECK(cudaMalloc((void **)&dev, 64) == cudaSuccess);
	CHECK(ddp_allreduce_async(ctx, dev, 16, DDP_FLOAT32, DDP_SUM, &w) == 0);
	/* Wait until the watchdog is polling the stuck collective. */
	t0 = time_now_ms();
	while (fake_get().event_queries < 3 && time_now_ms() - t0 < 5000)
		usleep(1000);
	ddp_abort(ctx);
	rc = ddp_work_wait(w);
	printf("abort: rc %d after %llu ms: %s\n", rc, (unsigned long long)(time_now_ms() - t0),
	       ddp_error(ctx));
	CHECK(rc == -ECANCELED && time_now_ms() - t0 < 5000);
	CHECK(fake_get().aborts == 1 && fake_get().comms == 0);
	cudaFree(dev);
	ddp_free(ctx);
}

/* ddp_reform on NCCL: the old communicator is aborted (ncclCommAbort, not
 * a finalize that would wait for dead peers), a new one is made (a new
 * unique id through the new store), the application's ddp_mem_alloc
 * buffer survives (not freed, still tracked: it is freed by ddp_mem_free
 * and nothing is left at ddp_free), and collectives work again. Twice. */
static void test_reform(void)
{
	struct fake_state st = {.hang_after = -1};
	struct ddp_options o;
	struct ddp_ctx *ctx;
	char err[512], init[300];
	float *dev, host[16];
	int allocs;

	fake_set(&st);
	CHECK(open_ctx(60000, &ctx, err, sizeof(err)) == 0);
	CHECK(ddp_mem_alloc(ctx, 16 * sizeof(float), (void **)&dev) == 0);
	allocs = fake_get().device_allocs;
	CHECK(ddp_allreduce(ctx, dev, 16, DDP_FLOAT32, DDP_SUM) == 0);
	ddp_abort(ctx);
	CHECK(ddp_allreduce(ctx, dev, 16, DDP_FLOAT32, DDP_SUM) == -ECANCELED);
	for (int round = 1; round <= 2; round++) {
		ddp_options_init(&o);
		snprintf(init, sizeof(init), "file://%s/store%d", dir, ncase++);
		o.init_method = init;
		o.rank = o.local_rank = 0;
		o.world_size = o.local_world_size = 1;
		o.attempt = round;
		o.backend = DDP_BACKEND_NCCL;
		CHECK(ddp_reform(ctx, &o, err, sizeof(err)) == 0);
		printf("reform %d: aborts %d comms %d device allocs %d\n", round, fake_get().aborts,
		       fake_get().comms, fake_get().device_allocs);
		CHECK(fake_get().aborts == round && fake_get().comms == 1);
		CHECK(fake_get().device_allocs == allocs && ddp_attempt(ctx) == round);
		for (int i = 0; i < 16; i++)
			host[i] = (float)i;
		memcpy(dev, host, sizeof(host)); /* the fake's device memory is host memory */
		CHECK(ddp_allreduce(ctx, dev, 16, DDP_FLOAT32, DDP_SUM) == 0);
		CHECK(dev[15] == 15.0f);
	}
	ddp_mem_free(ctx, dev);
	ddp_free(ctx);
	CHECK(fake_get().comms == 0 && fake_get().device_allocs == 0);
}

static void test_init_timeout(void)
{
	struct fake_state st = {.init_polls = 1 << 30, .hang_after = -1};
	struct ddp_ctx *ctx = NULL;
	char err[512] = "";
	uint64_t t0 = time_now_ms();
	int rc;

	fake_set(&st);
	rc = open_ctx(300, &ctx, err, sizeof(err));
	printf("init timeout: rc %d after %llu ms: %s\n", rc,
	       (unsigned long long)(time_now_ms() - t0), err);
	CHECK(rc == -ETIMEDOUT && !ctx);
	CHECK(strstr(err, "communicator initialisation") && strstr(err, "NCCL_SOCKET_IFNAME"));
	CHECK(fake_get().aborts == 1 && fake_get().comms == 0 && fake_get().device_allocs == 0);
}

/* The launcher's agent, played by a thread: after delay_ms it sends a round
 * on its end of the channel (the line ddplaunch's agent writes). */
struct round_sender {
	int fd;
	int round;
	long delay_ms;
	uint64_t sent_ms;
};

static void *round_sender_main(void *arg)
{
	struct round_sender *a = arg;
	struct agent_wire_msg m = {.kind = AGENT_WIRE_ROUND};
	char line[AGENT_WIRE_MAX_LINE];
	int n;

	m.r = (struct agent_wire_round){.round = a->round,
					.world_size = 1,
					.local_world_size = 1,
					.master_port = 1,
					.group_world_size = 1};
	agent_wire_round_set_addr(&m.r, "127.0.0.1");
	n = agent_wire_format(&m, line, sizeof(line));
	usleep((useconds_t)a->delay_ms * 1000);
	a->sent_ms = time_now_ms();
	if (n < 0 || write(a->fd, line, (size_t)n) != n)
		perror("round sender: write");
	return NULL;
}

/* One-rank options on the NCCL backend with a fresh file store. */
static void nccl_options(struct ddp_options *o, char *init, size_t len, int attempt)
{
	ddp_options_init(o);
	snprintf(init, len, "file://%s/store%d", dir, ncase++);
	o->init_method = init;
	o->rank = o->local_rank = 0;
	o->world_size = o->local_world_size = 1;
	o->attempt = attempt;
	o->backend = DDP_BACKEND_NCCL;
}

/* A re-formation superseded while NCCL creates the communicator (an
 * initialisation that never finishes, deadline 10 s): ddp_reform returns
 * -ESTALE within 100 ms of the round, not at the deadline, the
 * half-made communicator aborted (ncclCommAbort) and nothing left; the
 * next round's re-formation then works. The context has an agent channel
 * (a socketpair as DDP_AGENT_FD, as ddplaunch gives). */
static void test_reform_superseded(void)
{
	struct fake_state st = {.hang_after = -1};
	struct round_sender a = {.round = 7, .delay_ms = 200};
	struct ddp_options o;
	struct ddp_round r;
	struct ddp_ctx *ctx;
	char err[512] = "", init[300], fdname[16], pid[16];
	pthread_t t;
	uint64_t late;
	float v = 3.0f;
	int sv[2], rc;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	a.fd = sv[0];
	snprintf(fdname, sizeof(fdname), "%d", sv[1]);
	setenv("DDP_AGENT_FD", fdname, 1);
	/* The pair's creator, this process, is the agent (agent_chan.c). */
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	setenv("DDP_AGENT_PID", pid, 1);
	fake_set(&st);
	CHECK(open_ctx(10000, &ctx, err, sizeof(err)) == 0);
	unsetenv("DDP_AGENT_FD");
	CHECK(ddp_resizable(ctx));
	st = fake_get();
	st.init_polls = 1 << 30;
	fake_set(&st);
	nccl_options(&o, init, sizeof(init), 6);
	o.timeout_ms = 10000;
	CHECK(pthread_create(&t, NULL, round_sender_main, &a) == 0);
	rc = ddp_reform(ctx, &o, err, sizeof(err));
	late = time_now_ms() - a.sent_ms;
	pthread_join(t, NULL);
	printf("superseded during ncclCommInitRankConfig: rc %d %llu ms after the round: %s\n", rc,
	       (unsigned long long)late, err);
	CHECK(rc == -ESTALE && late < 100);
	CHECK(fake_get().aborts == 2 && fake_get().comms == 0);
	CHECK(ddp_next_round(ctx, &r, 1000) == 0 && r.round == 7);
	st = fake_get();
	st.init_polls = 1;
	fake_set(&st);
	nccl_options(&o, init, sizeof(init), 7);
	CHECK(ddp_reform(ctx, &o, err, sizeof(err)) == 0);
	CHECK(ddp_allreduce(ctx, &v, 1, DDP_FLOAT32, DDP_SUM) == 0 && v == 3.0f);
	ddp_free(ctx);
	CHECK(fake_get().comms == 0);
	close(sv[0]);
}

/* Runs test in a process of its own, forked before any ddp_init: libddp
 * looks for the agent channel once per process (a child of a process that
 * looked finds none), and the other cases run without one. */
static void in_child(void (*test)(void))
{
	int status;
	pid_t pid = fork();

	CHECK(pid >= 0);
	if (pid == 0) {
		test();
		exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char cmd[300];

	snprintf(dir, sizeof(dir), "%s/ddp-nccl-fake-XXXXXX", tmp);
	CHECK(mkdtemp(dir));
	unsetenv("DDP_CUDA_DEVICE");
	in_child(test_reform_superseded);
	test_collectives();
	test_reducer();
	test_compute_stream();
	test_compute_stream_cpu();
	test_fault(0);
	test_fault(1);
	test_abort();
	test_reform();
	test_init_timeout();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);
	printf("nccl backend against the fake: ok\n");
	return 0;
}
