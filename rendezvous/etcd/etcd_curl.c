/*
 * etcd_curl.c - libcurl, loaded at run time (etcd_curl.h).
 */
#include "etcd_curl.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct etcd_curl_api etcd_curl;

/* The soname Debian's libcurl4 (and libcurl3-gnutls' sibling) installs. */
#define ETCD_CURL_SONAME "libcurl.so.4"

#define CURL_FN(member, symbol)                                                                    \
	{                                                                                          \
#symbol, offsetof(struct etcd_curl_api, member)                                    \
	}

static const struct {
	const char *symbol;
	size_t offset;
} curl_fns[] = {
    CURL_FN(global_init, curl_global_init),
    CURL_FN(easy_strerror, curl_easy_strerror),
    CURL_FN(easy_init, curl_easy_init),
    CURL_FN(easy_cleanup, curl_easy_cleanup),
    CURL_FN(easy_reset, curl_easy_reset),
    CURL_FN(easy_setopt, curl_easy_setopt),
    CURL_FN(easy_getinfo, curl_easy_getinfo),
    CURL_FN(slist_append, curl_slist_append),
    CURL_FN(slist_free_all, curl_slist_free_all),
    CURL_FN(multi_init, curl_multi_init),
    CURL_FN(multi_cleanup, curl_multi_cleanup),
    CURL_FN(multi_setopt, curl_multi_setopt),
    CURL_FN(multi_add_handle, curl_multi_add_handle),
    CURL_FN(multi_remove_handle, curl_multi_remove_handle),
    CURL_FN(multi_assign, curl_multi_assign),
    CURL_FN(multi_socket_action, curl_multi_socket_action),
    CURL_FN(multi_info_read, curl_multi_info_read),
};

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_err[384];

static int resolve(void *lib)
{
	for (size_t i = 0; i < sizeof(curl_fns) / sizeof(curl_fns[0]); i++) {
		void *fn = dlsym(lib, curl_fns[i].symbol);

		if (!fn) {
			snprintf(load_err, sizeof(load_err),
				 "etcd: %s has no %s (libcurl 7.68 or later is needed; "
				 "Debian's libcurl4 has it)",
				 ETCD_CURL_SONAME, curl_fns[i].symbol);
			return -ENOENT;
		}
		/* POSIX: dlsym's pointer converts to the function's type;
		 * every member is a function pointer of a data pointer's size. */
		memcpy((char *)&etcd_curl + curl_fns[i].offset, &fn, sizeof(fn));
	}
	return 0;
}

static void load(void)
{
	/* Never closed: libcurl keeps global state (TLS libraries) for the
	 * process's life. */
	void *lib = dlopen(ETCD_CURL_SONAME, RTLD_NOW | RTLD_LOCAL);
	CURLcode code;

	if (!lib) {
		snprintf(load_err, sizeof(load_err),
			 "etcd: cannot load libcurl (%s): install it (Debian: apt-get install "
			 "libcurl4); --rdzv_backend=etcd needs it",
			 dlerror());
		load_rc = -ENOENT;
		return;
	}
	if ((load_rc = resolve(lib)) < 0)
		return;
	code = etcd_curl.global_init(CURL_GLOBAL_ALL);
	if (code != CURLE_OK) {
		snprintf(load_err, sizeof(load_err), "etcd: libcurl failed to initialise: %s",
			 etcd_curl.easy_strerror(code));
		load_rc = -EIO;
	}
}

int etcd_curl_load(char *err, size_t errlen)
{
	pthread_once(&load_once, load);
	if (load_rc < 0 && errlen)
		snprintf(err, errlen, "%s", load_err);
	return load_rc;
}
