/*
 * LD_PRELOAD shim for `ci/bench-pingpong.sh pad`: makes rdma-core's ibv_rc_pingpong poll its
 * (empty) CQ RVERBS_PINGPONG_PAD more times before every send, as RVERBS_PINGPONG_PAD does
 * in `rverbs rc-pingpong`, so that the latency cost of C's own hot code (the provider's CQ
 * poll) can be measured the same way as ours. Benchmark only: nothing of rverbs links it.
 *
 * It remembers the CQ the tool creates (ibv_create_cq) and wraps write(2): the rxe send
 * doorbell is a 32-byte POST_SEND command (28) on the context's command fd. The few fields
 * of libibverbs' public structs it reads are declared here (rdma-core v44, x86-64):
 * ibv_cq starts with its ibv_context pointer; ibv_context holds the device pointer, then
 * the ops table (poll_cq is its 12th function pointer), then cmd_fd.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ctx_prefix {
	void *device;
	void *ops[11];
	int (*poll_cq)(void *cq, int num, void *wc);
	void *ops_rest[20]; /* 32 function pointers in all */
	int cmd_fd;
};
_Static_assert(__builtin_offsetof(struct ctx_prefix, poll_cq) == 96, "ops.poll_cq");
_Static_assert(__builtin_offsetof(struct ctx_prefix, cmd_fd) == 8 + 32 * 8, "cmd_fd");

static void *the_cq;
static unsigned long pad;

void *ibv_create_cq(void *ctx, int cqe, void *cq_context, void *channel, int comp_vector)
{
	static void *(*real)(void *, int, void *, void *, int);
	if (!real)
		real = (void *(*)(void *, int, void *, void *, int))dlsym(RTLD_NEXT, "ibv_create_cq");
	void *cq = real(ctx, cqe, cq_context, channel, comp_vector);
	const char *p = getenv("RVERBS_PINGPONG_PAD");
	pad = p ? strtoul(p, NULL, 10) : 0;
	the_cq = cq;
	return cq;
}

/* Never inlined: callgrind counts its instructions per call. */
__attribute__((noinline)) void rverbs_cpad(void *cq, unsigned long n)
{
	struct ctx_prefix *ctx = *(struct ctx_prefix **)cq;
	uint64_t wc[6]; /* struct ibv_wc: 48 bytes */
	for (unsigned long i = 0; i < n; i++) {
		if (ctx->poll_cq(cq, 1, wc) != 0) {
			fprintf(stderr, "cpad: a padding poll found a completion\n");
			abort();
		}
	}
}

ssize_t write(int fd, const void *buf, size_t n)
{
	static ssize_t (*real)(int, const void *, size_t);
	if (!real)
		real = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
	if (pad && the_cq && n == 32 && *(const uint32_t *)buf == 28 &&
	    fd == (*(struct ctx_prefix **)the_cq)->cmd_fd)
		rverbs_cpad(the_cq, pad);
	return real(fd, buf, n);
}
