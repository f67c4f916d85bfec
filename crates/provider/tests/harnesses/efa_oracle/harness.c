/*
 * EFA oracle harness (test-only; never linked into anything users get).
 *
 * Runs Debian's own libibverbs + libefa (rdma-core 44) with no hardware, as the mlx5 oracle
 * harness (../mlx5_oracle/harness.c) runs libmlx5: this program interposes the libc calls
 * both libraries make (open, stat, fstat, ioctl, write, mmap, munmap, socket) and answers the
 * uverbs commands itself, as a fake EFA kernel driver, with the answers the script chooses.
 * Every mapping libefa asks for by an mmap key (CQ rings, the RQ ring, the SQ and RQ doorbell
 * pages, the LLQ descriptor window, the CQ doorbell page) is ordinary memory here. The script
 * (format: crates/provider/tests/efa_oracle/README.md) runs through the libibverbs API (SRD
 * QPs through efadv_create_driver_qp) and after every step the harness prints what changed
 * in those mappings (64-byte chunks), the driver data of every create, the core capacities
 * of CREATE_QP, and the completions of every poll. rverbs' EFA provider prints the same text
 * for the same script (crates/provider/src/tests/efa_oracle.rs); `cargo xtask efa-oracle`
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

#include <infiniband/efadv.h>
#include <infiniband/verbs.h>
#include <rdma/efa-abi.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_ioctl_cmds.h>

#define DEV_PATH "/dev/infiniband/uverbs0"
#define FAKE_RDEV makedev(231, 192)
#define PAGE 4096
#define MAXOBJ 16
/* kernel memory objects an mmap key names: key k is (KEY_BASE + k) * PAGE */
#define KEY_BASE 0x100
#define MAXMEM 64

/* ---------- the fake kernel's state ---------- */
static int fake_fd = -1;
static int next_handle = 1;

/* what the script's ctx line chooses */
static struct {
	unsigned sub_cqs, inline_buf, max_llq, max_tx_batch, min_sq_wr, max_sq_wr, max_rq_wr,
		max_sq_sge, max_rq_sge, max_rdma, caps, udata_mask;
} kc;

static struct {
	uint8_t *addr;
	size_t len;
} mem[MAXMEM];
static int nmem;

/* A kernel memory object of `len` bytes (zeroed); returns its mmap key. */
static uint64_t new_mem(size_t len)
{
	int k = nmem++;
	size_t l = (len + PAGE - 1) / PAGE * PAGE;
	mem[k].addr = aligned_alloc(PAGE, l ? l : PAGE);
	memset(mem[k].addr, 0, l ? l : PAGE);
	mem[k].len = l ? l : PAGE;
	return (uint64_t)(KEY_BASE + k) * PAGE;
}

static uint8_t *mem_of(uint64_t key)
{
	return mem[key / PAGE - KEY_BASE].addr;
}

/* the accepted alloc_ucontext request */
static uint8_t ctx_udata[64];
static size_t ctx_udata_len;

/* answers for the create being executed */
static uint32_t next_qpn, next_cqn, next_ahn, next_scq_idx, next_rcq_idx, next_llq_off,
	next_sq_db_off, next_rq_db_off, next_cq_db, next_cq_db_off;

/* recorded driver data and core caps of the last create */
static uint8_t last_udata[256];
static size_t last_udata_len;
static struct ib_uverbs_create_qp last_qp_core;
static uint32_t last_cqe;
/* the driver responses of the last create (the harness reads where the rings are) */
static struct efa_ibv_create_cq_resp last_cq_resp;
static struct efa_ibv_create_qp_resp last_qp_resp;

struct region {
	char name[32];
	uint8_t *addr;
	size_t len;
	uint8_t *shadow;
};
static struct region regions[64];
static int nregions;

