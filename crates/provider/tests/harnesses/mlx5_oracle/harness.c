/*
 * mlx5 oracle harness (test-only; never linked into anything users get).
 *
 * Runs Debian's own libibverbs + libmlx5 (rdma-core 44) with no hardware: this program
 * interposes the libc calls both libraries make (open, stat, fstat, ioctl, write, mmap,
 * munmap, close, socket) and answers the uverbs commands itself, as a fake kernel, with
 * the responses the script's `ctx` line chooses; UAR pages are ordinary memory. It executes
 * a script of work requests (format: crates/provider/tests/mlx5_oracle/README.md) through
 * the libibverbs API and prints, after every step, what changed in the SQ/RQ/SRQ/CQ
 * buffers, the doorbell records and the UAR pages (64-byte chunks), plus the driver data of
 * every create and the completions of every poll. rverbs' mlx5 provider prints the same
 * text for the same script (crates/provider/src/tests/mlx5_oracle.rs); `cargo xtask mlx5-oracle`
 * compares the two.
 *
 * Usage: harness SCRIPT (it makes its own sysfs tree under /tmp and removes it at exit).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>
#include <rdma/mlx5_user_ioctl_cmds.h>
#include <rdma/rdma_user_ioctl_cmds.h>

#define DEV_PATH "/dev/infiniband/uverbs0"
#define FAKE_RDEV makedev(231, 192)
#define UAR_PAGES 8
#define PAGE 4096
#define MAXOBJ 16

/* ---------- the fake kernel's state ---------- */
static int fake_fd = -1;
static uint8_t *uar_mem;          /* UAR_PAGES pages, mapped at offsets page_index * PAGE */
static int next_handle = 1;

/* what the script's ctx line chooses */
static struct {
	unsigned bf_reg_size, tot_bfregs, max_sq_desc, max_rq_desc, max_wqebb, max_recv_wr,
		max_srq_wr, link_eth, cmds_supp_uhw, cqe_version, uar_fail;
} kc = {512, 16, 512, 512, 1 << 15, 1 << 15, 1 << 15, 0, 0, 0, 0};

/* dynamic UARs (MLX5_IB_OBJECT_UAR): UAR k is memory dyn_mem + k * PAGE, mapped at offset
 * (DYN_OFF + k) * PAGE, page id DYN_PAGE_ID + k */
#define DYN_UARS 8
#define DYN_OFF 0x1000
#define DYN_PAGE_ID 0x30
static uint8_t *dyn_mem;
static int ndyn, dyn_alive[DYN_UARS], dyn_handle[DYN_UARS];
/* the accepted alloc_ucontext request */
static uint8_t ctx_udata[64];
static size_t ctx_udata_len;
/* UAR destroys seen during a close step (printed sorted: their order does not matter) */
static int destroyed[DYN_UARS], ndestroyed;

/* answers for the create being executed */
static uint32_t next_qpn, next_bfreg, next_cqn, next_srqn;
static uint8_t next_dmac[6];

/* recorded driver data of the last create */
static uint8_t last_udata[256];
static size_t last_udata_len;

struct region {
	const char *kind;
	int id;
	const char *part;
	uint8_t *addr;
	size_t len;
	uint8_t *shadow;
};
static struct region regions[64];
static int nregions;

static void add_region(const char *kind, int id, const char *part, void *addr, size_t len)
{
	struct region *r = &regions[nregions++];
	r->kind = kind;
	r->id = id;
	r->part = part;
	r->addr = addr;
	r->len = len;
	r->shadow = calloc(1, len);
}

