/*
 * test_config_data.c - ddp-train's settings (INI [train] section, flags
 * overriding it, errors naming the setting) and its data sets (the digits
 * file, the held-out split, the synthetic generator).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "config.h"
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/ddp-train-test-XXXXXX";

static const char *write_file(const char *name, const char *text)
{
	static char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

static void test_ini_then_flags(void **state)
{
	struct train_config c;
	char err[512] = "", path[300];
	char *argv[] = {
	    "--lr",	      "0.5",	       "--config", path, "--sync_bn", "--batch-size=8",
	    "--no-batchnorm", "--local_rank=1"};
	bool help;

	snprintf(path, sizeof(path), "%s",
		 write_file("job.ini", "[launch]\nnproc_per_node = 2\nunknown = 1\n"
				       "[train]\nlr = 0.25\nepochs = 3\nbatch_size = 16\n"
				       "data_path = d/x.csv\nhidden = 32, 16\n"));
	config_defaults(&c);
	assert_int_equal(config_parse_args(&c, 8, argv, &help, err, sizeof(err)), 0);
	assert_false(help);
	assert_float_equal(c.lr, 0.5, 0);	/* the flag wins wherever it is */
	assert_int_equal(c.epochs, 3);		/* from the file */
	assert_int_equal(c.batch_size, 8);	/* --batch-size=8 */
	assert_true(c.sync_bn && !c.batchnorm); /* bare flag, --no- flag */
	assert_string_equal(c.data_path + strlen(tmpdir), "/d/x.csv"); /* relative to file */
	{
		int w[8];

		assert_int_equal(config_hidden_dims(&c, w, 8), 2);
		assert_int_equal(w[0], 32);
		assert_int_equal(w[1], 16);
	}
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
}

