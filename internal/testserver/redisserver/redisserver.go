// Package redisserver gives tests Redis: the server named by TEST_REDIS_URL,
// else redis-server started as a throwaway process on a free loopback port
// without persistence; StartLocal always starts one (for tests that restart
// it), and StartCluster starts a Redis Cluster of several masters. When no
// Redis can be had, StartForTests fails the test binary naming the package
// to install: tests never skip.
package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tombstoneworks/communitydeletion/internal/testserver"
)

// EnvURL names an existing Redis (a redis:// URL) to use instead.
const EnvURL = "TEST_REDIS_URL"

// InstallCommand installs redis-server and redis-cli (Debian's package).
const InstallCommand = "apt-get install redis-server"

const startTimeout = time.Minute

// Server is one Redis server for tests.
type Server struct {
	URL    string // redis://127.0.0.1:PORT/0, or TEST_REDIS_URL
	Addr   string // 127.0.0.1:PORT ("" for TEST_REDIS_URL)
	Source string // "redis-server" or EnvURL

	bin   string
	dir   string
	port  int
	extra []string
	proc  *testserver.Process
}

// Start returns the server named by TEST_REDIS_URL, or StartLocal's.
func Start(ctx context.Context) (*Server, error) {
	if u := os.Getenv(EnvURL); u != "" {
		return &Server{URL: u, Source: EnvURL}, nil
	}
	return StartLocal(ctx, nil)
}

// StartLocal starts redis-server on a free loopback port in a temporary
// directory, with no persistence (--save "" --appendonly no) and extra
// arguments appended.
func StartLocal(ctx context.Context, extra []string) (*Server, error) {
	bin, err := testserver.FindBinary("redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redisserver-")
	if err != nil {
		return nil, fmt.Errorf("create temporary directory: %w", err)
	}
	s := &Server{bin: bin, dir: dir, extra: extra, Source: "redis-server"}
	for attempt := 1; ; attempt++ {
		if s.port, err = testserver.FreePort(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		err = s.start(ctx)
		if err == nil {
			break
		}
		if attempt < 5 && strings.Contains(err.Error(), "Address already in use") {
			continue
		}
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s.Addr = "127.0.0.1:" + strconv.Itoa(s.port)
	s.URL = "redis://" + s.Addr + "/0"
	return s, nil
}

// start starts the server on s.port and waits until it answers PING.
func (s *Server) start(ctx context.Context) error {
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "",
	}, s.extra...)
	proc, err := testserver.StartProcess(testserver.ProcessOptions{
		Path: s.bin, Args: args, Dir: s.dir, LogName: "redis.log", RemoveDir: true,
	})
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(s.port)
	if err := testserver.WaitReady(ctx, proc, func(ctx context.Context) error { return Ping(ctx, addr) }); err != nil {
		_ = proc.Stop(5 * time.Second)
		return fmt.Errorf("redis-server (%s) on %s: %w", s.bin, addr, err)
	}
	s.proc = proc
	return nil
}

// Restart saves the data set to disk (SAVE, even without persistence
// configured), stops the server and starts it again on the same port and
// directory, where it loads the saved data: a server restart that keeps the
// keys but not the connections, nor any SCAN cursor's meaning.
func (s *Server) Restart(ctx context.Context) error {
	if s.proc == nil {
		return errors.New("redisserver: cannot restart a server it did not start")
	}
	if _, err := Command(ctx, s.Addr, "SAVE"); err != nil {
		return fmt.Errorf("redisserver: SAVE before restart: %w", err)
	}
	if err := s.proc.Stop(10 * time.Second); err != nil {
		return err
	}
	s.proc = nil
	// The port is ours again in a moment; another process could take it,
	// which fails the test with a clear error rather than hangs it.
	return s.start(ctx)
}

// Close stops a server StartLocal started and removes its directory.
func (s *Server) Close() error {
	if s.dir == "" {
		return nil
	}
	var err error
	if s.proc != nil {
		err = s.proc.Stop(10 * time.Second)
	}
	if rmErr := os.RemoveAll(s.dir); rmErr != nil {
		err = errors.Join(err, rmErr)
	}
	return err
}

