package migration

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
)

// ErrDDLGuardNeedsSuperuser reports that the connection may not create or
// drop event triggers: only a superuser may install the DDL guard.
var ErrDDLGuardNeedsSuperuser = errors.New("the DDL guard is an event trigger: only a superuser may install or remove it")

// InstallDDLGuard installs the optional DDL guard in schema
// community_deletion of a migrated database: event triggers that refuse,
// outside migration runs opened by the schema's owner, any DDL that weakens
// a guard, fence, control table or installed function or changes that
// schema (see sql/optional/community_deletion_ddl_guard.sql). It replaces a
// guard an earlier release installed, is idempotent, and needs a superuser.
func (m *Migrator) InstallDDLGuard(ctx context.Context) error {
	install, _ := communitydeletion.DDLGuard()
	return m.execDDLGuard(ctx, "install", install)
}

// UninstallDDLGuard removes the DDL guard, if installed. It needs a
// superuser.
func (m *Migrator) UninstallDDLGuard(ctx context.Context) error {
	_, uninstall := communitydeletion.DDLGuard()
	return m.execDDLGuard(ctx, "uninstall", uninstall)
}

func (m *Migrator) execDDLGuard(ctx context.Context, verb, sql string) error {
	conn, err := m.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("%s DDL guard: %w", verb, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, sql); err != nil {
		// The script is one transaction block: a failure leaves it open
		// and aborted on the session.
		if _, rollbackErr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rollbackErr != nil {
			discard(conn)
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege {
			return fmt.Errorf("%s DDL guard: %w (%s)", verb, ErrDDLGuardNeedsSuperuser, pgErr.Message)
		}
		return fmt.Errorf("%s DDL guard: %w", verb, err)
	}
	return nil
}
