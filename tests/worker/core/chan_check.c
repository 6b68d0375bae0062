/*
 * chan_check.c - libddp's hold on the agent channel (worker/core/
 * agent_chan.c), each case in a child process of its own (the channel is
 * taken once per process). The program plays its agent: a socket pair it
 * makes, one end named by DDP_AGENT_FD, DDP_AGENT_PID its own pid (the
 * pair's creator, as ddplaunch is for a worker). World of one on a file
 * store: no daemon.
 *
 *   own_socket  a socket of the program's own on the number DDP_AGENT_FD
 *               names, whose peer is not DDP_AGENT_PID: not taken, and
 *               not a byte written to it
 *   lifetime    the first ddp_init takes the fd: the variables leave the
 *               environment (an exec'd child sees neither them nor the
 *               fd; a forked child's ddp_init finds no channel), and
 *               ddp_free leaves the fd open: a second ddp_init (after a
 *               socket opened meanwhile) speaks on the same channel, hears
 *               a round whose address is 200 bytes long and says "took R"
 *   dead_agent  the agent's end closed: ddp_set_resizable and
 *               ddp_next_round return -EPIPE, and no SIGPIPE kills the
 *               worker
 *   no_reader   the reader's thread cannot be made (an address-space
 *               limit raised a megabyte at a time, a fresh process each,
 *               from where ddp_init fails to where it holds the channel):
 *               a ddp_init that is not resizable said nothing to the
 *               agent, which would count on a worker that hears no round
 *
 *   ddp-chan-check DIR    (DIR: a scratch folder for the file stores)
 * Exits 0 when every case passed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_wire.h"
#include "ddp.h"

static const char *dir;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: ", __func__, __LINE__);                            \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

/* A world of one on its own file store. */
static struct ddp_ctx *init_one(const char *name)
{
	static char url[512];
	struct ddp_options o;
	struct ddp_ctx *ctx = NULL;
	char err[1024];

	ddp_options_init(&o);
	snprintf(url, sizeof(url), "file://%s/%s-%d", dir, name, (int)getpid());
	o.init_method = url;
	o.rank = o.local_rank = 0;
	o.world_size = o.local_world_size = 1;
	o.run_id = "chan";
	o.backend = DDP_BACKEND_CPU;
	o.timeout_ms = 5000;
	CHECK(ddp_init(&o, &ctx, err, sizeof(err)) == 0, "ddp_init: %s", err);
	return ctx;
}

/* The agent's end and the worker's end, the variables naming them. */
static void agent_pair(int sv[2], pid_t agent_pid)
{
	char s[32];

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair: %s", strerror(errno));
	snprintf(s, sizeof(s), "%d", sv[1]);
	setenv("DDP_AGENT_FD", s, 1);
	snprintf(s, sizeof(s), "%d", (int)agent_pid);
	setenv("DDP_AGENT_PID", s, 1);
}

/* Reads one line from the agent's end within 2 s ("" when none came). */
static void read_line(int fd, char *line, size_t len)
{
	size_t n = 0;

	line[0] = '\0';
	while (n + 1 < len) {
		struct pollfd p = {fd, POLLIN, 0};

		if (poll(&p, 1, 2000) <= 0 || read(fd, line + n, 1) != 1)
			break;
		if (line[n] == '\n')
			break;
		n++;
	}
	line[n] = '\0';
}

static bool readable(int fd, int ms)
{
	struct pollfd p = {fd, POLLIN, 0};

	return poll(&p, 1, ms) > 0;
}

static void case_own_socket(void)
{
	int sv[2];
	struct ddp_ctx *ctx;

	/* The program's own pair: its peer is this process, not the agent
	 * named (our parent stands for a launcher that made another one). */
	agent_pair(sv, getppid());
	ctx = init_one("own");
	CHECK(!ddp_resizable(ctx), "a socket of the program's own was taken for the agent's");
	CHECK(!readable(sv[0], 200), "libddp wrote on the program's own socket");
	CHECK(!getenv("DDP_AGENT_FD") && !getenv("DDP_AGENT_PID"),
	      "the variables are still in the environment");
	ddp_free(ctx);
}

