package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// DockerAvailable reports whether a Docker engine answers, so that
// testcontainers-go can start services. A docker client without an engine (as
// on the project's CI machines) does not count.
func DockerAvailable() bool {
	if h := os.Getenv("DOCKER_HOST"); h == "" {
		if _, err := os.Stat("/var/run/docker.sock"); err != nil {
			return false
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false
	}
	defer p.Close()
	return p.Health(ctx) == nil
}

// startPostgresContainer starts PostgreSQL 15 in Docker for the whole test
// binary (the container is reaped by testcontainers' Ryuk when it exits).
func startPostgresContainer() (string, error) {
	ctx := context.Background()
	c, err := tcpostgres.Run(ctx, "postgres:15",
		tcpostgres.WithDatabase("searchsync"), tcpostgres.WithUsername("searchsync"), tcpostgres.WithPassword("searchsync"),
		tcpostgres.BasicWaitStrategies())
	if err != nil {
		return "", fmt.Errorf("start postgres container: %w", err)
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}

// ElasticsearchContainer starts a single-node Elasticsearch 8 (security off)
// and returns its URL. Only called where DockerAvailable is true.
func ElasticsearchContainer(ctx context.Context, image string) (string, func(), error) {
	if image == "" {
		image = "elasticsearch:8.15.3"
	}
	req := testcontainers.ContainerRequest{
		Image:        image,
		ExposedPorts: []string{"9200/tcp"},
		Env: map[string]string{
			"discovery.type":         "single-node",
			"xpack.security.enabled": "false",
			"ES_JAVA_OPTS":           "-Xms512m -Xmx512m",
		},
		WaitingFor: wait.ForHTTP("/_cluster/health").WithPort("9200/tcp").WithStartupTimeout(3 * time.Minute),
	}
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
	if err != nil {
		return "", nil, fmt.Errorf("start elasticsearch container: %w", err)
	}
	ep, err := c.PortEndpoint(ctx, "9200/tcp", "http")
	if err != nil {
		_ = c.Terminate(ctx) // best effort: the error that matters is err
		return "", nil, err
	}
	return strings.TrimRight(ep, "/"), func() { _ = c.Terminate(context.Background()) }, nil
}
