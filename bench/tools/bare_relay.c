/* The floor for a proxy's CPU per request: one thread, epoll, and for each client one upstream
 * connection opened at accept; every read on one side is written to the other. No HTTP parsing,
 * no pooling, no timeouts, no limits: only what the kernel costs to move a request and its
 * response through a process (two reads and two writes per exchange).
 * Usage: bare_relay LISTEN_PORT UPSTREAM_PORT */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXFD 65536
static int peer[MAXFD];

static int upstream(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) { close(fd); return -1; }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: bare_relay LISTEN_PORT UPSTREAM_PORT\n"); return 2; }
    int lport = atoi(argv[1]), uport = atoi(argv[2]), one = 1;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(lfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(lport)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 4096)) { perror("listen"); return 1; }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd}, evs[512];
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    char buf[16384];
    for (;;) {
        int n = epoll_wait(ep, evs, 512, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                int c;
                while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    int u = upstream(uport);
                    if (u < 0 || c >= MAXFD || u >= MAXFD) { close(c); if (u >= 0) close(u); continue; }
                    peer[c] = u; peer[u] = c;
                    struct epoll_event ce = {.events = EPOLLIN, .data.fd = c}, ue = {.events = EPOLLIN, .data.fd = u};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
                    epoll_ctl(ep, EPOLL_CTL_ADD, u, &ue);
                }
                continue;
            }
            ssize_t r = read(fd, buf, sizeof buf);
            if (r <= 0) { close(peer[fd]); close(fd); continue; }
            if (write(peer[fd], buf, r) != r) { close(peer[fd]); close(fd); }
        }
    }
}
