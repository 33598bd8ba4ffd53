package ephemeralpg

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// dockerImage is the image of the PostgreSQL container.
const dockerImage = "postgres:16-alpine"

// startDocker starts a PostgreSQL container if a Docker daemon is
// reachable, and returns a Server whose Close removes the container.
func startDocker(ctx context.Context, opts Options, logf func(string, ...any)) (*Server, error) {
	if err := dockerHealth(ctx); err != nil {
		return nil, fmt.Errorf("no usable Docker daemon: %w", err)
	}
	settings, err := serverSettings(opts)
	if err != nil {
		return nil, err
	}
	cmd := []string{"postgres"}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		cmd = append(cmd, "-c", name+"="+settings[name])
	}

	ctr, err := tcpostgres.Run(ctx, dockerImage,
		testcontainers.WithLogger(log.NewNoopLogger()),
		testcontainers.WithCmd(cmd...),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return nil, fmt.Errorf("run %s: %w", dockerImage, err)
	}
	admin, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return nil, fmt.Errorf("connection string of %s container: %w", dockerImage, err)
	}
	logf("ephemeralpg: started Docker container %s (%s)", ctr.GetContainerID(), dockerImage)

	closeFn := func(ctx context.Context) error {
		return testcontainers.TerminateContainer(ctr, testcontainers.StopContext(ctx))
	}
	return newServer(SourceDocker, admin, logf, closeFn), nil
}

// dockerHealth reports whether testcontainers can reach a Docker daemon.
// Parts of testcontainers panic when there is none, so a panic counts as
// an error.
func dockerHealth(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("testcontainers panicked: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	provider, err := testcontainers.NewDockerProvider(testcontainers.WithLogger(log.NewNoopLogger()))
	if err != nil {
		return err
	}
	return provider.Health(ctx) // Health closes the provider
}
