package ephemeralpg

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TemplateBuilder produces a database schema.
type TemplateBuilder interface {
	// Hash identifies the schema the migrator produces; equal hashes share
	// one template database, across processes on a shared server too.
	Hash() (string, error)
	// Migrate brings the (empty) database at connString to the schema. It
	// must close its connections before returning.
	Migrate(ctx context.Context, connString string) error
}

// DatabaseSettings is implemented by a TemplateBuilder whose databases need
// per-database defaults (ALTER DATABASE ... SET), which CREATE DATABASE does
// not copy from a template.
type DatabaseSettings interface {
	// Settings returns each parameter's value, as SET would take it.
	Settings() map[string]string
}

// isMissingDatabase reports whether err is PostgreSQL's "database does not
// exist" (SQLSTATE 3D000, invalid_catalog_name).
func isMissingDatabase(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "3D000"
}

// advisoryLockClass is the first key of the two-key advisory locks that
// serialize template builds ("ephg"). The two-key form keeps these locks
// apart from any application lock taken with a single bigint key.
const advisoryLockClass int32 = 0x65706867

// template tracks one template database within this process.
type template struct {
	sem   chan struct{} // one builder at a time; a channel so waiting honors ctx
	ready bool          // guarded by sem
}

// NewDatabase returns the connection string of a fresh database cloned
// from a template database that is migrated once per TemplateBuilder hash, and a
// func that drops the database. Drop may be called more than once.
//
// Template builds are serialized within the process and, with an advisory
// lock, across processes sharing the server (through the same admin
// database, as with one TEST_DATABASE_URL). A template left half-built by
// a crashed process is dropped and rebuilt; one dropped by someone else
// while this process uses it is rebuilt too.
func (s *Server) NewDatabase(ctx context.Context, m TemplateBuilder) (connString string, drop func(context.Context) error, err error) {
	if m == nil {
		return "", nil, errors.New("ephemeralpg: new database: nil TemplateBuilder")
	}
	hash, err := m.Hash()
	if err != nil {
		return "", nil, fmt.Errorf("ephemeralpg: new database: migrator hash: %w", err)
	}
	for attempt := 1; ; attempt++ {
		tpl, err := s.ensureTemplate(ctx, hash, m)
		if err != nil {
			return "", nil, fmt.Errorf("ephemeralpg: new database: %w", err)
		}
		connString, drop, err = s.createDatabase(ctx, tpl)
		if attempt == 1 && isMissingDatabase(err) {
			// Someone dropped the template behind our back (e.g. pruned
			// a shared server): build it again.
			if err := s.forgetTemplate(ctx, tpl); err != nil {
				return "", nil, fmt.Errorf("ephemeralpg: new database: %w", err)
			}
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("ephemeralpg: new database: %w", err)
		}
		if settings, ok := m.(DatabaseSettings); ok {
			if err := s.applySettings(ctx, connString, settings.Settings()); err != nil {
				return "", nil, errors.Join(fmt.Errorf("ephemeralpg: new database: %w", err), drop(context.WithoutCancel(ctx)))
			}
		}
		return connString, drop, nil
	}
}

// applySettings makes each setting a default of the database at connString.
func (s *Server) applySettings(ctx context.Context, connString string, settings map[string]string) error {
	if len(settings) == 0 {
		return nil
	}
	config, err := pgx.ParseConfig(connString)
	if err != nil {
		return fmt.Errorf("parse connection string: %w", err)
	}
	conn, err := s.connectAdmin(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for name, value := range settings {
		stmt := "ALTER DATABASE " + pgx.Identifier{config.Database}.Sanitize() + " SET " + pgx.Identifier{name}.Sanitize() + " = " + value
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("set %s on database %s: %w", name, config.Database, err)
		}
	}
	return nil
}

// NewEmptyDatabase returns the connection string of a fresh, unmigrated
// database created from the server's default template, and a func that
// drops it. Drop may be called more than once.
func (s *Server) NewEmptyDatabase(ctx context.Context) (connString string, drop func(context.Context) error, err error) {
	connString, drop, err = s.createDatabase(ctx, "")
	if err != nil {
		return "", nil, fmt.Errorf("ephemeralpg: new empty database: %w", err)
	}
	return connString, drop, nil
}

// templateName returns the template database name for a TemplateBuilder hash.
func templateName(hash string) string {
	sum := sha256.Sum256([]byte(hash))
	return templatePrefix + hex.EncodeToString(sum[:8])
}

// ensureTemplate makes sure the template database for hash exists and is
// complete, building it with m if needed, and returns its name.
func (s *Server) ensureTemplate(ctx context.Context, hash string, m TemplateBuilder) (string, error) {
	name := templateName(hash)

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", errClosed
	}
	t := s.templates[name]
	if t == nil {
		t = &template{sem: make(chan struct{}, 1)}
		s.templates[name] = t
	}
	s.mu.Unlock()

	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("wait for template %s: %w", name, ctx.Err())
	}
	defer func() { <-t.sem }()
	if t.ready {
		return name, nil
	}
	if err := s.buildTemplate(ctx, name, m); err != nil {
		return "", fmt.Errorf("template %s: %w", name, err)
	}
	t.ready = true
	return name, nil
}

