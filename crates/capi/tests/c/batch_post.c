/*
 * A batch post with a malformed request in it posts the valid requests before it, as
 * rdma-core's providers do (rxe and mlx5 post request by request, stop at the first bad one,
 * point *bad_wr at it and ring the doorbell for those already queued): ibv_post_send,
 * ibv_post_recv and ibv_post_srq_recv each get a list of 20 requests whose request 18 has
 * num_sge -1. Each call must return EINVAL with *bad_wr at request 18, and requests 0..17
 * must complete; 19 must not have been posted.
 *
 * Two RC QPs on one device, connected to each other: A receives on its own receive queue,
 * B through an SRQ; each sends 18 (of 20) SENDs to the other. Then each posts one more
 * receive and one more SEND: those must be the next completions (a receive posted after
 * request 18 would take the next SEND first).
 *
 * Usage: batch_post DEVICE [GID_INDEX]. Prints "batch_post: all checks passed".
 * Built static on librverbs.a and, for the host guest, on rdma-core's libibverbs.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(c, ...)                                                                      \
	do {                                                                               \
		if (!(c)) {                                                                \
			fprintf(stderr, "batch_post.c:%d: check failed: %s: ", __LINE__, #c); \
			fprintf(stderr, __VA_ARGS__);                                      \
			fprintf(stderr, " (errno %d)\n", errno);                            \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

enum { N = 20, BAD = 18, MSG = 64 };

/* wr_id bases: A's SENDs, B's SENDs, A's receives, B's SRQ receives. */
enum { A_SEND = 1000, B_SEND = 2000, A_RECV = 3000, B_RECV = 4000, LATER = 100 };

static char buf[4 * N * MSG + 8 * MSG];
static struct ibv_mr *mr;
static struct ibv_cq *cq;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .srq = srq,
		.cap = { .max_send_wr = 32, .max_recv_wr = srq ? 0 : 32, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	return ibv_create_qp(pd, &a);
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid, int gidx)
{
	struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
	struct ibv_qp_attr rtr = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
		.dest_qp_num = dest, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = *gid, .sgid_index = gidx, .hop_limit = 1 } } };
	struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
		.rnr_retry = 7, .max_rd_atomic = 1 };

	CHECK(!ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					 IBV_QP_ACCESS_FLAGS), "INIT");
	CHECK(!ibv_modify_qp(qp, &rtr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), "RTR");
	CHECK(!ibv_modify_qp(qp, &rts, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					IBV_QP_MAX_QP_RD_ATOMIC), "RTS");
}

/* The buffer slot of request `id` (each request its own). */
static char *slot(uint64_t id)
{
	uint64_t base = id / 1000, i = id % 1000;

	return buf + ((base - 1) * N + (i >= LATER ? N - 1 : i)) * MSG;
}

/* A list of `n` receives with wr_ids base+0.., request `bad` (if < n) malformed. */
static struct ibv_recv_wr *recv_list(struct ibv_recv_wr *w, struct ibv_sge *s, int n, int bad,
				     uint64_t base)
{
	for (int i = 0; i < n; i++) {
		s[i] = (struct ibv_sge){ (uintptr_t)slot(base + i), MSG, mr->lkey };
		w[i] = (struct ibv_recv_wr){ .wr_id = base + i, .sg_list = &s[i],
					     .num_sge = i == bad ? -1 : 1,
					     .next = i + 1 < n ? &w[i + 1] : NULL };
	}
	return w;
}

/* A list of `n` signaled SENDs, each carrying "<wr_id>", request `bad` malformed. */
static struct ibv_send_wr *send_list(struct ibv_send_wr *w, struct ibv_sge *s, int n, int bad,
				     uint64_t base)
{
	for (int i = 0; i < n; i++) {
		snprintf(slot(base + i), MSG, "message %llu", (unsigned long long)(base + i));
		s[i] = (struct ibv_sge){ (uintptr_t)slot(base + i), MSG, mr->lkey };
		w[i] = (struct ibv_send_wr){ .wr_id = base + i, .sg_list = &s[i],
					     .num_sge = i == bad ? -1 : 1, .opcode = IBV_WR_SEND,
					     .send_flags = IBV_SEND_SIGNALED,
					     .next = i + 1 < n ? &w[i + 1] : NULL };
	}
	return w;
}

/* Polls until each wr_id of want[0..n) completed successfully, in any order across the
 * four queues; any other completion fails. A receive must hold the SEND of the same
 * request number from the other side. */
