/*
 * libFuzzer target: job files and command lines. The input's first byte
 * picks the mode: even -> the rest is a job file (jobfile_load_stream),
 * odd -> the rest is argv split at NUL bytes (args_parse). Either way the
 * result then goes through opts_check, opts_nproc and --dry_run's printer.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "dryrun.h"
#include "jobfile.h"
#include "opts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_args(struct launch_opts *o, const uint8_t *data, size_t size, char *err)
{
	char *buf = malloc(size + 1);
	char *argv[64];
	int argc = 1;

	if (!buf)
		return;
	memcpy(buf, data, size);
	buf[size] = '\0';
	argv[0] = "ddplaunch";
	for (size_t i = 0; i < size && argc < 63; i += strlen(buf + i) + 1)
		argv[argc++] = buf + i;
	argv[argc] = NULL;
	args_parse(o, argc, argv, err, OPTS_ERR_LEN);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct launch_opts o;
	char err[OPTS_ERR_LEN];
	FILE *f, *sink;

	if (size < 1 || opts_init(&o))
		return 0;
	if (data[0] % 2 == 0) {
		f = fmemopen((void *)(data + 1), size - 1 ? size - 1 : 1, "r");
		if (f) {
			if (size > 1)
				jobfile_load_stream(&o, f, "fuzz.ini", err, sizeof(err));
			fclose(f);
		}
	} else {
		fuzz_args(&o, data + 1, size - 1, err);
	}
	opts_check(&o, err, sizeof(err));
	opts_nproc(&o, 4, 1, err, sizeof(err));
	sink = fopen("/dev/null", "w");
	if (sink) {
		dryrun_print(&o, NULL, sink);
		fclose(sink);
	}
	opts_release(&o);
	return 0;
}
