/*
 * rdzv_etcd_names.c - before the etcd backend's first request: whether
 * any endpoint's host name can ever resolve. Each name (literals need no
 * look-up) is looked up on the loop's thread pool (uv_getaddrinfo); when
 * the resolver answers that every endpoint's name does not exist (not a
 * failure to ask it, which may pass), no retry can help: the session fails
 * at once, naming them. Otherwise the session is opened and kept trying
 * until the join deadline, as for an endpoint that does not answer.
 */
#include <errno.h>
#include <log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_etcd_int.h"
#include "rdzv_host.h"

struct pe_lookup {
	uv_getaddrinfo_t req;
	struct etcd_be *be;
	struct pe_lookup *next; /* in the endpoints' order */
	bool absent;		/* the resolver says no such name */
	char host[256];
};

/* The host of one endpoint ("h:p", "http://h:p", "https://[v6]:p") of
 * len bytes at s into host; false when it has none. */
static bool endpoint_host(const char *s, size_t len, char *host, size_t hostlen)
{
	const char *end = s + len, *h, *e;

	for (const char *scheme = "://", *p = s; p + 3 <= end; p++)
		if (!memcmp(p, scheme, 3)) {
			s = p + 3;
			break;
		}
	if (*s == '[') {
		h = s + 1;
		e = memchr(h, ']', (size_t)(end - h));
	} else {
		h = s;
		e = h;
		for (const char *p = h; p < end; p++)
			if (*p == ':')
				e = p;
		if (e == h)
			e = end;
	}
	if (!e || e <= h || (size_t)(e - h) >= hostlen)
		return false;
	memcpy(host, h, (size_t)(e - h));
	host[e - h] = '\0';
	return true;
}

static bool no_such_name(int status)
{
	return status == UV_EAI_NONAME
#ifdef UV_EAI_NODATA
	       || status == UV_EAI_NODATA
#endif
	    ;
}

/* Every look-up has answered: the verdict (unless the backend closed),
 * then the look-ups go. */
static void names_done(struct etcd_be *be)
{
	char msg[RDZV_PRIMS_MSG_MAX], bad[RDZV_PRIMS_MSG_MAX / 2] = "";
	size_t absent = 0, off = 0;
	struct pe_lookup *l;

	for (l = be->lookups; l; l = l->next)
		if (l->absent && off < sizeof(bad)) {
			off += (size_t)snprintf(bad + off, sizeof(bad) - off, "%s'%s'",
						absent++ ? ", " : "", l->host);
		}
	while ((l = be->lookups)) {
		be->lookups = l->next;
		free(l);
	}
	if (be->closed)
		return;
	if (be->names_total && absent == be->names_total) {
		snprintf(msg, sizeof(msg),
			 "no etcd endpoint's name exists: %s (the resolver says no such host; "
			 "retrying cannot help): correct --rdzv_endpoint",
			 bad);
		pe_open_failed(be, -EHOSTUNREACH, msg);
		return;
	}
	pe_names_ok(be);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	struct pe_lookup *l = req->data;
	struct etcd_be *be = l->be;

	uv_freeaddrinfo(res);
	l->absent = no_such_name(status);
	if (status < 0 && !l->absent)
		log_debug("etcd endpoint '%s': cannot resolve it yet: %s", l->host,
			  uv_strerror(status));
	if (--be->names_pending == 0)
		names_done(be);
	pe_handle_closed(be);
}

int pe_names_check(struct etcd_be *be)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct pe_lookup **tail = &be->lookups;
	const char *p = be->opt.endpoints;
	bool all_names = true;

	while (p && *p) {
		size_t len = strcspn(p, ",");
		struct pe_lookup *l = calloc(1, sizeof(*l));
		int rc;

		if (!l)
			return -ENOMEM;
		if (!endpoint_host(p, len, l->host, sizeof(l->host)) ||
		    rdzv_host_is_literal(l->host)) {
			all_names = false;
			free(l);
		} else {
			l->be = be;
			l->req.data = l;
			rc = uv_getaddrinfo(be->loop, &l->req, on_resolved, l->host, NULL, &hints);
			if (rc < 0) {
				free(l);
				return rc;
			}
			*tail = l;
			tail = &l->next;
			be->handles++; /* until its callback */
			be->names_pending++;
			be->names_total++;
		}
		p += len + (p[len] == ',');
	}
	/* A literal among them: that endpoint may come; no verdict needed. */
	if (!all_names)
		be->names_total = 0;
	if (be->names_pending == 0)
		pe_names_ok(be);
	return 0;
}
