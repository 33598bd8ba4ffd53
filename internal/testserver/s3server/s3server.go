// Package s3server gives tests an S3-compatible server: the one named by
// TEST_S3_ENDPOINT (with TEST_S3_ACCESS_KEY, TEST_S3_SECRET_KEY and
// TEST_S3_BUCKET), else Versity's gateway (versitygw) started as a throwaway
// process on a free loopback port over a temporary directory. When neither
// can be had, StartForTests fails the test binary naming the install command:
// tests never skip.
package s3server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tombstoneworks/communitydeletion/internal/testserver"
)

// Environment variables that name an existing server instead.
const (
	EnvEndpoint  = "TEST_S3_ENDPOINT"
	EnvAccessKey = "TEST_S3_ACCESS_KEY"
	EnvSecretKey = "TEST_S3_SECRET_KEY"
	EnvBucket    = "TEST_S3_BUCKET"
	EnvRegion    = "TEST_S3_REGION"
)

// InstallCommand installs the gateway the tests start.
const InstallCommand = "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"

const startTimeout = time.Minute

// Server is an S3-compatible server for tests.
type Server struct {
	Endpoint  string // base URL, e.g. http://127.0.0.1:7070
	AccessKey string
	SecretKey string
	Region    string
	Bucket    string // a bucket the tests may use
	Source    string // "versitygw" or EnvEndpoint

	proc *testserver.Process
	dir  string
}

// Start returns the server named by TEST_S3_ENDPOINT, checked to answer, or
// starts versitygw and creates a bucket in it.
func Start(ctx context.Context) (*Server, error) {
	if endpoint := os.Getenv(EnvEndpoint); endpoint != "" {
		return fromEnv(ctx, endpoint)
	}
	return startGateway(ctx)
}

func fromEnv(ctx context.Context, endpoint string) (*Server, error) {
	s := &Server{
		Endpoint: endpoint, AccessKey: os.Getenv(EnvAccessKey), SecretKey: os.Getenv(EnvSecretKey),
		Region: os.Getenv(EnvRegion), Bucket: os.Getenv(EnvBucket), Source: EnvEndpoint,
	}
	if s.Region == "" {
		s.Region = "us-east-1"
	}
	if s.AccessKey == "" || s.SecretKey == "" || s.Bucket == "" {
		return nil, fmt.Errorf("%s is set, but %s, %s or %s is not", EnvEndpoint, EnvAccessKey, EnvSecretKey, EnvBucket)
	}
	if _, err := s.Client("").HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.Bucket)}); err != nil {
		return nil, fmt.Errorf("%s=%s: bucket %s: %w", EnvEndpoint, endpoint, s.Bucket, err)
	}
	return s, nil
}

func startGateway(ctx context.Context) (*Server, error) {
	bin, err := testserver.FindBinary("versitygw")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "s3server-")
	if err != nil {
		return nil, fmt.Errorf("create temporary directory: %w", err)
	}
	data := dir + "/data"
	if err := os.Mkdir(data, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{
		AccessKey: "testaccess", SecretKey: "testsecret" + randomHex(8), Region: "us-east-1",
		Bucket: "cdtest-" + randomHex(6), Source: "versitygw", dir: dir,
	}
	for attempt := 1; ; attempt++ {
		port, err := testserver.FreePort()
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(port)
		s.proc, err = testserver.StartProcess(testserver.ProcessOptions{
			Path: bin, Dir: dir, RemoveDir: true,
			Args: []string{"--access", s.AccessKey, "--secret", s.SecretKey, "--region", s.Region,
				"--port", "127.0.0.1:" + strconv.Itoa(port), "--quiet", "posix", data},
		})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		err = testserver.WaitReady(ctx, s.proc, s.answers)
		if err == nil {
			break
		}
		_ = s.proc.Stop(5 * time.Second)
		if attempt < 5 && strings.Contains(err.Error(), "address already in use") {
			continue
		}
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("versitygw (%s): %w", bin, err)
	}
	if _, err := s.Client("").CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.Bucket)}); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("versitygw: create bucket %s: %w", s.Bucket, err)
	}
	return s, nil
}

// answers reports whether anything answers HTTP at the endpoint.
func (s *Server) answers(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Close stops a server Start started and removes its directory.
func (s *Server) Close() error {
	if s.proc == nil {
		return nil
	}
	err := s.proc.Stop(10 * time.Second)
	if rmErr := os.RemoveAll(s.dir); rmErr != nil {
		err = errors.Join(err, rmErr)
	}
	return err
}

// Credentials returns the server's static credentials.
func (s *Server) Credentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, "")
}

// Client returns a plain SDK client (path-style, no retries) for endpoint,
// or the server's own when endpoint is "": for setting up and inspecting
// what a test's store does.
func (s *Server) Client(endpoint string) *s3.Client {
	if endpoint == "" {
		endpoint = s.Endpoint
	}
	return s3.New(s3.Options{
		Region: s.Region, BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: s.Credentials(), RetryMaxAttempts: 1,
	})
}

// NewRoot returns a key prefix no other test uses, so tests can share the
// bucket.
func NewRoot() string { return "t-" + randomHex(8) + "/" }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// StartForTests starts a server for a test binary's TestMain. On failure it
// prints why and how to get a server, and exits with status 1: tests that
// need S3 never skip. Call the returned func after m.Run to stop it.
func StartForTests() (*Server, func()) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	s, err := Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: tests need an S3-compatible server: %v\n"+
			"Install Versity's gateway with `%s` (the tests find it on PATH or in $(go env GOPATH)/bin), "+
			"or set %s, %s, %s and %s.\n", err, InstallCommand, EnvEndpoint, EnvAccessKey, EnvSecretKey, EnvBucket)
		os.Exit(1)
	}
	return s, func() {
		if err := s.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "s3server: %v\n", err)
		}
	}
}