/* An exec'd child: neither the variables nor the fd. */
static void check_exec_child(int fd)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd),
		 "test -z \"${DDP_AGENT_FD}${DDP_AGENT_PID}\" && ! test -e /proc/self/fd/%d", fd);
	CHECK(system(cmd) == 0,
	      "a child started by the worker inherits the channel or its variables");
}

/* A forked child (a data loader) that calls ddp_init finds no channel. */
static void check_fork_child(const char *name)
{
	int status;
	pid_t pid = fork();

	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		struct ddp_ctx *ctx = init_one(name);

		_exit(ddp_resizable(ctx) ? 9 : 0);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "a forked child's ddp_init took the agent channel (%s)", name);
}

static void send_long_round(int fd, int round)
{
	struct agent_wire_msg m = {.kind = AGENT_WIRE_ROUND};
	char line[AGENT_WIRE_MAX_LINE], addr[201];
	int n;

	memset(addr, 'a', 200);
	memcpy(addr + 190, "4242424242", 10); /* digits past the old 63: no shift */
	addr[200] = '\0';
	m.r = (struct agent_wire_round){.round = round,
					.rank = 0,
					.world_size = 1,
					.local_world_size = 1,
					.master_port = 29400,
					.group_world_size = 1};
	CHECK(agent_wire_round_set_addr(&m.r, addr) == 0, "address");
	n = agent_wire_format(&m, line, sizeof(line));
	CHECK(n > 200 && write(fd, line, (size_t)n) == n, "write the round");
}

static void case_lifetime(void)
{
	int sv[2], flags, other;
	struct ddp_ctx *ctx;
	struct ddp_round r;
	char line[512], want[512];

	agent_pair(sv, getpid());
	ctx = init_one("first");
	read_line(sv[0], line, sizeof(line));
	CHECK(ddp_resizable(ctx) && strstr(line, "resizable"), "the first ddp_init said '%s'",
	      line);
	CHECK(!getenv("DDP_AGENT_FD") && !getenv("DDP_AGENT_PID"),
	      "the variables are still in the environment");
	flags = fcntl(sv[1], F_GETFD);
	CHECK(flags >= 0 && (flags & FD_CLOEXEC), "the channel is not close-on-exec");
	check_exec_child(sv[1]);
	check_fork_child("fork-held");
	ddp_free(ctx);

	/* Kept: not closed by ddp_free, so no later socket gets its number. */
	CHECK(fcntl(sv[1], F_GETFD) >= 0, "ddp_free closed the agent channel");
	other = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(other >= 0 && other != sv[1], "a new socket took the channel's number %d", sv[1]);
	check_fork_child("fork-freed");
	ctx = init_one("second");
	read_line(sv[0], line, sizeof(line));
	CHECK(ddp_resizable(ctx) && !strcmp(line, "resizable"),
	      "the second ddp_init said '%s' on the channel", line);
	send_long_round(sv[0], 7);
	CHECK(ddp_next_round(ctx, &r, 2000) == 0, "no round: %s", ddp_error(ctx));
	memset(want, 'a', 200);
	memcpy(want + 190, "4242424242", 10);
	want[200] = '\0';
	CHECK(r.round == 7 && strlen(r.init_method) == strlen("tcp://:29400") + 200 &&
		  strstr(r.init_method, want) && strstr(r.init_method, ":29400"),
	      "round %d, init method '%s'", r.round, r.init_method);
	read_line(sv[0], line, sizeof(line));
	CHECK(!strcmp(line, "took 7"), "the agent read '%s', not 'took 7'", line);
	ddp_free(ctx);
	close(other);
}

static void case_dead_agent(void)
{
	int sv[2];
	struct ddp_ctx *ctx;
	struct ddp_round r;
	char line[128];

	signal(SIGPIPE, SIG_DFL); /* as in a C program: the default kills */
	agent_pair(sv, getpid());
	ctx = init_one("dead");
	read_line(sv[0], line, sizeof(line));
	CHECK(ddp_resizable(ctx) && !strcmp(line, "hello 1 resizable"),
	      "ddp_init said '%s', not 'hello 1 resizable'", line);
	close(sv[0]);
	CHECK(ddp_set_resizable(ctx, 0) == -EPIPE, "ddp_set_resizable on a dead agent");
	CHECK(ddp_set_resizable(ctx, 1) == -EPIPE, "ddp_set_resizable on a dead agent");
	CHECK(ddp_next_round(ctx, &r, 2000) == -EPIPE, "ddp_next_round on a dead agent");
	ddp_free(ctx);
}

