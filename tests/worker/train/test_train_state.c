/*
 * test_train_state.c - the one list of the training state (train_state.h):
 * the table names every word of the header once, the checkpoint's tensors
 * cover every float of the segments once, and a checkpoint and a hand-over
 * of one state hold the same state: checkpoint -> load -> hand-over buffer
 * gives the bytes of the hand-over buffer it came from, and hand-over ->
 * take -> checkpoint gives the bytes of the checkpoint. A part of the state
 * that only one of the two paths lists fails here. Single process, a real
 * trainer (trainer_init without a launcher), in the per-rank batch mode and
 * with --global_batch_size.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "log.h"
#include "train_state.h"
#include "trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *const common_args[] = {"--data",
				    "synthetic",
				    "--synthetic_samples",
				    "256",
				    "--synthetic_features",
				    "8",
				    "--synthetic_classes",
				    "3",
				    "--hidden",
				    "16,12",
				    "--max_steps",
				    "40",
				    "--threads",
				    "1",
				    "--device",
				    "cpu",
				    "--held_out",
				    "0.1",
				    "--batchnorm",
				    "true",
				    "--seed",
				    "7"};

/* A fresh trainer of the job (shards: --global_batch_size 32, 4 shards). */
static void trainer_of(struct trainer *t, bool shards)
{
	char *argv[64];
	int argc = 0;
	struct train_config cfg;
	char err[512] = "";
	bool help = false;

	for (size_t i = 0; i < sizeof(common_args) / sizeof(common_args[0]); i++)
		argv[argc++] = common_args[i];
	argv[argc++] = "--batch_size";
	argv[argc++] = "8";
	if (shards) {
		argv[argc++] = "--global_batch_size";
		argv[argc++] = "32";
		argv[argc++] = "--virtual_shards";
		argv[argc++] = "4";
	}
	config_defaults(&cfg);
	if (config_parse_args(&cfg, argc, argv, &help, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_int_equal(config_validate(&cfg, err, sizeof(err)), 0);
	assert_int_equal(trainer_init(t, &cfg), 0);
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Every part of t's state set to values no fresh trainer holds. */
static void randomize(struct trainer *t, uint64_t seed)
{
	size_t n = train_state_floats(&t->model);
	float *host = malloc(n * sizeof(float));

	assert_non_null(host);
	for (size_t i = 0; i < n; i++)
		host[i] = (float)((double)(splitmix(&seed) >> 11) / 9007199254740992.0 - 0.5);
	assert_int_equal(train_state_stage(t, host, false), 0);
	free(host);
	t->step = 1 + splitmix(&seed) % (t->total_steps - 1);
	for (int i = 0; i < 4; i++)
		t->rng.s[i] = splitmix(&seed);
}

static void *pack(struct trainer *t)
{
	void *buf = malloc(train_state_bytes(&t->model));

	assert_non_null(buf);
	assert_int_equal(trainer_state_pack(t, buf), 0);
	return buf;
}

static void *file_bytes(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	rewind(f);
	buf = malloc(*len ? *len : 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, *len, f), *len);
	fclose(f);
	return buf;
}

static void tmp_path(char *path, size_t len, const char *name)
{
	const char *dir = getenv("TMPDIR");

	snprintf(path, len, "%s/ddp_train_state_%ld_%s.safetensors", dir ? dir : "/tmp",
		 (long)getpid(), name);
}

static void test_fields_cover_header(void **state)
{
	size_t off = 0;

	(void)state;
	for (size_t i = 0; i < train_state_nfields; i++) {
		const struct train_state_field *f = &train_state_fields[i];

		assert_int_equal(f->offset, off); /* in order, no gap, no overlap */
		assert_true(f->words >= 1);
		off += (size_t)f->words * sizeof(uint64_t);
		for (size_t j = 0; j < i; j++)
			assert_true(!f->key[0] || strcmp(f->key, train_state_fields[j].key) != 0);
	}
	assert_int_equal(off, sizeof(struct train_state_header));
}

/* The checkpoint's tensors are the segments: each float in one tensor. */
static void check_tensors_cover(struct trainer *t)
{
	size_t n = train_state_floats(&t->model), sum = 0;
	float *host = calloc(n, sizeof(float));
	unsigned char *seen = calloc(n, 1);
	struct train_state_tensors v;

	assert_non_null(host);
	assert_non_null(seen);
	assert_int_equal(train_state_tensors_init(&v, &t->model, host), 0);
	for (size_t i = 0; i < v.n; i++) {
		size_t first = (size_t)((float *)v.t[i].data - host), numel = 1;

		for (int k = 0; k < v.t[i].ndim; k++)
			numel *= (size_t)v.t[i].shape[k];
		assert_true(first + numel <= n);
		for (size_t j = 0; j < numel; j++)
			seen[first + j]++;
		sum += numel;
	}
	assert_int_equal(sum, n);
	for (size_t j = 0; j < n; j++)
		assert_int_equal(seen[j], 1);
	train_state_tensors_release(&v);
	free(seen);
	free(host);
}

/* Every field of the header is in the checkpoint's metadata, as the table
 * says, and every tensor holds the hand-over body's floats. */
static void check_ckpt_is_state(struct trainer *t, const char *path, const void *buf)
{
	const struct train_state_header *h = buf;
	const float *body = (const float *)(h + 1);
	struct train_state_tensors v;
	struct ddp_ckpt *ck = NULL;
	char err[512] = "", want[200];
	size_t numel_sum = 0;

	assert_int_equal(ddp_ckpt_open(path, &ck, err, sizeof(err)), 0);
	for (size_t i = 0; i < train_state_nfields; i++) {
		const struct train_state_field *f = &train_state_fields[i];
		const uint64_t *w = (const uint64_t *)((const char *)h + f->offset);
		const char *got = f->key[0] ? ddp_ckpt_meta(ck, f->key) : NULL;

		switch (f->kind) {
		case TRAIN_STATE_FORMAT:
			assert_int_equal(w[0], TRAIN_STATE_MAGIC);
			snprintf(want, sizeof(want), "ddp-train/%" PRIu64, w[1]);
			break;
		case TRAIN_STATE_U64:
			snprintf(want, sizeof(want), "%" PRIu64, w[0]);
			break;
		case TRAIN_STATE_I64:
			snprintf(want, sizeof(want), "%" PRId64, (int64_t)w[0]);
			break;
		case TRAIN_STATE_RNG:
			snprintf(want, sizeof(want),
				 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64, w[0],
				 w[1], w[2], w[3]);
			break;
		case TRAIN_STATE_JOB: /* the items it hashes: this job's */
			assert_int_equal(w[0], trainer_ckpt_job_hash(t));
			assert_non_null(ddp_ckpt_meta(ck, "job.train_samples"));
			continue;
		case TRAIN_STATE_SIZES:
			continue;
		}
		assert_non_null(got);
		assert_string_equal(got, want);
	}
	{
		uint64_t step = 0;
		char why[256];

		assert_int_equal(trainer_ckpt_peek(t, path, &step, why, sizeof(why)), 1);
		assert_int_equal(step, h->step);
	}
	/* The tensors, in the file, are the views' names over the body. */
	assert_int_equal(train_state_tensors_init(&v, &t->model, (float *)body), 0);
	assert_int_equal(ddp_ckpt_num_tensors(ck), v.n);
	for (size_t i = 0; i < ddp_ckpt_num_tensors(ck); i++) {
		struct ddp_tensor d;
		size_t j = 0, numel = 1;

		assert_int_equal(ddp_ckpt_tensor(ck, i, &d), 0);
		while (j < v.n && strcmp(v.t[j].name, d.name) != 0)
			j++;
		assert_true(j < v.n);
		for (int k = 0; k < d.ndim; k++)
			numel *= (size_t)d.shape[k];
		assert_memory_equal(d.data, v.t[j].data, numel * sizeof(float));
		numel_sum += numel;
	}
	assert_int_equal(numel_sum, 2 * h->nparams + h->nbuffers);
	train_state_tensors_release(&v);
	ddp_ckpt_free(ck);
}

static void check_roundtrip(bool shards)
{
	struct trainer a, b, c;
	char p1[512], p2[512];
	size_t bytes, l1, l2;
	void *bufa, *bufb, *f1, *f2;

	trainer_of(&a, shards);
	check_tensors_cover(&a);
	randomize(&a, shards ? 11 : 12);
	bufa = pack(&a);
	bytes = train_state_bytes(&a.model);
	tmp_path(p1, sizeof(p1), shards ? "s1" : "r1");
	tmp_path(p2, sizeof(p2), shards ? "s2" : "r2");
	assert_int_equal(trainer_ckpt_save(&a, p1), 0);
	check_ckpt_is_state(&a, p1, bufa);

	/* checkpoint -> a fresh trainer -> hand-over buffer: the same bytes */
	trainer_of(&b, shards);
	bufb = pack(&b);
	assert_true(memcmp(bufa, bufb, bytes) != 0); /* fresh: another state */
	free(bufb);
	assert_int_equal(trainer_ckpt_load(&b, p1), 0);
	bufb = pack(&b);
	assert_memory_equal(bufa, bufb, bytes);

	/* hand-over -> a fresh trainer -> checkpoint: the same bytes */
	trainer_of(&c, shards);
	assert_int_equal(trainer_state_take(&c, bufa, 1), 0);
	assert_int_equal(trainer_ckpt_save(&c, p2), 0);
	f1 = file_bytes(p1, &l1);
	f2 = file_bytes(p2, &l2);
	assert_int_equal(l1, l2);
	assert_memory_equal(f1, f2, l1);

	free(f1);
	free(f2);
	free(bufa);
	free(bufb);
	unlink(p1);
	unlink(p2);
	trainer_release(&a);
	trainer_release(&b);
	trainer_release(&c);
}

static void test_roundtrip_rank_batch(void **state)
{
	(void)state;
	check_roundtrip(false);
}

static void test_roundtrip_global_batch(void **state)
{
	(void)state;
	check_roundtrip(true);
}

/* A hand-over buffer of another layout version or job is refused. */
static void test_take_refuses(void **state)
{
	struct trainer a, b;
	struct train_state_header *h;
	void *buf;

	(void)state;
	trainer_of(&a, true);
	trainer_of(&b, true);
	randomize(&a, 5);
	buf = pack(&a);
	h = buf;
	h->version++;
	assert_int_equal(trainer_state_take(&b, buf, 1), -EPROTO);
	h->version--;
	h->job ^= 1;
	assert_int_equal(trainer_state_take(&b, buf, 1), -EPROTO);
	h->job ^= 1;
	assert_int_equal(trainer_state_take(&b, buf, 1), 0);
	assert_int_equal(b.step, a.step);
	free(buf);
	trainer_release(&a);
	trainer_release(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fields_cover_header),
	    cmocka_unit_test(test_roundtrip_rank_batch),
	    cmocka_unit_test(test_roundtrip_global_batch),
	    cmocka_unit_test(test_take_refuses),
	};

	log_init("test_train_state", LOG_INFO);
	unsetenv("RANK");
	unsetenv("WORLD_SIZE");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
