/*
 * The verbs of rdma-core 59 to 64 on our library, as their callers see them: the structures
 * and prototypes are declared here as rdma-core 64's verbs.h declares them (the installed
 * headers are rdma-core 44's, which have none of them).
 *
 * - ibv_query_port_speed (IBVERBS_1.16): prints "port_speed: rc N" for port 1 (the harness
 *   judges it per kernel); EINVAL for port 0, a port the device lacks, a NULL output.
 * - ibv_reg_mr_ex (IBVERBS_1.15): an address with and without IOVA registers (keys, addr,
 *   length, pd, context filled); every refusal libibverbs gives on rxe and siw, each errno.
 * - ibv_alloc_buf / ibv_reg_buf_mr / ibv_free_buf (IBVERBS_1.17): a page-aligned buffer, a
 *   region over all of it and over a part, ranges outside it and another PD refused.
 * - ibv_alloc_dmah / ibv_dealloc_dmah (IBVERBS_1.15): refused, EOPNOTSUPP.
 *
 * - rdma_write_cm_event, rdma_resolve_addrinfo, rdma_query_addrinfo (RDMACM_1.4): a USER
 *   event with its status and argument, an address resolved through ADDRINFO_RESOLVED on an
 *   asynchronous and a synchronous id; every refusal. Prints "cm: WRITE_CM_EVENT" where the
 *   kernel has the command, else "cm: no WRITE_CM_EVENT (EOPNOTSUPP)".
 *
 * Nothing stays registered: the PDs deallocate. Usage: new_verbs DEVICE ADDRESS (an IPv4
 * address of the device). Prints
 * "new_verbs: all checks passed". Built static on librverbs.a.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* rdma-core 64's verbs.h */
int ibv_query_port_speed(struct ibv_context *context, uint32_t port_num, uint64_t *port_speed);

enum {
	MASK_IOVA = 1 << 0,
	MASK_ADDR = 1 << 1,
	MASK_FD = 1 << 2,
	MASK_FD_OFFSET = 1 << 3,
	MASK_DMAH = 1 << 4,
	MASK_BUF = 1 << 5,
};

struct ibv_dmah;
struct ibv_buf;

struct ibv_mr_init_attr {
	size_t length;
	int access;
	uint64_t comp_mask;
	uint64_t iova;
	void *addr;
	int fd;
	uint64_t fd_offset;
	struct ibv_dmah *dmah;
	struct ibv_buf *buf;
};

struct ibv_dmah_init_attr {
	uint32_t comp_mask;
	uint32_t cpu_id;
	uint8_t ph;
	uint8_t tph_mem_type;
};

struct ibv_mr *ibv_reg_mr_ex(struct ibv_pd *pd, struct ibv_mr_init_attr *mr_init_attr);
void *ibv_alloc_buf(struct ibv_pd *pd, size_t size, struct ibv_buf **buf);
void ibv_free_buf(struct ibv_buf *buf);
struct ibv_mr *ibv_reg_buf_mr(struct ibv_pd *pd, struct ibv_buf *buf, void *addr, size_t length,
			      int access);
struct ibv_dmah *ibv_alloc_dmah(struct ibv_context *context, struct ibv_dmah_init_attr *attr);
int ibv_dealloc_dmah(struct ibv_dmah *dmah);

/* rdma-core 60's rdma_cma.h: RDMACM_1.4 and the events it adds */
int rdma_write_cm_event(struct rdma_cm_id *id, enum rdma_cm_event_type event, int status,
			uint64_t arg);
int rdma_resolve_addrinfo(struct rdma_cm_id *id, const char *node, const char *service,
			  const struct rdma_addrinfo *hints);
int rdma_query_addrinfo(struct rdma_cm_id *id, struct rdma_addrinfo **info);
enum {
	EV_ADDRINFO_RESOLVED = 16,
	EV_USER = 18,
	HINT_SA = 0x10,
	HINT_DNS = 0x20,
};
/* the union's new member: `uint64_t arg`, at the start of `param` */
static uint64_t event_arg(struct rdma_cm_event *e)
{
	uint64_t a;
	memcpy(&a, &e->param, sizeof(a));
	return a;
}

