# Multi-stage build: compile with the locked dependency set, run as non-root
# in a minimal image.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# The source revision for kruntimes_build_info (the build context has no
# .git): docker build --build-arg KRUNTIMES_REVISION=$(git rev-parse --short=12 HEAD) .
ARG KRUNTIMES_REVISION
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
COPY benches ./benches
COPY tests ./tests
COPY examples ./examples
RUN cargo build --release --locked --bin kruntimes-scheduler

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/kruntimes-scheduler /usr/local/bin/kruntimes-scheduler
COPY --from=build /src/examples /usr/share/kruntimes-scheduler/examples
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/kruntimes-scheduler"]
CMD ["serve", "--listen", "0.0.0.0:8080"]