/* ---------- interposed libc ---------- */
#define REAL(name, ret, ...)                                                               \
	static ret (*real_##name)(__VA_ARGS__);                                            \
	if (!real_##name)                                                                  \
		real_##name = dlsym(RTLD_NEXT, #name);

int open(const char *path, int flags, ...)
{
	REAL(open, int, const char *, int, ...);
	mode_t mode = 0;
	if (flags & O_CREAT) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	if (strcmp(path, DEV_PATH) == 0) {
		fake_fd = real_open("/dev/null", O_RDWR | O_CLOEXEC);
		return fake_fd;
	}
	return real_open(path, flags, mode);
}

int stat(const char *path, struct stat *st)
{
	REAL(stat, int, const char *, struct stat *);
	if (strcmp(path, DEV_PATH) == 0) {
		memset(st, 0, sizeof(*st));
		st->st_mode = S_IFCHR | 0666;
		st->st_rdev = FAKE_RDEV;
		return 0;
	}
	return real_stat(path, st);
}

int fstat(int fd, struct stat *st)
{
	REAL(fstat, int, int, struct stat *);
	if (fd >= 0 && fd == fake_fd) {
		memset(st, 0, sizeof(*st));
		st->st_mode = S_IFCHR | 0666;
		st->st_rdev = FAKE_RDEV;
		return 0;
	}
	return real_fstat(fd, st);
}

int socket(int domain, int type, int protocol)
{
	REAL(socket, int, int, int, int);
	if (domain == AF_NETLINK) {
		errno = EPROTONOSUPPORT; /* no RDMA netlink: libibverbs falls back to sysfs */
		return -1;
	}
	return real_socket(domain, type, protocol);
}

/* Prints an ioctl of the UAR object: every attribute's id/len/flags, and the value of
 * those that carry one (the IDR handle, the allocation type), not of output pointers. */
static void print_ioctl(const struct ib_uverbs_ioctl_hdr *h)
{
	printf("  ioctl %x/%x", h->object_id, h->method_id);
	for (unsigned i = 0; i < h->num_attrs; i++) {
		const struct ib_uverbs_attr *a = &h->attrs[i];
		int value = a->attr_id == MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE ||
			    (h->method_id == MLX5_IB_METHOD_UAR_OBJ_ALLOC &&
			     a->attr_id == MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE);
		printf(" %x:%u:%u", a->attr_id, a->len, a->flags);
		if (value)
			printf("=%llx", (unsigned long long)a->data);
	}
	printf("\n");
}

/* The fake kernel's MLX5_IB_OBJECT_UAR: alloc (the `uar_fail=N`th one fails with ENOMEM)
 * and destroy. */
static int fake_uar_ioctl(struct ib_uverbs_ioctl_hdr *h)
{
	if (h->method_id == MLX5_IB_METHOD_UAR_OBJ_DESTROY) {
		unsigned handle = h->attrs[0].data;
		for (int k = 0; k < ndyn; k++)
			if (dyn_alive[k] && (unsigned)dyn_handle[k] == handle) {
				dyn_alive[k] = 0;
				destroyed[ndestroyed++] = handle;
				return 0;
			}
		errno = ENOENT;
		return -1;
	}
	print_ioctl(h);
	if (h->method_id != MLX5_IB_METHOD_UAR_OBJ_ALLOC) {
		errno = EPROTONOSUPPORT;
		return -1;
	}
	if (ndyn == DYN_UARS || (kc.uar_fail && (unsigned)ndyn + 1 == kc.uar_fail)) {
		kc.uar_fail = 0;
		printf("  = ENOMEM\n");
		errno = ENOMEM;
		return -1;
	}
	int k = ndyn++;
	dyn_alive[k] = 1;
	dyn_handle[k] = 0x100 + k; /* UAR handles apart from the others: rverbs' fake numbers the same */
	for (unsigned i = 0; i < h->num_attrs; i++) {
		struct ib_uverbs_attr *a = &h->attrs[i];
		uint64_t v;
		switch (a->attr_id) {
		case MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE: a->data = dyn_handle[k]; continue;
		case MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET: v = (uint64_t)(DYN_OFF + k) * PAGE; break;
		case MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH: v = PAGE; break;
		case MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID: v = DYN_PAGE_ID + k; break;
		default: continue;
		}
		/* the kernel's u32 / u64 outputs: at most the attribute's length */
		memcpy((void *)(uintptr_t)a->data, &v, a->len < 8 ? a->len : 8);
		a->flags |= UVERBS_ATTR_F_VALID_OUTPUT;
	}
	return 0;
}

/* Prints an RDMA_VERBS_IOCTL call byte for byte: the header, then each attribute, with the
 * data of the attributes `out_a`/`out_b` (output pointers: each library's own memory) as
 * `x`s. */
static void print_ioctl_bytes(const struct ib_uverbs_ioctl_hdr *h, unsigned out_a, unsigned out_b)
{
	printf("  ioctl hdr ");
	for (size_t i = 0; i < sizeof(*h); i++)
		printf("%02x", ((const uint8_t *)h)[i]);
	printf("\n");
	for (unsigned i = 0; i < h->num_attrs; i++) {
		const struct ib_uverbs_attr *a = &h->attrs[i];
		const uint8_t *b = (const uint8_t *)a;
		int masked = a->attr_id == out_a || a->attr_id == out_b;
		printf("  ioctl attr ");
		for (size_t k = 0; k < sizeof(*a); k++) {
			if (masked && k >= 8)
				printf("xx");
			else
				printf("%02x", b[k]);
		}
		printf("\n");
	}
}

/* The fake kernel's UVERBS_METHOD_REG_DMABUF_MR: prints the request, answers a handle and
 * the script's keys (`lkey=`, `rkey=` of the step). */
static uint32_t dmabuf_lkey, dmabuf_rkey;
static int fake_reg_dmabuf_ioctl(struct ib_uverbs_ioctl_hdr *h)
{
	print_ioctl_bytes(h, UVERBS_ATTR_REG_DMABUF_MR_RESP_LKEY, UVERBS_ATTR_REG_DMABUF_MR_RESP_RKEY);
	for (unsigned i = 0; i < h->num_attrs; i++) {
		struct ib_uverbs_attr *a = &h->attrs[i];
		uint32_t v;
		switch (a->attr_id) {
		case UVERBS_ATTR_REG_DMABUF_MR_HANDLE: a->data = next_handle++; continue;
		case UVERBS_ATTR_REG_DMABUF_MR_RESP_LKEY: v = dmabuf_lkey; break;
		case UVERBS_ATTR_REG_DMABUF_MR_RESP_RKEY: v = dmabuf_rkey; break;
		default: continue;
		}
		memcpy((void *)(uintptr_t)a->data, &v, a->len < 4 ? a->len : 4);
		a->flags |= UVERBS_ATTR_F_VALID_OUTPUT;
	}
	return 0;
}

static void add_region(const char *kind, int id, const char *part, void *addr, size_t len);

int ioctl(int fd, unsigned long req, ...)
{
	REAL(ioctl, int, int, unsigned long, ...);
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	if (fd >= 0 && fd == fake_fd) {
		struct ib_uverbs_ioctl_hdr *h = arg;
		if (req == RDMA_VERBS_IOCTL && h->object_id == MLX5_IB_OBJECT_UAR)
			return fake_uar_ioctl(h);
		if (req == RDMA_VERBS_IOCTL && h->object_id == UVERBS_OBJECT_MR &&
		    h->method_id == UVERBS_METHOD_REG_DMABUF_MR)
			return fake_reg_dmabuf_ioctl(h);
		errno = ENOTTY; /* no core ioctl methods: every command goes through write() */
		return -1;
	}
	return real_ioctl(fd, req, arg);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	REAL(mmap, void *, void *, size_t, int, int, int, off_t);
	if (fd >= 0 && fd == fake_fd && off / PAGE >= DYN_OFF) {
		int k = off / PAGE - DYN_OFF;
		if (k >= ndyn || !dyn_alive[k] || len != PAGE) {
			errno = EINVAL;
			return MAP_FAILED;
		}
		add_region("duar", k, "p0", dyn_mem + k * PAGE, PAGE);
		return dyn_mem + k * PAGE;
	}
	if (fd >= 0 && fd == fake_fd) {
		unsigned cmd = (off / PAGE) >> 8, idx = (off / PAGE) & 0xff;
		if ((cmd != MLX5_IB_MMAP_REGULAR_PAGE && cmd != MLX5_IB_MMAP_NC_PAGE) || idx >= UAR_PAGES || len != PAGE) {
			errno = EINVAL;
			return MAP_FAILED;
		}
		return uar_mem + idx * PAGE;
	}
	return real_mmap(addr, len, prot, flags, fd, off);
}

int munmap(void *addr, size_t len)
{
	REAL(munmap, int, void *, size_t);
	if ((uint8_t *)addr >= uar_mem && (uint8_t *)addr < uar_mem + UAR_PAGES * PAGE)
		return 0;
	if ((uint8_t *)addr >= dyn_mem && (uint8_t *)addr < dyn_mem + DYN_UARS * PAGE)
		return 0;
	return real_munmap(addr, len);
}

int close(int fd)
{
	REAL(close, int, int);
	return real_close(fd);
}

static size_t core_in_size(unsigned cmd)
{
	switch (cmd) {
	case IB_USER_VERBS_CMD_GET_CONTEXT: return sizeof(struct ib_uverbs_get_context);
	case IB_USER_VERBS_CMD_QUERY_PORT: return sizeof(struct ib_uverbs_query_port);
	case IB_USER_VERBS_CMD_ALLOC_PD: return sizeof(struct ib_uverbs_alloc_pd);
	case IB_USER_VERBS_CMD_CREATE_CQ: return sizeof(struct ib_uverbs_create_cq);
	case IB_USER_VERBS_CMD_CREATE_QP: return sizeof(struct ib_uverbs_create_qp);
	case IB_USER_VERBS_CMD_MODIFY_QP: return sizeof(struct ib_uverbs_modify_qp);
	case IB_USER_VERBS_CMD_CREATE_SRQ: return sizeof(struct ib_uverbs_create_srq);
	case IB_USER_VERBS_CMD_CREATE_AH: return sizeof(struct ib_uverbs_create_ah);
	case IB_USER_VERBS_CMD_QUERY_DEVICE: return sizeof(struct ib_uverbs_query_device);
	case IB_USER_VERBS_CMD_DESTROY_QP: return sizeof(struct ib_uverbs_destroy_qp);
	case IB_USER_VERBS_CMD_DESTROY_CQ: return sizeof(struct ib_uverbs_destroy_cq);
	case IB_USER_VERBS_CMD_DESTROY_SRQ: return sizeof(struct ib_uverbs_destroy_srq);
	case IB_USER_VERBS_CMD_DESTROY_AH: return sizeof(struct ib_uverbs_destroy_ah);
	case IB_USER_VERBS_CMD_DEALLOC_PD: return sizeof(struct ib_uverbs_dealloc_pd);
	case IB_USER_VERBS_CMD_DEREG_MR: return sizeof(struct ib_uverbs_dereg_mr);
	default: return 8;
	}
}

static size_t core_out_size(unsigned cmd)
{
	switch (cmd) {
	case IB_USER_VERBS_CMD_GET_CONTEXT: return sizeof(struct ib_uverbs_get_context_resp);
	case IB_USER_VERBS_CMD_QUERY_PORT: return sizeof(struct ib_uverbs_query_port_resp);
	case IB_USER_VERBS_CMD_ALLOC_PD: return sizeof(struct ib_uverbs_alloc_pd_resp);
	case IB_USER_VERBS_CMD_CREATE_CQ: return sizeof(struct ib_uverbs_create_cq_resp);
	case IB_USER_VERBS_CMD_CREATE_QP: return sizeof(struct ib_uverbs_create_qp_resp);
	case IB_USER_VERBS_CMD_CREATE_SRQ: return sizeof(struct ib_uverbs_create_srq_resp);
	case IB_USER_VERBS_CMD_CREATE_AH: return sizeof(struct ib_uverbs_create_ah_resp);
	case IB_USER_VERBS_CMD_QUERY_DEVICE: return sizeof(struct ib_uverbs_query_device_resp);
	case IB_USER_VERBS_CMD_DESTROY_QP: return sizeof(struct ib_uverbs_destroy_qp_resp);
	case IB_USER_VERBS_CMD_DESTROY_CQ: return sizeof(struct ib_uverbs_destroy_cq_resp);
	case IB_USER_VERBS_CMD_DESTROY_SRQ: return sizeof(struct ib_uverbs_destroy_srq_resp);
	default: return 0;
	}
}

static void fill_device(struct ib_uverbs_query_device_resp *d)
{
	d->max_qp_wr = kc.max_recv_wr;
	d->max_sge = 30;
	d->max_cq = 1 << 16;
	d->max_cqe = 1 << 22;
	d->max_qp = 1 << 16;
	d->max_srq = 1 << 16;
	d->max_srq_wr = kc.max_srq_wr;
	d->max_srq_sge = 31;
	d->atomic_cap = IBV_ATOMIC_HCA;
	d->phys_port_cnt = 1;
	d->max_pd = 1 << 16;
	d->max_qp_rd_atom = 16;
	d->max_qp_init_rd_atom = 16;
}

/* One uverbs command: `in`/`out` are the core request/response, `uin`/`uout` the driver data. */
static int fake_cmd(unsigned cmd, int ex, const uint8_t *in, size_t inlen, uint8_t *out,
		    size_t outlen, const uint8_t *uin, size_t uinlen, uint8_t *uout, size_t uoutlen)
{
	(void)inlen;
	memset(out, 0, outlen);
	memset(uout, 0, uoutlen);
	last_udata_len = uinlen < sizeof(last_udata) ? uinlen : sizeof(last_udata);
	memcpy(last_udata, uin, last_udata_len);
	switch (cmd) {
	case IB_USER_VERBS_CMD_GET_CONTEXT: {
		struct ib_uverbs_get_context_resp *r = (void *)out;
		struct mlx5_ib_alloc_ucontext_resp m = {0};
		const struct mlx5_ib_alloc_ucontext_req_v2 *q = (const void *)uin;
		/* a device without DEVX (libmlx5 asks for it, then asks again without) */
		if (uinlen >= 12 && (q->flags & MLX5_IB_ALLOC_UCTX_DEVX)) {
			errno = EOPNOTSUPP;
			return -1;
		}
		ctx_udata_len = uinlen < sizeof(ctx_udata) ? uinlen : sizeof(ctx_udata);
		memcpy(ctx_udata, uin, ctx_udata_len);
		r->async_fd = eventfd(0, EFD_CLOEXEC);
		r->num_comp_vectors = 1;
		m.qp_tab_size = 1 << 18;
		m.bf_reg_size = kc.bf_reg_size;
		m.tot_bfregs = kc.tot_bfregs;
		m.cache_line_size = 64;
		m.max_sq_desc_sz = kc.max_sq_desc;
		m.max_rq_desc_sz = kc.max_rq_desc;
		m.max_send_wqebb = kc.max_wqebb;
		m.max_recv_wr = kc.max_recv_wr;
		m.max_srq_recv_wr = kc.max_srq_wr;
		m.num_ports = 1;
		/* the version asked for, at most the device's */
		m.cqe_version = uinlen >= 17 && q->max_cqe_version < kc.cqe_version ? q->max_cqe_version
										  : kc.cqe_version;
		m.cmds_supp_uhw = kc.cmds_supp_uhw;
		m.log_uar_size = 12;
		m.num_uars_per_page = 1;
		m.response_length = sizeof(m);
		memcpy(uout, &m, uoutlen < sizeof(m) ? uoutlen : sizeof(m));
		return 0;
	}
	case IB_USER_VERBS_CMD_QUERY_DEVICE:
		if (ex) {
			struct ib_uverbs_ex_query_device_resp r = {0};
			fill_device(&r.base);
			r.response_length = outlen < sizeof(r) ? outlen : sizeof(r);
			memcpy(out, &r, r.response_length);
		} else {
			fill_device((void *)out);
		}
		return 0;
	case IB_USER_VERBS_CMD_QUERY_PORT: {
		struct ib_uverbs_query_port_resp *r = (void *)out;
		r->state = IBV_PORT_ACTIVE;
		r->max_mtu = IBV_MTU_4096;
		r->active_mtu = IBV_MTU_4096;
		r->gid_tbl_len = 16;
		r->pkey_tbl_len = 1;
		r->lid = 1;
		r->link_layer = kc.link_eth ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
		return 0;
	}
	case IB_USER_VERBS_CMD_ALLOC_PD:
		((struct ib_uverbs_alloc_pd_resp *)out)->pd_handle = next_handle++;
		return 0;
	case IB_USER_VERBS_CMD_CREATE_CQ: {
		uint32_t cqe = ex ? ((struct ib_uverbs_ex_create_cq *)in)->cqe
				  : ((struct ib_uverbs_create_cq *)in)->cqe;
		struct ib_uverbs_create_cq_resp *r = (void *)out;
		r->cq_handle = next_handle++;
		r->cqe = cqe;
		if (ex)
			((struct ib_uverbs_ex_create_cq_resp *)out)->response_length = outlen;
		((struct mlx5_ib_create_cq_resp *)uout)->cqn = next_cqn;
		return 0;
	}
	case IB_USER_VERBS_CMD_CREATE_QP: {
		struct ib_uverbs_create_qp_resp *r = (void *)out;
		const struct ib_uverbs_create_qp *c = (const void *)in;
		if (ex) {
			const struct ib_uverbs_ex_create_qp *e = (const void *)in;
			r->max_send_wr = e->max_send_wr;
			r->max_recv_wr = e->max_recv_wr;
			r->max_send_sge = e->max_send_sge;
			r->max_recv_sge = e->max_recv_sge;
			r->max_inline_data = e->max_inline_data;
			((struct ib_uverbs_ex_create_qp_resp *)out)->response_length = outlen;
		} else {
			r->max_send_wr = c->max_send_wr;
			r->max_recv_wr = c->max_recv_wr;
			r->max_send_sge = c->max_send_sge;
			r->max_recv_sge = c->max_recv_sge;
			r->max_inline_data = c->max_inline_data;
		}
		r->qp_handle = next_handle++;
		r->qpn = next_qpn;
		((struct mlx5_ib_create_qp_resp *)uout)->bfreg_index = next_bfreg;
		return 0;
	}
	case IB_USER_VERBS_CMD_MODIFY_QP:
		if (ex)
			((struct ib_uverbs_ex_modify_qp_resp *)out)->response_length = outlen;
		return 0;
	case IB_USER_VERBS_CMD_CREATE_SRQ: {
		const struct ib_uverbs_create_srq *c = (const void *)in;
		struct ib_uverbs_create_srq_resp *r = (void *)out;
		r->srq_handle = next_handle++;
		/* as the kernel answers: roundup_pow_of_two(max_wr + 1) - 1 */
		r->max_wr = (1u << (32 - __builtin_clz(c->max_wr))) - 1;
		r->max_sge = c->max_sge;
		r->srqn = next_srqn;
		((struct mlx5_ib_create_srq_resp *)uout)->srqn = next_srqn;
		return 0;
	}
	case IB_USER_VERBS_CMD_CREATE_AH: {
		struct mlx5_ib_create_ah_resp *m = (void *)uout;
		((struct ib_uverbs_create_ah_resp *)out)->ah_handle = next_handle++;
		if (uoutlen >= sizeof(*m)) {
			m->response_length = sizeof(*m);
			memcpy(m->dmac, next_dmac, 6);
		}
		return 0;
	}
	case IB_USER_VERBS_CMD_DESTROY_QP:
	case IB_USER_VERBS_CMD_DESTROY_CQ:
	case IB_USER_VERBS_CMD_DESTROY_SRQ:
	case IB_USER_VERBS_CMD_DESTROY_AH:
	case IB_USER_VERBS_CMD_DEALLOC_PD:
	case IB_USER_VERBS_CMD_DEREG_MR:
		return 0;
	default:
		fprintf(stderr, "harness: unexpected uverbs command %u (ex %d)\n", cmd, ex);
		errno = EOPNOTSUPP;
		return -1;
	}
}

ssize_t write(int fd, const void *buf, size_t count)
{
	REAL(write, ssize_t, int, const void *, size_t);
	if (fd < 0 || fd != fake_fd)
		return real_write(fd, buf, count);
	const struct ib_uverbs_cmd_hdr *h = buf;
	unsigned cmd = h->command & IB_USER_VERBS_CMD_COMMAND_MASK;
	int ex = !!(h->command & IB_USER_VERBS_CMD_FLAG_EXTENDED);
	int rc;
	if (ex) {
		const struct ib_uverbs_ex_cmd_hdr *e = (const void *)(h + 1);
		const uint8_t *in = (const uint8_t *)(e + 1);
		size_t inlen = h->in_words * 8, outlen = h->out_words * 8;
		uint8_t *out = (uint8_t *)(uintptr_t)e->response;
		rc = fake_cmd(cmd, 1, in, inlen, out, outlen, in + inlen, e->provider_in_words * 8,
			      out + outlen, e->provider_out_words * 8);
	} else {
		const uint8_t *in = (const uint8_t *)(h + 1);
		size_t inlen = core_in_size(cmd), outlen = core_out_size(cmd);
		size_t total_in = h->in_words * 4 - sizeof(*h), total_out = h->out_words * 4;
		uint8_t *out = (uint8_t *)(uintptr_t)(*(const uint64_t *)in);
		static uint8_t none[8];
		if (total_out == 0)
			out = none;
		rc = fake_cmd(cmd, 0, in, inlen, out, outlen < total_out ? outlen : total_out,
			      in + inlen, total_in > inlen ? total_in - inlen : 0, out + outlen,
			      total_out > outlen ? total_out - outlen : 0);
	}
	return rc ? -1 : (ssize_t)count;
}

/* ---------- script ---------- */
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cqs[MAXOBJ];
static uint8_t *cq_buf[MAXOBJ];
/* entries, CQEs written, slot bytes (64 or 128: the CREATE_CQ driver data's cqe_size) */
static unsigned cq_n[MAXOBJ], cq_written[MAXOBJ], cq_sz[MAXOBJ];

/* The CQE64 of the next slot of CQ id: the whole slot, or its second half in a 128-byte one. */
static uint8_t *next_cqe64(int id, unsigned ci)
{
	return cq_buf[id] + (ci & (cq_n[id] - 1)) * cq_sz[id] + cq_sz[id] - 64;
}
static struct ibv_qp *qps[MAXOBJ];
static struct ibv_srq *srqs[MAXOBJ];
static struct ibv_ah *ahs[MAXOBJ];

static const char *arg(char **tok, int n, const char *key)
{
	size_t k = strlen(key);
	for (int i = 0; i < n; i++)
		if (strncmp(tok[i], key, k) == 0 && tok[i][k] == '=')
			return tok[i] + k + 1;
	return NULL;
}

static uint64_t num(char **tok, int n, const char *key, uint64_t dflt)
{
	const char *v = arg(tok, n, key);
	return v ? strtoull(v, NULL, 0) : dflt;
}

static void hex(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%02x", p[i]);
}

static size_t unhex(const char *s, uint8_t *out)
{
	size_t n = 0;
	while (s[0] && s[1]) {
		unsigned v;
		sscanf(s, "%2x", &v);
		out[n++] = v;
		s += 2;
	}
	return n;
}

/* Prints the 64-byte chunks of every region that changed since the last step. */
static void dump(void)
{
	for (int i = 0; i < nregions; i++) {
		struct region *r = &regions[i];
		for (size_t o = 0; o < r->len; o += 64) {
			size_t n = r->len - o < 64 ? r->len - o : 64;
			if (memcmp(r->addr + o, r->shadow + o, n) == 0)
				continue;
			printf("  %s%d.%s +%04zx ", r->kind, r->id, r->part, o);
			hex(r->addr + o, n);
			printf("\n");
			memcpy(r->shadow + o, r->addr + o, n);
		}
	}
}

/* Driver data of the last create, address fields masked (each library's own memory). */
static void print_udata(size_t masked)
{
	printf("  udata ");
	for (size_t i = 0; i < last_udata_len; i++) {
		if (i < masked)
			printf("xx");
		else
			printf("%02x", last_udata[i]);
	}
	printf("\n");
}

static uint8_t inline_bufs[64][4096];
static int ninline;

/* Parses `sge=ADDR:LEN:LKEY` and `data=HEX` (an inline SGE over a buffer holding HEX). */
static int sges(char **tok, int n, struct ibv_sge *sg)
{
	int k = 0;
	for (int i = 0; i < n; i++) {
		if (strncmp(tok[i], "sge=", 4) == 0) {
			unsigned long long a, l, key;
			sscanf(tok[i] + 4, "%lli:%lli:%lli", &a, &l, &key);
			sg[k].addr = a;
			sg[k].length = l;
			sg[k].lkey = key;
			k++;
		} else if (strncmp(tok[i], "data=", 5) == 0) {
			uint8_t *b = inline_bufs[ninline++ % 64];
			sg[k].length = unhex(tok[i] + 5, b);
			sg[k].addr = (uintptr_t)b;
			sg[k].lkey = 0;
			k++;
		}
	}
	return k;
}

static volatile uint32_t *qp_db[MAXOBJ];

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return (x > y) - (x < y);
}

/* The benchmark's post: not inlined, so that callgrind can count it alone. */
__attribute__((noinline)) int bench_post(struct ibv_qp *qp, struct ibv_send_wr *wr,
					 struct ibv_send_wr **bad)
{
	return ibv_post_send(qp, wr, bad);
}

/* A plain REQ CQE for the benchmark (send opcode, WQE counter), fields then owner byte. */
static void put_cqe(int id, unsigned op, uint32_t qpn, uint16_t counter)
{
	uint8_t c[64] = {0};
	uint32_t v = htobe32((0x0au << 24) | qpn);
	memcpy(c + 56, &v, 4);
	uint16_t ctr = htobe16(counter);
	memcpy(c + 60, &ctr, 2);
	unsigned ci = cq_written[id]++;
	uint8_t *slot = next_cqe64(id, ci);
	memcpy(slot, c, 63);
	__atomic_store_n(slot + 63, (uint8_t)((op << 4) | (!!(ci & cq_n[id]))), __ATOMIC_RELEASE);
}

static int step_send(char **tok, int n)
{
	static struct ibv_send_wr wrs[32];
	static struct ibv_sge sg[32][32];
	/* BIND_MW: libmlx5's post path reads only the window's rkey and type and the region's
	 * lkey (its MW_DEBUG checks are compiled out), so plain structs stand for the window and
	 * the region: no ALLOC_MW or REG_MR in the fake kernel. */
	static struct ibv_mw mws[32];
	static struct ibv_mr mrs[32];
	int qp = num(tok, n, "qp", 0), nw = 0, start = 1;
	for (int i = 1; i <= n; i++) {
		if (i < n && strcmp(tok[i], "|") != 0)
			continue;
		char **t = tok + start;
		int m = i - start;
		struct ibv_send_wr *w = &wrs[nw];
		memset(w, 0, sizeof(*w));
		w->wr_id = num(t, m, "id", 0);
		w->sg_list = sg[nw];
		w->num_sge = sges(t, m, sg[nw]);
		const char *op = arg(t, m, "op");
		if (!op || !strcmp(op, "send")) w->opcode = IBV_WR_SEND;
		else if (!strcmp(op, "send_imm")) w->opcode = IBV_WR_SEND_WITH_IMM;
		else if (!strcmp(op, "send_inv")) w->opcode = IBV_WR_SEND_WITH_INV;
		else if (!strcmp(op, "write")) w->opcode = IBV_WR_RDMA_WRITE;
		else if (!strcmp(op, "write_imm")) w->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		else if (!strcmp(op, "read")) w->opcode = IBV_WR_RDMA_READ;
		else if (!strcmp(op, "cas")) w->opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		else if (!strcmp(op, "faa")) w->opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		else if (!strcmp(op, "local_inv")) w->opcode = IBV_WR_LOCAL_INV;
		else if (!strcmp(op, "bind_mw")) w->opcode = IBV_WR_BIND_MW;
		else {
			fprintf(stderr, "harness: unknown op %s\n", op);
			exit(1);
		}
		if (w->opcode == IBV_WR_SEND_WITH_INV || w->opcode == IBV_WR_LOCAL_INV)
			w->invalidate_rkey = num(t, m, "inv", 0);
		else
			w->imm_data = htobe32(num(t, m, "imm", 0));
		if (w->opcode == IBV_WR_BIND_MW) {
			struct ibv_mw *mw = &mws[nw];
			struct ibv_mr *mr = &mrs[nw];
			memset(mw, 0, sizeof(*mw));
			memset(mr, 0, sizeof(*mr));
			mw->type = num(t, m, "mw_type", 2) == 1 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2;
			mw->rkey = num(t, m, "mw_rkey", 0);
			mr->lkey = num(t, m, "lkey", 0);
			w->bind_mw.mw = mw;
			w->bind_mw.rkey = num(t, m, "rkey", 0);
			w->bind_mw.bind_info.mr = mr;
			w->bind_mw.bind_info.addr = num(t, m, "addr", 0);
			w->bind_mw.bind_info.length = num(t, m, "len", 0);
			const char *a = arg(t, m, "access");
			unsigned acc = 0;
			if (a) {
				if (strstr(a, "local_write")) acc |= IBV_ACCESS_LOCAL_WRITE;
				if (strstr(a, "remote_write")) acc |= IBV_ACCESS_REMOTE_WRITE;
				if (strstr(a, "remote_read")) acc |= IBV_ACCESS_REMOTE_READ;
				if (strstr(a, "atomic")) acc |= IBV_ACCESS_REMOTE_ATOMIC;
				if (strstr(a, "zero_based")) acc |= IBV_ACCESS_ZERO_BASED;
			}
			w->bind_mw.bind_info.mw_access_flags = acc;
		} else if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			w->wr.atomic.remote_addr = num(t, m, "raddr", 0);
			w->wr.atomic.rkey = num(t, m, "rkey", 0);
			w->wr.atomic.compare_add = w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP
							   ? num(t, m, "cmp", 0)
							   : num(t, m, "add", 0);
			w->wr.atomic.swap = num(t, m, "swap", 0);
		} else if (arg(t, m, "ah")) {
			w->wr.ud.ah = ahs[num(t, m, "ah", 0)];
			if (!w->wr.ud.ah) {
				fprintf(stderr, "harness: no AH %s\n", arg(t, m, "ah"));
				exit(1);
			}
			w->wr.ud.remote_qpn = num(t, m, "rqpn", 0);
			w->wr.ud.remote_qkey = num(t, m, "qkey", 0);
		} else {
			w->wr.rdma.remote_addr = num(t, m, "raddr", 0);
			w->wr.rdma.rkey = num(t, m, "rkey", 0);
		}
		const char *f = arg(t, m, "flags");
		if (f) {
			if (strstr(f, "sig")) w->send_flags |= IBV_SEND_SIGNALED;
			if (strstr(f, "sol")) w->send_flags |= IBV_SEND_SOLICITED;
			if (strstr(f, "fence")) w->send_flags |= IBV_SEND_FENCE;
			if (strstr(f, "inline")) w->send_flags |= IBV_SEND_INLINE;
		}
		if (nw > 0)
			wrs[nw - 1].next = w;
		nw++;
		start = i + 1;
	}
	struct ibv_send_wr *bad = NULL;
	if (!strcmp(tok[0], "bench")) {
		/* post the list n times; after each post, complete its last WQE (a REQ CQE, polled
		 * outside bench_post) so the SQ never fills: callgrind counts bench_post only */
		int reps = num(tok, n, "n", 1), cq = num(tok, n, "cq", 1);
		volatile uint32_t *db = qp_db[qp];
		/* ns per WR (stderr, outside the dump): the median of each bench_post timed with
		 * CLOCK_MONOTONIC, minus the median of an empty timed region (medians: a loaded
		 * machine preempts some of them) */
		long long *spent = calloc(reps, sizeof(long long)), *empty = calloc(reps, sizeof(long long));
		struct timespec t0, t1;
		for (int r = 0; r < reps; r++) {
			clock_gettime(CLOCK_MONOTONIC, &t0);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			empty[r] = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
		}
		for (int r = 0; r < reps; r++) {
			uint16_t before = be32toh(db[1]);
			clock_gettime(CLOCK_MONOTONIC, &t0);
			int e = bench_post(qps[qp], wrs, &bad);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			spent[r] = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
			if (e)
				return 1;
			uint16_t after = be32toh(db[1]);
			uint16_t last = after - (uint16_t)(after - before) / nw;
			put_cqe(cq, 0, qps[qp]->qp_num, last);
			struct ibv_wc wc;
			if (ibv_poll_cq(cqs[cq], 1, &wc) != 1 || wc.status != IBV_WC_SUCCESS)
				return 1;
		}
		qsort(spent, reps, sizeof(long long), cmp_ll);
		qsort(empty, reps, sizeof(long long), cmp_ll);
		fprintf(stderr, "bench: %.2f ns per WR\n",
			(double)(spent[reps / 2] - empty[reps / 2]) / nw);
		free(spent);
		free(empty);
		return 0;
	}
	int rc = ibv_post_send(qps[qp], wrs, &bad);
	return rc ? (int)(bad - wrs) + 1 : 0;
}