#define CHECK(c, what)                                                                 \
	do {                                                                           \
		if (!(c)) {                                                            \
			fprintf(stderr, "new_verbs: %s failed (errno %d: %s)\n", what, \
				errno, strerror(errno));                               \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

static void want_errno(const void *got, int want, const char *what)
{
	if (got || errno != want) {
		fprintf(stderr, "new_verbs: %s: got %p errno %d (%s), want NULL errno %d (%s)\n",
			what, got, errno, strerror(errno), want, strerror(want));
		exit(1);
	}
}

static struct ibv_mr *reg_ex(struct ibv_pd *pd, uint64_t mask, void *addr, size_t len,
			     uint64_t iova, int fd)
{
	struct ibv_mr_init_attr a = {
		.length = len,
		.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
		.comp_mask = mask,
		.iova = iova,
		.addr = addr,
		.fd = fd,
		.fd_offset = 0,
		.dmah = (struct ibv_dmah *)(uintptr_t)0x1000,
		.buf = NULL,
	};
	errno = 0;
	return ibv_reg_mr_ex(pd, &a);
}

static void good_mr(struct ibv_mr *mr, struct ibv_pd *pd, void *addr, size_t len,
		    const char *what)
{
	if (!mr || mr->pd != pd || mr->context != pd->context || mr->addr != addr ||
	    mr->length != len || mr->lkey == 0) {
		fprintf(stderr, "new_verbs: %s: mr %p (errno %d: %s)\n", what, (void *)mr, errno,
			strerror(errno));
		if (mr)
			fprintf(stderr, "  pd %p/%p addr %p/%p length %zu/%zu lkey %#x\n",
				(void *)mr->pd, (void *)pd, mr->addr, addr, mr->length, len,
				mr->lkey);
		exit(1);
	}
	CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
}

static void port_speed(struct ibv_context *ctx)
{
	uint64_t speed = 12345;
	int rc = ibv_query_port_speed(ctx, 1, &speed);
	if (rc == 0)
		printf("port_speed: rc 0, %llu x 100 Mb/s\n", (unsigned long long)speed);
	else
		printf("port_speed: rc %d (%s)\n", rc, strerror(rc));
	CHECK(rc == 0 || speed == 12345, "ibv_query_port_speed left the output alone on failure");
	CHECK(ibv_query_port_speed(ctx, 0, &speed) == EINVAL, "port 0 is EINVAL");
	CHECK(ibv_query_port_speed(ctx, 77, &speed) == EINVAL, "port 77 is EINVAL");
	CHECK(ibv_query_port_speed(ctx, 1, NULL) == EINVAL, "a NULL output is EINVAL");
	CHECK(ibv_query_port_speed(NULL, 1, &speed) == EINVAL, "a NULL context is EINVAL");
}

static void reg_mr_ex(struct ibv_pd *pd)
{
	size_t len = 3 * 4096;
	char *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(mem != MAP_FAILED, "mmap");
	memset(mem, 7, len);
	good_mr(reg_ex(pd, MASK_ADDR, mem, len, 0, -1), pd, mem, len, "ADDR");
	good_mr(reg_ex(pd, MASK_ADDR | MASK_IOVA, mem + 4096, 4096, (uintptr_t)(mem + 4096), -1),
		pd, mem + 4096, 4096, "ADDR and IOVA equal to it");
	/* Another IOVA (keeping the address's offset in its page): registered on rxe, whose
	 * kernel driver addresses the region there (ibv_mr.addr stays the address, as
	 * libibverbs'); refused on siw, whose driver ignores the IOVA. */
	if (!strncmp(ibv_get_device_name(pd->context->device), "siw", 3))
		want_errno(reg_ex(pd, MASK_ADDR | MASK_IOVA, mem, len, 0x7000000000ull, -1),
			   EOPNOTSUPP, "an IOVA other than the address on siw");
	else
		good_mr(reg_ex(pd, MASK_ADDR | MASK_IOVA, mem, len, 0x7000000000ull, -1), pd, mem,
			len, "ADDR and another IOVA");
	want_errno(reg_ex(pd, MASK_ADDR | MASK_IOVA, mem, len, 0x7000000008ull, -1), EINVAL,
		   "an IOVA at another offset in its page than the address");
	want_errno(reg_ex(pd, 0, mem, len, 0, -1), EINVAL, "neither ADDR nor FD");
	want_errno(reg_ex(pd, MASK_ADDR | MASK_FD_OFFSET, mem, len, 0, -1), EINVAL,
		   "FD_OFFSET without FD");
	want_errno(reg_ex(pd, MASK_ADDR | MASK_FD | MASK_FD_OFFSET | MASK_IOVA, mem, len, 0, 0),
		   EINVAL, "FD with ADDR");
	want_errno(reg_ex(pd, MASK_FD | MASK_FD_OFFSET, NULL, len, 0, 0), EINVAL,
		   "FD without IOVA");
	want_errno(reg_ex(pd, MASK_FD | MASK_IOVA, NULL, len, 0, 0), EINVAL,
		   "FD without FD_OFFSET");
	int memfd = memfd_create("new_verbs", MFD_CLOEXEC);
	CHECK(memfd >= 0 && ftruncate(memfd, len) == 0, "memfd");
	want_errno(reg_ex(pd, MASK_FD | MASK_FD_OFFSET | MASK_IOVA, NULL, len, 0, memfd), EINVAL,
		   "FD naming a memfd (not a dma-buf)");
	close(memfd);
	want_errno(reg_ex(pd, MASK_ADDR | MASK_DMAH, mem, len, 0, -1), EOPNOTSUPP,
		   "a DMA handle");
	want_errno(reg_ex(pd, MASK_ADDR | (1 << 6), mem, len, 0, -1), EOPNOTSUPP,
		   "an unknown comp_mask bit");
	want_errno(reg_ex(pd, MASK_ADDR, mem, 0, 0, -1), EINVAL, "length 0");
	errno = 0;
	want_errno(ibv_reg_mr_ex(pd, NULL), EINVAL, "NULL attributes");
	want_errno(reg_ex(NULL, MASK_ADDR, mem, len, 0, -1), EINVAL, "a NULL PD");
	/* BUF without a buffer */
	want_errno(reg_ex(pd, MASK_ADDR | MASK_BUF, mem, len, 0, -1), EINVAL, "BUF with NULL");
	munmap(mem, len);
	printf("reg_mr_ex: checked\n");
}

static void bufs(struct ibv_context *ctx, struct ibv_pd *pd)
{
	size_t size = 3 * 4096 + 100;
	struct ibv_buf *b = NULL;
	char *p = ibv_alloc_buf(pd, size, &b);
	CHECK(p && b, "ibv_alloc_buf");
	CHECK(((uintptr_t)p & 4095) == 0, "ibv_alloc_buf's memory is page-aligned");
	memset(p, 1, size);
	int acc = IBV_ACCESS_LOCAL_WRITE;
	good_mr(ibv_reg_buf_mr(pd, b, p, size, acc), pd, p, size, "the whole buffer");
	good_mr(ibv_reg_buf_mr(pd, b, p + 4096, 4096, acc), pd, p + 4096, 4096, "a page of it");
	good_mr(ibv_reg_buf_mr(pd, b, p + size - 1, 1, acc), pd, p + size - 1, 1, "its last byte");
	errno = 0;
	want_errno(ibv_reg_buf_mr(pd, b, p + size - 10, 20, acc), EINVAL, "past the buffer's end");
	errno = 0;
	want_errno(ibv_reg_buf_mr(pd, b, p - 4096, 4096, acc), EINVAL, "before the buffer");
	errno = 0;
	want_errno(ibv_reg_buf_mr(pd, b, p, (size_t)-1, acc), EINVAL, "an overflowing length");
	errno = 0;
	want_errno(ibv_reg_buf_mr(pd, NULL, p, 4096, acc), EINVAL, "a NULL buffer");
	struct ibv_pd *other = ibv_alloc_pd(ctx);
	CHECK(other, "ibv_alloc_pd");
	errno = 0;
	want_errno(ibv_reg_buf_mr(other, b, p, 4096, acc), EINVAL, "a buffer of another PD");
	/* BUF and FD together */
	struct ibv_mr_init_attr a = {
		.length = 4096,
		.access = acc,
		.comp_mask = MASK_BUF | MASK_ADDR | MASK_FD,
		.addr = p,
		.buf = b,
	};
	errno = 0;
	want_errno(ibv_reg_mr_ex(pd, &a), EINVAL, "BUF with FD");
	a.comp_mask = MASK_BUF;
	errno = 0;
	want_errno(ibv_reg_mr_ex(pd, &a), EINVAL, "BUF without ADDR");
	CHECK(ibv_dealloc_pd(other) == 0, "ibv_dealloc_pd (other)");
	ibv_free_buf(b);
	errno = 0;
	want_errno(ibv_alloc_buf(pd, 4096, NULL), EINVAL, "ibv_alloc_buf without a handle slot");
	errno = 0;
	want_errno(ibv_alloc_buf(NULL, 4096, &b), EINVAL, "ibv_alloc_buf on a NULL PD");
	printf("bufs: checked\n");
}

static void dmah(struct ibv_context *ctx)
{
	struct ibv_dmah_init_attr attr = { .comp_mask = 1, .cpu_id = 0 };
	errno = 0;
	want_errno(ibv_alloc_dmah(ctx, &attr), EOPNOTSUPP, "ibv_alloc_dmah");
	errno = 0;
	want_errno(ibv_alloc_dmah(NULL, &attr), EINVAL, "ibv_alloc_dmah on a NULL context");
	CHECK(ibv_dealloc_dmah(NULL) == EINVAL, "ibv_dealloc_dmah(NULL) is EINVAL");
	printf("dmah: refused\n");
}

static void want_fail(int rc, int want, const char *what)
{
	if (rc != -1 || errno != want) {
		fprintf(stderr, "new_verbs: %s: got %d errno %d (%s), want -1 errno %d (%s)\n",
			what, rc, errno, strerror(errno), want, strerror(want));
		exit(1);
	}
}

/* The resolved list names `addr` as its destination. */
static void check_answer(struct rdma_addrinfo *ai, const char *addr, const char *what)
{
	CHECK(ai && ai->ai_dst_addr && ai->ai_dst_addr->sa_family == AF_INET, what);
	char got[64];
	inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_dst_addr)->sin_addr, got, sizeof(got));
	if (strcmp(got, addr)) {
		fprintf(stderr, "new_verbs: %s: resolved %s, want %s\n", what, got, addr);
		exit(1);
	}
	rdma_freeaddrinfo(ai);
}

