# Multi-stage build: compile with the locked dependency set (release
# profile: LTO, stripped), run as non-root in a minimal image.
#
#   docker build --build-arg KRUNTIMES_REVISION=$(git rev-parse --short=12 HEAD) \
#     -t REGISTRY/kruntimes-scheduler:TAG .
FROM rust:1.95-bookworm AS build
WORKDIR /src

# Dependencies first, in a layer of their own: only Cargo.toml, Cargo.lock
# and build.rs invalidate it, so a source change rebuilds this crate alone.
# The crate's targets are stubs here (every [[bench]] Cargo.toml declares
# must exist for the manifest to load).
COPY Cargo.toml Cargo.lock build.rs ./
RUN mkdir -p src benches \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && awk '/^\[\[bench\]\]/{b=1; next} b && /^name *=/{gsub(/[" ]/, "", $0); sub(/^name=/, "", $0); print; b=0}' Cargo.toml \
    | while read -r bench; do echo 'fn main() {}' > "benches/$bench.rs"; done \
 && cargo build --release --locked --bin kruntimes-scheduler \
 && rm -rf src benches

COPY src ./src
COPY benches ./benches
COPY tests ./tests
COPY examples ./examples
# The source revision for kruntimes_build_info (the build context has no
# .git). Declared after the dependency layer, so a new revision does not
# rebuild the dependencies.
ARG KRUNTIMES_REVISION
# The stubs' build left newer outputs than the copied sources' mtimes:
# touch the crate roots so cargo rebuilds the crate itself.
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked --bin kruntimes-scheduler

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/kruntimes-scheduler /usr/local/bin/kruntimes-scheduler
COPY --from=build /src/examples /usr/share/kruntimes-scheduler/examples
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/kruntimes-scheduler"]
CMD ["serve", "--listen", "0.0.0.0:8080"]
