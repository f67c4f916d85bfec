/*
 * rdma_destroy_id waits for the events of the id already handed to C (librdmacm: an event's
 * id stays valid until rdma_ack_cm_event; rdma_destroy_id waits for the acks of the events
 * the kernel reported for it). A thread takes an event and, once the main thread has begun
 * destroying the event's id, reads the id through the event and acknowledges it; the
 * destroy must return only after that ack.
 *
 * 1. ADDR_RESOLVED of an id: the main thread destroys the id (event->id).
 * 2. A threaded server: a CONNECT_REQUEST taken by the server thread, the main thread
 *    destroys the listening id (event->listen_id) while the thread still holds the event;
 *    the thread rejects the request and destroys the new id before acknowledging.
 *
 * Usage: cm_destroy_waits LOCAL_IPV4. Prints "cm_destroy_waits: all checks passed".
 * Built static on librverbs.a and, for the host guest, on rdma-core's librdmacm.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c, ...)                                                                      \
	do {                                                                               \
		if (!(c)) {                                                                \
			fprintf(stderr, "cm_destroy_waits.c:%d: check failed: %s: ", __LINE__, \
				#c);                                                       \
			fprintf(stderr, __VA_ARGS__);                                      \
			fprintf(stderr, " (errno %d)\n", errno);                            \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

/* The next event of `ch`, which must be `want` (within 10 s). */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *e;

	CHECK(poll(&p, 1, 10000) == 1, "no event within 10 s, wanted %s", rdma_event_str(want));
	CHECK(!rdma_get_cm_event(ch, &e), "rdma_get_cm_event");
	CHECK(e->event == want, "event %s (status %d), wanted %s", rdma_event_str(e->event),
	      e->status, rdma_event_str(want));
	return e;
}

static int load(int *p)
{
	return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

static void store(int *p, int v)
{
	__atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}

/* Waits (bounded: a failure, not a timing assumption) until *p is set. */
static void wait_set(int *p, const char *what)
{
	for (int i = 0; !load(p); i++) {
		CHECK(i < 10000, "%s not within 10 s", what);
		usleep(1000);
	}
}

struct holder {
	struct rdma_event_channel *ch;
	enum rdma_cm_event_type want;
	int listen;     /* the event's id to check is its listen_id */
	void *context;  /* what that id's context must still be */
	int got;        /* set once the event is held */
	int destroying; /* set by the main thread just before rdma_destroy_id */
	int acked;      /* set just before rdma_ack_cm_event */
	int context_ok;
};

static void *hold(void *p)
{
	struct holder *h = p;
	struct rdma_cm_event *e = expect(h->ch, h->want);

	store(&h->got, 1);
	wait_set(&h->destroying, "the destroy");
	/* Give the destroy time to get wherever it would go without waiting. */
	usleep(200000);
	struct rdma_cm_id *id = h->listen ? e->listen_id : e->id;

	h->context_ok = id->context == h->context;
	if (h->listen) {
		CHECK(!rdma_reject(e->id, NULL, 0), "rdma_reject");
		CHECK(!rdma_destroy_id(e->id), "rdma_destroy_id(the request's id)");
	}
	store(&h->acked, 1);
	rdma_ack_cm_event(e);
	return NULL;
}

/* Starts a holder thread for `want` on `ch`; waits until it holds its event. */
static pthread_t start(struct holder *h)
{
	pthread_t t;

	CHECK(!pthread_create(&t, NULL, hold, h), "pthread_create");
	wait_set(&h->got, rdma_event_str(h->want));
	return t;
}

/* Destroys `id` while `h` holds its event: checks that the destroy returned after the ack. */
static void destroy_while_held(struct rdma_cm_id *id, struct holder *h, pthread_t t,
			       const char *what)
{
	store(&h->destroying, 1);
	CHECK(!rdma_destroy_id(id), "rdma_destroy_id");
	int after = load(&h->acked);

	printf("cm_destroy_waits: %s: rdma_destroy_id returned %s the event's ack\n", what,
	       after ? "after" : "before");
	CHECK(after, "rdma_destroy_id returning only after rdma_ack_cm_event (%s)", what);
	pthread_join(t, NULL);
	CHECK(h->context_ok, "the event's id intact until the ack (%s)", what);
}

int main(int argc, char **argv)
{
	struct sockaddr_in local = { .sin_family = AF_INET };
	struct rdma_cm_id *id, *listen_id, *client;
	struct rdma_event_channel *ch, *cch;
	int ctx1, ctx2;

	CHECK(argc > 1 && inet_pton(AF_INET, argv[1], &local.sin_addr) == 1,
	      "usage: cm_destroy_waits LOCAL_IPV4");
	ch = rdma_create_event_channel();
	cch = rdma_create_event_channel();
	CHECK(ch && cch, "rdma_create_event_channel");

	/* 1. ADDR_RESOLVED held, its id destroyed. */
	CHECK(!rdma_create_id(ch, &id, &ctx1, RDMA_PS_TCP), "rdma_create_id");
	struct holder h1 = { .ch = ch, .want = RDMA_CM_EVENT_ADDR_RESOLVED, .context = &ctx1 };

	CHECK(!rdma_resolve_addr(id, NULL, (struct sockaddr *)&local, 2000),
	      "rdma_resolve_addr");
	pthread_t t1 = start(&h1);

	destroy_while_held(id, &h1, t1, "ADDR_RESOLVED");

	/* 2. CONNECT_REQUEST held by the server thread, the listening id destroyed. */
	CHECK(!rdma_create_id(ch, &listen_id, &ctx2, RDMA_PS_TCP), "rdma_create_id");
	CHECK(!rdma_bind_addr(listen_id, (struct sockaddr *)&local), "rdma_bind_addr");
	CHECK(!rdma_listen(listen_id, 4), "rdma_listen");
	struct sockaddr_in dst = local;

	dst.sin_port = rdma_get_src_port(listen_id);
	CHECK(!rdma_create_id(cch, &client, NULL, RDMA_PS_TCP), "rdma_create_id");
	CHECK(!rdma_resolve_addr(client, NULL, (struct sockaddr *)&dst, 2000),
	      "rdma_resolve_addr");
	rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(!rdma_resolve_route(client, 2000), "rdma_resolve_route");
	rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	struct holder h2 = { .ch = ch, .want = RDMA_CM_EVENT_CONNECT_REQUEST, .listen = 1,
			     .context = &ctx2 };
	struct rdma_conn_param p = { .qp_num = 0x1234, .retry_count = 1 };
	pthread_t t2;

	CHECK(!pthread_create(&t2, NULL, hold, &h2), "pthread_create");
	CHECK(!rdma_connect(client, &p), "rdma_connect");
	wait_set(&h2.got, "CONNECT_REQUEST");
	destroy_while_held(listen_id, &h2, t2, "CONNECT_REQUEST");

	CHECK(!rdma_destroy_id(client), "rdma_destroy_id(client)");
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(ch);
	printf("cm_destroy_waits: all checks passed\n");
	return 0;
}
