/*
 * Destroy waits for event acknowledgements (libibverbs' contract, man ibv_get_cq_event and
 * ibv_get_async_event): a thread takes an event and acknowledges it after a delay while the
 * main thread destroys the event's object; ibv_destroy_cq and ibv_destroy_srq must return
 * only after the acknowledgement, so the event thread's ack still finds a live object.
 *
 * Two RC QPs on one device, connected to each other; B receives through an SRQ whose limit
 * is armed, so A's SEND gives a completion event on the (armed) CQ and an
 * IBV_EVENT_SRQ_LIMIT_REACHED async event on the SRQ. The CQ's event is acknowledged after
 * 300 ms, the SRQ's after 600 ms. Then both QPs are destroyed and the CQ and the SRQ, each
 * destroy timed against its event's ack.
 *
 * Usage: destroy_waits DEVICE [GID_INDEX]. Prints "destroy_waits: all checks passed".
 * Built static on librverbs.a and, for the host guest, on rdma-core's libibverbs.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c, what)                                                                    \
	do {                                                                              \
		if (!(c)) {                                                               \
			fprintf(stderr, "destroy_waits: %s failed (errno %d: %s)\n", what, \
				errno, strerror(errno));                                  \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

struct acker {
	struct ibv_context *ctx;
	struct ibv_comp_channel *ch;
	useconds_t delay;
	int got;          /* set (atomically) once the event is held */
	void *obj;        /* the event's object */
	double acked_at;  /* when the ack was called */
};

static void *cq_acker(void *p)
{
	struct acker *a = p;
	struct ibv_cq *cq;
	void *cq_ctx;

	CHECK(!ibv_get_cq_event(a->ch, &cq, &cq_ctx), "ibv_get_cq_event");
	a->obj = cq;
	__atomic_store_n(&a->got, 1, __ATOMIC_SEQ_CST);
	usleep(a->delay);
	a->acked_at = now();
	ibv_ack_cq_events(cq, 1);
	return NULL;
}

