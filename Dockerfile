# Limen's container image, for hosts with a container builder:
#   docker build --build-arg VERSION=$(git describe --tags --always) -t limen .
# Where no container runtime works (CI here), `make image` writes the same
# image as an OCI layout without a daemon (deploy/image).

# Build: a static binary (SQLite is pure Go: no cgo, no libc).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
# The patched yamux that go.mod's replace names (third_party/yamux/LIMEN.md).
COPY third_party/ ./third_party/
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/limenhq/limen/gateway/buildinfo.Version=${VERSION} -X github.com/limenhq/limen/gateway/buildinfo.Commit=${COMMIT}" \
      -o /out/limen ./cmd/limen \
 && /out/limen version \
 && mkdir -p /out/data

# Run: distroless static, nonroot (65532), no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/limen /usr/local/bin/limen
# The data volume's mount point, owned by nonroot for an emptyDir or a new PVC.
COPY --from=build --chown=65532:65532 /out/data /var/lib/limen
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/limen"]
