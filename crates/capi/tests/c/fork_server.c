/*
 * A forking TCP server and its client: plain sockets, no RDMA in the source; run under a
 * preload (ours or rdma-core's librspreload) by crates/capi/tests/vm_preload.rs.
 *
 *   fork_server server ADDR PORT N   accepts N connections; a child per connection
 *                                    (inetd style: the parent closes its copy and waits)
 *                                    reads LEN bytes, checks them, echoes them back
 *   fork_server client ADDR PORT ID  connects, sends LEN patterned bytes, reads them back
 *
 * Each end prints one line per connection: which transport carried it ("rdma" when
 * getsockopt(SOL_RDMA, RDMA_INLINE) answers: only an rsocket does) and whether the bytes
 * came back intact, or the call that failed and its errno name.
 * Sockets are socket(AF_INET, SOCK_STREAM, 0) exactly: rdma-core's fork mode takes only
 * that type.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define LEN (256 * 1024)
#define SOL_RDMA 0x10000
#define RDMA_INLINE 2

static const char *ename(int e)
{
	switch (e) {
	case ENOTCONN: return "ENOTCONN";
	case EPIPE: return "EPIPE";
	case ECONNRESET: return "ECONNRESET";
	case EBADF: return "EBADF";
	case EINVAL: return "EINVAL";
	case ECONNREFUSED: return "ECONNREFUSED";
	default: return strerror(e);
	}
}

static const char *transport(int fd)
{
	int v = 0;
	socklen_t len = sizeof v;
	return getsockopt(fd, SOL_RDMA, RDMA_INLINE, &v, &len) == 0 ? "rdma" : "tcp";
}

static unsigned char pattern(size_t i, int id)
{
	return (unsigned char)((i * 7 + id) % 251);
}

/* 0: all n bytes; -1: errno set; 1: end of stream first. */
static int read_all(int fd, unsigned char *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = read(fd, b + got, n - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		if (k == 0)
			return 1;
		got += (size_t)k;
	}
	return 0;
}

static int write_all(int fd, const unsigned char *b, size_t n)
{
	size_t put = 0;
	while (put < n) {
		ssize_t k = write(fd, b + put, n - put);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		put += (size_t)k;
	}
	return 0;
}

static struct sockaddr_in addr_of(const char *a, const char *p)
{
	struct sockaddr_in sin;
	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_port = htons((unsigned short)atoi(p));
	if (inet_pton(AF_INET, a, &sin.sin_addr) != 1) {
		fprintf(stderr, "bad address %s\n", a);
		exit(2);
	}
	return sin;
}

/* Reads LEN bytes into b and checks them against client id's pattern; says what went wrong
 * as "<who> <n>: ...". */
static int read_pattern(int fd, unsigned char *b, int id, const char *who, int n)
{
	int r = read_all(fd, b, LEN);
	if (r) {
		printf("%s %d: read: %s\n", who, n, r < 0 ? ename(errno) : "end of stream");
		return 1;
	}
	for (size_t i = 0; i < LEN; i++) {
		if (b[i] != pattern(i, id)) {
			printf("%s %d: byte %zu differs\n", who, n, i);
			return 1;
		}
	}
	return 0;
}

static int serve(int c, int k)
{
	static unsigned char b[LEN];
	unsigned char id;
	int r = read_all(c, &id, 1);
	if (r) {
		printf("child %d: read: %s\n", k, r < 0 ? ename(errno) : "end of stream");
		return 1;
	}
	if (read_pattern(c, b, id, "child", k))
		return 1;
	if (write_all(c, b, LEN)) {
		printf("child %d: write: %s\n", k, ename(errno));
		return 1;
	}
	printf("child %d: client %d, %s, %d bytes ok\n", k, id, transport(c), LEN);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s server|client ADDR PORT N|ID\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	struct sockaddr_in sin = addr_of(argv[2], argv[3]);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0) {
		perror("socket");
		return 1;
	}
	if (!strcmp(argv[1], "server")) {
		int one = 1, n = atoi(argv[4]), bad = 0;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(fd, (struct sockaddr *)&sin, sizeof sin) || listen(fd, 8)) {
			perror("bind/listen");
			return 1;
		}
		printf("listening\n");
		for (int k = 0; k < n; k++) {
			int c = accept(fd, NULL, NULL);
			if (c < 0) {
				printf("accept: %s\n", ename(errno));
				return 1;
			}
			pid_t pid = fork();
			if (pid < 0) {
				perror("fork");
				return 1;
			}
			if (pid == 0) {
				close(fd);
				int r = serve(c, k);
				close(c);
				_exit(r);
			}
			close(c);
			int st;
			waitpid(pid, &st, 0);
			if (!WIFEXITED(st) || WEXITSTATUS(st))
				bad++;
		}
		printf("server done, %d bad\n", bad);
		return bad != 0;
	}
	int id = atoi(argv[4]);
	if (connect(fd, (struct sockaddr *)&sin, sizeof sin)) {
		printf("client %d: connect: %s\n", id, ename(errno));
		return 1;
	}
	static unsigned char b[LEN];
	unsigned char idb = (unsigned char)id;
	for (size_t i = 0; i < LEN; i++)
		b[i] = pattern(i, id);
	if (write_all(fd, &idb, 1) || write_all(fd, b, LEN)) {
		printf("client %d: write: %s\n", id, ename(errno));
		return 1;
	}
	memset(b, 0, LEN);
	if (read_pattern(fd, b, id, "client", id))
		return 1;
	printf("client %d: %s, %d bytes ok\n", id, transport(fd), LEN);
	close(fd);
	return 0;
}
