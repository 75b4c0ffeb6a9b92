# The relay image used by compose.yaml (for users with Docker).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -o /searchsync ./cmd/searchsync

FROM debian:12-slim
COPY --from=build /searchsync /searchsync
COPY examples/compose/searchsync.yaml /etc/searchsync.yaml
ENV SEARCHSYNC_CONFIG=/etc/searchsync.yaml
EXPOSE 8080
ENTRYPOINT ["/searchsync"]
CMD ["run"]
