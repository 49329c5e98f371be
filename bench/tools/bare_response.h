/* The fixed responses of the bare floors (bare_epoll.c, bare_uring.c): without a body size,
 * "Hello, World\n" (the core bench); with one, a body of that many bytes under the fields a
 * cache hit carries (Age, Cache-Status, ...), so a floor matches the cache benches' responses. */
#include <stdio.h>
#include <string.h>

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