static void add_region(const char *name, void *addr, size_t len)
{
	struct region *r = &regions[nregions++];
	snprintf(r->name, sizeof(r->name), "%s", name);
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

int ioctl(int fd, unsigned long req, ...)
{
	REAL(ioctl, int, int, unsigned long, ...);
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	if (fd >= 0 && fd == fake_fd) {
		errno = ENOTTY; /* no ioctl methods: every command goes through write() */
		return -1;
	}
	return real_ioctl(fd, req, arg);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	REAL(mmap, void *, void *, size_t, int, int, int, off_t);
	if (fd >= 0 && fd == fake_fd) {
		long k = off / PAGE - KEY_BASE;
		if (off % PAGE || k < 0 || k >= nmem || len > mem[k].len) {
			errno = EINVAL;
			return MAP_FAILED;
		}
		return mem[k].addr;
	}
	return real_mmap(addr, len, prot, flags, fd, off);
}

int munmap(void *addr, size_t len)
{
	REAL(munmap, int, void *, size_t);
	for (int k = 0; k < nmem; k++)
		if ((uint8_t *)addr >= mem[k].addr && (uint8_t *)addr < mem[k].addr + mem[k].len)
			return 0;
	if (!addr) /* libefa unmaps a CQ doorbell it never mapped (NULL) */
		return 0;
	return real_munmap(addr, len);
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
	case IB_USER_VERBS_CMD_CREATE_AH: return sizeof(struct ib_uverbs_create_ah);
	case IB_USER_VERBS_CMD_QUERY_DEVICE: return sizeof(struct ib_uverbs_query_device);
	case IB_USER_VERBS_CMD_DESTROY_QP: return sizeof(struct ib_uverbs_destroy_qp);
	case IB_USER_VERBS_CMD_DESTROY_CQ: return sizeof(struct ib_uverbs_destroy_cq);
	case IB_USER_VERBS_CMD_DESTROY_AH: return sizeof(struct ib_uverbs_destroy_ah);
	case IB_USER_VERBS_CMD_DEALLOC_PD: return sizeof(struct ib_uverbs_dealloc_pd);
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
	case IB_USER_VERBS_CMD_CREATE_AH: return sizeof(struct ib_uverbs_create_ah_resp);
	case IB_USER_VERBS_CMD_QUERY_DEVICE: return sizeof(struct ib_uverbs_query_device_resp);
	case IB_USER_VERBS_CMD_DESTROY_QP: return sizeof(struct ib_uverbs_destroy_qp_resp);
	case IB_USER_VERBS_CMD_DESTROY_CQ: return sizeof(struct ib_uverbs_destroy_cq_resp);
	default: return 0;
	}
}

static void fill_device(struct ib_uverbs_query_device_resp *d)
{
	d->max_qp_wr = kc.max_sq_wr;
	d->max_sge = kc.max_sq_sge;
	d->max_sge_rd = 1;
	d->max_cq = 1 << 10;
	d->max_cqe = 1 << 16;
	d->max_qp = 1 << 10;
	d->phys_port_cnt = 1;
	d->max_pd = 1 << 10;
	d->max_ah = 1 << 10;
}

