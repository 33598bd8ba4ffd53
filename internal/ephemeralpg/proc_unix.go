//go:build unix

package ephemeralpg

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// postgresUser returns how to run the server binaries. initdb and pg_ctl
// refuse to run as root, so as root they run as the "postgres" OS user,
// which then must own the cluster directory: chown hands a path to it. As
// anyone else, attr is nil and chown does nothing.
func postgresUser() (attr *syscall.SysProcAttr, chown func(path string) error, err error) {
	if os.Geteuid() != 0 {
		return nil, func(string) error { return nil }, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		if _, ok := errors.AsType[user.UnknownUserError](err); ok {
			return nil, nil, errors.New(`running as root, but initdb refuses root and there is no "postgres" OS user to run it as: create one or run as an unprivileged user`)
		}
		return nil, nil, fmt.Errorf("look up OS user postgres: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, nil, fmt.Errorf("OS user postgres: parse uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, nil, fmt.Errorf("OS user postgres: parse gid %q: %w", u.Gid, err)
	}
	attr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	chown = func(path string) error { return os.Chown(path, int(uid), int(gid)) }
	return attr, chown, nil
}

// watchdogScript stops the cluster and removes its directory once its
// standard input reaches EOF. Arguments: pg_ctl, data directory, cluster
// directory.
const watchdogScript = `read x; "$1" stop -D "$2" -m immediate -s >/dev/null 2>&1; rm -rf "$3"`

// watchdogPipes holds the write end of every watchdog's pipe until its
// release.
var watchdogPipes sync.Map

// startWatchdog starts a process that stops the cluster and removes its
// directory when this process exits, however it exits (a panicking test,
// go test's timeout, SIGKILL): it waits for EOF on a pipe whose write end
// only this process holds. It runs in its own session, so a Ctrl-C aimed
// at this process leaves it alone. The returned func ends the watchdog in
// an orderly way and waits for it, which also stops and removes the
// cluster.
//
// The write ends are held in watchdogPipes until released: an *os.File that
// nothing references is closed by its finalizer, and a Server or Replica
// its caller dropped without Close would otherwise stop under a running
// test at the next garbage collection.
func startWatchdog(c *cluster) (release func() error, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", watchdogScript,
		"ephemeralpg-watchdog", filepath.Join(c.bin, "pg_ctl"), c.data, c.dir)
	cmd.Stdin = r
	cmd.Dir = "/"
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if c.attr != nil {
		cmd.SysProcAttr.Credential = c.attr.Credential
	}
	err = cmd.Start()
	_ = r.Close() // the watchdog holds its own copy
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	watchdogPipes.Store(w, struct{}{})
	return func() error {
		watchdogPipes.Delete(w)
		_ = w.Close()
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("watchdog: %w", err)
		}
		return nil
	}, nil
}
