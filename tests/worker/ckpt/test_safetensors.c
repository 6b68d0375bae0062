/*
 * test_safetensors.c - checkpoint files: round trip of tensors and
 * metadata, the on-disk layout, the atomic replace, strict and non-strict
 * loads (module. prefix, missing, unexpected, mismatched), and refusal of
 * malformed files; the per-tensor checksums (every bit flip of the data
 * refused, naming the tensor; files without checksums still open), the
 * exact data section (no gap, no trailing bytes), string-only metadata,
 * and paths that are not regular files.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmocka.h>

#include "ddp.h"

static char dir[256];

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/ddp-st-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static float w1[6] = {1, 2, 3, 4, 5, 6};
static double b1[3] = {0.5, -1.25, 3e100};
static float s1[1] = {42};

static void make_tensors(struct ddp_tensor *t, const char *prefix, char names[3][64])
{
	snprintf(names[0], 64, "%sfc1.weight", prefix);
	snprintf(names[1], 64, "%sfc1.bias", prefix);
	snprintf(names[2], 64, "%sscale", prefix);
	t[0] = (struct ddp_tensor){names[0], DDP_FLOAT32, 2, {2, 3}, w1};
	t[1] = (struct ddp_tensor){names[1], DDP_FLOAT64, 1, {3}, b1};
	t[2] = (struct ddp_tensor){names[2], DDP_FLOAT32, 0, {0}, s1};
}

static void path_of(char *out, const char *name)
{
	snprintf(out, 300, "%s/%s", dir, name);
}

static void write_ckpt(const char *name, const char *prefix)
{
	struct ddp_tensor t[3];
	char names[3][64], path[300], err[256];
	struct ddp_meta meta[] = {{"step", "120"}, {"epoch", "3"}};

	make_tensors(t, prefix, names);
	path_of(path, name);
	assert_int_equal(ddp_ckpt_write(path, t, 3, meta, 2, err, sizeof(err)), 0);
}

static void test_round_trip(void **state)
{
	struct ddp_ckpt *ck;
	struct ddp_tensor t;
	char path[300], err[256];

	write_ckpt("a.safetensors", "");
	path_of(path, "a.safetensors");
	assert_int_equal(ddp_ckpt_open(path, &ck, err, sizeof(err)), 0);
	assert_string_equal(ddp_ckpt_meta(ck, "step"), "120");
	assert_string_equal(ddp_ckpt_meta(ck, "epoch"), "3");
	assert_null(ddp_ckpt_meta(ck, "nope"));
	assert_int_equal(ddp_ckpt_num_tensors(ck), 3);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(ddp_ckpt_tensor(ck, i, &t), 0);
		if (strcmp(t.name, "fc1.weight") == 0) {
			assert_int_equal(t.ndim, 2);
			assert_int_equal(t.shape[1], 3);
			assert_memory_equal(t.data, w1, sizeof(w1));
		} else if (strcmp(t.name, "fc1.bias") == 0) {
			assert_int_equal(t.dtype, DDP_FLOAT64);
			assert_memory_equal(t.data, b1, sizeof(b1));
		} else {
			assert_string_equal(t.name, "scale");
			assert_int_equal(t.ndim, 0);
			assert_memory_equal(t.data, s1, sizeof(s1));
		}
	}
	assert_int_equal(ddp_ckpt_tensor(ck, 3, &t), -ERANGE);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(ddp_ckpt_tensor_verified(ck, i), 1);
	assert_int_equal(ddp_ckpt_tensor_verified(ck, 3), -ERANGE);
	ddp_ckpt_free(ck);
}

static void test_layout(void **state)
{
	char path[300], buf[4096];
	uint64_t hlen;
	json_t *root, *e;
	int fd;
	ssize_t n;

	write_ckpt("b.safetensors", "");
	path_of(path, "b.safetensors");
	fd = open(path, O_RDONLY);
	n = read(fd, buf, sizeof(buf));
	close(fd);
	memcpy(&hlen, buf, 8);
	assert_int_equal(hlen % 8, 0);
	assert_int_equal((size_t)n, 8 + hlen + sizeof(w1) + sizeof(b1) + sizeof(s1));
	root = json_loadb(buf + 8, hlen, 0, NULL);
	assert_non_null(root);
	e = json_object_get(root, "fc1.bias");
	assert_string_equal(json_string_value(json_object_get(e, "dtype")), "F64");
	assert_int_equal(json_integer_value(json_array_get(json_object_get(e, "data_offsets"), 0)),
			 sizeof(w1));
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(root, "__metadata__"), "step")),
	    "120");
	/* The checksums are metadata strings: XXH3_64bits of the bytes, in hex. */
	char sum[17];
	snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)XXH3_64bits(b1, sizeof(b1)));
	assert_string_equal(json_string_value(json_object_get(json_object_get(root, "__metadata__"),
							      "xxh3_64:fc1.bias")),
			    sum);
	json_decref(root);
	/* No temporary file is left behind. */
	snprintf(path, sizeof(path), "%s/b.safetensors.tmp", dir);
	assert_int_equal(access(path, F_OK), -1);
}

