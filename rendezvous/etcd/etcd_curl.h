/*
 * etcd_curl.h - libcurl, loaded at run time by the first etcd client.
 *
 * Only a job on --rdzv_backend=etcd needs libcurl, and linking it costs
 * every launch about 30 shared libraries (TLS, Kerberos, LDAP, ...): some
 * 6 MiB of resident memory and milliseconds of relocation, for a one-node
 * job too. So the client does not link it: etcd_curl_load() dlopen()s
 * libcurl.so.4 once per process and fills etcd_curl with the functions the
 * client calls; before it has returned 0, no member may be called.
 *
 * The types and constants still come from <curl/curl.h> (the build needs
 * libcurl's headers; the run needs libcurl only for etcd).
 */
#ifndef DDP_ETCD_CURL_H
#define DDP_ETCD_CURL_H

#include <stddef.h>

#include <curl/curl.h>

struct etcd_curl_api {
	CURLcode (*global_init)(long flags);
	const char *(*easy_strerror)(CURLcode code);
	CURL *(*easy_init)(void);
	void (*easy_cleanup)(CURL *h);
	void (*easy_reset)(CURL *h);
	CURLcode (*easy_setopt)(CURL *h, CURLoption opt, ...);
	CURLcode (*easy_getinfo)(CURL *h, CURLINFO info, ...);
	struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
	void (*slist_free_all)(struct curl_slist *l);
	CURLM *(*multi_init)(void);
	CURLMcode (*multi_cleanup)(CURLM *m);
	CURLMcode (*multi_setopt)(CURLM *m, CURLMoption opt, ...);
	CURLMcode (*multi_add_handle)(CURLM *m, CURL *h);
	CURLMcode (*multi_remove_handle)(CURLM *m, CURL *h);
	CURLMcode (*multi_assign)(CURLM *m, curl_socket_t s, void *p);
	CURLMcode (*multi_socket_action)(CURLM *m, curl_socket_t s, int ev_bitmask, int *running);
	CURLMsg *(*multi_info_read)(CURLM *m, int *left);
};

/* The functions, valid once etcd_curl_load() has returned 0. */
extern struct etcd_curl_api etcd_curl;

/* Loads libcurl and calls its global init, once per process (thread-safe;
 * later calls return the first call's result). Returns 0, or -ENOENT when
 * libcurl.so.4 cannot be loaded or lacks a function, -EIO when its init
 * fails; err (errlen bytes) then says which and how to fix it. */
int etcd_curl_load(char *err, size_t errlen);

#endif
