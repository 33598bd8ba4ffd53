//go:build tools

// Package tools pins the code generators used by this repository. It lives in
// its own module so their dependencies never reach the library's go.mod.
package tools

import (
	_ "github.com/sqlc-dev/sqlc/cmd/sqlc"
)