/* One uverbs command: `in`/`out` are the core request/response, `uin`/`uout` the driver data. */
static int fake_cmd(unsigned cmd, int ex, const uint8_t *in, uint8_t *out, size_t outlen,
		    const uint8_t *uin, size_t uinlen, uint8_t *uout, size_t uoutlen)
{
	memset(out, 0, outlen);
	memset(uout, 0, uoutlen);
	last_udata_len = uinlen < sizeof(last_udata) ? uinlen : sizeof(last_udata);
	memcpy(last_udata, uin, last_udata_len);
	switch (cmd) {
	case IB_USER_VERBS_CMD_GET_CONTEXT: {
		struct ib_uverbs_get_context_resp *r = (void *)out;
		struct efa_ibv_alloc_ucontext_resp m = {0};
		ctx_udata_len = uinlen < sizeof(ctx_udata) ? uinlen : sizeof(ctx_udata);
		memcpy(ctx_udata, uin, ctx_udata_len);
		r->async_fd = eventfd(0, EFD_CLOEXEC);
		r->num_comp_vectors = 1;
		m.cmds_supp_udata_mask = kc.udata_mask;
		m.sub_cqs_per_cq = kc.sub_cqs;
		m.inline_buf_size = kc.inline_buf;
		m.max_llq_size = kc.max_llq;
		m.max_tx_batch = kc.max_tx_batch;
		m.min_sq_wr = kc.min_sq_wr;
		memcpy(uout, &m, uoutlen < sizeof(m) ? uoutlen : sizeof(m));
		return 0;
	}
	case IB_USER_VERBS_CMD_QUERY_DEVICE: {
		struct efa_ibv_ex_query_device_resp e = {0};
		if (ex) {
			struct ib_uverbs_ex_query_device_resp r = {0};
			fill_device(&r.base);
			r.response_length = outlen < sizeof(r) ? outlen : sizeof(r);
			memcpy(out, &r, r.response_length);
		} else {
			fill_device((void *)out);
		}
		e.max_sq_wr = kc.max_sq_wr;
		e.max_rq_wr = kc.max_rq_wr;
		e.max_sq_sge = kc.max_sq_sge;
		e.max_rq_sge = kc.max_rq_sge;
		e.max_rdma_size = kc.max_rdma;
		e.device_caps = kc.caps;
		memcpy(uout, &e, uoutlen < sizeof(e) ? uoutlen : sizeof(e));
		return 0;
	}
	case IB_USER_VERBS_CMD_QUERY_PORT: {
		struct ib_uverbs_query_port_resp *r = (void *)out;
		r->state = IBV_PORT_ACTIVE;
		r->max_mtu = IBV_MTU_4096;
		r->active_mtu = IBV_MTU_4096;
		r->gid_tbl_len = 1;
		r->pkey_tbl_len = 1;
		return 0;
	}
	case IB_USER_VERBS_CMD_ALLOC_PD:
		((struct ib_uverbs_alloc_pd_resp *)out)->pd_handle = next_handle++;
		return 0;
	case IB_USER_VERBS_CMD_CREATE_CQ: {
		uint32_t cqe = ex ? ((struct ib_uverbs_ex_create_cq *)in)->cqe
				  : ((struct ib_uverbs_create_cq *)in)->cqe;
		const struct efa_ibv_create_cq *c = (const void *)uin;
		struct efa_ibv_create_cq_resp *m = (void *)uout;
		struct ib_uverbs_create_cq_resp *r = (void *)out;
		last_cqe = cqe;
		r->cq_handle = next_handle++;
		r->cqe = cqe;
		if (ex)
			((struct ib_uverbs_ex_create_cq_resp *)out)->response_length = outlen;
		m->cq_idx = next_cqn;
		m->q_mmap_size = ((size_t)c->num_sub_cqs * cqe * c->cq_entry_size + PAGE - 1) / PAGE * PAGE;
		m->q_mmap_key = new_mem(m->q_mmap_size);
		if (next_cq_db) {
			m->comp_mask = EFA_CREATE_CQ_RESP_DB_OFF;
			m->db_off = next_cq_db_off;
			m->db_mmap_key = new_mem(PAGE);
		}
		last_cq_resp = *m;
		return 0;
	}
	case IB_USER_VERBS_CMD_CREATE_QP: {
		struct ib_uverbs_create_qp_resp *r = (void *)out;
		const struct efa_ibv_create_qp *c = (const void *)uin;
		struct efa_ibv_create_qp_resp *m = (void *)uout;
		if (ex) {
			fprintf(stderr, "harness: libefa sent EX_CREATE_QP\n");
			errno = EOPNOTSUPP;
			return -1;
		}
		memcpy(&last_qp_core, in, sizeof(last_qp_core));
		r->max_send_wr = last_qp_core.max_send_wr;
		r->max_recv_wr = last_qp_core.max_recv_wr;
		r->max_send_sge = last_qp_core.max_send_sge;
		r->max_recv_sge = last_qp_core.max_recv_sge;
		r->max_inline_data = last_qp_core.max_inline_data;
		r->qp_handle = next_handle++;
		r->qpn = next_qpn;
		m->rq_db_offset = next_rq_db_off;
		m->sq_db_offset = next_sq_db_off;
		m->llq_desc_offset = next_llq_off;
		m->rq_mmap_size = ((size_t)c->rq_ring_size + PAGE - 1) / PAGE * PAGE;
		m->rq_mmap_key = new_mem(m->rq_mmap_size);
		m->rq_db_mmap_key = new_mem(PAGE);
		m->sq_db_mmap_key = new_mem(PAGE);
		m->llq_desc_mmap_key = new_mem((size_t)c->sq_ring_size + next_llq_off);
		m->send_sub_cq_idx = next_scq_idx;
		m->recv_sub_cq_idx = next_rcq_idx;
		last_qp_resp = *m;
		return 0;
	}
	case IB_USER_VERBS_CMD_MODIFY_QP:
		if (ex)
			((struct ib_uverbs_ex_modify_qp_resp *)out)->response_length = outlen;
		return 0;
	case IB_USER_VERBS_CMD_CREATE_AH: {
		struct efa_ibv_create_ah_resp *m = (void *)uout;
		((struct ib_uverbs_create_ah_resp *)out)->ah_handle = next_handle++;
		if (uoutlen >= sizeof(*m))
			m->efa_address_handle = next_ahn;
		return 0;
	}
	case IB_USER_VERBS_CMD_DESTROY_QP:
	case IB_USER_VERBS_CMD_DESTROY_CQ:
	case IB_USER_VERBS_CMD_DESTROY_AH:
	case IB_USER_VERBS_CMD_DEALLOC_PD:
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
		rc = fake_cmd(cmd, 1, in, out, outlen, in + inlen, e->provider_in_words * 8,
			      out + outlen, e->provider_out_words * 8);
	} else {
		const uint8_t *in = (const uint8_t *)(h + 1);
		size_t inlen = core_in_size(cmd), outlen = core_out_size(cmd);
		size_t total_in = h->in_words * 4 - sizeof(*h), total_out = h->out_words * 4;
		uint8_t *out = (uint8_t *)(uintptr_t)(*(const uint64_t *)in);
		static uint8_t none[8];
		if (total_out == 0)
			out = none;
		rc = fake_cmd(cmd, 0, in, out, outlen < total_out ? outlen : total_out, in + inlen,
			      total_in > inlen ? total_in - inlen : 0, out + outlen,
			      total_out > outlen ? total_out - outlen : 0);
	}
	return rc ? -1 : (ssize_t)count;
}

