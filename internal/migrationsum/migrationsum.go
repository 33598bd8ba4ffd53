// Package migrationsum keeps sql/migrations.sum, the integrity file of the
// released migrations: a SHA-256 per migration file and one over the list, in
// the manner of Atlas's atlas.sum.
//
// Verify fails when a recorded migration was edited, removed or renamed, when
// a migration was inserted below the newest recorded one, or when a new one
// is not yet recorded. Record appends new migrations above the newest and
// refuses everything Verify refuses about the recorded ones, so a released
// migration can never be changed by regenerating the file.
package migrationsum

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Path is the integrity file, relative to the repository root.
const Path = "sql/migrations.sum"

// Dirs are the migration folders under sql/, one version sequence.
var Dirs = []string{"schema", "triggers"}

// ErrReleasedMigrationChanged reports a recorded migration that was edited,
// removed or renamed, or a new migration below the newest recorded one.
var ErrReleasedMigrationChanged = errors.New("a released migration changed")

// ErrUnrecorded reports a new migration above the newest recorded one that
// is not yet in the integrity file.
var ErrUnrecorded = errors.New("a new migration is not recorded")

// ErrCorrupt reports an integrity file that does not parse or whose own
// checksum does not match its lines.
var ErrCorrupt = errors.New("the integrity file is corrupt")

// entry is one migration file: its path under sql/ and its hash.
type entry struct {
	name    string // e.g. schema/00001_communities.sql
	hash    string // h1:<base64 SHA-256 of the file>
	version int64
}

// scan reads the migration files of sqlDir (a file system rooted at sql/).
func scan(sqlDir fs.FS) ([]entry, error) {
	var out []entry
	for _, dir := range Dirs {
		names, err := fs.Glob(sqlDir, dir+"/*.sql")
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", dir, err)
		}
		for _, name := range names {
			body, err := fs.ReadFile(sqlDir, name)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", name, err)
			}
			v, err := version(name)
			if err != nil {
				return nil, err
			}
			out = append(out, entry{name: name, hash: hash(body), version: v})
		}
	}
	sortEntries(out)
	return out, nil
}

func sortEntries(es []entry) {
	slices.SortFunc(es, func(a, b entry) int {
		if a.version != b.version {
			return int(a.version - b.version)
		}
		return strings.Compare(a.name, b.name)
	})
}

func version(name string) (int64, error) {
	base := path.Base(name)
	digits, _, ok := strings.Cut(base, "_")
	v, err := strconv.ParseInt(digits, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("migration %s: the name does not start with a version number and an underscore", name)
	}
	return v, nil
}

func hash(b []byte) string {
	sum := sha256.Sum256(b)
	return "h1:" + base64.StdEncoding.EncodeToString(sum[:])
}

// Format renders the integrity file for entries: the checksum of the lines
// below it, then one line per migration.
func format(es []entry) []byte {
	var lines bytes.Buffer
	for _, e := range es {
		fmt.Fprintf(&lines, "%s %s\n", e.name, e.hash)
	}
	return append([]byte(hash(lines.Bytes())+"\n"), lines.Bytes()...)
}

// parse reads an integrity file and checks its own checksum.
func parse(sum []byte) ([]entry, error) {
	head, rest, ok := bytes.Cut(sum, []byte("\n"))
	if !ok {
		return nil, fmt.Errorf("%w: %s has no checksum line; restore it from main", ErrCorrupt, Path)
	}
	if string(head) != hash(rest) {
		return nil, fmt.Errorf("%w: %s's own checksum does not match its lines (edited by hand?); restore it from main and run make migrations-sum", ErrCorrupt, Path)
	}
	var es []entry
	sc := bufio.NewScanner(bytes.NewReader(rest))
	for sc.Scan() {
		name, h, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(h, "h1:") {
			return nil, fmt.Errorf("%w: %s: line %q is not \"<file> h1:<hash>\"", ErrCorrupt, Path, sc.Text())
		}
		v, err := version(name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, Path, err)
		}
		es = append(es, entry{name: name, hash: h, version: v})
	}
	return es, nil
}

// compare checks the files against the recorded entries and returns the
// files above the newest recorded one that are not recorded yet.
func compare(recorded, files []entry) (fresh []entry, err error) {
	byName := map[string]entry{}
	byHash := map[string]entry{}
	for _, f := range files {
		byName[f.name] = f
		byHash[f.hash] = f
	}
	var top int64
	known := map[string]bool{}
	for _, r := range recorded {
		top = max(top, r.version)
		known[r.name] = true
		f, ok := byName[r.name]
		switch {
		case ok && f.hash != r.hash:
			return nil, fmt.Errorf("%w: sql/%s was edited after release; restore it (git checkout main -- sql/%s) and add a new migration instead",
				ErrReleasedMigrationChanged, r.name, r.name)
		case ok:
			continue
		}
		if moved, ok := byHash[r.hash]; ok {
			return nil, fmt.Errorf("%w: sql/%s was renamed to sql/%s after release; restore its name and add a new migration instead",
				ErrReleasedMigrationChanged, r.name, moved.name)
		}
		return nil, fmt.Errorf("%w: sql/%s was removed after release; restore it, and undo what it did with a new migration instead",
			ErrReleasedMigrationChanged, r.name)
	}
	for _, f := range files {
		if known[f.name] {
			continue
		}
		if f.version <= top {
			return nil, fmt.Errorf("%w: sql/%s has version %d, not above the newest released migration (%d); give it the next number instead",
				ErrReleasedMigrationChanged, f.name, f.version, top)
		}
		fresh = append(fresh, f)
	}
	return fresh, nil
}

// Verify checks the migration files of sqlDir against the integrity file's
// contents. It returns nil only when every file is recorded unchanged.
func Verify(sqlDir fs.FS, sum []byte) error {
	recorded, err := parse(sum)
	if err != nil {
		return err
	}
	files, err := scan(sqlDir)
	if err != nil {
		return err
	}
	fresh, err := compare(recorded, files)
	if err != nil {
		return err
	}
	if len(fresh) > 0 {
		return fmt.Errorf("%w: sql/%s is not in %s; run make migrations-sum and commit it with the migration",
			ErrUnrecorded, fresh[0].name, Path)
	}
	return nil
}

// Record returns the integrity file with the new migrations of sqlDir
// appended. sum may be nil for a first file. It refuses whatever Verify
// refuses about the recorded migrations.
func Record(sqlDir fs.FS, sum []byte) ([]byte, error) {
	var recorded []entry
	if sum != nil {
		var err error
		if recorded, err = parse(sum); err != nil {
			return nil, err
		}
	}
	files, err := scan(sqlDir)
	if err != nil {
		return nil, err
	}
	fresh, err := compare(recorded, files)
	if err != nil {
		return nil, err
	}
	return format(slices.Concat(recorded, fresh)), nil
}