static void test_failed_write_keeps_previous(void **state)
{
	struct ddp_tensor t[2] = {{"x", DDP_FLOAT32, 1, {1}, s1}, {"x", DDP_FLOAT32, 1, {1}, s1}};
	struct ddp_ckpt *ck;
	char path[300], err[256];

	write_ckpt("c.safetensors", "");
	path_of(path, "c.safetensors");
	assert_int_equal(ddp_ckpt_write(path, t, 2, NULL, 0, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'x' appears twice"));
	assert_int_equal(ddp_ckpt_open(path, &ck, err, sizeof(err)), 0);
	assert_int_equal(ddp_ckpt_num_tensors(ck), 3);
	ddp_ckpt_free(ck);
}

static void test_load_module_prefix(void **state)
{
	float w[6] = {0};
	double b[3] = {0};
	float s[1] = {0};
	struct ddp_tensor t[3] = {{"fc1.weight", DDP_FLOAT32, 2, {2, 3}, w},
				  {"fc1.bias", DDP_FLOAT64, 1, {3}, b},
				  {"scale", DDP_FLOAT32, 0, {0}, s}};
	struct ddp_load_report rep;
	struct ddp_ckpt *ck;
	char path[300], err[512];

	write_ckpt("d.safetensors", "module.");
	path_of(path, "d.safetensors");
	assert_int_equal(ddp_ckpt_open(path, &ck, err, sizeof(err)), 0);
	assert_int_equal(ddp_ckpt_load(ck, t, 3, DDP_LOAD_STRICT, &rep, err, sizeof(err)), 0);
	assert_int_equal(rep.prefix_stripped, 1);
	assert_int_equal(rep.nloaded, 3);
	assert_non_null(strstr(rep.report, "'module.' prefix"));
	assert_memory_equal(w, w1, sizeof(w));
	assert_memory_equal(b, b1, sizeof(b));
	assert_memory_equal(s, s1, sizeof(s));
	ddp_load_report_release(&rep);
	ddp_ckpt_free(ck);
}

static void test_strict_refusals(void **state)
{
	float w[6] = {0}, extra[2] = {0}, s[4] = {0};
	double b[3] = {0};
	/* "extra" is missing from the file; "scale" has another shape; the
	 * file's "fc1.bias" is unexpected (we do not ask for it). */
	struct ddp_tensor t[3] = {{"fc1.weight", DDP_FLOAT32, 2, {2, 3}, w},
				  {"extra", DDP_FLOAT32, 1, {2}, extra},
				  {"scale", DDP_FLOAT32, 1, {4}, s}};
	struct ddp_load_report rep;
	struct ddp_ckpt *ck;
	char path[300], err[1024];

	write_ckpt("e.safetensors", "");
	path_of(path, "e.safetensors");
	assert_int_equal(ddp_ckpt_open(path, &ck, err, sizeof(err)), 0);
	assert_int_equal(ddp_ckpt_load(ck, t, 3, DDP_LOAD_STRICT, &rep, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "missing from the checkpoint: extra"));
	assert_non_null(strstr(err, "unexpected in the checkpoint: fc1.bias"));
	assert_non_null(strstr(err, "scale (checkpoint F32 [], model F32 [4])"));
	assert_int_equal(rep.nloaded, 0);
	assert_true(w[0] == 0.0f); /* nothing partially loaded */
	ddp_load_report_release(&rep);
	(void)b;

	/* Non-strict: the matching tensor is loaded, the rest reported. */
	assert_int_equal(ddp_ckpt_load(ck, t, 3, DDP_LOAD_NON_STRICT, &rep, err, sizeof(err)), 0);
	assert_int_equal(rep.nloaded, 1);
	assert_int_equal(rep.nmissing, 1);
	assert_int_equal(rep.nunexpected, 1);
	assert_int_equal(rep.nmismatched, 1);
	assert_string_equal(rep.missing, "extra");
	assert_memory_equal(w, w1, sizeof(w));
	ddp_load_report_release(&rep);
	ddp_ckpt_free(ck);
}

/* Non-strict, as PyTorch's strict=False: what is not loaded keeps the
 * values it had (a fresh initialisation), and the report says which
 * tensors were loaded and which were not. */
static void test_non_strict_keeps_the_rest(void **state)
{
	float w[6] = {0}, extra[2] = {7, 7}, s[4] = {9, 9, 9, 9};
	struct ddp_tensor t[3] = {{"fc1.weight", DDP_FLOAT32, 2, {2, 3}, w},
				  {"extra", DDP_FLOAT32, 1, {2}, extra},
				  {"scale", DDP_FLOAT32, 1, {4}, s}};
	struct ddp_load_report rep;
	struct ddp_ckpt *ck;
	char path[300], err[1024];

	write_ckpt("n.safetensors", "");
	path_of(path, "n.safetensors");
	assert_int_equal(ddp_ckpt_open(path, &ck, err, sizeof(err)), 0);
	assert_int_equal(ddp_ckpt_load(ck, t, 3, DDP_LOAD_NON_STRICT, &rep, err, sizeof(err)), 0);
	assert_memory_equal(w, w1, sizeof(w));
	assert_true(extra[0] == 7 && extra[1] == 7);
	assert_true(s[0] == 9 && s[3] == 9);
	assert_string_equal(rep.loaded, "fc1.weight");
	assert_non_null(strstr(rep.report, "loaded: fc1.weight\n"));
	assert_non_null(strstr(rep.report, "missing from the checkpoint: extra"));
	assert_non_null(strstr(rep.report, "keep their values"));
	ddp_load_report_release(&rep);
	ddp_ckpt_free(ck);
}

/* A writer killed in the middle of a checkpoint leaves the previous one
 * intact (the new bytes only ever went to PATH.tmp). */
static void test_killed_writer_keeps_previous(void **state)
{
	char path[300], tmp[310], err[256];
	size_t n = 16u << 20; /* 64 MiB of float32: slow enough to interrupt */
	struct ddp_ckpt *ck;
	struct stat st;
	pid_t kid;
	int status;

	write_ckpt("k.safetensors", "");
	path_of(path, "k.safetensors");
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	kid = fork();
	if (kid == 0) {
		float *big = calloc(n, sizeof(float));
		struct ddp_tensor t = {"big", DDP_FLOAT32, 1, {(int64_t)n}, big};

		for (;;)
			ddp_ckpt_write(path, &t, 1, NULL, 0, err, sizeof(err));
	}
	/* Wait (bounded) until the child is writing the temporary file. */
	for (int i = 0; i < 10000 && (stat(tmp, &st) < 0 || st.st_size < 4096); i++) {
		struct timespec ts = {0, 1000 * 1000};

		nanosleep(&ts, NULL);
	}
	/* The child was writing the temporary file when it was killed. */
	assert_int_equal(stat(tmp, &st), 0);
	kill(kid, SIGKILL);
	assert_int_equal(waitpid(kid, &status, 0), kid);
	assert_true(WIFSIGNALED(status));
	/* PATH is a complete checkpoint: the old one or a whole new one. */
	assert_int_equal(ddp_ckpt_open(path, &ck, err, sizeof(err)), 0);
	assert_true(ddp_ckpt_num_tensors(ck) == 3 || ddp_ckpt_num_tensors(ck) == 1);
	ddp_ckpt_free(ck);
	unlink(tmp);
}

/* Writes a file of u64 header length + header + n data bytes. */
static void write_raw(const char *name, uint64_t hlen_field, const char *header, size_t ndata)
{
	char path[300], zeros[64] = {0};
	FILE *f;

	path_of(path, name);
	f = fopen(path, "wb");
	fwrite(&hlen_field, 8, 1, f);
	fwrite(header, 1, strlen(header), f);
	fwrite(zeros, 1, ndata, f);
	fclose(f);
}

static void expect_refused(const char *name, const char *why)
{
	struct ddp_ckpt *ck = NULL;
	char path[300], err[512];

	path_of(path, name);
	assert_int_equal(ddp_ckpt_open(path, &ck, err, sizeof(err)), -EINVAL);
	assert_null(ck);
	if (!strstr(err, why))
		fail_msg("%s: message '%s' lacks '%s'", name, err, why);
}

static void test_malformed_files(void **state)
{
	const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

	write_raw("m0", strlen(ok), ok, 8);
	struct ddp_ckpt *ck;
	char path[300], err[256];
	path_of(path, "m0");
	assert_int_equal(ddp_ckpt_open(path, &ck, err, sizeof(err)), 0);
	ddp_ckpt_free(ck);

	write_raw("m1", 1u << 30, ok, 8);
	expect_refused("m1", "bad header length");
	write_raw("m2", 5, "{\"a\":", 0);
	expect_refused("m2", "bad header length or JSON");
	write_raw("m3", strlen(ok), ok, 4); /* data shorter than offsets */
	expect_refused("m3", "tensor 'a'");
	const char *wrong_len = "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}";
	write_raw("m4", strlen(wrong_len), wrong_len, 8);
	expect_refused("m4", "tensor 'a'");
	const char *overlap = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
			      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
	write_raw("m5", strlen(overlap), overlap, 8);
	expect_refused("m5", "overlap");
	const char *dtype = "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}";
	write_raw("m6", strlen(dtype), dtype, 8);
	expect_refused("m6", "tensor 'a'");
	const char *neg = "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}";
	write_raw("m7", strlen(neg), neg, 8);
	expect_refused("m7", "tensor 'a'");
	write_raw("m8", 0, "", 0);
	expect_refused("m8", "JSON");
	path_of(path, "absent");
	assert_int_equal(ddp_ckpt_open(path, &ck, err, sizeof(err)), -ENOENT);
}

/* The whole file in memory: *n bytes, the data section at *data_off. */
static char *slurp(const char *path, size_t *n, size_t *data_off)
{
	static char buf[8192];
	uint64_t hlen;
	int fd = open(path, O_RDONLY);
	ssize_t got = read(fd, buf, sizeof(buf));

	close(fd);
	assert_true(got > 8 && (size_t)got < sizeof(buf));
	memcpy(&hlen, buf, 8);
	*n = (size_t)got;
	*data_off = 8 + (size_t)hlen;
	return buf;
}

static void spit(const char *path, const char *buf, size_t n)
{
	FILE *f = fopen(path, "wb");

	assert_int_equal(fwrite(buf, 1, n, f), n);
	fclose(f);
}

/* Every single bit flip in the tensors' bytes is refused, naming the
 * tensor whose checksum failed. */
static void test_every_bit_flip_refused(void **state)
{
	char path[300], flip[300], err[512];
	size_t n, data;
	struct ddp_ckpt *ck = NULL;
	char *buf;

	write_ckpt("f.safetensors", "");
	path_of(path, "f.safetensors");
	path_of(flip, "f.flip");
	buf = slurp(path, &n, &data);
	assert_int_equal(n - data, sizeof(w1) + sizeof(b1) + sizeof(s1));
	for (size_t i = data; i < n; i++) {
		const char *name = i - data < sizeof(w1)		? "'fc1.weight'"
				   : i - data < sizeof(w1) + sizeof(b1) ? "'fc1.bias'"
									: "'scale'";

		for (int bit = 0; bit < 8; bit++) {
			buf[i] ^= (char)(1 << bit);
			spit(flip, buf, n);
			buf[i] ^= (char)(1 << bit);
			assert_int_equal(ddp_ckpt_open(flip, &ck, err, sizeof(err)), -EINVAL);
			assert_null(ck);
			if (!strstr(err, name) || !strstr(err, "checksum") ||
			    !strstr(err, "corrupt"))
				fail_msg("byte %zu bit %d: '%s' lacks %s", i, bit, err, name);
		}
	}
}

static void test_exact_data_section(void **state)
{
	char path[300], bad[300], err[512];
	size_t n, data;
	char *buf;

	write_ckpt("x.safetensors", "");
	path_of(path, "x.safetensors");
	path_of(bad, "x.junk");
	buf = slurp(path, &n, &data);
	memcpy(buf + n, "junk", 4);
	spit(bad, buf, n + 4);
	expect_refused("x.junk", "4 bytes after the last tensor");
	/* A gap between two tensors (the first ends early). */
	const char *gap = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
			  "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
	write_raw("x.gap", strlen(gap), gap, 12);
	expect_refused("x.gap", "4 bytes before tensor 'b'");
	/* Zero-sized tensors anywhere on the boundaries are fine. */
	const char *empty = "{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
			    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
			    "\"y\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}";
	write_raw("x.empty", strlen(empty), empty, 4);
	struct ddp_ckpt *ck;
	path_of(bad, "x.empty");
	assert_int_equal(ddp_ckpt_open(bad, &ck, err, sizeof(err)), 0);
	ddp_ckpt_free(ck);
}

/* A file without checksums (as PyTorch writes it) opens, unverified;
 * non-string metadata (unreadable by PyTorch's reader) is refused. */
static void test_foreign_files(void **state)
{
	const char *plain = "{\"__metadata__\":{\"format\":\"pt\"},"
			    "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
	const char *num = "{\"__metadata__\":{\"step\":5},"
			  "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
	const char *arr = "{\"__metadata__\":[],"
			  "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
	struct ddp_ckpt *ck;
	char path[300], err[512];

	write_raw("p.plain", strlen(plain), plain, 8);
	path_of(path, "p.plain");
	assert_int_equal(ddp_ckpt_open(path, &ck, err, sizeof(err)), 0);
	assert_int_equal(ddp_ckpt_tensor_verified(ck, 0), 0);
	assert_string_equal(ddp_ckpt_meta(ck, "format"), "pt");
	ddp_ckpt_free(ck);
	write_raw("p.num", strlen(num), num, 8);
	expect_refused("p.num", "metadata 'step' is not a string");
	write_raw("p.arr", strlen(arr), arr, 8);
	expect_refused("p.arr", "'__metadata__' is not an object");
}

static void test_reserved_meta_key(void **state)
{
	struct ddp_tensor t = {"x", DDP_FLOAT32, 1, {1}, s1};
	struct ddp_meta meta[] = {{"xxh3_64:x", "0000000000000000"}};
	char path[300], err[256];

	path_of(path, "r.safetensors");
	assert_int_equal(ddp_ckpt_write(path, &t, 1, meta, 1, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'xxh3_64:x' is missing or reserved"));
	assert_int_equal(access(path, F_OK), -1);
}

/* A directory, a FIFO (nobody writes to it: refused, not waited on) and a
 * device (/dev/zero: never read) are not checkpoints. */
static void test_not_regular_files(void **state)
{
	struct ddp_ckpt *ck = NULL;
	char path[300], err[512];

	assert_int_equal(ddp_ckpt_open(dir, &ck, err, sizeof(err)), -EISDIR);
	assert_non_null(strstr(err, "a directory, not a safetensors file"));
	path_of(path, "fifo");
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(ddp_ckpt_open(path, &ck, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "a FIFO, not a safetensors file"));
	assert_int_equal(ddp_ckpt_open("/dev/zero", &ck, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'/dev/zero': a device, not a safetensors file"));
	assert_null(ck);
}

/* Every truncation of a valid file, and every single-byte change of its
 * header, is either refused with -EINVAL or read as a consistent file;
 * never a crash (the sanitizer build runs this too). */
static void test_truncations_and_corruptions(void **state)
{
	char path[300], cut[300], err[512], buf[4096];
	struct ddp_ckpt *ck;
	uint64_t hlen;
	ssize_t n;
	int fd;

	write_ckpt("t.safetensors", "");
	path_of(path, "t.safetensors");
	path_of(cut, "t.cut");
	fd = open(path, O_RDONLY);
	n = read(fd, buf, sizeof(buf));
	close(fd);
	memcpy(&hlen, buf, 8);
	for (ssize_t len = 0; len < n; len++) {
		FILE *f = fopen(cut, "wb");

		fwrite(buf, 1, (size_t)len, f);
		fclose(f);
		assert_int_equal(ddp_ckpt_open(cut, &ck, err, sizeof(err)), -EINVAL);
	}
	for (size_t i = 0; i < 8 + hlen; i++) {
		static const unsigned char vals[] = {0, '"', '9', '[', 0xff};

		for (size_t v = 0; v < sizeof(vals); v++) {
			char save = buf[i];
			FILE *f = fopen(cut, "wb");
			int rc;

			buf[i] = (char)vals[v];
			fwrite(buf, 1, (size_t)n, f);
			fclose(f);
			buf[i] = save;
			rc = ddp_ckpt_open(cut, &ck, err, sizeof(err));
			assert_true(rc == 0 || rc == -EINVAL);
			if (rc == 0) {
				struct ddp_tensor t;

				for (size_t k = 0; k < ddp_ckpt_num_tensors(ck); k++)
					ddp_ckpt_tensor(ck, k, &t);
				ddp_ckpt_free(ck);
			}
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_layout),
	    cmocka_unit_test(test_failed_write_keeps_previous),
	    cmocka_unit_test(test_load_module_prefix),
	    cmocka_unit_test(test_strict_refusals),
	    cmocka_unit_test(test_malformed_files),
	    cmocka_unit_test(test_killed_writer_keeps_previous),
	    cmocka_unit_test(test_truncations_and_corruptions),
	    cmocka_unit_test(test_non_strict_keeps_the_rest),
	    cmocka_unit_test(test_every_bit_flip_refused),
	    cmocka_unit_test(test_exact_data_section),
	    cmocka_unit_test(test_foreign_files),
	    cmocka_unit_test(test_reserved_meta_key),
	    cmocka_unit_test(test_not_regular_files),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
