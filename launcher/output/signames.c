#include "signames.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int signame_parse(const char *name)
{
	char *end;

	if (!name || !*name)
		return -EINVAL;
	if (isdigit((unsigned char)*name)) {
		long v = strtol(name, &end, 10);

		return (*end || v <= 0 || v >= NSIG) ? -EINVAL : (int)v;
	}
	if (!strncasecmp(name, "SIG", 3))
		name += 3;
	for (int s = 1; s < NSIG; s++) {
		const char *abbrev = sigabbrev_np(s);

		if (abbrev && !strcasecmp(abbrev, name))
			return s;
	}
	return -EINVAL;
}

const char *signame_name(int sig)
{
	static __thread char buf[32];
	const char *abbrev = sigabbrev_np(sig);

	if (abbrev)
		snprintf(buf, sizeof(buf), "SIG%s", abbrev);
	else
		snprintf(buf, sizeof(buf), "SIG%d", sig);
	return buf;
}
