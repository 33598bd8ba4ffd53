package communitydeletion

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// SchemaDestructionLockKey is the deployment-global advisory lock key that
// serializes schema migrations with the destructive deletion stages.
//
// The migration job holds it exclusively (session level) for its whole run;
// destructive stages hold it shared (transaction level). It is ASCII
// "cdschema" and must never change: replicas of an older release still take
// the old key during a rolling deploy, and a new key would silently drop the
// exclusion between them. The SQL function community_schema_destruction_lock_key()
// returns the same value.
const SchemaDestructionLockKey int64 = 0x6364736368656d61

//go:embed sql/schema/*.sql sql/triggers/*.sql
var migrationFiles embed.FS

// migrationDirs are the embedded folders merged into one goose directory.
var migrationDirs = []string{"sql/schema", "sql/triggers"}

// Migrations returns every embedded migration, from sql/schema and
// sql/triggers, as one flat fs.FS whose root holds the .sql files. Pass it to
// goose (goose.NewProvider with dir "."). A file name present in both folders
// is reported as an error by Open and ReadDir; goose itself rejects two files
// that share a version number.
func Migrations() fs.FS {
	return flatFS{base: migrationFiles, dirs: migrationDirs}
}

// flatFS presents the files of several directories of base as one directory.
type flatFS struct {
	base fs.FS
	dirs []string
}

// errDuplicateMigration reports one file name present in two folders.
var errDuplicateMigration = errors.New("migration file name appears in more than one folder")

func (f flatFS) locate(name string) (string, error) {
	var found []string
	for _, dir := range f.dirs {
		full := path.Join(dir, name)
		if _, err := fs.Stat(f.base, full); err == nil {
			found = append(found, full)
		}
	}
	switch len(found) {
	case 0:
		return "", fs.ErrNotExist
	case 1:
		return found[0], nil
	default:
		return "", fmt.Errorf("%s: %w (%s)", name, errDuplicateMigration, strings.Join(found, ", "))
	}
}

// Open opens a migration file by its bare name, or "." for the merged root.
func (f flatFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return f.base.Open(f.dirs[0])
	}
	if strings.Contains(name, "/") {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	full, err := f.locate(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return f.base.Open(full)
}

// ReadDir lists the merged root, sorted by name.
func (f flatFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if name != "." {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	seen := map[string]string{}
	var entries []fs.DirEntry
	for _, dir := range f.dirs {
		list, err := fs.ReadDir(f.base, dir)
		if err != nil {
			return nil, fmt.Errorf("read embedded %s: %w", dir, err)
		}
		for _, entry := range list {
			if other, dup := seen[entry.Name()]; dup {
				return nil, fmt.Errorf("%s: %w (%s, %s)", entry.Name(), errDuplicateMigration, other, dir)
			}
			seen[entry.Name()] = dir
			entries = append(entries, entry)
		}
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

//go:embed sql/optional/community_deletion_ddl_guard.sql
var ddlGuardInstall string

//go:embed sql/optional/community_deletion_ddl_guard_uninstall.sql
var ddlGuardUninstall string

// DDLGuard returns the SQL that installs the optional DDL guard (an event
// trigger that refuses owner-level tampering with the deletion schema, see
// sql/optional) and the SQL that removes it. Both need a superuser.
func DDLGuard() (install, uninstall string) {
	return ddlGuardInstall, ddlGuardUninstall
}