/* This process's address space in bytes (VmSize). */
static long long vm_size(void)
{
	char line[256];
	long long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	CHECK(f, "/proc/self/status: %s", strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %lld kB", &kb) == 1)
			break;
	fclose(f);
	CHECK(kb > 0, "no VmSize in /proc/self/status");
	return kb * 1024;
}

enum { NR_INIT_FAILED = 2, NR_NO_CHANNEL, NR_RESIZABLE };

/* One try in a fresh process under an address-space limit of its size now
 * plus mb megabytes. Returns how ddp_init came out (NR_*); *said: whether
 * the agent heard a line. */
static int no_reader_try(int mb, bool *said)
{
	char line[128];
	int sv[2], status;
	pid_t pid;

	agent_pair(sv, getpid());
	pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		struct rlimit rl;
		struct ddp_options o;
		struct ddp_ctx *ctx = NULL;
		char url[512], err[1024];

		close(sv[0]);
		ddp_options_init(&o);
		snprintf(url, sizeof(url), "file://%s/noreader-%d", dir, (int)getpid());
		o.init_method = url;
		o.rank = o.local_rank = 0;
		o.world_size = o.local_world_size = 1;
		o.run_id = "chan";
		o.backend = DDP_BACKEND_CPU;
		o.timeout_ms = 5000;
		rl.rlim_cur = rl.rlim_max = (rlim_t)(vm_size() + (long long)mb * 1024 * 1024);
		if (setrlimit(RLIMIT_AS, &rl) != 0)
			_exit(1);
		if (ddp_init(&o, &ctx, err, sizeof(err)) != 0)
			_exit(NR_INIT_FAILED);
		_exit(ddp_resizable(ctx) ? NR_RESIZABLE : NR_NO_CHANNEL);
	}
	close(sv[1]);
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status), "the try under %d MB died", mb);
	/* the child's end is closed now: a line, or EOF at once */
	*said = recv(sv[0], line, sizeof(line), MSG_DONTWAIT) > 0;
	close(sv[0]);
	return WEXITSTATUS(status);
}

static void case_no_reader(void)
{
	int window = 0, out = 0;

	for (int mb = 0; mb <= 512 && out != NR_RESIZABLE; mb++) {
		bool said;

		out = no_reader_try(mb, &said);
		CHECK(out >= NR_INIT_FAILED, "the try under %d MB could not set its limit", mb);
		CHECK(out != NR_NO_CHANNEL || !said,
		      "under %d MB ddp_init held no channel, yet the agent heard it", mb);
		CHECK(out != NR_RESIZABLE || said, "resizable, yet the agent heard nothing");
		window += out == NR_NO_CHANNEL;
	}
	CHECK(out == NR_RESIZABLE, "no limit up to 512 MB let ddp_init hold the channel");
	CHECK(window > 0, "no limit let ddp_init succeed without a reader: nothing was checked");
}

static int run_case(const char *name, void (*fn)(void))
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		fn();
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return 1;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		printf("%s: ok\n", name);
		return 0;
	}
	if (WIFSIGNALED(status))
		printf("%s: FAILED, killed by signal %d\n", name, WTERMSIG(status));
	else
		printf("%s: FAILED (exit %d)\n", name, WEXITSTATUS(status));
	return 1;
}

int main(int argc, char **argv)
{
	int fails = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: ddp-chan-check DIR\n");
		return 2;
	}
	dir = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	fails += run_case("own_socket", case_own_socket);
	fails += run_case("lifetime", case_lifetime);
	fails += run_case("dead_agent", case_dead_agent);
#ifndef __SANITIZE_ADDRESS__ /* its shadow memory does not fit an address-space limit */
	fails += run_case("no_reader", case_no_reader);
#endif
	return fails ? 1 : 0;
}