/* ---------- script ---------- */
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cqs[MAXOBJ];
/* per CQ: ring, entries per sub-CQ, sub-CQs, entry size; per sub-CQ: CQEs written */
static uint8_t *cq_buf[MAXOBJ];
static unsigned cq_n[MAXOBJ], cq_subs[MAXOBJ], cq_esz[MAXOBJ], cq_written[MAXOBJ][16];
static struct ibv_qp *qps[MAXOBJ];
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
			printf("  %s +%04zx ", r->name, o);
			hex(r->addr + o, n);
			printf("\n");
			memcpy(r->shadow + o, r->addr + o, n);
		}
	}
}

static void print_udata(void)
{
	printf("  udata ");
	hex(last_udata, last_udata_len);
	printf("\n");
}

static uint8_t inline_bufs[64][4096];
static int ninline;

/* Parses `sge=ADDR:LEN:LKEY` and `data=HEX` (an SGE over a buffer holding HEX). */
static int sges(char **tok, int n, struct ibv_sge *sg)
{
	int k = 0;
	for (int i = 0; i < n; i++) {
		if (strncmp(tok[i], "sge=", 4) == 0) {
			/* unsigned: addresses use all 64 bits */
			char *p = tok[i] + 4;
			sg[k].addr = strtoull(p, &p, 0);
			sg[k].length = strtoull(p + 1, &p, 0);
			sg[k].lkey = strtoull(p + 1, &p, 0);
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

/* A completion as the device writes it into sub-CQ `sub` of CQ `id`: the fields, then the
 * flags byte with the phase of the sub-CQ's current lap (1 first). */
static void put_cqe(int id, int sub, unsigned req_id, unsigned qpn, int recv, unsigned status,
		    unsigned len, unsigned ah, unsigned src_qp, int has_imm, uint32_t imm)
{
	uint8_t c[32] = {0};
	uint16_t v16;
	v16 = req_id; memcpy(c + 0, &v16, 2);
	c[2] = status;
	v16 = qpn; memcpy(c + 4, &v16, 2);
	v16 = len; memcpy(c + 6, &v16, 2);
	v16 = ah; memcpy(c + 8, &v16, 2);
	v16 = src_qp; memcpy(c + 10, &v16, 2);
	memcpy(c + 12, &imm, 4);
	unsigned k = cq_written[id][sub]++;
	uint8_t flags = (recv ? 2 : 1) << 1;
	if (has_imm)
		flags |= 1 << 3;
	flags |= !((k / cq_n[id]) & 1);
	uint8_t *slot = cq_buf[id] + ((size_t)sub * cq_n[id] + k % cq_n[id]) * cq_esz[id];
	memcpy(slot, c, cq_esz[id]);
	slot[3] = 0;
	__atomic_store_n(slot + 3, flags, __ATOMIC_RELEASE);
}

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return (x > y) - (x < y);
}

/* The benchmark's posts: not inlined, so that callgrind can count them alone. */
__attribute__((noinline)) int bench_post(struct ibv_qp *qp, struct ibv_send_wr *wr,
					 struct ibv_send_wr **bad)
{
	return ibv_post_send(qp, wr, bad);
}

__attribute__((noinline)) int bench_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
					      struct ibv_recv_wr **bad)
{
	return ibv_post_recv(qp, wr, bad);
}

/* `bench`/`rbench`: posts the list `n` times through bench_post (bench_post_recv); after each
 * post, completes its `nw` requests outside the timed call (CQEs into sub-CQ `sub` with
 * request ids nw-1 down to 0: the ids a fresh queue hands out, given back in the order that
 * leaves its pool as it was) and polls them, so the queue never fills. ns per WR (stderr,
 * outside the dump): the median of each post timed with CLOCK_MONOTONIC, minus the median of
 * an empty timed region (medians: a loaded machine preempts some of them). */
static int bench(char **tok, int n, struct ibv_send_wr *swr, struct ibv_recv_wr *rwr, int nw)
{
	int qp = num(tok, n, "qp", 0), reps = num(tok, n, "n", 1), cq = num(tok, n, "cq", 1);
	int sub = num(tok, n, "sub", 0);
	unsigned qpn = num(tok, n, "qpn", 0);
	long long *spent = calloc(reps, sizeof(long long)), *empty = calloc(reps, sizeof(long long));
	struct timespec t0, t1;
	for (int r = 0; r < reps; r++) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		empty[r] = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
	}
	for (int r = 0; r < reps; r++) {
		struct ibv_send_wr *sbad = NULL;
		struct ibv_recv_wr *rbad = NULL;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		int e = swr ? bench_post(qps[qp], swr, &sbad) : bench_post_recv(qps[qp], rwr, &rbad);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		spent[r] = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
		if (e)
			return 1;
		for (int i = nw - 1; i >= 0; i--)
			put_cqe(cq, sub, i, qpn, !swr, 0, 0, 0, 0, 0, 0);
		struct ibv_wc wc[64];
		if (ibv_poll_cq(cqs[cq], nw, wc) != nw)
			return 1;
		for (int i = 0; i < nw; i++)
			if (wc[i].status != IBV_WC_SUCCESS)
				return 1;
	}
	qsort(spent, reps, sizeof(long long), cmp_ll);
	qsort(empty, reps, sizeof(long long), cmp_ll);
	fprintf(stderr, "bench: %.2f ns per WR\n", (double)(spent[reps / 2] - empty[reps / 2]) / nw);
	free(spent);
	free(empty);
	return 0;
}

