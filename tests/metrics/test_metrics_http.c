/* Tests for metrics/metrics_http.c: a real daemon on a real loop, asked by
 * a plain HTTP client over loopback from a thread of the test. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "metrics_http.h"

struct client {
	int port;
	int nreq;
	const char *req[4];
	char resp[4][4096];
	uv_async_t done;
};

static int renders;

static void render(void *arg, struct metrics_out *o)
{
	renders++;
	metrics_family(o, "ddp_test_value", METRICS_GAUGE, "A test value.");
	metrics_sample(o, NULL, 0, (double)renders);
}

/* One request on its own connection; the whole answer into buf. */
static void ask(int port, const char *req, char *buf, size_t cap)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	size_t len = 0;
	ssize_t n;

	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	buf[0] = '\0';
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		goto out;
	if (write(fd, req, strlen(req)) != (ssize_t)strlen(req))
		goto out;
	while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
out:
	if (fd >= 0)
		close(fd);
}

static void *client_main(void *arg)
{
	struct client *c = arg;

	for (int i = 0; i < c->nreq; i++)
		ask(c->port, c->req[i], c->resp[i], sizeof(c->resp[i]));
	uv_async_send(&c->done);
	return NULL;
}

static struct metrics_http *served;

static void on_done(uv_async_t *a)
{
	metrics_http_close(served);
	uv_close((uv_handle_t *)a, NULL);
}

static void test_serves(void **state)
{
	uv_loop_t loop;
	struct client c = {
	    .nreq = 4,
	    .req = {"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		    "GET /metrics HTTP/1.0\r\n\r\n", "GET / HTTP/1.0\r\n\r\n",
		    "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n"},
	};
	pthread_t th;

	(void)state;
	uv_loop_init(&loop);
	if (!metrics_http_built()) {
		assert_int_equal(metrics_http_start(&loop, "127.0.0.1", 0, render, NULL, &served),
				 -ENOTSUP);
		uv_loop_close(&loop);
		return;
	}
	assert_int_equal(metrics_http_start(&loop, "127.0.0.1", 0, render, NULL, &served), 0);
	c.port = metrics_http_port(served);
	assert_true(c.port > 0);
	uv_async_init(&loop, &c.done, on_done);
	pthread_create(&th, NULL, client_main, &c);
	uv_run(&loop, UV_RUN_DEFAULT);
	pthread_join(th, NULL);
	assert_int_equal(uv_loop_close(&loop), 0);

	assert_non_null(strstr(c.resp[0], "HTTP/1.1 200"));
	assert_non_null(strstr(c.resp[0], "Content-Type: " METRICS_CONTENT_TYPE));
	assert_non_null(strstr(c.resp[0], "\r\n\r\n# HELP ddp_test_value A test value.\n"
					  "# TYPE ddp_test_value gauge\nddp_test_value 1\n"));
	/* rendered again for each scrape */
	assert_non_null(strstr(c.resp[1], " 200 "));
	assert_non_null(strstr(c.resp[1], "ddp_test_value 2\n"));
	assert_non_null(strstr(c.resp[2], " 404 "));
	assert_non_null(strstr(c.resp[3], " 405 "));
	assert_int_equal(renders, 2);
}

static void test_taken_port(void **state)
{
	uv_loop_t loop;
	struct metrics_http *a, *b;

	(void)state;
	if (!metrics_http_built())
		return;
	uv_loop_init(&loop);
	assert_int_equal(metrics_http_start(&loop, "127.0.0.1", 0, render, NULL, &a), 0);
	assert_int_equal(
	    metrics_http_start(&loop, "127.0.0.1", metrics_http_port(a), render, NULL, &b),
	    -EADDRINUSE);
	assert_int_equal(metrics_http_start(&loop, "no.such.literal", 0, render, NULL, &b),
			 -EINVAL);
	/* the address bound, as the start message prints it */
	assert_string_equal(metrics_http_host(a), "127.0.0.1");
	assert_int_equal(metrics_http_start(&loop, "", 0, render, NULL, &b), 0);
	assert_true(!strcmp(metrics_http_host(b), "::") ||
		    !strcmp(metrics_http_host(b), "0.0.0.0"));
	metrics_http_close(b);
	metrics_http_close(a);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_serves),
	    cmocka_unit_test(test_taken_port),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