static void *srq_acker(void *p)
{
	struct acker *a = p;
	struct ibv_async_event ev;

	for (;;) {
		/* async_fd blocks by default (vm_errors checks it); wait with poll all the same,
		 * so that this test is about destroy only. */
		struct pollfd p = { .fd = a->ctx->async_fd, .events = POLLIN };

		CHECK(poll(&p, 1, 10000) == 1, "poll(async_fd)");
		CHECK(!ibv_get_async_event(a->ctx, &ev), "ibv_get_async_event");
		if (ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED)
			break;
		ibv_ack_async_event(&ev);
	}
	a->obj = ev.element.srq;
	__atomic_store_n(&a->got, 1, __ATOMIC_SEQ_CST);
	usleep(a->delay);
	a->acked_at = now();
	ibv_ack_async_event(&ev);
	return NULL;
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .srq = srq,
		.cap = { .max_send_wr = 4, .max_recv_wr = srq ? 0 : 4, .max_send_sge = 1,
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

/* How long destroy took and when it returned relative to the ack (0: not acked yet). */
static void report(const char *what, double t0, double t1, double acked_at)
{
	if (acked_at > 0)
		printf("destroy_waits: %s took %.3f s, returned %.3f s after the ack\n", what,
		       t1 - t0, t1 - acked_at);
	else
		printf("destroy_waits: %s took %.3f s, returned before the ack\n", what, t1 - t0);
}

static void wait_got(struct acker *a, const char *what)
{
	double end = now() + 10;

	while (!__atomic_load_n(&a->got, __ATOMIC_SEQ_CST)) {
		if (now() > end) {
			fprintf(stderr, "destroy_waits: no %s within 10 s\n", what);
			exit(1);
		}
		usleep(1000);
	}
}

int main(int argc, char **argv)
{
	const char *want = argc > 1 ? argv[1] : "rxe0";
	int gidx = argc > 2 ? atoi(argv[2]) : 1, n, i, polled = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;
	static char buf[4096];
	union ibv_gid gid;
	double t0, t1;

	CHECK(list, "ibv_get_device_list");
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), want))
			ctx = ibv_open_device(list[i]);
	CHECK(ctx, "ibv_open_device");
	ibv_free_device_list(list);
	CHECK(!ibv_query_gid(ctx, 1, gidx, &gid), "ibv_query_gid");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "ibv_reg_mr");
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch, "ibv_create_comp_channel");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	CHECK(cq, "ibv_create_cq");
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq, "ibv_create_srq");
	struct ibv_qp *a = make_qp(pd, cq, NULL), *b = make_qp(pd, cq, srq);
	CHECK(a && b, "ibv_create_qp");
	connect_qp(a, b->qp_num, &gid, gidx);
	connect_qp(b, a->qp_num, &gid, gidx);

	/* Four receives on the SRQ, limit 4: the first one consumed raises the event. */
	for (i = 0; i < 4; i++) {
		struct ibv_sge s = { (uintptr_t)buf + 1024 + 256 * i, 256, mr->lkey };
		struct ibv_recv_wr r = { .wr_id = 100 + i, .sg_list = &s, .num_sge = 1 }, *bad;

		CHECK(!ibv_post_srq_recv(srq, &r, &bad), "ibv_post_srq_recv");
	}
	struct ibv_srq_attr lim = { .srq_limit = 4 };
	CHECK(!ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT), "ibv_modify_srq(IBV_SRQ_LIMIT)");
	CHECK(!ibv_req_notify_cq(cq, 0), "ibv_req_notify_cq");

	struct acker ca = { .ctx = ctx, .ch = ch, .delay = 300000 };
	struct acker sa2 = { .ctx = ctx, .delay = 600000 };
	pthread_t tc, ts;
	CHECK(!pthread_create(&tc, NULL, cq_acker, &ca), "pthread_create");
	CHECK(!pthread_create(&ts, NULL, srq_acker, &sa2), "pthread_create");

	struct ibv_sge s = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	CHECK(!ibv_post_send(a, &w, &bad), "ibv_post_send");

	wait_got(&ca, "completion event");
	wait_got(&sa2, "IBV_EVENT_SRQ_LIMIT_REACHED");
	CHECK(ca.obj == cq, "the completion event names the CQ");
	CHECK(sa2.obj == srq, "the async event names the SRQ");
	for (double end = now() + 5; polled < 2 && now() < end;) {
		struct ibv_wc wc;
		int got = ibv_poll_cq(cq, 1, &wc);

		CHECK(got >= 0, "ibv_poll_cq");
		if (got) {
			CHECK(wc.status == IBV_WC_SUCCESS, "a successful completion");
			polled++;
		}
	}
	CHECK(polled == 2, "the SEND's two completions");

	CHECK(!ibv_destroy_qp(a), "ibv_destroy_qp(A)");
	CHECK(!ibv_destroy_qp(b), "ibv_destroy_qp(B)");

	t0 = now();
	CHECK(!ibv_destroy_cq(cq), "ibv_destroy_cq");
	t1 = now();
	report("ibv_destroy_cq", t0, t1, ca.acked_at);
	CHECK(ca.acked_at > 0 && t1 >= ca.acked_at,
	      "ibv_destroy_cq returning only after the event's ibv_ack_cq_events");

	t0 = now();
	CHECK(!ibv_destroy_srq(srq), "ibv_destroy_srq");
	t1 = now();
	report("ibv_destroy_srq", t0, t1, sa2.acked_at);
	CHECK(sa2.acked_at > 0 && t1 >= sa2.acked_at,
	      "ibv_destroy_srq returning only after the event's ibv_ack_async_event");

	pthread_join(tc, NULL);
	pthread_join(ts, NULL);
	CHECK(!ibv_destroy_comp_channel(ch), "ibv_destroy_comp_channel");
	CHECK(!ibv_dereg_mr(mr), "ibv_dereg_mr");
	CHECK(!ibv_dealloc_pd(pd), "ibv_dealloc_pd");
	CHECK(!ibv_close_device(ctx), "ibv_close_device");
	printf("destroy_waits: all checks passed\n");
	return 0;
}
