package ephemeralpg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// binGlob is where Debian and Ubuntu install PostgreSQL server binaries,
// one directory per major version.
const binGlob = "/usr/lib/postgresql/*/bin"

// startAttempts bounds the retries when another process grabs the port
// between choosing it and the server binding it.
const startAttempts = 5

// cluster is a PostgreSQL cluster in a temporary directory, run with the
// local server binaries.
type cluster struct {
	bin  string               // directory holding initdb, pg_ctl, postgres
	dir  string               // temporary directory: data, socket, log
	data string               // data directory
	log  string               // server log file
	attr *syscall.SysProcAttr // runs the binaries as the postgres OS user; nil to run as ourselves
	port int                  // TCP port on 127.0.0.1, once started

	// noSync passes --no-sync to initdb and pg_basebackup (Options.Fsync
	// false): nothing needs to survive a crash of the machine.
	noSync bool

	release func() error // ends the watchdog, which stops the server and removes dir
}

// EnvClusterDir is the environment variable that, when set, names the
// directory local clusters are created in, instead of the one
// clusterParent picks.
const EnvClusterDir = "EPHEMERALPG_DIR"

// clusterParent is where startLocal creates a cluster's directory:
// EnvClusterDir if set; else, when fsync is off (nothing is to survive a
// crash of the machine), a memory file system with 2 GiB free if the
// machine has one; else the temporary directory. Every test database is a
// copy of about a thousand files, and on ext4 creating them spent a
// quarter of the test server's CPU looking for free inodes.
func clusterParent(opts Options) string {
	if dir := os.Getenv(EnvClusterDir); dir != "" {
		return dir
	}
	if !opts.Fsync {
		if dir := memoryDir(2 << 30); dir != "" {
			return dir
		}
	}
	return os.TempDir()
}

// startLocal creates a cluster with the local server binaries, starts it
// on a free port and returns a Server whose Close stops and removes it.
func startLocal(ctx context.Context, opts Options, logf func(string, ...any)) (_ *Server, err error) {
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	attr, chown, err := postgresUser()
	if err != nil {
		return nil, err
	}

	began := time.Now()
	dir, err := os.MkdirTemp(clusterParent(opts), "ephemeralpg-")
	if err != nil {
		return nil, fmt.Errorf("create temporary directory: %w", err)
	}
	c := &cluster{
		bin:    bin,
		dir:    dir,
		data:   filepath.Join(dir, "data"),
		log:    filepath.Join(dir, "postgres.log"),
		attr:   attr,
		noSync: !opts.Fsync,
	}
	if err := chown(dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("hand %s to the postgres user: %w", dir, err)
	}
	if c.release, err = startWatchdog(c); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = c.release()
			_ = os.RemoveAll(dir)
		}
	}()

	initdb := []string{"-D", c.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"}
	if c.noSync {
		initdb = append(initdb, "--no-sync")
	}
	if _, err := c.run(ctx, "initdb", initdb...); err != nil {
		return nil, err
	}
	conf, err := localConfig(opts, dir)
	if err != nil {
		return nil, err
	}
	if err := appendFile(filepath.Join(c.data, "postgresql.conf"), conf); err != nil {
		return nil, fmt.Errorf("write postgresql.conf: %w", err)
	}

	port, err := c.start(ctx)
	if err != nil {
		return nil, err
	}

	version, _ := c.run(ctx, "pg_ctl", "--version")
	as := ""
	if attr != nil {
		as = " as OS user postgres"
	}
	logf("ephemeralpg: started %s from %s%s on 127.0.0.1:%d in %v, cluster in %s",
		strings.TrimSpace(version), bin, as, port, time.Since(began).Round(time.Millisecond), dir)

	s := newServer(SourceLocal, localConnString(port, "postgres"), logf, c.stop)
	s.local = c
	return s, nil
}

// localConnString returns the URL of database on a local cluster's port,
// for the postgres superuser.
func localConnString(port int, database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// start starts the server on a free port, retrying if another process
// takes the port first, and returns the port.
func (c *cluster) start(ctx context.Context) (int, error) {
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return 0, err
		}
		logStart := fileSize(c.log)
		_, err = c.run(ctx, "pg_ctl", "start", "-D", c.data, "-l", c.log, "-w", "-t", "60", "-s",
			"-o", "-p "+strconv.Itoa(port))
		if err == nil {
			c.port = port
			return port, nil
		}
		// pg_ctl may give up waiting on a postmaster that is still running.
		_ = c.kill(ctx)
		serverLog := c.logTail(logStart)
		if attempt < startAttempts && strings.Contains(serverLog, "Address already in use") {
			continue
		}
		return 0, fmt.Errorf("start server on port %d: %w\nserver log:\n%s", port, err, serverLog)
	}
}

// stop stops the server, fast if possible, and removes its directory.
func (c *cluster) stop(ctx context.Context) error {
	_, err := c.run(ctx, "pg_ctl", "stop", "-D", c.data, "-m", "fast", "-w", "-t", "30", "-s")
	if err != nil {
		err = c.kill(ctx) // nil if the server is not running after all
	}
	if wdErr := c.release(); wdErr != nil {
		err = errors.Join(err, wdErr)
	}
	// Removing the data directory also makes a surviving postmaster shut
	// itself down once it notices its lock file is gone.
	if rmErr := os.RemoveAll(c.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("remove cluster directory: %w", rmErr))
	}
	return err
}

// kill stops the server with an immediate shutdown, if it is running.
func (c *cluster) kill(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if !c.running(ctx) {
		return nil
	}
	_, err := c.run(ctx, "pg_ctl", "stop", "-D", c.data, "-m", "immediate", "-w", "-t", "20", "-s")
	return err
}

