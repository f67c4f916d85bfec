/*
 * The extended QP send API (ibv_wr_*) and the extended CQ (ibv_cq_ex) through the inline
 * functions of <infiniband/verbs.h>, linked statically against rverbs' librverbs.a: two RC
 * QPs on one device connected to each other, SEND / SEND with immediate / inline data /
 * RDMA WRITE (with immediate) / RDMA READ / atomics built with ibv_wr_* and posted by
 * ibv_wr_complete, completions read with ibv_start_poll / ibv_next_poll / ibv_wc_read_*, the
 * same CQ through ibv_poll_cq and completion events, and the error conventions
 * (ibv_wr_complete returns the errno and posts nothing of the batch).
 *
 * usage: qp_ex [DEV [GID_INDEX]]   (default rxe0 1)
 * Prints "qp_ex: all checks passed" and exits 0, or names the first failed check and exits 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define CHECK(cond, ...)                                                               \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "qp_ex.c:%d: check failed: %s: ", __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                  \
			fprintf(stderr, " (errno %d)\n", errno);                        \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

enum { BUF = 4096, INLINE = 64, SGES = 2, DEPTH = 16 };

struct side {
	struct ibv_cq_ex *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	struct ibv_mr *mr;
	char *buf;
};

static const uint64_t OPS = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
			    IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
			    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

static struct ibv_cq_ex *make_cq(struct ibv_context *ctx, struct ibv_comp_channel *ch)
{
	struct ibv_cq_init_attr_ex a = {
		.cqe = 64, .channel = ch, .wc_flags = IBV_WC_STANDARD_FLAGS,
	};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &a);

	CHECK(cq, "ibv_create_cq_ex");
	return cq;
}

static struct ibv_qp *make_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq_ex *cq,
			      enum ibv_qp_type type, uint64_t ops)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
		.cap = { .max_send_wr = DEPTH, .max_recv_wr = DEPTH, .max_send_sge = SGES,
			 .max_recv_sge = 1, .max_inline_data = INLINE },
		.qp_type = type, .pd = pd, .send_ops_flags = ops,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
			     IBV_QP_INIT_ATTR_CREATE_FLAGS,
	};

	return ibv_create_qp_ex(ctx, &a);
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid, int gidx)
{
	struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };
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

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* What one completion said, read through the ibv_wc_read_* functions. */
struct got {
	uint64_t wr_id;
	int status, opcode;
	uint32_t byte_len, imm, qp_num, flags;
};

/* Polls exactly n completions with ibv_start_poll / ibv_next_poll (5 s at most). */
static void poll_ex(struct ibv_cq_ex *cq, int n, struct got *out)
{
	struct ibv_poll_cq_attr attr = {};
	double t0 = now();
	int i = 0, ret;

	while ((ret = ibv_start_poll(cq, &attr)) == ENOENT)
		CHECK(now() - t0 < 5, "no completion within 5 s");
	CHECK(ret == 0, "ibv_start_poll returned %d", ret);
	for (;;) {
		out[i].wr_id = cq->wr_id;
		out[i].status = cq->status;
		out[i].opcode = ibv_wc_read_opcode(cq);
		out[i].byte_len = ibv_wc_read_byte_len(cq);
		out[i].imm = ibv_wc_read_imm_data(cq);
		out[i].qp_num = ibv_wc_read_qp_num(cq);
		out[i].flags = ibv_wc_read_wc_flags(cq);
		CHECK(out[i].status == IBV_WC_SUCCESS, "wr_id %llu: status %s",
		      (unsigned long long)out[i].wr_id, ibv_wc_status_str(out[i].status));
		if (++i == n)
			break;
		while ((ret = ibv_next_poll(cq)) == ENOENT)
			CHECK(now() - t0 < 5, "%d of %d completions within 5 s", i, n);
		CHECK(ret == 0, "ibv_next_poll returned %d", ret);
	}
	ibv_end_poll(cq);
}

/* The CQ stays empty for 200 ms (nothing of a failed batch went out). */
static void stays_empty(struct ibv_cq_ex *cq, const char *what)
{
	struct ibv_poll_cq_attr attr = {};
	double t0 = now();

	while (now() - t0 < 0.2) {
		int ret = ibv_start_poll(cq, &attr);

		if (ret == 0)
			ibv_end_poll(cq);
		CHECK(ret == ENOENT, "%s: a completion (wr_id %llu) after a failed batch", what,
		      (unsigned long long)cq->wr_id);
	}
}