static int step_send(char **tok, int n)
{
	static struct ibv_send_wr wrs[64];
	static struct ibv_sge sg[64][16];
	int qp = num(tok, n, "qp", 0), nw = 0, start = 1;
	for (int i = 1; i <= n; i++) {
		if (i < n && strcmp(tok[i], "|") != 0)
			continue;
		char **t = tok + start;
		int m = i - start;
		struct ibv_send_wr *w = &wrs[nw];
		memset(w, 0, sizeof(*w));
		w->wr_id = num(t, m, "id", 0);
		const char *op = arg(t, m, "op");
		w->opcode = op && !strcmp(op, "send_imm") ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
		w->imm_data = htobe32(num(t, m, "imm", 0));
		const char *f = arg(t, m, "flags");
		if (f && strstr(f, "sig"))
			w->send_flags |= IBV_SEND_SIGNALED;
		if (f && strstr(f, "inline"))
			w->send_flags |= IBV_SEND_INLINE;
		if (f && strstr(f, "sol"))
			w->send_flags |= IBV_SEND_SOLICITED;
		if (f && strstr(f, "fence"))
			w->send_flags |= IBV_SEND_FENCE;
		w->sg_list = sg[nw];
		w->num_sge = sges(t, m, sg[nw]);
		w->wr.ud.ah = ahs[num(t, m, "ah", 0)];
		w->wr.ud.remote_qpn = num(t, m, "rqpn", 0);
		w->wr.ud.remote_qkey = num(t, m, "qkey", 0);
		if (nw > 0)
			wrs[nw - 1].next = w;
		nw++;
		start = i + 1;
	}
	if (!strcmp(tok[0], "bench"))
		return bench(tok, n, wrs, NULL, nw) ? nw + 1 : 0;
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(qps[qp], wrs, &bad);
	return rc ? (int)(bad - wrs) + 1 : 0;
}

/* `wr`: one ibv_wr_start ... ibv_wr_complete session on a QP made with `ops=` (libefa's
 * extended send API, the only way libefa 44 posts an RDMA READ). Per request: wr_id and
 * wr_flags, the builder (send, send_imm, rdma_read), wr_set_ud_addr, then the SGE list
 * (wr_set_sge_list) or, with `flags=inline`, the buffers as inline data
 * (wr_set_inline_data_list). libefa rolls the whole session back on an error: `= err`. */
static int step_wr(char **tok, int n)
{
	struct ibv_sge sg[16];
	struct ibv_data_buf db[16];
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(qps[num(tok, n, "qp", 0)]);
	if (!qpx)
		return -1;
	ibv_wr_start(qpx);
	for (int i = 1, start = 1; i <= n; i++) {
		if (i < n && strcmp(tok[i], "|") != 0)
			continue;
		char **t = tok + start;
		int m = i - start;
		start = i + 1;
		const char *op = arg(t, m, "op");
		const char *f = arg(t, m, "flags");
		qpx->wr_id = num(t, m, "id", 0);
		qpx->wr_flags = 0;
		if (f && strstr(f, "sig"))
			qpx->wr_flags |= IBV_SEND_SIGNALED;
		if (f && strstr(f, "inline"))
			qpx->wr_flags |= IBV_SEND_INLINE;
		if (op && !strcmp(op, "read"))
			ibv_wr_rdma_read(qpx, num(t, m, "rkey", 0), num(t, m, "raddr", 0));
		else if (op && !strcmp(op, "send_imm"))
			ibv_wr_send_imm(qpx, htobe32(num(t, m, "imm", 0)));
		else
			ibv_wr_send(qpx);
		ibv_wr_set_ud_addr(qpx, ahs[num(t, m, "ah", 0)], num(t, m, "rqpn", 0),
				   num(t, m, "qkey", 0));
		int k = sges(t, m, sg);
		if (f && strstr(f, "inline")) {
			for (int j = 0; j < k; j++) {
				db[j].addr = (void *)(uintptr_t)sg[j].addr;
				db[j].length = sg[j].length;
			}
			ibv_wr_set_inline_data_list(qpx, k, db);
		} else {
			ibv_wr_set_sge_list(qpx, k, sg);
		}
	}
	return ibv_wr_complete(qpx);
}

