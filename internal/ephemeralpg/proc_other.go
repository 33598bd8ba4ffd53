//go:build !unix

package ephemeralpg

import "syscall"

// postgresUser returns how to run the server binaries: as ourselves, since
// only Unix has the root problem.
func postgresUser() (attr *syscall.SysProcAttr, chown func(path string) error, err error) {
	return nil, func(string) error { return nil }, nil
}

// startWatchdog does nothing: outside Unix, a cluster outlives a process
// that exits without Close.
func startWatchdog(*cluster) (release func() error, err error) {
	return func() error { return nil }, nil
}