static int step_recv(char **tok, int n, int srq)
{
	static struct ibv_recv_wr wrs[32];
	static struct ibv_sge sg[32][32];
	int id = num(tok, n, srq ? "srq" : "qp", 0), nw = 0, start = 1;
	for (int i = 1; i <= n; i++) {
		if (i < n && strcmp(tok[i], "|") != 0)
			continue;
		char **t = tok + start;
		int m = i - start;
		struct ibv_recv_wr *w = &wrs[nw];
		memset(w, 0, sizeof(*w));
		w->wr_id = num(t, m, "id", 0);
		w->sg_list = sg[nw];
		w->num_sge = sges(t, m, sg[nw]);
		if (nw > 0)
			wrs[nw - 1].next = w;
		nw++;
		start = i + 1;
	}
	struct ibv_recv_wr *bad = NULL;
	int rc = srq ? ibv_post_srq_recv(srqs[id], wrs, &bad) : ibv_post_recv(qps[id], wrs, &bad);
	return rc ? (int)(bad - wrs) + 1 : 0;
}

static void put(const char *root, const char *rel, const char *text)
{
	char path[4096], cmd[4200];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	if (system(cmd) != 0)
		exit(3);
	FILE *f = fopen(path, "w");
	if (!f)
		exit(3);
	fprintf(f, "%s\n", text);
	fclose(f);
}

