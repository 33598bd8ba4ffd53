package rediscache

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrInvalidURL is matched by every error ParseURL returns (a *URLError).
var ErrInvalidURL = errors.New("rediscache: invalid URL")

// URLError reports why ParseURL refused a URL: the part at fault ("url",
// "scheme", "host", "path", "pattern", "query" or a parameter's name) and
// the reason. It never repeats the URL's password.
type URLError struct {
	Part   string
	Reason string
}

func (e *URLError) Error() string {
	return bound(fmt.Sprintf("rediscache: invalid URL: %s: %s", e.Part, e.Reason))
}

func (e *URLError) Unwrap() error { return ErrInvalidURL }

// Config configures Open: the Cache's Options and exactly one of a single
// server's or a cluster's go-redis options.
type Config struct {
	Options

	Client  *redis.Options        // a single server (or nil)
	Cluster *redis.ClusterOptions // a cluster (or nil)
}

// maxURLBytes bounds what ParseURL reads.
const maxURLBytes = 8192

// Query parameters of the cache itself; the others go to go-redis.
const (
	paramPattern     = "pattern"
	paramScanCount   = "scan_count"
	paramUnlinkBatch = "unlink_batch"
)

// ParseURL parses the URL form of a Config:
//
//	redis://[USER:PASSWORD@]HOST:PORT[/DB]?pattern=T[&pattern=T…][&scan_count=N][&unlink_batch=N][&GO-REDIS OPTIONS]
//	rediss://…                                            the same over TLS
//	redis+cluster://[USER:PASSWORD@]HOST:PORT,HOST:PORT…?pattern=T…   a Redis Cluster (seed nodes)
//	rediss+cluster://…                                    a cluster over TLS
//
// Each pattern is a key-pattern template (see Pattern), percent-encoded as
// a query value ("+" must be written %2B). The remaining parameters are
// go-redis's own (dial_timeout, max_retries, …; see redis.ParseURL and
// redis.ParseClusterURL); an unknown one is refused. Errors are *URLError
// values matching ErrInvalidURL.
func ParseURL(raw string) (Config, error) {
	var cfg Config
	if len(raw) > maxURLBytes {
		return cfg, urlErr("url", "longer than %d bytes", maxURLBytes)
	}
	if strings.ContainsRune(raw, '#') {
		return cfg, urlErr("url", "has a fragment")
	}
	before, after, ok := strings.Cut(raw, "://")
	if !ok {
		return cfg, urlErr("scheme", "missing (redis://, rediss://, redis+cluster:// or rediss+cluster://)")
	}
	scheme := strings.ToLower(before)
	var base string
	var cluster bool
	switch scheme {
	case "redis", "rediss":
		base = scheme
	case "redis+cluster", "rediss+cluster":
		base, cluster = strings.TrimSuffix(scheme, "+cluster"), true
	default:
		return cfg, urlErr("scheme", "%q is not redis, rediss, redis+cluster or rediss+cluster", clip(scheme, 40))
	}
	rest := after
	authority, pathQuery := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, pathQuery = rest[:i], rest[i:]
	}
	path, rawQuery, _ := strings.Cut(pathQuery, "?")
	userinfo, hosts := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	redact := redactor(userinfo)

	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		return Config{}, urlErr("query", "%s", redact(err.Error()))
	}
	cfg.Patterns = query[paramPattern]
	delete(query, paramPattern)
	for _, name := range []string{paramScanCount, paramUnlinkBatch} {
		values, ok := query[name]
		if !ok {
			continue
		}
		delete(query, name)
		n, err := strconv.Atoi(values[0])
		if len(values) != 1 || err != nil || n < 1 {
			return Config{}, urlErr(name, "is not one positive number")
		}
		if name == paramScanCount {
			cfg.ScanCount = int64(n)
		} else {
			cfg.UnlinkBatch = n
		}
	}
	if _, err := cfg.validate(); err != nil {
		part := "query"
		if errors.Is(err, ErrInvalidPattern) {
			part = paramPattern
		}
		return Config{}, urlErr(part, "%s", strings.TrimPrefix(err.Error(), ErrInvalidConfig.Error()+": "))
	}

	hostList := strings.Split(hosts, ",")
	for _, h := range hostList {
		if h == "" || strings.ContainsAny(h, " \t\r\n") {
			return Config{}, urlErr("host", "a host is empty or has a space")
		}
	}
	goRedisURL := base + "://" + userinfo + hostList[0] + path
	if cluster {
		if path != "" && path != "/" && path != "/0" {
			return Config{}, urlErr("path", "a cluster has only database 0")
		}
		for _, h := range hostList[1:] {
			query.Add("addr", h)
		}
		goRedisURL = base + "://" + userinfo + hostList[0]
	} else if len(hostList) > 1 {
		return Config{}, urlErr("host", "several hosts: use redis+cluster:// for a cluster")
	}
	if len(query) > 0 {
		goRedisURL += "?" + query.Encode()
	}
	if cluster {
		cfg.Cluster, err = redis.ParseClusterURL(goRedisURL)
	} else {
		cfg.Client, err = redis.ParseURL(goRedisURL)
	}
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // url.Error repeats the URL, password included
		}
		return Config{}, urlErr("url", "%s", redact(err.Error()))
	}
	return cfg, nil
}

func urlErr(part, format string, args ...any) error {
	return &URLError{Part: part, Reason: fmt.Sprintf(format, args...)}
}

// redactor returns a func that blanks the password of userinfo ("user:pw@")
// out of a text, raw or unescaped.
func redactor(userinfo string) func(string) string {
	_, password, ok := strings.Cut(strings.TrimSuffix(userinfo, "@"), ":")
	if !ok || password == "" {
		return func(s string) string { return s }
	}
	forms := []string{password}
	if p, err := url.PathUnescape(password); err == nil && p != password && p != "" {
		forms = append(forms, p)
	}
	return func(s string) string {
		for _, f := range forms {
			s = strings.ReplaceAll(s, f, "xxxxx")
		}
		return s
	}
}

// Open returns a Cache over a new client built from cfg; Close closes it.
// It makes no request.
func Open(cfg Config) (*Cache, error) {
	var client redis.UniversalClient
	switch {
	case cfg.Client != nil && cfg.Cluster != nil:
		return nil, fmt.Errorf("%w: both Client and Cluster are set", ErrInvalidConfig)
	case cfg.Client != nil:
		client = redis.NewClient(cfg.Client)
	case cfg.Cluster != nil:
		client = redis.NewClusterClient(cfg.Cluster)
	default:
		return nil, fmt.Errorf("%w: neither Client nor Cluster is set", ErrInvalidConfig)
	}
	c, err := New(client, cfg.Options)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	c.owned = true
	return c, nil
}

// OpenURL is ParseURL followed by Open.
func OpenURL(raw string) (*Cache, error) {
	cfg, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	return Open(cfg)
}