// Ping sends PING to addr and expects PONG.
func Ping(ctx context.Context, addr string) error {
	reply, err := Command(ctx, addr, "PING")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("PING answered %q", reply)
	}
	return nil
}

// Command sends one command (arguments without spaces) to addr over a new
// connection and returns its first reply line without the type byte; an
// error reply is an error.
func Command(ctx context.Context, addr string, args ...string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	} else {
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	if line[0] == '-' {
		return "", fmt.Errorf("redis: %s", line[1:])
	}
	return line[1:], nil
}

// Cluster is a Redis Cluster of masters without replicas.
type Cluster struct {
	Addrs []string
	nodes []*Server
}

// StartCluster starts n redis-server processes in cluster mode (each on a
// free port whose cluster-bus port, +10000, is free too), joins them with
// redis-cli --cluster create and waits until every node reports
// cluster_state:ok.
func StartCluster(ctx context.Context, n int) (_ *Cluster, err error) {
	cli, err := testserver.FindBinary("redis-cli")
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	for range n {
		node, err := startClusterNode(ctx)
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, node)
		c.Addrs = append(c.Addrs, node.Addr)
	}
	args := append(append([]string{"--cluster", "create"}, c.Addrs...), "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, strings.TrimSpace(string(out)))
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for _, addr := range c.Addrs {
		for {
			info, err := clusterInfo(ctx, addr)
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("cluster node %s not ok: %v (%w)", addr, err, ctx.Err())
			case <-tick.C:
			}
		}
	}
	return c, nil
}

func startClusterNode(ctx context.Context) (*Server, error) {
	for attempt := 1; ; attempt++ {
		port, err := testserver.FreePort()
		if err != nil {
			return nil, err
		}
		if port+10000 > 65535 || !portFree(port+10000) {
			if attempt > 50 {
				return nil, errors.New("no free port with a free cluster-bus port")
			}
			continue
		}
		bin, err := testserver.FindBinary("redis-server")
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "redisserver-cluster-")
		if err != nil {
			return nil, err
		}
		s := &Server{bin: bin, dir: dir, port: port, Source: "redis-server", extra: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "5000",
		}}
		if err := s.start(ctx); err != nil {
			_ = os.RemoveAll(dir)
			if attempt < 5 && strings.Contains(err.Error(), "Address already in use") {
				continue
			}
			return nil, err
		}
		s.Addr = "127.0.0.1:" + strconv.Itoa(port)
		s.URL = "redis://" + s.Addr
		return s, nil
	}
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// clusterInfo returns CLUSTER INFO of addr (a bulk string reply).
func clusterInfo(ctx context.Context, addr string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("*2\r\n$7\r\nCLUSTER\r\n$4\r\nINFO\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	header, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(header, "$") && !strings.HasPrefix(header, "=") {
		return "", fmt.Errorf("CLUSTER INFO answered %q", strings.TrimSpace(header))
	}
	size, err := strconv.Atoi(strings.TrimSpace(header[1:]))
	if err != nil {
		return "", err
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	return string(body), nil
}

// Close stops every node.
func (c *Cluster) Close() error {
	var err error
	for _, n := range c.nodes {
		err = errors.Join(err, n.Close())
	}
	return err
}

// StartForTests starts a server for a test binary's TestMain. On failure it
// prints why and how to get Redis, and exits with status 1: tests that need
// Redis never skip. Call the returned func after m.Run to stop it.
func StartForTests() (*Server, func()) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	s, err := Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: tests need Redis: %v\n"+
			"Install Debian's package with `%s` (the tests find redis-server and redis-cli on PATH), or set %s.\n",
			err, InstallCommand, EnvURL)
		os.Exit(1)
	}
	return s, func() {
		if err := s.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "redisserver: %v\n", err)
		}
	}
}
