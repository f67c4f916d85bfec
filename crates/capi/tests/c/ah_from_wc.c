/*
 * A UD reply through ibv_create_ah_from_wc: two UD QPs on one device; A sends a datagram to
 * B, B builds the address of its reply from the receive's completion and GRH
 * (ibv_init_ah_from_wc, then ibv_create_ah_from_wc), replies, and A receives the reply.
 * Also: a completion without IBV_WC_GRH gives attributes without a global route, and a GRH
 * addressed to a GID the port does not have makes both calls fail.
 *
 * The same source is linked statically against rverbs' librverbs.a and, in the host guest,
 * dynamically against rdma-core's libibverbs: the test compares the "reply:" lines of both.
 *
 * usage: ah_from_wc [DEV [GID_INDEX]]   (default rxe0 1)
 * Prints "reply: ..." lines and "ah_from_wc: all checks passed", exit 0; or names the first
 * failed check, exit 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define CHECK(cond, ...)                                                                    \
	do {                                                                                \
		if (!(cond)) {                                                              \
			fprintf(stderr, "ah_from_wc.c:%d: check failed: %s: ", __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                       \
			fprintf(stderr, " (errno %d)\n", errno);                             \
			exit(1);                                                            \
		}                                                                           \
	} while (0)

enum { BUF = 4096, QKEY = 0x11111111 };

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static struct ibv_qp *ud_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
	struct ibv_qp_attr rtr = { .qp_state = IBV_QPS_RTR };
	struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS };

	CHECK(qp, "ibv_create_qp UD");
	CHECK(!ibv_modify_qp(qp, &init,
			     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) &&
		      !ibv_modify_qp(qp, &rtr, IBV_QP_STATE) &&
		      !ibv_modify_qp(qp, &rts, IBV_QP_STATE | IBV_QP_SQ_PSN),
	      "UD QP to RTS");
	return qp;
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, char *at, uint64_t id)
{
	struct ibv_sge s = { .addr = (uintptr_t)at, .length = 40 + 512, .lkey = mr->lkey };
	struct ibv_recv_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;

	CHECK(!ibv_post_recv(qp, &w, &bad), "ibv_post_recv");
}

static void send_to(struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn, struct ibv_mr *mr,
		    char *at, uint32_t len, uint64_t id)
{
	struct ibv_sge s = { .addr = (uintptr_t)at, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr w = {
		.wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.ud = { .ah = ah, .remote_qpn = qpn, .remote_qkey = QKEY },
	}, *bad;

	CHECK(!ibv_post_send(qp, &w, &bad), "ibv_post_send");
}

static struct ibv_wc wait_wc(struct ibv_cq *cq, uint64_t id)
{
	struct ibv_wc wc;
	double t0 = now();
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		CHECK(now() - t0 < 5, "no completion %llu within 5 s", (unsigned long long)id);
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == id,
	      "completion %llu: n %d status %d (%s) wr_id %llu", (unsigned long long)id, n,
	      wc.status, ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id);
	return wc;
}

static void print_attr(const char *what, const struct ibv_ah_attr *a)
{
	char g[INET6_ADDRSTRLEN];

	inet_ntop(AF_INET6, a->grh.dgid.raw, g, sizeof g);
	printf("reply: %s: is_global %u dgid %s sgid_index %u hop_limit %u traffic_class %u "
	       "flow_label %u dlid %u sl %u src_path_bits %u port %u\n",
	       what, a->is_global, a->is_global ? g : "-", a->grh.sgid_index,
	       a->grh.hop_limit, a->grh.traffic_class, a->grh.flow_label, a->dlid, a->sl,
	       a->src_path_bits, a->port_num);
}

int main(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : "rxe0";
	int gid_index = argc > 2 ? atoi(argv[2]) : 1;
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;

	CHECK(list, "ibv_get_device_list");
	for (int i = 0; list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	CHECK(ctx, "open %s", name);
	ibv_free_device_list(list);

	union ibv_gid gid;
	CHECK(!ibv_query_gid(ctx, 1, gid_index, &gid), "GID %d", gid_index);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *ca = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_cq *cb = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	char *buf = calloc(1, BUF);
	CHECK(pd && ca && cb && buf, "PD, CQs");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "ibv_reg_mr");
	struct ibv_qp *a = ud_qp(pd, ca), *b = ud_qp(pd, cb);

	struct ibv_ah_attr to_b = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = gid, .sgid_index = gid_index, .hop_limit = 64 },
	};
	struct ibv_ah *ah = ibv_create_ah(pd, &to_b);
	CHECK(ah, "ibv_create_ah");

	/* A -> B. */
	strcpy(buf, "ping");
	strcpy(buf + 100, "pong");
	post_recv(b, mr, buf + 1024, 1);
	post_recv(a, mr, buf + 2048, 2);
	send_to(a, ah, b->qp_num, mr, buf, 5, 10);
	wait_wc(ca, 10);
	struct ibv_wc wc = wait_wc(cb, 1);
	CHECK(wc.wc_flags & IBV_WC_GRH, "the UD receive has a GRH: flags %#x", wc.wc_flags);
	CHECK(wc.src_qp == a->qp_num, "src_qp %u, A is %u", wc.src_qp, a->qp_num);
	struct ibv_grh *grh = (struct ibv_grh *)(buf + 1024);

	/* B's reply address. */
	struct ibv_ah_attr back;
	memset(&back, 0xa5, sizeof back);
	CHECK(!ibv_init_ah_from_wc(ctx, 1, &wc, grh, &back), "ibv_init_ah_from_wc");
	print_attr("from the datagram", &back);
	CHECK(back.is_global && !memcmp(back.grh.dgid.raw, gid.raw, 16) &&
		      back.grh.sgid_index == gid_index,
	      "the reply goes to A's GID from B's (the same on one device)");

	/* B -> A through ibv_create_ah_from_wc. */
	struct ibv_ah *reply = ibv_create_ah_from_wc(pd, &wc, grh, 1);
	CHECK(reply, "ibv_create_ah_from_wc");
	send_to(b, reply, wc.src_qp, mr, buf + 100, 5, 11);
	wait_wc(cb, 11);
	struct ibv_wc wa = wait_wc(ca, 2);
	CHECK(wa.src_qp == b->qp_num && wa.byte_len == 40 + 5, "reply: src_qp %u len %u",
	      wa.src_qp, wa.byte_len);
	CHECK(!strcmp(buf + 2048 + 40, "pong"), "reply data: %s", buf + 2048 + 40);

	/* No GRH flag: attributes without a global route. (rdma-core reads the area's flow
	 * label even then, so the pointer must stay valid.) */
	struct ibv_wc plain = wc;
	plain.wc_flags &= ~IBV_WC_GRH;
	CHECK(!ibv_init_ah_from_wc(ctx, 1, &plain, grh, &back), "init without a GRH");
	print_attr("without a GRH", &back);
	CHECK(!back.is_global, "no global route without a GRH");

	/* Addressed to a GID this port does not have: both calls fail. rxe's area starts with 20
	 * zero bytes, so the IPv4 header behind them counts whatever its checksum. */
	buf[1024 + 39] ^= 0x5a;
	errno = 0;
	CHECK(ibv_init_ah_from_wc(ctx, 1, &wc, grh, &back) != 0, "a destination we do not have");
	printf("reply: unknown destination: fails\n");
	CHECK(!ibv_create_ah_from_wc(pd, &wc, grh, 1), "ibv_create_ah_from_wc, unknown destination");

	CHECK(!ibv_destroy_ah(reply) && !ibv_destroy_ah(ah) && !ibv_destroy_qp(a) &&
		      !ibv_destroy_qp(b) && !ibv_dereg_mr(mr) && !ibv_destroy_cq(ca) &&
		      !ibv_destroy_cq(cb) && !ibv_dealloc_pd(pd) && !ibv_close_device(ctx),
	      "teardown");
	printf("ah_from_wc: all checks passed\n");
	return 0;
}
