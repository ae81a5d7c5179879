# The `bench` binary in a small non-root image: one image for every role (`serve --role replica|gateway`, or a
# single process). Models are not in it: mount a model directory and pass --model (deploy/kubernetes does).
#   docker build -t embedding-workbench .
FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY . .
# The release binary only; g++ (in this image) builds the tokenizers crate's suffix-array helper.
RUN cargo build --release --locked -p harness --bin bench \
 && cp target/release/bench /bench

FROM debian:bookworm-slim
# ca-certificates: only for fetching the default model when no --model is given (that also needs pip, not here).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent bench
COPY --from=build /bench /usr/local/bin/bench
USER 10001:10001
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/bench"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