static void test_errors_name_the_setting(void **state)
{
	struct train_config c;
	char err[512], path[300];
	char *argv[] = {"--config", path};
	char *bad_flag[] = {"--lr", "fast"};
	char *stray[] = {"train.py"};
	char longline[400];
	bool help;

	config_defaults(&c);
	snprintf(path, sizeof(path), "%s", write_file("bad.ini", "[train]\nlearning_rate = 1\n"));
	assert_int_equal(config_parse_args(&c, 2, argv, &help, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "learning_rate"));
	assert_non_null(strstr(err, "line 2"));
	assert_int_equal(config_parse_args(&c, 2, bad_flag, &help, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'fast' for 'lr'"));
	assert_int_equal(config_parse_args(&c, 1, stray, &help, err, sizeof(err)), -EINVAL);
	/* inih on Debian: 200-character lines; a longer one is an error */
	memset(longline, 'x', sizeof(longline));
	memcpy(longline, "[train]\nhidden = ", 17);
	strcpy(longline + 380, "\n");
	snprintf(path, sizeof(path), "%s", write_file("long.ini", longline));
	assert_int_equal(config_parse_args(&c, 2, argv, &help, err, sizeof(err)), -EINVAL);
	strcpy(path, "/nonexistent/job.ini");
	assert_int_equal(config_parse_args(&c, 2, argv, &help, err, sizeof(err)), -ENOENT);
	config_defaults(&c);
	strcpy(c.schedule, "step");
	assert_int_equal(config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "schedule 'step'"));
}

/* Validates cfg and checks that the message contains `words`. */
static void refused_with(const struct train_config *c, const char *words)
{
	char err[512] = "";

	assert_int_equal(config_validate(c, err, sizeof(err)), -EINVAL);
	if (!strstr(err, words))
		fail_msg("'%s' does not say '%s'", err, words);
}

/* --global_batch_size / --virtual_shards: refused with the fix named. */
static void test_shards_settings(void **state)
{
	struct train_config c;
	char err[512];
	bool help;
	char *argv[] = {"--global_batch_size", "64", "--virtual_shards=8"};

	(void)state;
	config_defaults(&c);
	assert_int_equal(config_parse_args(&c, 3, argv, &help, err, sizeof(err)), 0);
	assert_int_equal(c.global_batch_size, 64);
	assert_int_equal(c.virtual_shards, 8);
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	c.virtual_shards = 6;
	refused_with(&c, "not divisible by virtual_shards 6");
	c.virtual_shards = 0;
	refused_with(&c, "set --virtual_shards");
	c.global_batch_size = 0;
	c.virtual_shards = 8;
	refused_with(&c, "set --global_batch_size");
	c.global_batch_size = 8;
	refused_with(&c, "--no-batchnorm");
	c.batchnorm = false;
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	c.batchnorm = true;
	c.global_batch_size = 64;
	c.sync_bn = true;
	refused_with(&c, "drop --sync_bn");
	c.sync_bn = false;
	/* Stragglers: on by default; a ratio of 1 or less would name anyone. */
	assert_true(c.rebalance);
	assert_true(c.straggler_ratio == 1.5);
	c.straggler_ratio = 1.0;
	refused_with(&c, "straggler_ratio 1 is out of range");
	{
		char *off[] = {"--no-rebalance", "--straggler-ratio=2"};

		assert_int_equal(config_parse_args(&c, 2, off, &help, err, sizeof(err)), 0);
		assert_false(c.rebalance);
		assert_true(c.straggler_ratio == 2.0);
		assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	}
}

/* "[train]\nmetrics = mmm...\n" with the second line `len` characters long. */
static const char *metrics_line(size_t len)
{
	static char text[600];

	strcpy(text, "[train]\nmetrics = ");
	memset(text + strlen(text), 'm', len - strlen("metrics = "));
	strcpy(text + 8 + len, "\n");
	return write_file("limit.ini", text);
}

static void test_settings_shared_with_ddplaunch(void **state)
{
	struct train_config c;
	char err[512], path[300];
	char *argv[] = {"--config", path};
	char *typo[] = {"--epohcs", "3"};
	char *dashes[] = {"--weight-decay", "0.1", "--local-rank=3", "--no-eval-every-epoch"};
	bool help;

	config_defaults(&c);
	assert_int_equal(config_parse_args(&c, 4, dashes, &help, err, sizeof(err)), 0);
	assert_float_equal(c.weight_decay, 0.1, 0);
	assert_false(c.eval_every_epoch);
	assert_int_equal(config_parse_args(&c, 2, typo, &help, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "unknown option '--epohcs'; did you mean '--epochs'?");
	snprintf(path, sizeof(path), "%s", write_file("typo.ini", "[train]\n\nbatchsize = 3\n"));
	assert_int_equal(config_parse_args(&c, 2, argv, &help, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "typo.ini line 3: unknown key 'batchsize' in [train]; did you "
				    "mean 'batch_size'?"));
	/* The documented line limit, 198 characters, as for ddplaunch. */
	snprintf(path, sizeof(path), "%s", metrics_line(198));
	assert_int_equal(config_parse_args(&c, 2, argv, &help, err, sizeof(err)), 0);
	assert_int_equal(strlen(c.metrics), strlen(tmpdir) + 1 + 198 - strlen("metrics = "));
	snprintf(path, sizeof(path), "%s", metrics_line(199));
	assert_int_equal(config_parse_args(&c, 2, argv, &help, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "limit.ini line 2: line longer than 198 characters"));
	/* A folder is not a job file (it used to read as an empty one). */
	snprintf(path, sizeof(path), "%s", tmpdir);
	assert_int_equal(config_parse_args(&c, 2, argv, &help, err, sizeof(err)), -EISDIR);
	assert_non_null(strstr(err, "is a directory"));
}

static void test_digits_load_and_split(void **state)
{
	struct dataset all, tr, ho;
	size_t bad = 0, counts[10] = {0};

	assert_int_equal(data_load_csv(DIGITS_PATH, 64, 1.0f / 16.0f, &all, &bad), 0);
	assert_int_equal(all.n, 1797);
	assert_int_equal(all.classes, 10);
	for (size_t i = 0; i < all.n; i++) {
		counts[all.y[i]]++;
		for (int f = 0; f < 64; f++)
			assert_true(all.x[i * 64 + f] >= 0.0f && all.x[i * 64 + f] <= 1.0f);
	}
	for (int c = 0; c < 10; c++)
		assert_in_range(counts[c], 170, 190);
	assert_int_equal(data_split(&all, 0.2, 0, &tr, &ho), 0);
	assert_int_equal(ho.n, 359);
	assert_int_equal(tr.n + ho.n, all.n);
	/* The same seed gives the same split. */
	{
		struct dataset tr2, ho2;

		assert_int_equal(data_split(&all, 0.2, 0, &tr2, &ho2), 0);
		assert_memory_equal(ho.x, ho2.x, ho.n * 64 * sizeof(float));
		data_release(&tr2);
		data_release(&ho2);
	}
	data_release(&tr);
	data_release(&ho);
	data_release(&all);
}

static void test_malformed_csv_names_the_line(void **state)
{
	struct dataset ds;
	size_t bad = 0;
	const char *p = write_file("bad.csv", "1,2,3\n\n4,5,x\n");

	assert_int_equal(data_load_csv(p, 2, 1.0f, &ds, &bad), -EINVAL);
	assert_int_equal(bad, 3);
	assert_null(ds.x);
	assert_int_equal(data_load_csv("/nonexistent.csv", 2, 1.0f, &ds, &bad), -ENOENT);
	p = write_file("ok.csv", "1,2,3\n\n4,5,1\n");
	assert_int_equal(data_load_csv(p, 2, 0.5f, &ds, &bad), 0);
	assert_int_equal(ds.n, 2);
	assert_int_equal(ds.classes, 4);
	assert_true(ds.x[2] == 2.0f && ds.y[1] == 1);
	data_release(&ds);
}

static void test_synthetic_is_deterministic_and_balanced(void **state)
{
	struct dataset a, b;
	size_t counts[4] = {0};

	assert_int_equal(data_synthetic(4000, 16, 4, 9, &a), 0);
	assert_int_equal(data_synthetic(4000, 16, 4, 9, &b), 0);
	assert_memory_equal(a.x, b.x, 4000 * 16 * sizeof(float));
	assert_memory_equal(a.y, b.y, 4000 * sizeof(int32_t));
	for (size_t i = 0; i < a.n; i++)
		counts[a.y[i]]++;
	for (int c = 0; c < 4; c++)
		assert_in_range(counts[c], 300, 2000);
	data_release(&b);
	assert_int_equal(data_synthetic(10, 16, 4, 10, &b), 0);
	assert_memory_not_equal(a.x, b.x, 10 * 16 * sizeof(float));
	data_release(&a);
	data_release(&b);
}

static int setup(void **state)
{
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	const char *names[] = {"job.ini", "bad.ini",  "long.ini", "bad.csv",
			       "ok.csv",  "typo.ini", "limit.ini"};
	char path[256];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", tmpdir, names[i]);
		unlink(path);
	}
	return rmdir(tmpdir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ini_then_flags),
	    cmocka_unit_test(test_errors_name_the_setting),
	    cmocka_unit_test(test_shards_settings),
	    cmocka_unit_test(test_settings_shared_with_ddplaunch),
	    cmocka_unit_test(test_digits_load_and_split),
	    cmocka_unit_test(test_malformed_csv_names_the_line),
	    cmocka_unit_test(test_synthetic_is_deterministic_and_balanced),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