// forgetTemplate makes the next ensureTemplate for name check the server
// again.
func (s *Server) forgetTemplate(ctx context.Context, name string) error {
	s.mu.Lock()
	t := s.templates[name]
	s.mu.Unlock()
	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for template %s: %w", name, ctx.Err())
	}
	t.ready = false
	<-t.sem
	return nil
}

// buildTemplate creates and migrates the template database name unless a
// complete one already exists. A template is complete once it is marked
// IS_TEMPLATE, which is the last step; an unmarked one is left over from a
// failed or crashed build and is rebuilt.
func (s *Server) buildTemplate(ctx context.Context, name string, m TemplateBuilder) (err error) {
	conn, err := s.connectAdmin(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx)) // also releases the advisory lock

	sum := sha256.Sum256([]byte(name))
	key := int32(binary.BigEndian.Uint32(sum[:4]))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", advisoryLockClass, key); err != nil {
		return fmt.Errorf("take advisory lock: %w", err)
	}
	defer func() {
		_, unlockErr := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1, $2)", advisoryLockClass, key)
		if unlockErr != nil && err == nil {
			err = fmt.Errorf("release advisory lock: %w", unlockErr)
		}
	}()

	var isTemplate bool
	err = conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&isTemplate)
	switch {
	case err == nil && isTemplate:
		s.logf("ephemeralpg: reusing template database %s", name)
		return nil
	case err == nil:
		s.logf("ephemeralpg: dropping incomplete template database %s", name)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop incomplete template: %w", err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("look up template: %w", err)
	}

	start := time.Now()
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if err := m.Migrate(ctx, s.ConnString(name)); err != nil {
		// Best effort: an unmarked template is rebuilt next time anyway.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" WITH ALLOW_CONNECTIONS false IS_TEMPLATE true"); err != nil {
		return fmt.Errorf("mark as template: %w", err)
	}
	// CREATE DATABASE ... TEMPLATE fails while anyone is connected to the
	// template, so end sessions a TemplateBuilder may have leaked.
	_, err = conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", name)
	if err != nil {
		return fmt.Errorf("terminate leftover sessions: %w", err)
	}
	s.logf("ephemeralpg: migrated template database %s in %v", name, time.Since(start).Round(time.Millisecond))
	return nil
}

// createDatabase creates a uniquely named database, cloned from template
// unless it is empty, and returns its connection string and drop func.
func (s *Server) createDatabase(ctx context.Context, template string) (string, func(context.Context) error, error) {
	name := uniqueName(databasePrefix)
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		stmt += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}

	// Register before creating, so Close drops the database even if it
	// races with this call.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", nil, errClosed
	}
	s.created[name] = struct{}{}
	s.mu.Unlock()

	conn, err := s.connectAdmin(ctx)
	if err == nil {
		if template != "" && serverMajor(conn) >= 15 {
			// PostgreSQL 15's default strategy, WAL_LOG, writes every page
			// of the template through shared buffers into the WAL: about
			// 0.4 s of CPU for a migrated template, against 0.05 s for a
			// file copy and a checkpoint (fsync is off on a test server).
			stmt += " STRATEGY FILE_COPY"
		}
		_, err = conn.Exec(ctx, stmt)
		conn.Close(context.WithoutCancel(ctx))
	}
	if err != nil {
		s.mu.Lock()
		delete(s.created, name)
		s.mu.Unlock()
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}

	drop := func(ctx context.Context) error {
		if err := s.dropDatabase(ctx, name); err != nil {
			return fmt.Errorf("ephemeralpg: %w", err)
		}
		return nil
	}
	return s.ConnString(name), drop, nil
}

// dropDatabase drops a database this Server created, disconnecting its
// sessions, and forgets it. After Close of a server Start created, there
// is nothing left to drop.
func (s *Server) dropDatabase(ctx context.Context, name string) error {
	s.mu.Lock()
	gone := s.closed && s.closeFn != nil
	s.mu.Unlock()
	if gone {
		return nil // it went away with the server
	}
	conn, err := s.connectAdmin(ctx)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	s.mu.Lock()
	delete(s.created, name)
	s.mu.Unlock()
	return nil
}

// serverMajor is the major version of conn's server (15 for "15.18 (Debian
// …)"), or 0 when the server did not report one.
func serverMajor(conn *pgx.Conn) int {
	v := conn.PgConn().ParameterStatus("server_version")
	end := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if end >= 0 {
		v = v[:end]
	}
	major, err := strconv.Atoi(v)
	if err != nil {
		return 0
	}
	return major
}
