// Package testserver runs throwaway server processes for tests: on a free
// loopback port, watched by a watchdog that kills them when the test binary
// dies however it dies, with their output in a log file. Its subpackages
// start the servers the adapters' tests need (s3server, redisserver); Proxy
// puts a fault-injecting HTTP reverse proxy in front of one.
package testserver

import (
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
	"sync"
	"syscall"
	"time"
)

// ProcessOptions configures StartProcess.
type ProcessOptions struct {
	// Path is the executable; Args its arguments.
	Path string
	Args []string
	// Dir is the working directory, also where the log file goes. Required.
	Dir string
	// LogName is the log file's name in Dir; default "server.log".
	LogName string
	// Env, if not nil, is the environment; else this process's.
	Env []string
	// RemoveDir makes the watchdog also remove Dir when the test binary
	// dies without Stop (after Stop, removing it is the caller's job).
	RemoveDir bool
}

// Process is a running server process. A watchdog (a small shell process in
// its own session) kills it with SIGKILL, and removes its directory if asked
// to, if the test binary exits without Stop: a panic, go test's timeout,
// SIGKILL, the end of a fuzzing worker.
type Process struct {
	cmd     *exec.Cmd
	log     string
	exited  chan struct{}
	waitErr error

	mu       sync.Mutex
	released bool
	release  func() error // ends the watchdog without a kill
}

// watchdogScript waits on its standard input: a line means "released, do
// nothing"; EOF without one means the test binary died, so it kills the
// server and removes its directory if one is named. Arguments: the server's
// pid, the directory or "".
const watchdogScript = `if read x; then exit 0; fi; kill -KILL "$1" 2>/dev/null; if [ -n "$2" ]; then rm -rf "$2"; fi; exit 0`

// StartProcess starts opts.Path under a watchdog and returns at once; the
// caller waits for readiness.
func StartProcess(opts ProcessOptions) (*Process, error) {
	if opts.Dir == "" {
		return nil, errors.New("testserver: ProcessOptions.Dir is empty")
	}
	logName := opts.LogName
	if logName == "" {
		logName = "server.log"
	}
	logPath := filepath.Join(opts.Dir, logName)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testserver: open log: %w", err)
	}
	defer logFile.Close()

	cmd := exec.Command(opts.Path, opts.Args...)
	cmd.Dir = opts.Dir
	cmd.Env = opts.Env
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Its own process group: a Ctrl-C aimed at the test binary leaves the
	// cleanup to Stop or the watchdog.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testserver: start %s: %w", opts.Path, err)
	}
	p := &Process{cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()

	r, w, err := os.Pipe()
	if err != nil {
		_ = p.kill()
		return nil, fmt.Errorf("testserver: start watchdog: %w", err)
	}
	removeDir := ""
	if opts.RemoveDir {
		removeDir = opts.Dir
	}
	dog := exec.Command("/bin/sh", "-c", watchdogScript, "testserver-watchdog", strconv.Itoa(cmd.Process.Pid), removeDir)
	dog.Stdin = r
	dog.Dir = "/"
	dog.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = dog.Start()
	_ = r.Close() // the watchdog holds its own copy
	if err != nil {
		_ = w.Close()
		_ = p.kill()
		return nil, fmt.Errorf("testserver: start watchdog: %w", err)
	}
	p.release = func() error {
		_, werr := io.WriteString(w, "released\n")
		_ = w.Close()
		if err := dog.Wait(); err != nil {
			return fmt.Errorf("testserver: watchdog: %w", err)
		}
		return werr
	}
	return p, nil
}

// Pid returns the server's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the server has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Stop stops the server: SIGTERM, then SIGKILL after grace. It waits for the
// exit and ends the watchdog. Calling it again does nothing.
func (p *Process) Stop(grace time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	select {
	case <-p.exited:
		t.Stop()
	case <-t.C:
		_ = p.kill()
	}
	p.released = true
	return p.release()
}

func (p *Process) kill() error {
	err := p.cmd.Process.Kill()
	<-p.exited
	if errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	return err
}

// LogTail returns the last few KiB of the server's log, for error messages.
func (p *Process) LogTail() string { return LogTail(p.log) }

// LogTail returns the last few KiB of the file at path.
func LogTail(path string) string {
	const limit = 4 << 10
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(b) > limit {
		b = b[len(b)-limit:]
	}
	return strings.TrimSpace(string(b))
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testserver: find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("testserver: find a free port: %w", err)
	}
	return port, nil
}

// WaitReady calls ready every 20ms until it returns nil, the process exits,
// or ctx is done; the error then says why and quotes the server's log.
func WaitReady(ctx context.Context, p *Process, ready func(context.Context) error) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = ready(attemptCtx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("server exited (%v) before it was ready: %v\nserver log:\n%s", p.waitErr, last, p.LogTail())
		case <-ctx.Done():
			return fmt.Errorf("server not ready: %v (%w)\nserver log:\n%s", last, ctx.Err(), p.LogTail())
		case <-tick.C:
		}
	}
}

// FindBinary returns the path of the executable name: on PATH, else in
// $GOBIN, else in $(go env GOPATH)/bin (where go install puts it).
func FindBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	var dirs []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(string(out), "\n") // GOBIN (often empty), GOPATH
		if strings.TrimSpace(lines[0]) != "" {
			dirs = append(dirs, strings.TrimSpace(lines[0]))
		}
		if len(lines) >= 2 {
			for _, gp := range filepath.SplitList(strings.TrimSpace(lines[1])) {
				dirs = append(dirs, filepath.Join(gp, "bin"))
			}
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH or in %s", name, strings.Join(dirs, ", "))
}
