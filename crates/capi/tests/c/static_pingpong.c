/*
 * A small RC ping-pong written against <infiniband/verbs.h>, linked statically against
 * rverbs' librverbs.a (no rdma-core library involved). It speaks the exchange of rdma-core's
 * ibv_rc_pingpong (one TCP message "LID:QPN:PSN:GID" each way, then "done" from the client),
 * so either side can be ibv_rc_pingpong or `rverbs rc-pingpong`.
 *
 * usage: static_pingpong -d DEV -g GIDX -p PORT -n ITERS -s SIZE [SERVER_IPV4]
 * Prints "N iters done" and exits 0 on success.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define RECV_ID 1
#define SEND_ID 2
#define DEPTH 100

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static int exchange(const char *server, int port, const char *mine, char *theirs, int len)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	int s = socket(AF_INET, SOCK_STREAM, 0), fd, one = 1, got = 0, n;

	if (s < 0)
		die("socket");
	if (server) {
		if (inet_pton(AF_INET, server, &a.sin_addr) != 1)
			die("inet_pton");
		for (n = 0; connect(s, (struct sockaddr *)&a, sizeof(a)); n++) {
			if (n > 100)
				die("connect");
			usleep(100000);
			close(s);
			s = socket(AF_INET, SOCK_STREAM, 0);
		}
		fd = s;
		if (write(fd, mine, len) != len)
			die("write");
	} else {
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 1))
			die("bind/listen");
		fd = accept(s, NULL, NULL);
		if (fd < 0)
			die("accept");
		close(s);
	}
	while (got < len) {
		n = read(fd, theirs + got, len - got);
		if (n <= 0)
			die("read");
		got += n;
	}
	return fd;
}

int main(int argc, char **argv)
{
	const char *dev_name = "rxe0", *server = NULL;
	int gidx = 1, port = 18515, iters = 100, size = 4096, c, i, n;
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;

	while ((c = getopt(argc, argv, "d:g:p:n:s:")) != -1) {
		switch (c) {
		case 'd': dev_name = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 'n': iters = atoi(optarg); break;
		case 's': size = atoi(optarg); break;
		default: return 2;
		}
	}
	if (optind < argc)
		server = argv[optind];

	list = ibv_get_device_list(&n);
	if (!list)
		die("ibv_get_device_list");
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev_name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx)
		die("ibv_open_device");

	char *buf = calloc(1, size);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_cq *cq = ibv_create_cq(ctx, DEPTH + 1, NULL, NULL, 0);
	if (!buf || !mr || !cq)
		die("pd/mr/cq");
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = DEPTH, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		die("ibv_create_qp");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify INIT");

	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = size, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = RECV_ID, .sg_list = &sge, .num_sge = 1 }, *bad_r;
	for (i = 0; i < DEPTH; i++)
		if (ibv_post_recv(qp, &rwr, &bad_r))
			die("ibv_post_recv");
	int routs = DEPTH;

	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, gidx, &gid))
		die("ibv_query_gid");
	char mine[sizeof "0000:000000:000000:00000000000000000000000000000000"], theirs[sizeof mine];
	unsigned psn = (unsigned)getpid() & 0xffffff, rlid, rqpn, rpsn;
	n = sprintf(mine, "%04x:%06x:%06x:", 0, qp->qp_num, psn);
	for (i = 0; i < 16; i++)
		n += sprintf(mine + n, "%02x", gid.raw[i]);
	int fd = exchange(server, port, mine, theirs, sizeof mine);

	char gidhex[33];
	if (sscanf(theirs, "%x:%x:%x:%32s", &rlid, &rqpn, &rpsn, gidhex) != 4)
		die("bad peer message");
	union ibv_gid rgid;
	for (i = 0; i < 16; i++) {
		unsigned v;
		sscanf(gidhex + 2 * i, "%2x", &v);
		rgid.raw[i] = v;
	}
	struct ibv_qp_attr rtr = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = rqpn,
		.rq_psn = rpsn, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .dlid = rlid, .port_num = 1,
			     .grh = { .dgid = rgid, .sgid_index = gidx, .hop_limit = 1 } },
	};
	if (ibv_modify_qp(qp, &rtr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify RTR");
	struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				   .rnr_retry = 7, .sq_psn = psn, .max_rd_atomic = 1 };
	if (ibv_modify_qp(qp, &rts, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify RTS");
	if (server) {
		/* client: tell the server we have its address */
		if (write(fd, "done", sizeof "done") != sizeof "done")
			die("write done");
	} else {
		/* server: our QP is ready, answer with our address, wait for "done" */
		char done[sizeof "done"];
		int got = 0;
		if (write(fd, mine, sizeof mine) != sizeof mine)
			die("write");
		while (got < (int)sizeof done) {
			n = read(fd, done + got, sizeof done - got);
			if (n <= 0)
				die("read done");
			got += n;
		}
	}

	struct ibv_send_wr swr = { .wr_id = SEND_ID, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad_s;
	int pending = RECV_ID, scnt = 0, rcnt = 0;
	if (server) {
		if (ibv_post_send(qp, &swr, &bad_s))
			die("ibv_post_send");
		pending |= SEND_ID;
	}
	while (rcnt < iters || scnt < iters) {
		struct ibv_wc wc[2];
		int ne = ibv_poll_cq(cq, 2, wc);
		if (ne < 0)
			die("ibv_poll_cq");
		for (i = 0; i < ne; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "completion %d: %s\n", (int)wc[i].wr_id,
					ibv_wc_status_str(wc[i].status));
				return 1;
			}
			if (wc[i].wr_id == SEND_ID) {
				scnt++;
			} else {
				rcnt++;
				if (--routs <= 1) {
					for (; routs < DEPTH; routs++)
						if (ibv_post_recv(qp, &rwr, &bad_r))
							die("ibv_post_recv");
				}
			}
			pending &= ~(int)wc[i].wr_id;
			if (scnt < iters && !pending) {
				if (ibv_post_send(qp, &swr, &bad_s))
					die("ibv_post_send");
				pending = RECV_ID | SEND_ID;
			}
		}
	}
	printf("%d iters done\n", iters);
	close(fd);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return 0;
}
