/*
 * bindsrc.so: makes a program's TCP connections leave from the address in BIND_SRC (bench/ddos.sh
 * runs slowhttptest from 127.0.0.2-9 with it, the legitimate client keeping 127.0.0.1).
 * Build: cc -O2 -shared -fPIC -o bindsrc.so bindsrc.c -ldl
 * Usage: BIND_SRC=127.0.0.2 LD_PRELOAD=./bindsrc.so slowhttptest ...
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static int (*real)(int, const struct sockaddr *, socklen_t);
    if (!real) real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
    const char *src = getenv("BIND_SRC");
    if (src && addr->sa_family == AF_INET) {
        struct sockaddr_in s = {.sin_family = AF_INET};
        if (inet_pton(AF_INET, src, &s.sin_addr) == 1) {
            int one = 1;
            setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
            bind(fd, (struct sockaddr *)&s, sizeof s);
        }
    }
    return real(fd, addr, len);
}