static char sysfs_root[64];

static void remove_sysfs(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", sysfs_root);
	if (system(cmd) != 0)
		fprintf(stderr, "harness: could not remove %s\n", sysfs_root);
}

/* A sysfs tree with one mlx5 device (a ConnectX-4 by its PCI modalias), given to libibverbs
 * through SYSFS_PATH. */
static void setup_sysfs_env(void)
{
	static char root[] = "/tmp/mlx5-oracle-sysfs-XXXXXX";
	if (!mkdtemp(root))
		exit(3);
	snprintf(sysfs_root, sizeof(sysfs_root), "%s", root);
	put(root, "class/infiniband_verbs/abi_version", "6");
	put(root, "class/infiniband_verbs/uverbs0/ibdev", "mlx5_0");
	put(root, "class/infiniband_verbs/uverbs0/dev", "231:192");
	put(root, "class/infiniband_verbs/uverbs0/abi_version", "1");
	put(root, "class/infiniband/mlx5_0/node_type", "1: CA");
	put(root, "class/infiniband/mlx5_0/node_guid", "0002:c903:0000:0001");
	put(root, "class/infiniband/mlx5_0/fw_ver", "12.28.2006");
	put(root, "class/infiniband/mlx5_0/device/modalias",
	    "pci:v000015B3d00001013sv000015B3sd00000008bc02sc00i00");
	for (int i = 0; i < 16; i++) {
		char rel[128];
		snprintf(rel, sizeof(rel), "class/infiniband/mlx5_0/ports/1/gid_attrs/types/%d", i);
		put(root, rel, "IB/RoCE v1");
	}
	setenv("SYSFS_PATH", root, 1);
	atexit(remove_sysfs);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s SCRIPT\n", argv[0]);
		return 2;
	}
	FILE *f = fopen(argv[1], "r");
	if (!f) {
		perror(argv[1]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	uar_mem = aligned_alloc(PAGE, UAR_PAGES * PAGE);
	memset(uar_mem, 0, UAR_PAGES * PAGE);
	dyn_mem = aligned_alloc(PAGE, DYN_UARS * PAGE);
	memset(dyn_mem, 0, DYN_UARS * PAGE);
	setup_sysfs_env();
	char line[8192];
	int stepno = 0;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\r\n")] = 0;
		char copy[8192];
		strcpy(copy, line);
		char *tok[512];
		int n = 0;
		for (char *s = strtok(copy, " \t"); s && n < 512; s = strtok(NULL, " \t"))
			tok[n++] = s;
		if (n == 0 || tok[0][0] == '#')
			continue;
		printf("step %d: %s\n", ++stepno, line);
		int rc = 0, errat = 0;
		const char *w = tok[0];
		if (!strcmp(w, "env")) {
			for (int i = 1; i < n; i++) {
				char *eq = strchr(tok[i], '=');
				*eq = 0;
				setenv(tok[i], eq + 1, 1);
			}
		} else if (!strcmp(w, "ctx")) {
			kc.bf_reg_size = num(tok, n, "bf_reg_size", kc.bf_reg_size);
			kc.tot_bfregs = num(tok, n, "tot_bfregs", kc.tot_bfregs);
			kc.max_srq_wr = num(tok, n, "max_srq_wr", kc.max_srq_wr);
			kc.cqe_version = num(tok, n, "cqe_version", 0);
			kc.uar_fail = num(tok, n, "uar_fail", 0);
			kc.link_eth = arg(tok, n, "link") && !strcmp(arg(tok, n, "link"), "eth");
			kc.cmds_supp_uhw = kc.link_eth ? MLX5_USER_CMDS_SUPP_UHW_CREATE_AH : 0;
			int nd = 0;
			struct ibv_device **l = ibv_get_device_list(&nd);
			if (!l || nd != 1) {
				fprintf(stderr, "harness: %d devices\n", nd);
				return 1;
			}
			ctx = ibv_open_device(l[0]);
			if (!ctx) {
				perror("ibv_open_device");
				return 1;
			}
			pd = ibv_alloc_pd(ctx);
			printf("  udata ");
			hex(ctx_udata, ctx_udata_len);
			printf("\n");
			for (int i = 0; i < UAR_PAGES && kc.tot_bfregs; i++) {
				char name[8];
				snprintf(name, sizeof(name), "p%d", i);
				add_region("uar", 0, strdup(name), uar_mem + i * PAGE, PAGE);
			}
		} else if (!strcmp(w, "cq")) {
			int id = atoi(tok[1]);
			next_cqn = num(tok, n, "cqn", id);
			cqs[id] = ibv_create_cq(ctx, num(tok, n, "cqe", 15), NULL, NULL, 0);
			if (!cqs[id]) { rc = errno; goto done; }
			struct mlx5_ib_create_cq c;
			memcpy(&c, last_udata, sizeof(c));
			cq_n[id] = num(tok, n, "cqe", 15) + 1;
			cq_n[id] = 1u << (32 - __builtin_clz(cq_n[id] - 1));
			cq_buf[id] = (uint8_t *)(uintptr_t)c.buf_addr;
			cq_sz[id] = c.cqe_size;
			print_udata(16);
			add_region("cq", id, "buf", cq_buf[id], cq_n[id] * cq_sz[id]);
			add_region("cq", id, "db", (void *)(uintptr_t)c.db_addr, 8);
		} else if (!strcmp(w, "qp")) {
			int id = atoi(tok[1]);
			struct ibv_qp_init_attr a = {0};
			const char *t = arg(tok, n, "type");
			a.qp_type = !strcmp(t, "rc") ? IBV_QPT_RC : !strcmp(t, "uc") ? IBV_QPT_UC : IBV_QPT_UD;
			a.send_cq = cqs[num(tok, n, "cq", 1)];
			a.recv_cq = cqs[num(tok, n, "rcq", num(tok, n, "cq", 1))];
			if (arg(tok, n, "srq"))
				a.srq = srqs[num(tok, n, "srq", 0)];
			a.cap.max_send_wr = num(tok, n, "send_wr", 0);
			a.cap.max_recv_wr = num(tok, n, "recv_wr", 0);
			a.cap.max_send_sge = num(tok, n, "send_sge", 0);
			a.cap.max_recv_sge = num(tok, n, "recv_sge", 0);
			a.cap.max_inline_data = num(tok, n, "inline", 0);
			a.sq_sig_all = num(tok, n, "sig_all", 0);
			next_qpn = num(tok, n, "qpn", 0x100 + id);
			next_bfreg = num(tok, n, "bfreg", 1);
			qps[id] = ibv_create_qp(pd, &a);
			if (!qps[id]) { rc = errno; goto done; }
			struct mlx5_ib_create_qp c;
			memcpy(&c, last_udata, sizeof(c));
			print_udata(16);
			printf("  caps send_wr %u recv_wr %u send_sge %u recv_sge %u inline %u\n",
			       a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge,
			       a.cap.max_recv_sge, a.cap.max_inline_data);
			size_t len = ((size_t)c.rq_wqe_count << c.rq_wqe_shift) + (size_t)c.sq_wqe_count * 64;
			add_region("qp", id, "buf", (void *)(uintptr_t)c.buf_addr, len);
			add_region("qp", id, "db", (void *)(uintptr_t)c.db_addr, 8);
			qp_db[id] = (volatile uint32_t *)(uintptr_t)c.db_addr;
		} else if (!strcmp(w, "srq")) {
			int id = atoi(tok[1]);
			struct ibv_srq_init_attr a = {0};
			a.attr.max_wr = num(tok, n, "max_wr", 1);
			a.attr.max_sge = num(tok, n, "max_sge", 1);
			next_srqn = num(tok, n, "srqn", 0x40 + id);
			srqs[id] = ibv_create_srq(pd, &a);
			if (!srqs[id]) { rc = errno; goto done; }
			struct mlx5_ib_create_srq c;
			memcpy(&c, last_udata, sizeof(c));
			print_udata(16);
			printf("  max_wr %u max_sge %u\n", a.attr.max_wr, a.attr.max_sge);
			unsigned desc = 16 + 16 * a.attr.max_sge;
			desc = desc < 32 ? 32 : desc;
			desc = 1u << (32 - __builtin_clz(desc - 1));
			unsigned max = a.attr.max_wr + 1;
			max = 1u << (32 - __builtin_clz(max - 1));
			add_region("srq", id, "buf", (void *)(uintptr_t)c.buf_addr, (size_t)max * desc);
			add_region("srq", id, "db", (void *)(uintptr_t)c.db_addr, 4);
		} else if (!strcmp(w, "ah")) {
			int id = atoi(tok[1]);
			struct ibv_ah_attr a = {0};
			a.port_num = num(tok, n, "port", 1);
			a.dlid = num(tok, n, "dlid", 0);
			a.sl = num(tok, n, "sl", 0);
			a.src_path_bits = num(tok, n, "path_bits", 0);
			a.static_rate = num(tok, n, "rate", 0);
			if (arg(tok, n, "dgid")) {
				a.is_global = 1;
				unhex(arg(tok, n, "dgid"), a.grh.dgid.raw);
				a.grh.sgid_index = num(tok, n, "sgid", 0);
				a.grh.hop_limit = num(tok, n, "hop", 64);
				a.grh.traffic_class = num(tok, n, "tclass", 0);
				a.grh.flow_label = num(tok, n, "flow", 0);
			}
			if (arg(tok, n, "dmac"))
				unhex(arg(tok, n, "dmac"), next_dmac);
			if (num(tok, n, "roce_v2", 0)) {
				/* the source GID is a RoCE v2 one: what ibv_query_gid_type reads */
				char rel[128];
				snprintf(rel, sizeof(rel),
					 "class/infiniband/mlx5_0/ports/%u/gid_attrs/types/%u",
					 a.port_num, a.grh.sgid_index);
				put(sysfs_root, rel, "RoCE v2");
			}
			ahs[id] = ibv_create_ah(pd, &a);
			if (!ahs[id]) { rc = errno ? errno : EINVAL; goto done; }
		} else if (!strcmp(w, "rts")) {
			struct ibv_qp *q = qps[num(tok, n, "qp", 0)];
			struct ibv_qp_attr a = {0};
			a.qp_state = IBV_QPS_INIT;
			a.port_num = 1;
			a.qkey = 0x11111111;
			int ud = q->qp_type == IBV_QPT_UD;
			rc = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						   (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS));
			a.qp_state = IBV_QPS_RTR;
			a.path_mtu = IBV_MTU_1024;
			a.dest_qp_num = 1;
			a.ah_attr.port_num = 1;
			a.ah_attr.dlid = 1;
			if (!rc)
				rc = ibv_modify_qp(q, &a, ud ? IBV_QP_STATE : IBV_QP_STATE | IBV_QP_AV |
							IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
							(q->qp_type == IBV_QPT_RC ? IBV_QP_MAX_DEST_RD_ATOMIC |
							 IBV_QP_MIN_RNR_TIMER : 0));
			a.qp_state = IBV_QPS_RTS;
			if (!rc)
				rc = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
						   (q->qp_type == IBV_QPT_RC ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
						    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC : 0));
		} else if (!strcmp(w, "reset")) {
			struct ibv_qp_attr a = {0};
			a.qp_state = IBV_QPS_RESET;
			rc = ibv_modify_qp(qps[num(tok, n, "qp", 0)], &a, IBV_QP_STATE);
		} else if (!strcmp(w, "destroy")) {
			/* ibv_destroy_qp: its queues are freed, so they are no longer dumped */
			int id = num(tok, n, "qp", 0);
			int k = 0;
			for (int i = 0; i < nregions; i++) {
				if (strcmp(regions[i].kind, "qp") == 0 && regions[i].id == id)
					free(regions[i].shadow);
				else
					regions[k++] = regions[i];
			}
			nregions = k;
			if (ibv_destroy_qp(qps[id]))
				rc = errno;
			qps[id] = NULL;
		} else if (!strcmp(w, "close")) {
			/* destroy everything, close the device; print the UAR destroys, sorted */
			for (int i = 0; i < MAXOBJ; i++)
				if (qps[i] && ibv_destroy_qp(qps[i]))
					rc = errno;
			for (int i = 0; i < MAXOBJ; i++)
				if (srqs[i] && ibv_destroy_srq(srqs[i]))
					rc = errno;
			for (int i = 0; i < MAXOBJ; i++)
				if (ahs[i] && ibv_destroy_ah(ahs[i]))
					rc = errno;
			for (int i = 0; i < MAXOBJ; i++)
				if (cqs[i] && ibv_destroy_cq(cqs[i]))
					rc = errno;
			if (ibv_dealloc_pd(pd) || ibv_close_device(ctx))
				rc = errno;
			for (int i = 0; i < ndestroyed; i++)
				for (int j = i + 1; j < ndestroyed; j++)
					if (destroyed[j] < destroyed[i]) {
						int t = destroyed[i];
						destroyed[i] = destroyed[j];
						destroyed[j] = t;
					}
			for (int i = 0; i < ndestroyed; i++)
				printf("  destroyed uar handle %d\n", destroyed[i]);
			for (int k = 0; k < ndyn; k++)
				if (dyn_alive[k])
					printf("  leaked uar handle %d\n", dyn_handle[k]);
			nregions = 0; /* the memory of destroyed objects is gone */
		} else if (!strcmp(w, "send") || !strcmp(w, "bench")) {
			errat = step_send(tok, n);
		} else if (!strcmp(w, "recv")) {
			errat = step_recv(tok, n, 0);
		} else if (!strcmp(w, "srecv")) {
			errat = step_recv(tok, n, 1);
		} else if (!strcmp(w, "cqe")) {
			/* a CQE as the device writes it: fields, then the owner byte */
			int id = num(tok, n, "cq", 1);
			uint8_t c[64] = {0};
			uint32_t v;
			unsigned op = num(tok, n, "op", 0);
			v = htobe32(num(tok, n, "srqn", 0)); memcpy(c + 32, &v, 4);
			v = htobe32(num(tok, n, "imm", 0)); memcpy(c + 36, &v, 4);
			v = htobe32(num(tok, n, "len", 0)); memcpy(c + 44, &v, 4);
			v = htobe32((num(tok, n, "wqe_op", 0x0a) << 24) | num(tok, n, "qpn", 0));
			memcpy(c + 56, &v, 4);
			uint16_t ctr = htobe16(num(tok, n, "counter", 0)); memcpy(c + 60, &ctr, 2);
			c[54] = num(tok, n, "vendor", 0);
			c[55] = num(tok, n, "syndrome", 0);
			unsigned ci = cq_written[id]++;
			uint8_t *slot = next_cqe64(id, ci);
			memcpy(slot, c, 63);
			__atomic_store_n(slot + 63, (uint8_t)((op << 4) | (!!(ci & cq_n[id]))),
					 __ATOMIC_RELEASE);
		} else if (!strcmp(w, "dmabuf_mr")) {
			/* ibv_reg_dmabuf_mr on the context's PD: the fake kernel prints the ioctl
			 * libibverbs sends for libmlx5 and answers the script's keys; then what the
			 * caller sees, and the region is deregistered again */
			dmabuf_lkey = num(tok, n, "lkey", 0);
			dmabuf_rkey = num(tok, n, "rkey", 0);
			struct ibv_mr *mr = ibv_reg_dmabuf_mr(pd, num(tok, n, "offset", 0),
							      num(tok, n, "len", 0), num(tok, n, "iova", 0),
							      num(tok, n, "fd", 0), num(tok, n, "access", 0));
			if (!mr) {
				rc = 1;
			} else {
				printf("  mr lkey 0x%x rkey 0x%x addr 0x%llx length %zu\n", mr->lkey,
				       mr->rkey, (unsigned long long)(uintptr_t)mr->addr, mr->length);
				if (ibv_dereg_mr(mr))
					rc = 1;
			}
		} else if (!strcmp(w, "poll")) {
			struct ibv_wc wc[32];
			memset(wc, 0, sizeof(wc));
			int got = ibv_poll_cq(cqs[num(tok, n, "cq", 1)], num(tok, n, "n", 1), wc);
			/* the opcode of an error completion is undefined in verbs: masked ("-") */
			for (int i = 0; i < got; i++) {
				char op[16] = "-";
				if (wc[i].status == IBV_WC_SUCCESS)
					snprintf(op, sizeof(op), "%d", wc[i].opcode);
				printf("  wc wr_id %llu status %d opcode %s qp 0x%x len %u flags 0x%x imm 0x%x\n",
				       (unsigned long long)wc[i].wr_id, wc[i].status, op,
				       wc[i].qp_num, wc[i].byte_len, wc[i].wc_flags,
				       wc[i].wc_flags & IBV_WC_WITH_INV ? wc[i].invalidated_rkey
									 : be32toh(wc[i].imm_data));
			}
		} else {
			fprintf(stderr, "harness: unknown step '%s'\n", w);
			return 2;
		}
done:
		if (rc)
			printf("  = err\n");
		if (errat)
			printf("  = err at %d\n", errat - 1);
		dump();
	}
	return 0;
}