static void expect(const uint64_t *want, int n)
{
	int seen[4 * N] = { 0 }, left = n;
	double end = now() + 10;

	while (left) {
		struct ibv_wc wc;
		int got = ibv_poll_cq(cq, 1, &wc), k;

		CHECK(got >= 0, "ibv_poll_cq");
		if (!got) {
			CHECK(now() < end, "%d of %d completions missing after 10 s (first: %llu)",
			      left, n, (unsigned long long)want[0]);
			continue;
		}
		CHECK(wc.status == IBV_WC_SUCCESS, "wr_id %llu: status %s",
		      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
		for (k = 0; k < n && (want[k] != wc.wr_id || seen[k]); k++)
			;
		CHECK(k < n, "a completion of wr_id %llu, not one expected now",
		      (unsigned long long)wc.wr_id);
		seen[k] = 1;
		left--;
		if (wc.opcode == IBV_WC_RECV) {
			/* A's receives hold B's SENDs and B's hold A's, request for request. */
			uint64_t from = wc.wr_id - (wc.wr_id / 1000 == 3 ? A_RECV - B_SEND
									 : B_RECV - A_SEND);
			char want_msg[MSG];

			snprintf(want_msg, MSG, "message %llu", (unsigned long long)from);
			CHECK(!strcmp(slot(wc.wr_id), want_msg), "receive %llu holds \"%.20s\"",
			      (unsigned long long)wc.wr_id, slot(wc.wr_id));
		}
	}
}

int main(int argc, char **argv)
{
	const char *want = argc > 1 ? argv[1] : "rxe0";
	int gidx = argc > 2 ? atoi(argv[2]) : 1, n, i, r;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;
	union ibv_gid gid;

	CHECK(list, "ibv_get_device_list");
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), want))
			ctx = ibv_open_device(list[i]);
	CHECK(ctx, "no device %s", want);
	ibv_free_device_list(list);
	CHECK(!ibv_query_gid(ctx, 1, gidx, &gid), "ibv_query_gid");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "ibv_reg_mr");
	cq = ibv_create_cq(ctx, 128, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq");
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 32, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq, "ibv_create_srq");
	struct ibv_qp *a = make_qp(pd, cq, NULL), *b = make_qp(pd, cq, srq);
	CHECK(a && b, "ibv_create_qp");
	connect_qp(a, b->qp_num, &gid, gidx);
	connect_qp(b, a->qp_num, &gid, gidx);

	struct ibv_recv_wr rw[N], *rbad;
	struct ibv_send_wr sw[N], *sbad;
	struct ibv_sge s[N];

	rbad = NULL;
	r = ibv_post_recv(a, recv_list(rw, s, N, BAD, A_RECV), &rbad);
	printf("batch_post: ibv_post_recv: %s, bad_wr at %ld\n", strerror(r),
	       rbad ? (long)(rbad - rw) : -1L);
	CHECK(r == EINVAL && rbad == &rw[BAD], "ibv_post_recv's error and bad_wr");

	rbad = NULL;
	r = ibv_post_srq_recv(srq, recv_list(rw, s, N, BAD, B_RECV), &rbad);
	printf("batch_post: ibv_post_srq_recv: %s, bad_wr at %ld\n", strerror(r),
	       rbad ? (long)(rbad - rw) : -1L);
	CHECK(r == EINVAL && rbad == &rw[BAD], "ibv_post_srq_recv's error and bad_wr");

	sbad = NULL;
	r = ibv_post_send(a, send_list(sw, s, N, BAD, A_SEND), &sbad);
	printf("batch_post: ibv_post_send (A): %s, bad_wr at %ld\n", strerror(r),
	       sbad ? (long)(sbad - sw) : -1L);
	CHECK(r == EINVAL && sbad == &sw[BAD], "ibv_post_send's error and bad_wr");

	sbad = NULL;
	r = ibv_post_send(b, send_list(sw, s, N, BAD, B_SEND), &sbad);
	printf("batch_post: ibv_post_send (B): %s, bad_wr at %ld\n", strerror(r),
	       sbad ? (long)(sbad - sw) : -1L);
	CHECK(r == EINVAL && sbad == &sw[BAD], "ibv_post_send's error and bad_wr");

	/* The valid prefixes: 18 SENDs each way, 18 receives on each side. */
	uint64_t first[4 * BAD];

	for (i = 0; i < BAD; i++) {
		first[i] = A_SEND + i;
		first[BAD + i] = B_SEND + i;
		first[2 * BAD + i] = A_RECV + i;
		first[3 * BAD + i] = B_RECV + i;
	}
	expect(first, 4 * BAD);
	printf("batch_post: the valid prefixes completed: %d of %d\n", 4 * BAD, 4 * BAD);

	/* One more of each: the next completions (nothing after request 18 was posted). */
	struct ibv_recv_wr r1;
	struct ibv_send_wr s1;
	struct ibv_sge s1g;

	CHECK(!ibv_post_recv(a, recv_list(&r1, &s1g, 1, -1, A_RECV + LATER), &rbad),
	      "ibv_post_recv");
	CHECK(!ibv_post_srq_recv(srq, recv_list(&r1, &s1g, 1, -1, B_RECV + LATER), &rbad),
	      "ibv_post_srq_recv");
	CHECK(!ibv_post_send(a, send_list(&s1, &s1g, 1, -1, A_SEND + LATER), &sbad),
	      "ibv_post_send");
	CHECK(!ibv_post_send(b, send_list(&s1, &s1g, 1, -1, B_SEND + LATER), &sbad),
	      "ibv_post_send");
	uint64_t then[4] = { A_SEND + LATER, B_SEND + LATER, A_RECV + LATER, B_RECV + LATER };

	expect(then, 4);
	printf("batch_post: nothing after the bad request was posted\n");

	CHECK(!ibv_destroy_qp(a), "ibv_destroy_qp(A)");
	CHECK(!ibv_destroy_qp(b), "ibv_destroy_qp(B)");
	CHECK(!ibv_destroy_srq(srq), "ibv_destroy_srq");
	CHECK(!ibv_destroy_cq(cq), "ibv_destroy_cq");
	CHECK(!ibv_dereg_mr(mr), "ibv_dereg_mr");
	CHECK(!ibv_dealloc_pd(pd), "ibv_dealloc_pd");
	CHECK(!ibv_close_device(ctx), "ibv_close_device");
	printf("batch_post: all checks passed\n");
	return 0;
}
