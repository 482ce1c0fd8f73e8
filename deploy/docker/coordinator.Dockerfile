# nqueens-coordinator on an empty base: one static binary, a non-root user, a state directory.
# Build context: the directory staged by deploy/stage-images.sh (nothing here is ever pulled).
FROM scratch
COPY rootfs/ /
COPY --chown=10001:10001 data/ /data/
COPY bin/nqueens-coordinator /usr/local/bin/nqueens-coordinator
ENV PATH=/usr/local/bin
USER 10001:10001
WORKDIR /data
ENV NQ_STATE=/data/nqueens.db \
    NQ_LISTEN=0.0.0.0:7447 \
    NQ_HTTP_LISTEN=0.0.0.0:9447
EXPOSE 7447 9447
VOLUME ["/data"]
HEALTHCHECK --interval=5s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/nqueens-coordinator", "healthcheck", "--connect", "http://127.0.0.1:7447"]
ENTRYPOINT ["/usr/local/bin/nqueens-coordinator"]
CMD ["serve"]
