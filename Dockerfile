# weir in a container: a multi-stage build, a small runtime image, not root, port 8080.
#   docker build -t weir .
#   docker run --rm -p 8080:8080 weir                      # serves deploy/container.yaml
#   docker run --rm -p 8080:8080 -v $PWD/my.yaml:/etc/weir/weir.yaml:ro weir
# Reload: docker kill --signal HUP <container>. Reopen logs: --signal USR1.
# The same layout as the Debian package: /etc/weir/weir.yaml and its www/, ACME state in
# /var/lib/weir/acme (mount a volume there to keep certificates across containers).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# The dist profile, as the Debian package (packaging/deb): stripped, no debug info. Nothing but
# Rust is needed (no protoc: etcd's API is declared in crates/weir/src/cluster/etcd_rpc.rs).
RUN cargo build --profile dist --locked -p weir

FROM debian:bookworm-slim
# CA certificates: ACME directories and https:// upstreams are verified against them.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin weir \
    && mkdir -p /etc/weir /var/log/weir /var/lib/weir/acme && chown weir /var/log/weir /var/lib/weir/acme
COPY --from=build /src/target/dist/weir /usr/local/bin/weir
COPY deploy/container.yaml /etc/weir/weir.yaml
COPY examples/www /etc/weir/www
USER weir
# Only the service port: the admin API listens on the container's loopback (deploy/container.yaml);
# to publish it, run with -e WEIR_ADMIN=0.0.0.0:9901 -p 127.0.0.1:9901:9901 on a trusted host.
EXPOSE 8080
ENV WEIR_LISTEN=0.0.0.0:8080
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/weir"]
CMD ["run", "-c", "/etc/weir/weir.yaml"]
