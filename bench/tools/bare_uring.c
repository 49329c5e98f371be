/* The io_uring counterpart of bare_epoll.c (issue 35 §6): one thread, one ring, and for every
 * request one receive and one send of a fixed response. Multishot accept, multishot receive
 * into a provided buffer ring, sends without waiting for their completion to read again,
 * SINGLE_ISSUER + DEFER_TASKRUN. No HTTP parsing, no timeouts, no limits: the floor an io_uring
 * transport could reach on this kernel, to compare with the epoll floor and with weir.
 * Usage: bare_uring PORT [BODY_BYTES]   (the same responses as bare_epoll) */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bare_response.h"

/* user_data: the kind in the top byte, the descriptor below. */
enum { ACCEPT = 1, RECV = 2, SEND = 3 };
#define UD(kind, fd) (((unsigned long long)(kind) << 56) | (unsigned)(fd))
#define BUFS 4096
#define BUF_SIZE 2048
#define BGID 1

static struct io_uring ring;
static struct io_uring_buf_ring *br;
static char *bufs;

/* liburing 2.3 (Debian 12) has no io_uring_setup_buf_ring: the ring is allocated and
 * registered here. */
static struct io_uring_buf_ring *setup_buf_ring(unsigned entries, int bgid) {
    void *mem;
    if (posix_memalign(&mem, 4096, entries * sizeof(struct io_uring_buf))) return NULL;
    struct io_uring_buf_ring *r = mem;
    io_uring_buf_ring_init(r);
    struct io_uring_buf_reg reg = {.ring_addr = (unsigned long)r, .ring_entries = entries, .bgid = bgid};
    int e = io_uring_register_buf_ring(&ring, &reg, 0);
    if (e) { fprintf(stderr, "buf ring: %s\n", strerror(-e)); return NULL; }
    return r;
}

static struct io_uring_sqe *sqe(void) {
    struct io_uring_sqe *s = io_uring_get_sqe(&ring);
    if (!s) { io_uring_submit(&ring); s = io_uring_get_sqe(&ring); }
    return s;
}

static void recv_on(int fd) {
    struct io_uring_sqe *s = sqe();
    io_uring_prep_recv_multishot(s, fd, NULL, 0, 0);
    s->flags |= IOSQE_BUFFER_SELECT;
    s->buf_group = BGID;
    io_uring_sqe_set_data64(s, UD(RECV, fd));
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: bare_uring PORT [BODY_BYTES]\n"); return 2; }
    build(argc > 2 ? atol(argv[2]) : -1);
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1])),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 4096)) { perror("listen"); return 1; }

    struct io_uring_params p = {0};
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN;
    if (io_uring_queue_init_params(4096, &ring, &p) < 0) { perror("io_uring"); return 1; }
    br = setup_buf_ring(BUFS, BGID);
    if (!br) return 1;
    bufs = malloc((size_t)BUFS * BUF_SIZE);
    for (int i = 0; i < BUFS; i++)
        io_uring_buf_ring_add(br, bufs + (size_t)i * BUF_SIZE, BUF_SIZE, i, io_uring_buf_ring_mask(BUFS), i);
    io_uring_buf_ring_advance(br, BUFS);

    struct io_uring_sqe *s = sqe();
    io_uring_prep_multishot_accept(s, ls, NULL, NULL, 0);
    io_uring_sqe_set_data64(s, UD(ACCEPT, ls));

    for (;;) {
        io_uring_submit_and_wait(&ring, 1);
        struct io_uring_cqe *c;
        unsigned head, n = 0;
        io_uring_for_each_cqe(&ring, head, c) {
            n++;
            unsigned long long ud = c->user_data;
            int kind = ud >> 56, fd = (int)(ud & 0xffffffff);
            if (kind == ACCEPT) {
                if (c->res >= 0) {
                    setsockopt(c->res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    recv_on(c->res);
                }
                if (!(c->flags & IORING_CQE_F_MORE)) {
                    struct io_uring_sqe *x = sqe();
                    io_uring_prep_multishot_accept(x, ls, NULL, NULL, 0);
                    io_uring_sqe_set_data64(x, UD(ACCEPT, ls));
                }
            } else if (kind == RECV) {
                if (c->res <= 0) {
                    if (c->res == -ENOBUFS) { recv_on(fd); continue; }
                    close(fd);
                    continue;
                }
                int bid = c->flags >> IORING_CQE_BUFFER_SHIFT;
                /* One response per receive: keep-alive clients send one request at a time. */
                struct io_uring_sqe *x = sqe();
                io_uring_prep_send(x, fd, resp, resp_len, MSG_NOSIGNAL);
                io_uring_sqe_set_data64(x, UD(SEND, fd));
                x->flags |= IOSQE_CQE_SKIP_SUCCESS;
                io_uring_buf_ring_add(br, bufs + (size_t)bid * BUF_SIZE, BUF_SIZE, bid,
                                      io_uring_buf_ring_mask(BUFS), 0);
                io_uring_buf_ring_advance(br, 1);
                if (!(c->flags & IORING_CQE_F_MORE)) recv_on(fd);
            }
            /* SEND completions come only on failure (CQE_SKIP_SUCCESS): the receive sees the close. */
        }
        io_uring_cq_advance(&ring, n);
    }
}
