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

static const char HELLO[] =
    "HTTP/1.1 200 OK\r\nServer: bare\r\nContent-Type: text/plain; charset=utf-8\r\n"
    "Content-Length: 13\r\nDate: Sat, 21 Nov 2026 00:00:00 GMT\r\n\r\nHello, World\n";

static char resp[1 << 20];
static size_t resp_len;

static void build(long body) {
    if (body < 0) { memcpy(resp, HELLO, sizeof HELLO - 1); resp_len = sizeof HELLO - 1; return; }
    if (body > (long)sizeof resp - 512) body = sizeof resp - 512;
    int h = snprintf(resp, 512,
                     "HTTP/1.1 200 OK\r\nServer: bare\r\nDate: Sat, 21 Nov 2026 00:00:00 GMT\r\n"
                     "Content-Type: text/plain\r\nContent-Length: %ld\r\n"
                     "Last-Modified: Sat, 21 Nov 2026 00:00:00 GMT\r\nETag: \"6b1f3a00-%lx\"\r\n"
                     "Accept-Ranges: bytes\r\nAge: 0\r\nCache-Status: bare; hit; ttl=86400\r\n"
                     "X-Cache-By: bare\r\n\r\n",
                     body, body);
    memset(resp + h, 'x', body);
    resp_len = h + body;
}

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
