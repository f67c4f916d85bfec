/*
 * ibv_reg_dmabuf_mr on a device without dma-buf support (rxe), as libibverbs' callers see
 * it: NULL and errno for a NULL PD (EINVAL), a negative or closed fd (EBADF), a file that is
 * not a dma-buf (a memfd: EINVAL), and, where the kernel has udmabuf (a sealed memfd turned
 * into a dma-buf through /dev/udmabuf), a range past the dma-buf's end (EINVAL) and a valid
 * one that the device refuses (EOPNOTSUPP). Nothing stays registered: the PD deallocates.
 *
 * Usage: dmabuf_mr DEVICE. Prints "udmabuf: ..." then "dmabuf_mr: all checks passed".
 * Built static on librverbs.a.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK(c, what)                                                                 \
	do {                                                                           \
		if (!(c)) {                                                            \
			fprintf(stderr, "dmabuf_mr: %s failed (errno %d: %s)\n", what, \
				errno, strerror(errno));                               \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

/* ibv_reg_dmabuf_mr must fail with `want` */
static void refused(struct ibv_pd *pd, uint64_t off, size_t len, int fd, int want,
		    const char *what)
{
	errno = 0;
	struct ibv_mr *mr = ibv_reg_dmabuf_mr(pd, off, len, 0, fd, IBV_ACCESS_LOCAL_WRITE);
	if (mr || errno != want) {
		fprintf(stderr, "dmabuf_mr: %s: got %p errno %d (%s), want NULL errno %d (%s)\n",
			what, (void *)mr, errno, strerror(errno), want, strerror(want));
		exit(1);
	}
}

/* linux/udmabuf.h */
struct udmabuf_create {
	uint32_t memfd;
	uint32_t flags;
	uint64_t offset;
	uint64_t size;
};
#define UDMABUF_CREATE _IOW('u', 0x42, struct udmabuf_create)

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: dmabuf_mr DEVICE\n");
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
	CHECK(ctx, "ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");

	int memfd = memfd_create("dmabuf_mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	CHECK(memfd >= 0, "memfd_create");
	CHECK(ftruncate(memfd, 8192) == 0, "ftruncate");
	CHECK(fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK) == 0, "F_ADD_SEALS");

	refused(NULL, 0, 4096, memfd, EINVAL, "NULL pd");
	refused(pd, 0, 4096, -1, EBADF, "fd -1");
	refused(pd, 0, 4096, 1000, EBADF, "closed fd 1000");
	refused(pd, 0, 4096, memfd, EINVAL, "a memfd (not a dma-buf)");

	int dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
	if (dev < 0) {
		CHECK(errno == ENOENT, "open /dev/udmabuf");
		printf("udmabuf: none in this kernel\n");
	} else {
		struct udmabuf_create c = {.memfd = memfd, .flags = 1, .offset = 0, .size = 8192};
		int buf = ioctl(dev, UDMABUF_CREATE, &c);
		CHECK(buf >= 0, "UDMABUF_CREATE");
		refused(pd, 4096, 8192, buf, EINVAL, "a range past the dma-buf's end");
		refused(pd, 0, 8192, buf, EOPNOTSUPP, "a dma-buf on a device without support");
		printf("udmabuf: refused with EOPNOTSUPP\n");
		close(buf);
		close(dev);
	}
	close(memfd);
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd (no region left on it)");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	printf("dmabuf_mr: all checks passed\n");
	return 0;
}
