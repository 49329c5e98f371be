/* The floor for keep-alive CPU per request: one thread, epoll, and for every readable socket one
 * read and one write of a fixed response. No HTTP parsing, no timeouts, no limits: not a server
 * anyone should run, only a measure of what the kernel alone costs per request.
 * Usage: bare_epoll PORT [BODY_BYTES]
 *   without BODY_BYTES: "Hello, World\n" (the core bench);
 *   with BODY_BYTES:    a body of that many bytes under the fields a cache hit carries (Age,
 *                       Cache-Status, ...), so the floor matches the cache benches' responses. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bare_response.h"

int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 18082, one = 1;
    build(argc > 2 ? atol(argv[2]) : -1);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(lfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 4096)) { perror("listen"); return 1; }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd}, evs[512];
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    char buf[8192];
    for (;;) {
        int n = epoll_wait(ep, evs, 512, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                int c;
                while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                }
                continue;
            }
            ssize_t r = read(fd, buf, sizeof buf);
            if (r <= 0) { close(fd); continue; }
            if (write(fd, resp, resp_len) < 0) close(fd);
        }
    }
}
