# nqueens-worker on an empty base: one static binary and a non-root user. Stateless.
# Build context: the directory staged by deploy/stage-images.sh (nothing here is ever pulled).
FROM scratch
COPY rootfs/ /
COPY bin/nqueens-worker /usr/local/bin/nqueens-worker
ENV PATH=/usr/local/bin
USER 10001:10001
WORKDIR /
ENTRYPOINT ["/usr/local/bin/nqueens-worker"]
