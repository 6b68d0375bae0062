/* Unit tests for launcher/status/status_view.c: the screen and the JSON of
 * `ddplaunch status` from a snapshot (no store, no loop). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status_view.h"

static const char rec0[] =
    "{\"v\":1,\"addr\":\"127.0.0.3\",\"state\":\"running\",\"round\":2,\"node_rank\":0,"
    "\"rank_base\":0,\"nproc\":2,\"lost_s\":0.25,\"time\":1000,"
    "\"ranks\":[{\"local\":0,\"rank\":0,\"step\":120,\"steps_per_s\":50,\"step_s\":0.02,"
    "\"wait_s\":0.01},{\"local\":1,\"rank\":1,\"step\":118,\"steps_per_s\":48,"
    "\"step_s\":0.021,\"wait_s\":0.011}],"
    "\"reformations\":[{\"time\":990,\"round\":2,\"nodes\":2,\"why\":\"node 'c' died\","
    "\"waited_s\":0.4}],"
    "\"rounds\":[{\"time\":900,\"round\":1,\"nodes\":3,\"reason\":\"start\",\"subject\":\"\","
    "\"in_place\":false},{\"time\":990,\"round\":2,\"nodes\":2,\"reason\":\"dead\","
    "\"subject\":\"c\",\"in_place\":true}]}";

static void snap_fill(struct status_snap *s)
{
	memset(s, 0, sizeof(*s));
	s->run_id = "job";
	s->endpoint = "h:29400";
	s->st.phase = RDZV_RUNNING;
	s->st.round = 2;
	s->st.reason = RDZV_WHY_DEAD;
	strcpy(s->st.subject, "c");
	s->st.min_nodes = 2;
	s->st.max_nodes = 3;
	s->st.restarts = 1;
	s->st.max_restarts = 3;
	s->world_round = 2;
	s->nnodes = 2;
	s->nodes = calloc(2, sizeof(*s->nodes));
	strcpy(s->nodes[0].id, "a");
	strcpy(s->nodes[0].addr, "127.0.0.3");
	s->nodes[0].nproc = 2;
	s->nodes[0].rec = json_loads(rec0, 0, NULL);
	assert_non_null(s->nodes[0].rec);
	strcpy(s->nodes[1].id, "b");
	strcpy(s->nodes[1].addr, "127.0.0.4");
	s->nodes[1].nproc = 2;
}

static void test_text(void **state)
{
	struct status_snap s;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	(void)state;
	snap_fill(&s);
	assert_int_equal(status_render_text(f, &s, 1003), 0);
	fclose(f);
	assert_non_null(strstr(buf, "job 'job' at h:29400: running, round 2 (opened because a "
				    "node died: 'c')\n"));
	assert_non_null(
	    strstr(buf, "nodes 1 live of 2 in round 2 (wants 2..3), restarts 1 of 3\n"));
	/* the lowest step, the ranks' mean rate, rank 0's times, 3 s ago */
	assert_non_null(strstr(buf,
			       "  0    a                      127.0.0.3       running        "
			       "0-1          118     49.0   0.020   0.010    0.25     3s ago\n"));
	assert_non_null(strstr(buf, "  -    b                      127.0.0.4       gone       "));
	assert_non_null(strstr(buf, "round 2, 2 nodes: dead 'c'; the workers re-formed in place "
				    "after 0.40 s (node 'c' died)\n"));
	/* the first round is no re-formation */
	assert_null(strstr(buf, "round 1,"));
	free(buf);
	status_snap_release(&s);
}

/* Two nodes list the same hang (the culprit's cut it out), one lists
 * another in compute: each named once, oldest first, with how many say so. */
static const char rec_hang0[] =
    "{\"v\":1,\"state\":\"running\",\"round\":3,\"rank_base\":0,\"nproc\":2,\"time\":1000,"
    "\"hangs_total\":2,\"hangs\":["
    "{\"time\":0,\"round\":2,\"node\":1,\"rank\":3,\"pid\":77,\"phase\":\"collective\","
    "\"op\":\"allreduce\",\"seq\":812,\"late_s\":0.05,\"deadline_s\":0.5,"
    "\"state\":\"stopped\",\"cut\":false,\"waits\":\"0>5\"},"
    "{\"time\":5,\"round\":3,\"node\":0,\"rank\":1,\"pid\":66,\"phase\":\"compute\","
    "\"op\":\"broadcast\",\"seq\":9,\"late_s\":1.25,\"deadline_s\":0.75,"
    "\"state\":\"running on a CPU\",\"cut\":true}]}";
