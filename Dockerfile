# Build stage: a release binary from the locked dependency set.
FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN cargo build --release --locked --bin slotbridge

# Runtime stage: the binary alone, run as an unprivileged user.
FROM debian:bookworm-slim
RUN useradd --system --no-create-home --uid 10001 slotbridge
COPY --from=build /src/target/release/slotbridge /usr/local/bin/slotbridge
COPY config /etc/slotbridge
USER slotbridge
# Inside a container the proxy must listen on every interface to be reachable.
ENV SLOTBRIDGE_LISTEN=0.0.0.0:6380 \
    SLOTBRIDGE_ADMIN_LISTEN=0.0.0.0:9121
EXPOSE 6380 9121
# The binary probes its own /healthz, so the image needs no curl.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["slotbridge", "healthcheck"]
ENTRYPOINT ["slotbridge"]
