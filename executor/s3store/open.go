package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// Limits of Config's retry settings.
const (
	MaxAttemptsLimit = 100
	MaxBackoffLimit  = 5 * time.Minute
)

// Config configures Open: the Store's Options, plus how to build its client.
// Credentials and region come from the SDK's default chain (environment,
// shared config and credentials files, container and instance roles), each
// overridden by the field that is set.
type Config struct { //nolint:recvcheck // URL takes a copy so a Config value can print itself; the setters need a pointer
	Options

	// Endpoint is the base URL of an S3-compatible server, e.g.
	// "http://127.0.0.1:9000"; empty means Amazon S3.
	Endpoint string
	// Region overrides the default chain's region. With an Endpoint and no
	// region anywhere, "us-east-1" is used.
	Region string
	// PathStyle addresses the bucket in the path (host/bucket/key) rather
	// than the host name (bucket.host/key), as most S3-compatible servers
	// need.
	PathStyle bool
	// MaxAttempts is the standard retryer's attempts per call, the first
	// included: 0 means the SDK's default (3); at most MaxAttemptsLimit.
	MaxAttempts int
	// MaxBackoff caps the retryer's delay between attempts, throttling
	// retries included: 0 means the SDK's default (20s); at most
	// MaxBackoffLimit.
	MaxBackoff time.Duration
	// Profile selects a shared-config profile instead of AWS_PROFILE's.
	Profile string
	// Credentials, if not nil, replaces the default credential chain. It
	// has no URL form: a URL never carries secrets.
	Credentials aws.CredentialsProvider
	// HTTPClient, if not nil, replaces the SDK's HTTP client.
	HTTPClient aws.HTTPClient
}

// check validates the client-building fields of c.
func (c *Config) check() error {
	if c.Endpoint != "" {
		if err := checkEndpoint(c.Endpoint); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
	}
	if c.Region != "" {
		if err := checkRegion(c.Region); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
	}
	if c.MaxAttempts < 0 || c.MaxAttempts > MaxAttemptsLimit {
		return fmt.Errorf("%w: MaxAttempts %d is not between 0 and %d", ErrInvalidConfig, c.MaxAttempts, MaxAttemptsLimit)
	}
	if c.MaxBackoff < 0 || c.MaxBackoff > MaxBackoffLimit {
		return fmt.Errorf("%w: MaxBackoff %s is not between 0 and %s", ErrInvalidConfig, c.MaxBackoff, MaxBackoffLimit)
	}
	return nil
}

// Open builds an S3 client from cfg and the SDK's default chain and returns a
// Store over it. The client retries with the SDK's standard retryer (its
// exponential backoff with jitter, a slower base for throttling answers such
// as 503 SlowDown, and its retry quota), shaped by MaxAttempts and
// MaxBackoff, and also retrying an answer cut short. Open makes no request.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	opts := cfg.Options
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	load := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				if cfg.MaxAttempts > 0 {
					o.MaxAttempts = cfg.MaxAttempts
				}
				if cfg.MaxBackoff > 0 {
					o.MaxBackoff = cfg.MaxBackoff
				}
				o.Retryables = append(o.Retryables, retry.IsErrorRetryableFunc(cutShort))
			})
		}),
	}
	if cfg.Region != "" {
		load = append(load, config.WithRegion(cfg.Region))
	}
	if cfg.Profile != "" {
		load = append(load, config.WithSharedConfigProfile(cfg.Profile))
	}
	if cfg.Credentials != nil {
		load = append(load, config.WithCredentialsProvider(cfg.Credentials))
	}
	if cfg.HTTPClient != nil {
		load = append(load, config.WithHTTPClient(cfg.HTTPClient))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fmt.Errorf("%w: load AWS configuration: %s", ErrInvalidConfig, bound(err.Error()))
	}
	if awsCfg.Region == "" {
		if cfg.Endpoint == "" {
			return nil, fmt.Errorf("%w: no region: set Region, AWS_REGION or a profile's region", ErrInvalidConfig)
		}
		awsCfg.Region = "us-east-1"
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		next := o.HTTPClient
		if next == nil {
			next = awshttp.NewBuildableClient()
		}
		o.HTTPClient = plainBodyClient{next: next}
	})
	return New(client, opts)
}

// cutShort retries an answer whose body ended early (a connection cut in
// the middle of a listing page), which the SDK's defaults do not retry. Every
// call the store makes is idempotent, so sending it again is safe.
func cutShort(err error) aws.Ternary {
	var de *smithy.DeserializationError
	if errors.As(err, &de) && (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)) {
		return aws.TrueTernary
	}
	return aws.UnknownTernary
}

// OpenURL is ParseURL followed by Open.
func OpenURL(ctx context.Context, rawURL string) (*Store, error) {
	cfg, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return Open(ctx, cfg)
}