static int step_recv(char **tok, int n)
{
	static struct ibv_recv_wr wrs[64];
	static struct ibv_sge sg[64][16];
	int id = num(tok, n, "qp", 0), nw = 0, start = 1;
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
	if (!strcmp(tok[0], "rbench"))
		return bench(tok, n, NULL, wrs, nw) ? nw + 1 : 0;
	struct ibv_recv_wr *bad = NULL;
	int rc = ibv_post_recv(qps[id], wrs, &bad);
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

/* A sysfs tree with one EFA device (by its PCI modalias: Amazon 0x1d0f, device 0xefa0),
 * given to libibverbs through SYSFS_PATH. */
static void setup_sysfs_env(void)
{
	static char root[] = "/tmp/efa-oracle-sysfs-XXXXXX";
	if (!mkdtemp(root))
		exit(3);
	snprintf(sysfs_root, sizeof(sysfs_root), "%s", root);
	put(root, "class/infiniband_verbs/abi_version", "6");
	put(root, "class/infiniband_verbs/uverbs0/ibdev", "efa_0");
	put(root, "class/infiniband_verbs/uverbs0/dev", "231:192");
	put(root, "class/infiniband_verbs/uverbs0/abi_version", "1");
	put(root, "class/infiniband/efa_0/node_type", "1: CA");
	put(root, "class/infiniband/efa_0/node_guid", "0000:0000:0000:0000");
	put(root, "class/infiniband/efa_0/fw_ver", "0.0.0.0");
	put(root, "class/infiniband/efa_0/device/modalias",
	    "pci:v00001D0Fd0000EFA0sv00000000sd00000000bc02sc00i00");
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
		if (!strcmp(w, "ctx")) {
			kc.sub_cqs = num(tok, n, "sub_cqs", 2);
			kc.inline_buf = num(tok, n, "inline_buf", 32);
			kc.max_llq = num(tok, n, "max_llq", 1 << 16);
			kc.max_tx_batch = num(tok, n, "max_tx_batch", 0);
			kc.min_sq_wr = num(tok, n, "min_sq_wr", 0);
			kc.max_sq_wr = num(tok, n, "max_sq_wr", 1024);
			kc.max_rq_wr = num(tok, n, "max_rq_wr", 1024);
			kc.max_sq_sge = num(tok, n, "max_sq_sge", 2);
			kc.max_rq_sge = num(tok, n, "max_rq_sge", 2);
			kc.max_rdma = num(tok, n, "max_rdma", 1 << 30);
			kc.caps = num(tok, n, "caps", EFA_QUERY_DEVICE_CAPS_RDMA_READ |
							  EFA_QUERY_DEVICE_CAPS_RNR_RETRY);
			kc.udata_mask = num(tok, n, "udata_mask",
					    EFA_USER_CMDS_SUPP_UDATA_QUERY_DEVICE |
						    EFA_USER_CMDS_SUPP_UDATA_CREATE_AH);
			int nd = 0;
			struct ibv_device **l = ibv_get_device_list(&nd);
			if (!l || nd != 1) {
				fprintf(stderr, "harness: %d devices\n", nd);
				return 1;
			}
			ctx = ibv_open_device(l[0]);
			if (!ctx) {
				printf("  = err\n");
				dump();
				continue;
			}
			pd = ibv_alloc_pd(ctx);
			printf("  udata ");
			hex(ctx_udata, ctx_udata_len);
			printf("\n");
			struct efadv_device_attr da;
			if (efadv_query_device(ctx, &da, sizeof(da)) == 0)
				printf("  device max_sq_wr %u max_rq_wr %u max_sq_sge %u max_rq_sge %u "
				       "inline_buf %u max_rdma %u caps 0x%x\n",
				       da.max_sq_wr, da.max_rq_wr, da.max_sq_sge, da.max_rq_sge,
				       da.inline_buf_size, da.max_rdma_size, da.device_caps);
		} else if (!strcmp(w, "cq")) {
			int id = atoi(tok[1]);
			next_cqn = num(tok, n, "cqn", id);
			next_cq_db = num(tok, n, "db", 1);
			next_cq_db_off = num(tok, n, "db_off", 0x40 * id);
			cqs[id] = ibv_create_cq(ctx, num(tok, n, "cqe", 15), NULL, NULL, 0);
			if (!cqs[id]) { rc = errno; goto done; }
			const struct efa_ibv_create_cq *c = (const void *)last_udata;
			printf("  cqe %u\n", last_cqe);
			print_udata();
			cq_n[id] = last_cqe;
			cq_subs[id] = c->num_sub_cqs;
			cq_esz[id] = c->cq_entry_size;
			memset(cq_written[id], 0, sizeof(cq_written[id]));
			cq_buf[id] = mem_of(last_cq_resp.q_mmap_key);
			char name[32];
			snprintf(name, sizeof(name), "cq%d.buf", id);
			add_region(name, cq_buf[id], (size_t)cq_n[id] * cq_subs[id] * cq_esz[id]);
			if (last_cq_resp.comp_mask & EFA_CREATE_CQ_RESP_DB_OFF) {
				snprintf(name, sizeof(name), "cq%d.db", id);
				add_region(name, mem_of(last_cq_resp.db_mmap_key) + last_cq_resp.db_off, 4);
			}
		} else if (!strcmp(w, "qp")) {
			int id = atoi(tok[1]);
			struct ibv_qp_init_attr a = {0};
			const char *t = arg(tok, n, "type");
			int srd = t && !strcmp(t, "srd");
			a.qp_type = srd ? IBV_QPT_DRIVER : !strcmp(t, "ud") ? IBV_QPT_UD
							  : !strcmp(t, "rc") ? IBV_QPT_RC : IBV_QPT_UC;
			a.send_cq = cqs[num(tok, n, "cq", 1)];
			a.recv_cq = cqs[num(tok, n, "rcq", num(tok, n, "cq", 1))];
			a.cap.max_send_wr = num(tok, n, "send_wr", 0);
			a.cap.max_recv_wr = num(tok, n, "recv_wr", 0);
			a.cap.max_send_sge = num(tok, n, "send_sge", 0);
			a.cap.max_recv_sge = num(tok, n, "recv_sge", 0);
			a.cap.max_inline_data = num(tok, n, "inline", 0);
			a.sq_sig_all = num(tok, n, "sig_all", 0);
			next_qpn = num(tok, n, "qpn", 0x100 + id);
			next_scq_idx = num(tok, n, "scq_idx", 0);
			next_rcq_idx = num(tok, n, "rcq_idx", 1);
			next_llq_off = num(tok, n, "llq_off", 0);
			next_sq_db_off = num(tok, n, "sq_db_off", 0);
			next_rq_db_off = num(tok, n, "rq_db_off", 0);
			last_udata_len = 0;
			const char *ops = arg(tok, n, "ops");
			if (ops) {
				/* the extended send API: efadv_create_qp_ex (SRD), ibv_create_qp_ex (UD) */
				struct ibv_qp_init_attr_ex ax = {0};
				ax.qp_type = a.qp_type;
				ax.send_cq = a.send_cq;
				ax.recv_cq = a.recv_cq;
				ax.cap = a.cap;
				ax.sq_sig_all = a.sq_sig_all;
				ax.pd = pd;
				ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
				if (strstr(ops, "send"))
					ax.send_ops_flags |= IBV_QP_EX_WITH_SEND;
				if (strstr(ops, "imm"))
					ax.send_ops_flags |= IBV_QP_EX_WITH_SEND_WITH_IMM;
				if (strstr(ops, "read"))
					ax.send_ops_flags |= IBV_QP_EX_WITH_RDMA_READ;
				struct efadv_qp_init_attr ea = {0};
				ea.driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD;
				qps[id] = srd ? efadv_create_qp_ex(ctx, &ax, &ea, sizeof(ea))
					      : ibv_create_qp_ex(ctx, &ax);
				a.cap = ax.cap;
			} else {
				qps[id] = srd ? efadv_create_driver_qp(pd, &a, EFADV_QP_DRIVER_TYPE_SRD)
					      : ibv_create_qp(pd, &a);
			}
			if (!qps[id]) { rc = errno; goto done; }
			const struct efa_ibv_create_qp *c = (const void *)last_udata;
			printf("  core send_wr %u recv_wr %u send_sge %u recv_sge %u inline %u type %u\n",
			       last_qp_core.max_send_wr, last_qp_core.max_recv_wr,
			       last_qp_core.max_send_sge, last_qp_core.max_recv_sge,
			       last_qp_core.max_inline_data, last_qp_core.qp_type);
			print_udata();
			printf("  caps send_wr %u recv_wr %u send_sge %u recv_sge %u inline %u\n",
			       a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge,
			       a.cap.max_recv_sge, a.cap.max_inline_data);
			char name[32];
			snprintf(name, sizeof(name), "qp%d.rq", id);
			add_region(name, mem_of(last_qp_resp.rq_mmap_key), c->rq_ring_size);
			snprintf(name, sizeof(name), "qp%d.rqdb", id);
			add_region(name, mem_of(last_qp_resp.rq_db_mmap_key) + last_qp_resp.rq_db_offset, 4);
			snprintf(name, sizeof(name), "qp%d.llq", id);
			add_region(name, mem_of(last_qp_resp.llq_desc_mmap_key) + last_qp_resp.llq_desc_offset,
				   c->sq_ring_size);
			snprintf(name, sizeof(name), "qp%d.sqdb", id);
			add_region(name, mem_of(last_qp_resp.sq_db_mmap_key) + last_qp_resp.sq_db_offset, 4);
		} else if (!strcmp(w, "ah")) {
			int id = atoi(tok[1]);
			struct ibv_ah_attr a = {0};
			a.port_num = 1;
			a.is_global = 1;
			if (arg(tok, n, "dgid"))
				unhex(arg(tok, n, "dgid"), a.grh.dgid.raw);
			next_ahn = num(tok, n, "ahn", id);
			ahs[id] = ibv_create_ah(pd, &a);
			if (!ahs[id]) { rc = errno ? errno : EINVAL; goto done; }
			struct efadv_ah_attr aa;
			if (efadv_query_ah(ahs[id], &aa, sizeof(aa)) == 0)
				printf("  ahn %u\n", aa.ahn);
		} else if (!strcmp(w, "rts")) {
			struct ibv_qp *q = qps[num(tok, n, "qp", 0)];
			struct ibv_qp_attr a = {0};
			a.qp_state = IBV_QPS_INIT;
			a.port_num = 1;
			a.qkey = 0x11111111;
			rc = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
			a.qp_state = IBV_QPS_RTR;
			if (!rc)
				rc = ibv_modify_qp(q, &a, IBV_QP_STATE);
			a.qp_state = IBV_QPS_RTS;
			if (!rc)
				rc = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
		} else if (!strcmp(w, "reset")) {
			struct ibv_qp_attr a = {0};
			a.qp_state = IBV_QPS_RESET;
			rc = ibv_modify_qp(qps[num(tok, n, "qp", 0)], &a, IBV_QP_STATE);
		} else if (!strcmp(w, "close")) {
			for (int i = 0; i < MAXOBJ; i++)
				if (qps[i] && ibv_destroy_qp(qps[i]))
					rc = errno;
			for (int i = 0; i < MAXOBJ; i++)
				if (ahs[i] && ibv_destroy_ah(ahs[i]))
					rc = errno;
			for (int i = 0; i < MAXOBJ; i++)
				if (cqs[i] && ibv_destroy_cq(cqs[i]))
					rc = errno;
			if (ibv_dealloc_pd(pd) || ibv_close_device(ctx))
				rc = errno;
			memset(qps, 0, sizeof(qps));
			memset(ahs, 0, sizeof(ahs));
			memset(cqs, 0, sizeof(cqs));
			nregions = 0; /* the memory of destroyed objects is gone */
		} else if (!strcmp(w, "destroy_qp")) {
			int id = num(tok, n, "qp", 0);
			if (ibv_destroy_qp(qps[id]))
				rc = errno;
			qps[id] = NULL;
		} else if (!strcmp(w, "send") || !strcmp(w, "bench")) {
			errat = step_send(tok, n);
		} else if (!strcmp(w, "wr")) {
			rc = step_wr(tok, n);
		} else if (!strcmp(w, "recv") || !strcmp(w, "rbench")) {
			errat = step_recv(tok, n);
		} else if (!strcmp(w, "cqe")) {
			put_cqe(num(tok, n, "cq", 1), num(tok, n, "sub", 0), num(tok, n, "req_id", 0),
				num(tok, n, "qpn", 0), num(tok, n, "recv", 0), num(tok, n, "status", 0),
				num(tok, n, "len", 0), num(tok, n, "ah", 0), num(tok, n, "src_qp", 0),
				arg(tok, n, "imm") != NULL, num(tok, n, "imm", 0));
		} else if (!strcmp(w, "poll")) {
			struct ibv_wc wc[32];
			memset(wc, 0, sizeof(wc));
			int got = ibv_poll_cq(cqs[num(tok, n, "cq", 1)], num(tok, n, "n", 1), wc);
			if (got < 0)
				printf("  = poll err\n");
			/* the opcode of an error completion is undefined in verbs: masked ("-") */
			for (int i = 0; i < got; i++) {
				char op[16] = "-";
				if (wc[i].status == IBV_WC_SUCCESS)
					snprintf(op, sizeof(op), "%d", wc[i].opcode);
				printf("  wc wr_id %llu status %d opcode %s qp 0x%x len %u flags 0x%x imm 0x%x"
				       " src_qp 0x%x slid 0x%x vendor %u\n",
				       (unsigned long long)wc[i].wr_id, wc[i].status, op,
				       wc[i].qp_num, wc[i].byte_len, wc[i].wc_flags,
				       be32toh(wc[i].imm_data), wc[i].src_qp, wc[i].slid,
				       wc[i].vendor_err);
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
