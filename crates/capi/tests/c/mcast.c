/*
 * UD multicast through the rdma_cm: a receiver joins the group with rdma_join_multicast
 * (its QP is attached by the MULTICAST_JOIN event), a sender joins send-only with
 * rdma_join_multicast_ex and sends to the group through the AH made from the event's UD
 * parameters; the receiver gets every datagram. After rdma_leave_multicast the receiver gets
 * nothing more. Also: the event's id, private data (the join's context), QP number, Q_Key and
 * group GID; a leave of a group not joined fails with EADDRNOTAVAIL.
 *
 * The same source is linked statically against rverbs' librverbs.a and, in the host guest,
 * dynamically against rdma-core's librdmacm and libibverbs: both must pass.
 *
 * usage: mcast LOCAL_IPV4 GROUP_IPV4
 * Prints "mcast: all checks passed", exit 0; or names the first failed check, exit 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>

#define CHECK(cond, ...)                                                                    \
	do {                                                                                \
		if (!(cond)) {                                                              \
			fprintf(stderr, "mcast.c:%d: check failed: %s: ", __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                       \
			fprintf(stderr, " (errno %d)\n", errno);                             \
			exit(1);                                                            \
		}                                                                           \
	} while (0)

enum { GRH = 40, MSG = 64, SLOT = 256, NRECV = 16 };

struct node {
	struct rdma_cm_id *id;
	char *buf;
	struct ibv_mr *mr;
	struct ibv_ah *ah;
	uint32_t qpn, qkey;
};

static struct rdma_event_channel *ch;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* The next event, which must be `want` (within 5 s). */
static struct rdma_cm_event *expect(enum rdma_cm_event_type want)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *e;

	CHECK(poll(&p, 1, 5000) == 1, "no event within 5 s, wanted %s", rdma_event_str(want));
	CHECK(!rdma_get_cm_event(ch, &e), "rdma_get_cm_event");
	CHECK(e->event == want, "event %s (status %d), wanted %s", rdma_event_str(e->event),
	      e->status, rdma_event_str(want));
	return e;
}

static void post_recv(struct node *n, int slot)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(n->buf + slot * SLOT),
			       .length = GRH + MSG, .lkey = n->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = slot, .sg_list = &sge, .num_sge = 1 }, *bad;

	CHECK(!ibv_post_recv(n->id->qp, &wr, &bad), "ibv_post_recv");
}

/* A UD id on `local`'s device, resolved towards `grp` (as mckey does), with a QP and
 * NRECV receives posted. */
static void node_init(struct node *n, struct sockaddr *local, struct sockaddr *grp)
{
	struct ibv_qp_init_attr a = {
		.qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 8, .max_recv_wr = NRECV, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.sq_sig_all = 1,
	};

	memset(n, 0, sizeof(*n));
	CHECK(!rdma_create_id(ch, &n->id, n, RDMA_PS_UDP), "rdma_create_id");
	CHECK(!rdma_resolve_addr(n->id, local, grp, 2000), "rdma_resolve_addr");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(!rdma_create_qp(n->id, NULL, &a), "rdma_create_qp");
	n->buf = calloc(NRECV, SLOT);
	CHECK(n->buf, "calloc");
	n->mr = ibv_reg_mr(n->id->pd, n->buf, NRECV * SLOT, IBV_ACCESS_LOCAL_WRITE);
	CHECK(n->mr, "ibv_reg_mr");
	for (int i = 0; i < NRECV; i++)
		post_recv(n, i);
}

/* Checks the MULTICAST_JOIN event of `n`'s join of `grp` with context `ctx`; makes the AH. */
static void joined(struct node *n, const struct sockaddr_in *grp, void *ctx)
{
	struct rdma_cm_event *e = expect(RDMA_CM_EVENT_MULTICAST_JOIN);
	struct rdma_ud_param *ud = &e->param.ud;
	uint8_t want[16] = { 0 };

	want[10] = want[11] = 0xff;
	memcpy(&want[12], &grp->sin_addr, 4);
	CHECK(e->id == n->id, "the event's id");
	CHECK(e->status == 0, "status %d", e->status);
	CHECK(ud->private_data == ctx, "private_data %p, the join's context is %p",
	      ud->private_data, ctx);
	CHECK(ud->qp_num == 0xffffff, "qp_num %#x", ud->qp_num);
	CHECK(ud->qkey == 0x01234567, "qkey %#x", ud->qkey);
	CHECK(ud->ah_attr.is_global, "no GRH");
	CHECK(!memcmp(ud->ah_attr.grh.dgid.raw, want, 16), "dgid is not ::ffff:GROUP");
	n->ah = ibv_create_ah(n->id->pd, &ud->ah_attr);
	CHECK(n->ah, "ibv_create_ah from the event");
	n->qpn = ud->qp_num;
	n->qkey = ud->qkey;
	rdma_ack_cm_event(e);
}