static const char rec_hang1[] =
    "{\"v\":1,\"state\":\"running\",\"round\":3,\"rank_base\":2,\"nproc\":2,\"time\":1000,"
    "\"hangs_total\":1,\"hangs\":["
    "{\"time\":0,\"round\":2,\"node\":1,\"rank\":3,\"pid\":77,\"phase\":\"collective\","
    "\"op\":\"allreduce\",\"seq\":812,\"late_s\":0.05,\"deadline_s\":0.5,"
    "\"state\":\"stopped\",\"cut\":true,\"waits\":\"0>5 1>0 2>3 4>2 5>4\"}]}";

static void test_hangs(void **state)
{
	struct status_snap s;
	char *buf = NULL, *a, *b;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	(void)state;
	snap_fill(&s);
	json_decref(s.nodes[0].rec);
	s.nodes[0].rec = json_loads(rec_hang0, 0, NULL);
	s.nodes[1].rec = json_loads(rec_hang1, 0, NULL);
	assert_non_null(s.nodes[0].rec);
	assert_non_null(s.nodes[1].rec);
	assert_int_equal(status_render_text(f, &s, 1003), 0);
	fclose(f);
	assert_non_null(strstr(buf, "hangs named: 2 (the last 2)\n"));
	a = strstr(buf, "round 2: node 1 rank 3 pid 77 has not left allreduce #812, 0.05 s past "
			"its deadline of 0.50 s; its process is stopped; cut out (2 nodes)\n");
	b = strstr(buf,
		   "round 3: node 0 rank 1 pid 66 has not entered broadcast #9, 1.25 s past "
		   "its deadline of 0.75 s; its process is running on a CPU; cut out (1 node)\n");
	assert_non_null(a);
	assert_non_null(b);
	assert_true(a < b);
	/* who waits on whom, as the node that heard the most says: after its
	 * hang's line, once */
	a = strstr(buf, "cut out (2 nodes)\n            who waits on whom (rank>rank): 0>5 1>0 2>3 "
			"4>2 5>4\n  ");
	assert_non_null(a);
	assert_null(strstr(strstr(a, "who waits") + 1, "who waits"));
	free(buf);
	status_snap_release(&s);
}

static void test_json(void **state)
{
	struct status_snap s;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	json_t *o, *nodes;

	(void)state;
	snap_fill(&s);
	assert_int_equal(status_render_json(f, &s), 0);
	fclose(f);
	o = json_loads(buf, 0, NULL);
	assert_non_null(o);
	assert_string_equal(json_string_value(json_object_get(o, "phase")), "running");
	assert_int_equal(json_integer_value(json_object_get(o, "round")), 2);
	assert_string_equal(json_string_value(json_object_get(o, "subject")), "c");
	assert_string_equal(json_string_value(json_object_get(o, "backend")), "store");
	nodes = json_object_get(o, "nodes");
	assert_int_equal(json_array_size(nodes), 2);
	assert_int_equal(json_integer_value(json_object_get(
			     json_object_get(json_array_get(nodes, 0), "record"), "rank_base")),
			 0);
	assert_true(json_is_null(json_object_get(json_array_get(nodes, 1), "record")));
	json_decref(o);
	free(buf);
	status_snap_release(&s);
}

/* etcd: the endpoint list, said to be etcd's, on the screen and in JSON */
static void test_etcd(void **state)
{
	struct status_snap s;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	json_t *o;

	(void)state;
	snap_fill(&s);
	s.backend = "etcd";
	s.endpoint = "e1:2379,https://e2:2379";
	assert_int_equal(status_render_text(f, &s, 1003), 0);
	assert_int_equal(status_render_json(f, &s), 0);
	fclose(f);
	assert_non_null(strstr(buf, "job 'job' at etcd e1:2379,https://e2:2379: running, round 2"));
	o = json_loads(strchr(buf, '{'), JSON_DISABLE_EOF_CHECK, NULL);
	assert_non_null(o);
	assert_string_equal(json_string_value(json_object_get(o, "backend")), "etcd");
	assert_string_equal(json_string_value(json_object_get(o, "endpoint")),
			    "e1:2379,https://e2:2379");
	json_decref(o);
	free(buf);
	status_snap_release(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_text),
	    cmocka_unit_test(test_json),
	    cmocka_unit_test(test_etcd),
	    cmocka_unit_test(test_hangs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
