/*
 * etcd_awatch_int.h - a watch's state, shared by its two files:
 *   etcd_awatch.c         the stream's life: authentication, the stream on
 *                         one endpoint, the probe of a quiet one, resuming
 *                         on the next endpoint, the end
 *   etcd_awatch_events.c  the stream's messages parsed into events, the
 *                         queue, handing them on; making and freeing a watch
 */
#ifndef DDP_RENDEZVOUS_ETCD_AWATCH_INT_H
#define DDP_RENDEZVOUS_ETCD_AWATCH_INT_H

#include "etcd_async.h"
#include "etcd_codec.h"
#include "etcd_int.h"

struct watch_item {
	struct watch_item *next;
	struct etcd_event ev;
};

enum phase { PH_IDLE, PH_AUTH, PH_STREAM, PH_ENDED };

struct etcd_awatch {
	struct etcd_awatch *prev, *next;
	struct etcd_async *c;
	const struct etcd_cfg *cfg;
	char *key;
	bool prefix;
	etcd_awatch_cb cb;
	void *arg;
	enum phase phase;
	struct etcd_wake wake;

	struct etcd_xfer stream;
	char *s_body, *s_url;
	struct curl_slist *s_hdrs;
	char stream_err[CURL_ERROR_SIZE];
	struct etcd_linebuf lb;

	struct etcd_xfer aux; /* the authentication, or a probe */
	char *a_body, *a_url;
	struct curl_slist *a_hdrs;
	struct etcd_rxbuf rx;
	char aux_err[CURL_ERROR_SIZE];
	bool probing;

	char (*ep_err)[160]; /* per endpoint, for the message if all fail */
	int64_t next_rev;    /* resume from here; 0: from now (until created) */
	size_t ep;
	bool created;	     /* the current stream was accepted */
	int auth_rejections; /* token rejected since the last accepted stream */
	int stream_rc;	     /* why the write callback ended the stream */
	bool terminal;	     /* ... and not worth another endpoint */
	uint64_t created_deadline, slice_ms, last_activity;
	size_t failed; /* attempts since the last working stream */
	uint64_t down_since, delay;

	struct watch_item *head, *tail;
	int final_rc;
	char final_err[2048];
	bool dead, final_told;
};

/* A quiet stream's member is probed this often. */
static inline uint64_t awatch_probe_interval(const struct etcd_awatch *w)
{
	uint64_t t = w->cfg->timeout_ms / 2;
	return t < 200 ? 200 : t;
}

/* etcd_awatch.c: the callbacks of the watch's wake-up and transfers, and
 * stopping its transfers. */
void awatch_on_wake(struct etcd_wake *wk);
void awatch_on_stream_done(struct etcd_xfer *x, CURLcode code);
void awatch_on_aux_done(struct etcd_xfer *x, CURLcode code);
void awatch_stop(struct etcd_awatch *w);
void awatch_stream_release(struct etcd_awatch *w);

/* etcd_awatch_events.c: curl's write callback of the stream (userdata: the
 * watch), why the current endpoint failed, and the final message. */
size_t awatch_stream_write(char *p, size_t size, size_t n, void *userdata);
void awatch_note(struct etcd_awatch *w, const char *what);
int awatch_fail(struct etcd_awatch *w, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