/* Sends `count` datagrams "message TAG.I" to the group, each waited for. */
static void send_all(struct node *s, int count, int tag)
{
	for (int i = 0; i < count; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)s->buf, .length = MSG,
				       .lkey = s->mr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		struct ibv_wc wc;
		double end = now() + 5;
		int n;

		memset(s->buf, 0, MSG);
		snprintf(s->buf, MSG, "message %d.%d", tag, i);
		wr.wr.ud.ah = s->ah;
		wr.wr.ud.remote_qpn = s->qpn;
		wr.wr.ud.remote_qkey = s->qkey;
		CHECK(!ibv_post_send(s->id->qp, &wr, &bad), "ibv_post_send");
		while ((n = ibv_poll_cq(s->id->send_cq, 1, &wc)) == 0 && now() < end)
			;
		CHECK(n == 1 && wc.status == IBV_WC_SUCCESS, "send %d: n %d status %d", i, n,
		      n == 1 ? (int)wc.status : -1);
	}
}

/* The datagrams `r` receives within `secs`, each checked to be "message TAG.I" in order. */
static int received(struct node *r, double secs, int tag)
{
	double end = now() + secs;
	int got = 0;

	while (now() < end) {
		struct ibv_wc wc;
		char want[MSG] = { 0 };
		int n = ibv_poll_cq(r->id->recv_cq, 1, &wc);

		CHECK(n >= 0, "ibv_poll_cq");
		if (!n)
			continue;
		CHECK(wc.status == IBV_WC_SUCCESS, "receive status %d", wc.status);
		CHECK(wc.byte_len == GRH + MSG, "byte_len %u", wc.byte_len);
		snprintf(want, MSG, "message %d.%d", tag, got);
		CHECK(!memcmp(r->buf + wc.wr_id * SLOT + GRH, want, MSG), "payload %d: %.20s",
		      got, r->buf + wc.wr_id * SLOT + GRH);
		post_recv(r, wc.wr_id);
		got++;
	}
	return got;
}

static void node_destroy(struct node *n)
{
	CHECK(!ibv_destroy_ah(n->ah), "ibv_destroy_ah");
	rdma_destroy_qp(n->id);
	CHECK(!ibv_dereg_mr(n->mr), "ibv_dereg_mr");
	free(n->buf);
	CHECK(!rdma_destroy_id(n->id), "rdma_destroy_id");
}

int main(int argc, char **argv)
{
	struct sockaddr_in local = { .sin_family = AF_INET }, grp = { .sin_family = AF_INET };
	struct rdma_cm_join_mc_attr_ex ex = {
		.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
		.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
		.addr = (struct sockaddr *)&grp,
	};
	struct node r, s;
	int got;

	setvbuf(stdout, NULL, _IONBF, 0);
	CHECK(argc == 3, "usage: mcast LOCAL_IPV4 GROUP_IPV4");
	CHECK(inet_pton(AF_INET, argv[1], &local.sin_addr) == 1, "LOCAL_IPV4 %s", argv[1]);
	CHECK(inet_pton(AF_INET, argv[2], &grp.sin_addr) == 1, "GROUP_IPV4 %s", argv[2]);
	ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel");
	node_init(&r, (struct sockaddr *)&local, (struct sockaddr *)&grp);
	node_init(&s, (struct sockaddr *)&local, (struct sockaddr *)&grp);

	errno = 0;
	CHECK(rdma_leave_multicast(r.id, (struct sockaddr *)&grp) == -1 && errno == EADDRNOTAVAIL,
	      "a leave of a group not joined");

	CHECK(!rdma_join_multicast(r.id, (struct sockaddr *)&grp, &r), "rdma_join_multicast");
	joined(&r, &grp, &r);
	CHECK(!rdma_join_multicast_ex(s.id, &ex, &s), "rdma_join_multicast_ex send-only");
	joined(&s, &grp, &s);

	send_all(&s, 5, 1);
	got = received(&r, 2, 1);
	printf("delivered while joined: %d of 5\n", got);
	CHECK(got == 5, "the receiver got %d of 5", got);

	CHECK(!rdma_leave_multicast(r.id, (struct sockaddr *)&grp), "rdma_leave_multicast");
	send_all(&s, 3, 2);
	got = received(&r, 1, 2);
	printf("delivered after the leave: %d of 3\n", got);
	CHECK(got == 0, "the receiver got %d datagrams after it left", got);

	CHECK(!rdma_leave_multicast(s.id, (struct sockaddr *)&grp), "rdma_leave_multicast sender");
	node_destroy(&r);
	node_destroy(&s);
	rdma_destroy_event_channel(ch);
	printf("mcast: all checks passed\n");
	return 0;
}