static void post_recvs(struct side *s, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = { (uintptr_t)s->buf + 512 * i, 512, s->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 }, *bad;

		CHECK(!ibv_post_recv(s->qp, &wr, &bad), "ibv_post_recv");
	}
}

int main(int argc, char **argv)
{
	const char *want = argc > 1 ? argv[1] : "rxe0";
	int gidx = argc > 2 ? atoi(argv[2]) : 1, n, i;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;
	struct ibv_comp_channel *ch;
	struct ibv_pd *pd;
	struct side a = {}, b = {};
	union ibv_gid gid;
	struct got g[8];

	CHECK(list, "ibv_get_device_list");
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), want))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	CHECK(ctx, "device %s", want);
	CHECK(!ibv_query_gid(ctx, 1, gidx, &gid), "ibv_query_gid");
	pd = ibv_alloc_pd(ctx);
	ch = ibv_create_comp_channel(ctx);
	CHECK(pd && ch, "PD, channel");

	for (struct side *s = &a; s; s = s == &a ? &b : NULL) {
		s->buf = calloc(1, BUF);
		s->mr = ibv_reg_mr(pd, s->buf, BUF, IBV_ACCESS_LOCAL_WRITE |
			IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
		CHECK(s->mr, "ibv_reg_mr");
		s->cq = make_cq(ctx, s == &a ? ch : NULL);
		s->qp = make_qp(ctx, pd, s->cq, IBV_QPT_RC, OPS);
		CHECK(s->qp, "ibv_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS");
		s->qpx = ibv_qp_to_qp_ex(s->qp);
		CHECK(s->qpx && &s->qpx->qp_base == s->qp, "ibv_qp_to_qp_ex");
		CHECK(s->qpx->wr_send && s->qpx->wr_atomic_fetch_add && !s->qpx->wr_bind_mw &&
		      !s->qpx->wr_send_inv, "the builders asked for, and only those");
	}
	connect_qp(a.qp, b.qp->qp_num, &gid, gidx);
	connect_qp(b.qp, a.qp->qp_num, &gid, gidx);

	/* 1. One batch: SEND, SEND with immediate and inline data, RDMA WRITE with immediate
	 * from a two-element gather list, SEND of an inline list, SEND of an SGE with
	 * IBV_SEND_INLINE (its bytes copied at ibv_wr_complete). */
	post_recvs(&b, 5);
	strcpy(a.buf, "hello");
	strcpy(a.buf + 100, "wr");
	strcpy(a.buf + 200, "ite");
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(a.qpx);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf, 6);
	a.qpx->wr_id = 2;
	ibv_wr_send_imm(a.qpx, htonl(0x1234));
	{
		char tmp[16];

		strcpy(tmp, "inline!");
		ibv_wr_set_inline_data(a.qpx, tmp, 8);
		memset(tmp, 'x', sizeof(tmp)); /* copied at the call, as libibverbs' providers do */
	}
	a.qpx->wr_id = 3;
	ibv_wr_rdma_write_imm(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 3500, htonl(7));
	{
		struct ibv_sge l[2] = { { (uintptr_t)a.buf + 100, 2, a.mr->lkey },
					{ (uintptr_t)a.buf + 200, 4, a.mr->lkey } };

		ibv_wr_set_sge_list(a.qpx, 2, l);
		memset(l, 0, sizeof(l)); /* copied at the call */
	}
	a.qpx->wr_id = 4;
	ibv_wr_send(a.qpx);
	{
		char x[] = "in", y[] = "line";
		struct ibv_data_buf l[2] = { { x, 2 }, { y, 5 } };

		ibv_wr_set_inline_data_list(a.qpx, 2, l);
		memset(y, 'x', 4);
	}
	a.qpx->wr_id = 5;
	a.qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send(a.qpx);
	strcpy(a.buf + 600, "copied");
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf + 600, 7);
	CHECK(ibv_wr_complete(a.qpx) == 0, "ibv_wr_complete");
	strcpy(a.buf + 600, "CHANGED");
	poll_ex(a.cq, 5, g);
	for (i = 0; i < 5; i++)
		CHECK(g[i].wr_id == (uint64_t)i + 1, "send completion %d has wr_id %llu", i,
		      (unsigned long long)g[i].wr_id);
	CHECK(g[0].opcode == IBV_WC_SEND && g[1].opcode == IBV_WC_SEND &&
	      g[2].opcode == IBV_WC_RDMA_WRITE && g[3].opcode == IBV_WC_SEND &&
	      g[4].opcode == IBV_WC_SEND, "send opcodes %d %d %d %d %d", g[0].opcode,
	      g[1].opcode, g[2].opcode, g[3].opcode, g[4].opcode);
	CHECK(g[0].qp_num == a.qp->qp_num, "send qp_num");
	poll_ex(b.cq, 5, g);
	CHECK(g[0].wr_id == 100 && g[0].opcode == IBV_WC_RECV && g[0].byte_len == 6 &&
	      !(g[0].flags & IBV_WC_WITH_IMM), "receive 1: wr_id %llu opcode %d len %u",
	      (unsigned long long)g[0].wr_id, g[0].opcode, g[0].byte_len);
	CHECK(g[1].wr_id == 101 && g[1].opcode == IBV_WC_RECV && g[1].byte_len == 8 &&
	      (g[1].flags & IBV_WC_WITH_IMM) && g[1].imm == htonl(0x1234),
	      "receive 2: len %u flags %#x imm %#x", g[1].byte_len, g[1].flags, g[1].imm);
	CHECK(g[2].wr_id == 102 && g[2].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
	      g[2].byte_len == 6 && g[2].imm == htonl(7) && g[2].qp_num == b.qp->qp_num,
	      "receive 3: opcode %d len %u imm %#x", g[2].opcode, g[2].byte_len, g[2].imm);
	CHECK(g[3].wr_id == 103 && g[3].byte_len == 7 && g[4].wr_id == 104 &&
	      g[4].byte_len == 7, "receives 4, 5: len %u, %u", g[3].byte_len, g[4].byte_len);
	CHECK(!strcmp(b.buf, "hello"), "SEND data: %s", b.buf);
	CHECK(!strcmp(b.buf + 512, "inline!"), "inline SEND data: %s", b.buf + 512);
	CHECK(!memcmp(b.buf + 3500, "write", 6), "RDMA WRITE data: %.6s", b.buf + 3500);
	CHECK(!strcmp(b.buf + 1536, "inline"), "inline list data: %s", b.buf + 1536);
	CHECK(!strcmp(b.buf + 2048, "copied"), "IBV_SEND_INLINE SGE data: %s", b.buf + 2048);

	/* 2. RDMA WRITE (unsignaled) then a signaled RDMA READ of what it wrote. */
	strcpy(a.buf + 300, "written by A");
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 4;
	a.qpx->wr_flags = 0;
	ibv_wr_rdma_write(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 1024);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf + 300, 13);
	a.qpx->wr_id = 5;
	a.qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
	ibv_wr_rdma_read(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 1024);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf + 400, 13);
	CHECK(ibv_wr_complete(a.qpx) == 0, "ibv_wr_complete");
	poll_ex(a.cq, 1, g);
	CHECK(g[0].wr_id == 5 && g[0].opcode == IBV_WC_RDMA_READ && g[0].byte_len == 13,
	      "read completion: wr_id %llu opcode %d len %u", (unsigned long long)g[0].wr_id,
	      g[0].opcode, g[0].byte_len);
	CHECK(!strcmp(b.buf + 1024, "written by A") && !strcmp(a.buf + 400, "written by A"),
	      "RDMA WRITE/READ data: %s / %s", b.buf + 1024, a.buf + 400);

	/* 3. Atomics on B's 8 bytes at 3072 (5): compare-and-swap 5 -> 9, fetch-and-add 3. */
	*(uint64_t *)(b.buf + 3072) = 5;
	ibv_wr_start(a.qpx);
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	a.qpx->wr_id = 6;
	ibv_wr_atomic_cmp_swp(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 3072, 5, 9);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf + 3072, 8);
	a.qpx->wr_id = 7;
	ibv_wr_atomic_fetch_add(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 3072, 3);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf + 3080, 8);
	CHECK(ibv_wr_complete(a.qpx) == 0, "ibv_wr_complete");
	poll_ex(a.cq, 2, g);
	CHECK(g[0].opcode == IBV_WC_COMP_SWAP && g[1].opcode == IBV_WC_FETCH_ADD,
	      "atomic opcodes %d %d", g[0].opcode, g[1].opcode);
	CHECK(*(uint64_t *)(a.buf + 3072) == 5 && *(uint64_t *)(a.buf + 3080) == 9 &&
	      *(uint64_t *)(b.buf + 3072) == 12, "atomics: old %llu, %llu, now %llu",
	      (unsigned long long)*(uint64_t *)(a.buf + 3072),
	      (unsigned long long)*(uint64_t *)(a.buf + 3080),
	      (unsigned long long)*(uint64_t *)(b.buf + 3072));

	/* 4. Errors: wr_complete returns the errno and nothing of the batch is posted. */
	post_recvs(&b, 1);
	{
		struct ibv_sge l[SGES + 8];
		char big[1024] = {};

		for (i = 0; i < SGES + 8; i++)
			l[i] = (struct ibv_sge){ (uintptr_t)a.buf, 1, a.mr->lkey };
		ibv_wr_start(a.qpx);
		a.qpx->wr_id = 50;
		ibv_wr_send(a.qpx);
		ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf, 6);
		a.qpx->wr_id = 51;
		ibv_wr_send(a.qpx);
		ibv_wr_set_sge_list(a.qpx, SGES + 8, l);
		CHECK(ibv_wr_complete(a.qpx) == ENOSPC, "more SGEs than max_send_sge");

		ibv_wr_start(a.qpx);
		ibv_wr_send(a.qpx);
		ibv_wr_set_inline_data(a.qpx, big, sizeof(big));
		CHECK(ibv_wr_complete(a.qpx) == ENOSPC, "more inline data than max_inline_data");

		ibv_wr_start(a.qpx);
		ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf, 6);
		CHECK(ibv_wr_complete(a.qpx) == EINVAL, "a setter with no request before it");

		ibv_wr_start(a.qpx);
		ibv_wr_send(a.qpx);
		ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf, 6);
		ibv_wr_abort(a.qpx);
		CHECK(ibv_wr_complete(a.qpx) == EINVAL, "ibv_wr_complete after ibv_wr_abort");
	}
	stays_empty(a.cq, "sender");
	stays_empty(b.cq, "receiver");

	/* 5. The same CQ through ibv_poll_cq and completion events; a legacy post on the QP. */
	{
		struct ibv_sge sge = { (uintptr_t)a.buf, 6, a.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 60, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		struct ibv_wc wc;

		CHECK(!ibv_req_notify_cq(ibv_cq_ex_to_cq(a.cq), 0), "ibv_req_notify_cq");
		CHECK(!ibv_post_send(a.qp, &wr, &bad), "ibv_post_send on an extended QP");
		CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx), "ibv_get_cq_event");
		CHECK(ev_cq == ibv_cq_ex_to_cq(a.cq), "the event names the extended CQ");
		ibv_ack_cq_events(ev_cq, 1);
		CHECK(ibv_poll_cq(ibv_cq_ex_to_cq(a.cq), 1, &wc) == 1 && wc.wr_id == 60 &&
		      wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND,
		      "ibv_poll_cq on the extended CQ");
		poll_ex(b.cq, 1, g);
		CHECK(g[0].wr_id == 100 && g[0].byte_len == 6, "receive of the legacy post");
	}

	/* 6. UD: SEND with immediate addressed by ibv_wr_set_ud_addr; without an address
	 * ibv_wr_complete is EINVAL and nothing goes out. */
	{
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
			.grh = { .dgid = gid, .sgid_index = gidx, .hop_limit = 1 } };
		struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT, .port_num = 1,
					    .qkey = 0x11111111 };
		struct ibv_qp_attr rtr = { .qp_state = IBV_QPS_RTR };
		struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS };
		struct ibv_qp *u[2];
		struct ibv_qp_ex *ux;
		struct ibv_ah *ah = ibv_create_ah(pd, &aa);
		struct ibv_sge sge = { (uintptr_t)b.buf, 40 + 64, b.mr->lkey };
		struct ibv_recv_wr rwr = { .wr_id = 200, .sg_list = &sge, .num_sge = 1 }, *rbad;

		CHECK(ah, "ibv_create_ah");
		for (i = 0; i < 2; i++) {
			u[i] = make_qp(ctx, pd, i ? b.cq : a.cq, IBV_QPT_UD,
				       IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
			CHECK(u[i], "UD QP");
			CHECK(!ibv_modify_qp(u[i], &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
							IBV_QP_PORT | IBV_QP_QKEY) &&
			      !ibv_modify_qp(u[i], &rtr, IBV_QP_STATE) &&
			      !ibv_modify_qp(u[i], &rts, IBV_QP_STATE | IBV_QP_SQ_PSN), "UD to RTS");
		}
		ux = ibv_qp_to_qp_ex(u[0]);
		CHECK(!ibv_post_recv(u[1], &rwr, &rbad), "UD receive");
		ibv_wr_start(ux);
		ux->wr_id = 300;
		ux->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(ux);
		ibv_wr_set_sge(ux, a.mr->lkey, (uintptr_t)a.buf, 6);
		CHECK(ibv_wr_complete(ux) == EINVAL, "a UD request without ibv_wr_set_ud_addr");
		stays_empty(b.cq, "UD receiver");
		ibv_wr_start(ux);
		ux->wr_id = 301;
		ibv_wr_send_imm(ux, htonl(42));
		ibv_wr_set_ud_addr(ux, ah, u[1]->qp_num, 0x11111111);
		ibv_wr_set_sge(ux, a.mr->lkey, (uintptr_t)a.buf, 6);
		CHECK(ibv_wr_complete(ux) == 0, "UD ibv_wr_complete");
		poll_ex(a.cq, 1, g);
		CHECK(g[0].wr_id == 301 && g[0].opcode == IBV_WC_SEND, "UD send completion");
		{
			struct ibv_poll_cq_attr attr = {};
			double t0 = now();
			int ret;

			while ((ret = ibv_start_poll(b.cq, &attr)) == ENOENT)
				CHECK(now() - t0 < 5, "no UD receive within 5 s");
			CHECK(ret == 0 && b.cq->wr_id == 200 && b.cq->status == IBV_WC_SUCCESS,
			      "UD receive: %d", ret);
			CHECK(ibv_wc_read_byte_len(b.cq) == 40 + 6 &&
			      ibv_wc_read_src_qp(b.cq) == u[0]->qp_num &&
			      (ibv_wc_read_wc_flags(b.cq) & IBV_WC_GRH) &&
			      ibv_wc_read_imm_data(b.cq) == htonl(42) &&
			      ibv_wc_read_qp_num(b.cq) == u[1]->qp_num,
			      "UD receive: len %u src_qp %u flags %#x", ibv_wc_read_byte_len(b.cq),
			      ibv_wc_read_src_qp(b.cq), ibv_wc_read_wc_flags(b.cq));
			ibv_end_poll(b.cq);
		}
		CHECK(!strcmp(b.buf + 40, "hello"), "UD data: %s", b.buf + 40);
		CHECK(!ibv_destroy_qp(u[0]) && !ibv_destroy_qp(u[1]) && !ibv_destroy_ah(ah),
		      "UD teardown");
	}

	/* 7. Creation: what is refused, what is offered. */
	{
		struct ibv_cq_init_attr_ex ca = { .cqe = 4,
			.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP };
		struct ibv_cq_ex *cq;
		struct ibv_qp *qp;

		errno = 0;
		CHECK(!ibv_create_cq_ex(ctx, &ca) && errno == EOPNOTSUPP, "timestamps refused");
		ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
		cq = ibv_create_cq_ex(ctx, &ca);
		CHECK(cq && cq->read_byte_len && !cq->read_imm_data && !cq->read_completion_ts,
		      "only the read_* asked for");
		errno = 0;
		CHECK(!make_qp(ctx, pd, cq, IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE) &&
		      errno == EOPNOTSUPP, "RDMA WRITE on UD refused");
		errno = 0;
		CHECK(!make_qp(ctx, pd, cq, IBV_QPT_RC, IBV_QP_EX_WITH_TSO) && errno == EOPNOTSUPP,
		      "TSO refused");
		qp = make_qp(ctx, pd, cq, IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
		CHECK(qp && ibv_qp_to_qp_ex(qp)->wr_set_ud_addr, "UD with SEND");
		CHECK(!ibv_destroy_qp(qp), "destroy UD QP");
		{
			struct ibv_qp_init_attr ia = { .send_cq = ibv_cq_ex_to_cq(cq),
				.recv_cq = ibv_cq_ex_to_cq(cq), .qp_type = IBV_QPT_RC,
				.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
					 .max_recv_sge = 1 } };

			qp = ibv_create_qp(pd, &ia);
			CHECK(qp && !ibv_qp_to_qp_ex(qp), "no ibv_qp_ex for an ibv_create_qp QP");
			CHECK(!ibv_destroy_qp(qp), "destroy");
		}
		CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), "destroy CQ");
	}

	CHECK(!ibv_destroy_qp(a.qp) && !ibv_destroy_qp(b.qp), "destroy QPs");
	CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(a.cq)) && !ibv_destroy_cq(ibv_cq_ex_to_cq(b.cq)),
	      "destroy CQs");
	CHECK(!ibv_dereg_mr(a.mr) && !ibv_dereg_mr(b.mr), "dereg");
	CHECK(!ibv_destroy_comp_channel(ch) && !ibv_dealloc_pd(pd), "channel, PD");
	CHECK(!ibv_close_device(ctx), "close");
	printf("qp_ex: all checks passed\n");
	return 0;
}