// running reports whether pg_ctl status sees a running server. It errs on
// the side of "running" when the status is unknown.
func (c *cluster) running(ctx context.Context) bool {
	_, err := c.run(ctx, "pg_ctl", "status", "-D", c.data)
	var exitErr *exec.ExitError
	// Exit status 3: not running; 4: no accessible data directory.
	if errors.As(err, &exitErr) && (exitErr.ExitCode() == 3 || exitErr.ExitCode() == 4) {
		return false
	}
	return true
}

// run runs one of the server binaries and returns its combined output. The
// error includes that output.
func (c *cluster) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir // our own working directory may be closed to the postgres user
	cmd.Env = childEnv()
	cmd.SysProcAttr = c.attr
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	// pg_ctl start leaves a postmaster behind; never wait on its output.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// logTail returns the end of what the server logged after offset.
func (c *cluster) logTail(offset int64) string {
	const limit = 4 << 10
	f, err := os.Open(c.log)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	defer f.Close()
	if size := fileSize(c.log); size-offset > limit {
		offset = size - limit
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return fmt.Sprintf("(read server log: %v)", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return fmt.Sprintf("(read server log: %v)", err)
	}
	return strings.TrimSpace(string(b))
}

// findBinDir returns the directory holding the PostgreSQL server binaries:
// pg_ctl's directory on PATH, else the highest version under binGlob.
func findBinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if resolved, err := filepath.EvalSymlinks(p); err == nil && hasServerBinaries(filepath.Dir(resolved)) {
			return filepath.Dir(resolved), nil // e.g. /usr/lib/postgresql/15/bin, not /usr/local/bin
		}
		if hasServerBinaries(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	dirs, err := filepath.Glob(binGlob)
	if err != nil {
		return "", fmt.Errorf("glob %s: %w", binGlob, err)
	}
	slices.SortFunc(dirs, func(a, b string) int { // highest version first
		return slices.Compare(majorVersion(b), majorVersion(a))
	})
	for _, dir := range dirs {
		if hasServerBinaries(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("initdb, pg_ctl and postgres not found together on PATH or under %s", binGlob)
}

// hasServerBinaries reports whether dir holds initdb, pg_ctl and postgres.
func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := exec.LookPath(filepath.Join(dir, name)); err != nil {
			return false
		}
	}
	return true
}

// majorVersion parses the version in a path like /usr/lib/postgresql/9.6/bin.
func majorVersion(binDir string) []int {
	var v []int
	for f := range strings.SplitSeq(filepath.Base(filepath.Dir(binDir)), ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil
		}
		v = append(v, n)
	}
	return v
}

// settingName matches a postgresql.conf parameter name.
var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// serverSettings returns the postgresql.conf settings for a server Start
// creates: this package's defaults, overridden by opts.ExtraConfig.
func serverSettings(opts Options) (map[string]string, error) {
	settings := map[string]string{"max_connections": "200"}
	if !opts.Fsync {
		maps.Copy(settings, fastSettings)
	}
	if err := checkSettings(opts.ExtraConfig); err != nil {
		return nil, err
	}
	maps.Copy(settings, opts.ExtraConfig)
	return settings, nil
}

// checkSettings refuses an ExtraConfig whose names or values could not be
// written to postgresql.conf as one line each.
func checkSettings(extra map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(extra)) {
		if !settingName.MatchString(name) {
			return fmt.Errorf("ExtraConfig: invalid setting name %q", name)
		}
		if strings.ContainsAny(extra[name], "\x00\r\n") {
			return fmt.Errorf("ExtraConfig: setting %s: value contains a NUL or line break", name)
		}
	}
	return nil
}

// localConfig returns the postgresql.conf lines for a local cluster whose
// unix socket lives in socketDir.
func localConfig(opts Options, socketDir string) (string, error) {
	settings, err := serverSettings(opts)
	if err != nil {
		return "", err
	}
	settings["listen_addresses"] = "127.0.0.1"
	settings["unix_socket_directories"] = socketDir
	return confLines("Added by ephemeralpg.", settings), nil
}

// confLines returns settings as postgresql.conf lines, sorted by name,
// after a comment line.
func confLines(comment string, settings map[string]string) string {
	var b strings.Builder
	b.WriteString("\n# " + comment + "\n")
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		fmt.Fprintf(&b, "%s = %s\n", name, confQuote(settings[name]))
	}
	return b.String()
}

// confQuote quotes a value for postgresql.conf (and a libpq connection
// string's value, which uses the same backslash escapes).
func confQuote(value string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(value) + "'"
}

// fastSettings trade durability for speed when Options.Fsync is false.
var fastSettings = map[string]string{
	"fsync":              "off",
	"synchronous_commit": "off",
	"full_page_writes":   "off",
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}

// childEnv is our environment without libpq's PG* variables, which could
// point the binaries at another server or data directory, and with
// untranslated messages.
func childEnv() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_ALL=")
	})
	return append(env, "LC_ALL=C")
}

// appendFile appends s to the existing file at path.
func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// fileSize returns the size of the file at path, or 0.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// ClientTool returns the path of a PostgreSQL client program (pg_dump,
// psql) from the same directory as the server binaries a local cluster
// would use, so that its major version matches theirs.
func ClientTool(name string) (string, error) {
	dir, err := findBinDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if _, err := exec.LookPath(path); err != nil {
		return "", fmt.Errorf("%s not found beside the server binaries in %s: %w", name, dir, err)
	}
	return path, nil
}