static void cm(const char *addr)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel");
	struct rdma_cm_id *id = NULL;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	struct rdma_cm_event *ev = NULL;
	struct rdma_addrinfo *ai = NULL;

	errno = 0;
	want_fail(rdma_write_cm_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, 1), EINVAL,
		  "rdma_write_cm_event of another event than USER");
	errno = 0;
	want_fail(rdma_write_cm_event(NULL, EV_USER, 0, 1), EINVAL, "rdma_write_cm_event(NULL)");
	errno = 0;
	want_fail(rdma_query_addrinfo(id, &ai), ENOENT, "rdma_query_addrinfo before resolving");
	errno = 0;
	want_fail(rdma_query_addrinfo(id, NULL), EINVAL, "rdma_query_addrinfo(NULL info)");
	struct rdma_addrinfo hints = { .ai_flags = HINT_SA };
	errno = 0;
	want_fail(rdma_resolve_addrinfo(id, NULL, "1", &hints), EOPNOTSUPP, "RAI_SA");
	hints.ai_flags = HINT_SA | HINT_DNS;
	errno = 0;
	want_fail(rdma_resolve_addrinfo(id, NULL, "1", &hints), EOPNOTSUPP, "RAI_SA | RAI_DNS");
	errno = 0;
	want_fail(rdma_resolve_addrinfo(NULL, addr, NULL, NULL), EINVAL,
		  "rdma_resolve_addrinfo(NULL id)");

	errno = 0;
	int rc = rdma_write_cm_event(id, EV_USER, 7, 0x1122334455667788ULL);
	if (rc) {
		want_fail(rc, EOPNOTSUPP, "rdma_write_cm_event without WRITE_CM_EVENT");
		errno = 0;
		want_fail(rdma_resolve_addrinfo(id, addr, NULL, NULL), EOPNOTSUPP,
			  "rdma_resolve_addrinfo without WRITE_CM_EVENT");
		errno = 0;
		want_fail(rdma_query_addrinfo(id, &ai), ENOENT,
			  "nothing to query after the refusal");
		printf("cm: no WRITE_CM_EVENT (EOPNOTSUPP)\n");
	} else {
		CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event (USER)");
		if (ev->event != EV_USER || ev->status != 7 || ev->id != id ||
		    event_arg(ev) != 0x1122334455667788ULL) {
			fprintf(stderr, "new_verbs: USER event: event %d status %d id %p arg %#llx\n",
				ev->event, ev->status, (void *)ev->id,
				(unsigned long long)event_arg(ev));
			exit(1);
		}
		printf("cm: USER event, %s\n", rdma_event_str(ev->event));
		CHECK(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event");

		CHECK(rdma_resolve_addrinfo(id, addr, NULL, NULL) == 0, "rdma_resolve_addrinfo");
		errno = 0;
		want_fail(rdma_resolve_addrinfo(id, addr, NULL, NULL), EBUSY,
			  "a second rdma_resolve_addrinfo while resolving");
		CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event (ADDRINFO_RESOLVED)");
		CHECK(ev->event == EV_ADDRINFO_RESOLVED && ev->status == 0 && ev->id == id,
		      "the event is ADDRINFO_RESOLVED, status 0, on the id");
		printf("cm: %s\n", rdma_event_str(ev->event));
		CHECK(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event");
		CHECK(rdma_query_addrinfo(id, &ai) == 0, "rdma_query_addrinfo");
		check_answer(ai, addr, "the answer");
		errno = 0;
		want_fail(rdma_query_addrinfo(id, &ai), ENOENT, "a second rdma_query_addrinfo");

		/* a synchronous id reads the event itself */
		struct rdma_cm_id *sid = NULL;
		CHECK(rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP) == 0, "rdma_create_id (sync)");
		CHECK(rdma_resolve_addrinfo(sid, addr, NULL, NULL) == 0,
		      "rdma_resolve_addrinfo (sync)");
		CHECK(rdma_query_addrinfo(sid, &ai) == 0, "rdma_query_addrinfo (sync)");
		check_answer(ai, addr, "the synchronous id's answer");
		/* an answer nobody queries is freed with its id */
		CHECK(rdma_resolve_addrinfo(sid, addr, NULL, NULL) == 0,
		      "rdma_resolve_addrinfo (sync, not queried)");
		CHECK(rdma_destroy_id(sid) == 0, "rdma_destroy_id (sync)");
		printf("cm: WRITE_CM_EVENT\n");
	}
	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	rdma_destroy_event_channel(ch);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: new_verbs DEVICE ADDRESS\n");
		return 2;
	}
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list, "ibv_get_device_list");
	struct ibv_context *ctx = NULL;
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	CHECK(ctx, "open the device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");

	port_speed(ctx);
	reg_mr_ex(pd);
	bufs(ctx, pd);
	dmah(ctx);
	cm(argv[2]);

	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd: no region left on it");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	printf("new_verbs: all checks passed\n");
	return 0;
}
